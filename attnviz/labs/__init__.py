"""The labs: the Pitfall lab, the induction lab, the comparison of variants and implementations, and training."""
