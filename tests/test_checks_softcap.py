"""Soft-capped scores, cap · tanh(s / cap) between the scaled scores and the softmax (Gemma 2's
``attn_logit_softcapping``), in every way code writes it: ``scaling`` judges the scale before the cap,
``matches-reference`` compares with a reference soft-capped as the module caps, rotary is identified — and a module
that divides by head_dim before capping fails both (the modules are tests/helpers/user_modules.py's
SoftCappedAttention and Gemma2Layer).  The cap the module declares — an attribute named as the cap, its config's
``attn_logit_softcapping``, or the constructor argument it was built with — is the cap it must apply: another cap,
or none, fails ``matches-reference`` naming both (DeclaredSoftCap)."""

from pathlib import Path

import pytest
import torch
from helpers import user_modules as um
from helpers.check_table import cli_table

import attnviz
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


class TanhWithoutTheDivide(um.SoftCappedAttention):
    """cap · tanh(s), the divide inside the tanh forgotten: no soft-cap, and no Q @ Kᵀ the walk back reaches."""

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        s = torch.tanh(q @ k.transpose(-1, -2) / self.divide_by) * self.cap  # (b, h, n, n)
        w = torch.softmax(s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, n, d))  # (b, n, d_model)


def test_a_tanh_that_is_no_soft_cap_is_named_when_scaling_cannot_find_the_scale():
    """scaling skips saying the scale of the scores could not be identified, and names the tanh on its line that
    comes between Q @ Kᵀ and the softmax."""
    torch.manual_seed(0)
    recording = attnviz.tracing.record(TanhWithoutTheDivide().eval(), torch.randn(1, 3, 64))
    check = checks.scaling(attnviz.tracing.combine(recording.attentions))
    line = Path(__file__).read_text().splitlines().index(
        "        s = torch.tanh(q @ k.transpose(-1, -2) / self.divide_by) * self.cap  # (b, h, n, n)") + 1
    assert check == checks.Check("scaling", "skip", "the scale of the scores could not be identified (no Q @ Kᵀ "
                                 f"before the softmax: the tanh on line {line} comes between them)"), check


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


# ---------------------------------------------------------------- the cap the module declares (DeclaredSoftCap)

CLI_HELPERS = Path(__file__).parent / "helpers" / "user_modules.py"


@pytest.mark.parametrize(("declared", "words"), [("attribute", "self.attn_logit_softcapping = 50"),
                                                 ("config", "the config's attn_logit_softcapping = 50")])
def test_a_cap_other_than_the_declared_one_fails_matches_reference_naming_both(declared, words):
    torch.manual_seed(0)
    result = verdicts(um.DeclaredSoftCap(declared=declared, applied=30.0), ("matches-reference",))
    check = result["matches-reference"]
    assert check.status == "fail", check.evidence
    assert check.evidence.startswith("the module soft-caps its scaled scores at 30 · tanh(s / 30), but it declares "
                                     f"a cap of 50 — {words}: cap with 50 · tanh(s / 50), not 30"), check.evidence


def test_scores_left_uncapped_where_a_cap_is_declared_fail_naming_the_cap():
    torch.manual_seed(0)
    check = verdicts(um.DeclaredSoftCap(applied=0), ("matches-reference",))["matches-reference"]
    assert check.status == "fail", check.evidence
    assert check.evidence.startswith("the module declares a soft-cap of its scores, self.attn_logit_softcapping = 50 "
                                     "(Gemma 2's attn_logit_softcapping), but its scaled scores reach the softmax "
                                     "uncapped"), check.evidence
    assert "apply s → 50 · tanh(s / 50)" in check.evidence


@pytest.mark.slow  # a whole check_module run: the slow tier
def test_a_declared_cap_written_without_the_division_inside_the_tanh_fails_naming_its_line():
    """``torch.tanh(s) * cap``: the walk back to Q @ Kᵀ stops at its tanh, and matches-reference skipped, so a module
    whose every score of 1 becomes 38 passed every rule."""
    torch.manual_seed(0)
    check = verdicts(um.DeclaredSoftCap(divided=False), ("matches-reference",))["matches-reference"]
    line = next(number for number, text in enumerate(CLI_HELPERS.read_text().splitlines(), start=1)
                if "s = torch.tanh(s) * self.cap_in_forward" in text)
    assert check == checks.Check(
        "matches-reference", "fail", "the module declares a soft-cap, self.attn_logit_softcapping = 50, but the tanh "
        f"on line {line} before the softmax is not 50 · tanh(s / 50) of the scaled scores s: divide s by 50 inside the "
        "tanh and multiply by 50 after it — 50 · tanh(s) turns a score of 1 into 38.1")


@pytest.mark.slow  # a whole check_module run: the slow tier
def test_a_cap_applied_after_the_mask_fails_mask_convention_saying_the_future_keeps_minus_the_cap():
    """Gemma 2's cap after the mask is added turns −∞ into −50, so no cell is hidden: mask-convention fails saying
    every future key keeps −50 and to cap first, causal and matches-reference run (no skip), and matches-reference
    blames no bias "neither a mask nor ALiBi"."""
    torch.manual_seed(0)
    results = verdicts(um.DeclaredSoftCap(masked_first=True), ("causal", "mask-convention", "matches-reference"))
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "fail", "no cell is hidden: the soft-cap comes after the mask, and 50 · tanh(−∞ / 50) = "
        "−50, so every future key keeps a score of −50, not −∞, and the softmax still gives it weight — cap the "
        "scores first, then mask them"), results
    assert results["causal"].status != "skip" and results["matches-reference"].status != "skip", results
    assert "neither a mask" not in results["matches-reference"].evidence


@pytest.mark.parametrize("declared", ["attribute", "config"])
def test_the_declared_cap_applied_passes_saying_where_it_is_declared(declared):
    torch.manual_seed(0)
    check = verdicts(um.DeclaredSoftCap(declared=declared), ("matches-reference",))["matches-reference"]
    assert check.status == "pass", check.evidence
    assert "(the cap the module declares, " in check.evidence and "not checked" not in check.evidence


def test_a_cap_kept_nowhere_is_checked_against_the_one_it_was_built_with():
    """The constructor takes attn_logit_softcapping and writes another number into the forward: check_module's
    sizes (what attnviz check gives it from the constructor's arguments) say which cap it was built with."""
    torch.manual_seed(0)
    module = um.DeclaredSoftCap(declared="argument", applied=30.0)
    alone = verdicts(module, ("matches-reference",))["matches-reference"]
    assert alone.status == "pass" and CAP_TAKEN.format(cap=30) in alone.evidence, alone
    told = {c.rule: c for c in checks.check_module(module, rules=("matches-reference",),
                                                   sizes={"attn_logit_softcapping": 50.0})}["matches-reference"]
    assert told.status == "fail" and "declares a cap of 50 — the soft-cap it is built with, 50" in told.evidence
    status, table = cli_table(f"{CLI_HELPERS}:DeclaredSoftCap", "--set", "declared=argument", "--set", "applied=30")
    assert status == 1 and "matches-reference FAIL the module soft-caps its scaled scores at 30" in table, table


CAP_TAKEN = ("(the check takes the cap it applies, {cap}, as the module's own: it keeps no cap under a name attnviz "
             "reads (attn_logit_softcapping, softcap …) and was built with none attnviz knows, so the cap is not "
             "checked — if it was built with another, tell the checker: check_module(module, sizes={{\"softcap\": "
             "…}}) in Python, or, for attnviz check, a constructor argument named attn_logit_softcapping or softcap)")


def test_a_cap_kept_under_a_name_attnviz_does_not_read_is_said_taken_and_sizes_tell_it():
    """SoftCappedAttention keeps its cap as self.cap: in a notebook check_module cannot know it is the cap, so the
    verdict says which cap it took and how to tell it; told another, it fails naming both."""
    torch.manual_seed(0)
    module = um.SoftCappedAttention(cap=5.0).eval()
    alone = {c.rule: c for c in attnviz.check_module(module, rules=("matches-reference",))}["matches-reference"]
    assert alone.status == "pass" and alone.evidence.endswith(CAP_TAKEN.format(cap=5)), alone
    told = {c.rule: c for c in attnviz.check_module(module, rules=("matches-reference",),
                                                    sizes={"softcap": 50.0})}["matches-reference"]
    assert told.status == "fail" and told.evidence.startswith(
        "the module soft-caps its scaled scores at 5 · tanh(s / 5), but it declares a cap of 50 — the soft-cap it is "
        "built with, 50"), told


@pytest.mark.slow  # every rule, from the command line
def test_the_command_line_says_the_cap_it_took_for_a_constructor_argument_it_does_not_read():
    status, table = cli_table(f"{CLI_HELPERS}:SoftCappedAttention", "--set", "cap=5")
    assert status == 0 and CAP_TAKEN.format(cap=5) in table, table


def test_transformers_gemma2_attention_with_its_cap_switched_off_fails_naming_the_configs():
    """A wrapper that sets the layer's attn_logit_softcapping to None (to try the layer without it) while its config
    still says 50: the scores reach the softmax uncapped."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    module = um.Gemma2Layer()
    passed = verdicts(module, ("matches-reference",))["matches-reference"]
    assert passed.status == "pass" and "the cap the module declares, self.self_attn.attn_logit_softcapping = 50" \
        in passed.evidence, passed.evidence
    module.self_attn.attn_logit_softcapping = None
    check = verdicts(module, ("matches-reference",))["matches-reference"]
    assert check.status == "fail", check.evidence
    assert check.evidence.startswith("the module declares a soft-cap of its scores, the config's "
                                     "attn_logit_softcapping = 50"), check.evidence
