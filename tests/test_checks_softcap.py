"""Soft-capped scores, cap · tanh(s / cap) between the scaled scores and the softmax (Gemma 2's
``attn_logit_softcapping``), in every way code writes it: ``scaling`` judges the scale before the cap,
``matches-reference`` compares with a reference soft-capped as the module caps, rotary is identified — and a module
that divides by head_dim before capping fails both (the modules are tests/helpers/user_modules.py's
SoftCappedAttention and Gemma2Layer)."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks

RULES = ("scaling", "rotary-placement", "matches-reference")


def verdicts(module, rules=RULES) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval(), rules=rules)}


@pytest.mark.parametrize("written", ["inline", "steps", "reciprocal"])
def test_soft_capped_scores_pass_scaling_and_matches_reference_naming_the_cap(written):
    torch.manual_seed(0)
    results = verdicts(um.SoftCappedAttention(cap=5.0, written=written), ("scaling", "matches-reference"))
    for rule in ("scaling", "matches-reference"):
        assert results[rule].status == "pass", results[rule].evidence
        assert "5 · tanh(s / 5)" in results[rule].evidence


def test_scores_divided_by_head_dim_before_the_cap_fail_scaling_and_matches_reference():
    torch.manual_seed(0)
    results = verdicts(um.SoftCappedAttention(cap=50.0, divide_by=16), ("scaling", "matches-reference"))
    assert results["scaling"].status == "fail", results["scaling"].evidence
    assert "head_dim = 16 without the square root" in results["scaling"].evidence
    assert results["matches-reference"].status == "fail", results["matches-reference"].evidence


def test_a_cap_small_enough_to_bite_is_in_the_reference():
    torch.manual_seed(0)
    module = um.SoftCappedAttention(cap=0.5)  # every score squashed into (-0.5, 0.5): far from the uncapped softmax
    result = verdicts(module, ("matches-reference",))["matches-reference"]
    assert result.status == "pass", result.evidence


def test_transformers_gemma2_attention_with_soft_capping_runs_every_rule():
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    results = verdicts(um.Gemma2Layer())
    for rule in RULES:
        assert results[rule].status == "pass", (rule, results[rule].evidence)
    assert "50 · tanh(s / 50)" in results["matches-reference"].evidence
