"""A module without weights (q = k = v = x) is judged by the scale it applies, read from its trace: unscaled, as the
book's simplified self-attention (3.3) is by design, it skips ``scaling`` and gets an unscaled reference; divided by
√d, it passes ``scaling`` and gets the book's reference; divided by anything else, both rules name the scale (the
modules are tests/helpers/user_modules.py's Weightless*: plain nn.Modules without a constructor)."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks


def verdicts(module, width: int = 16) -> dict[str, checks.Check]:
    x = torch.randn(2, 8, width, generator=torch.Generator().manual_seed(0))  # (b, n, d_in)
    return {check.rule: check for check in checks.check_module(module, x)}


@pytest.mark.parametrize("name", ["WeightlessScaled", "WeightlessSDPA"])
def test_a_weightless_module_that_divides_by_the_root_of_its_width_passes_both_rules(name):
    """x @ xᵀ / √d (by hand, or by SDPA's own scale): scaling says the scores are divided by √head_dim, and
    matches-reference passes against the scaled reference; no rule fails."""
    results = verdicts(getattr(um, name)())
    assert results["scaling"].status == "pass"
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √16 ≈ 4"
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    assert "softmax(mask(QKᵀ/√d_head))·V" in results["matches-reference"].evidence
    assert all(check.status != "fail" for check in results.values()), results


def test_a_weightless_module_that_does_not_scale_skips_scaling_and_its_reference_says_unscaled():
    """The book's 3.3 made causal: the skip says what the module does, and the reference's words name the unscaled
    formula they compare with, and no √d_head."""
    results = verdicts(um.WeightlessUnscaled())
    assert results["scaling"].status == "skip"
    assert results["scaling"].evidence.startswith("the scores are not scaled, as in the book's simplified "
                                                  "self-attention (3.3), a module without weights")
    assert "dividing them by √head_dim = √16 ≈ 4 passes too" in results["scaling"].evidence
    reference = results["matches-reference"]
    assert reference.status == "pass", reference.evidence
    assert "softmax(mask(QKᵀ))·V" in reference.evidence and "√d_head" not in reference.evidence
    assert "unscaled, as the module's scores are (see scaling)" in reference.evidence


def test_a_weightless_module_that_divides_by_its_width_fails_naming_the_scale():
    """Neither the book's 3.3 (no scale) nor √d: scaling names the scale and both it may use; the reference keeps
    √d and matches-reference names the scale as the difference."""
    results = verdicts(um.WeightlessOverD())
    assert results["scaling"].status == "fail"
    assert results["scaling"].evidence == (
        "the scores are divided by head_dim = 16 without the square root: divide by √head_dim = √16 ≈ 4 — or, "
        "for a module without weights, not at all, as the book's simplified self-attention (3.3)")
    assert results["matches-reference"].status == "fail"
    assert "the difference is the scale alone" in results["matches-reference"].evidence


@pytest.mark.parametrize("width", [16, 768])
def test_the_verdicts_do_not_depend_on_the_width(width):
    """The app checked the module at d_in 768, whose softmax saturates (every rule passed), the CLI at 16 (the
    reference failed): the verdicts hold at either width."""
    statuses = {rule: check.status for rule, check in verdicts(um.WeightlessScaled(), width).items()}
    assert statuses["scaling"] == statuses["matches-reference"] == "pass"
