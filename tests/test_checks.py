"""check_module's rules on modules written as users write them: each rule passes the correct code and fails its bug."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing, variants
from attnviz.config import AttentionConfig


def failing(module, **kwargs) -> set[str]:
    return {check.rule for check in checks.check_module(module, **kwargs) if check.status == "fail"}


def verdict(module, rule, **kwargs) -> checks.Check:
    return next(check for check in checks.check_module(module, **kwargs) if check.rule == rule)


def mha(bug=None, dropout=0.0):
    torch.manual_seed(0)
    return um.MyMultiHeadAttention(16, 32, 16, dropout, 4, bug=bug).eval()  # head_dim 8: √d_out ≠ head_dim


def test_the_rules_have_stable_ids_in_order():
    assert checks.RULES == ("rows-sum-to-one", "causal", "mask-convention", "scaling", "dropout-placement",
                            "batch-independence", "matches-reference")
    assert [check.rule for check in checks.check_module(mha())] == list(checks.RULES)


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
def test_the_books_classes_pass_every_rule_that_applies(variant):
    torch.manual_seed(123)
    module = variants.get(variant).build(AttentionConfig(variant=variant, d_in=16, d_out=16, num_heads=4,
                                                          context_length=16, dropout=0.1)).eval()
    results = checks.check_module(module)
    assert [c for c in results if c.status == "fail"] == []
    skipped = {c.rule for c in results if c.status == "skip"}
    assert skipped == ({"scaling"} if variant == "simplified" else
                       {"causal", "mask-convention"} if not getattr(module, "causal", True) else set())


@pytest.mark.parametrize("module", [um.CausalSelfAttention(flash=True), um.CausalSelfAttention(flash=False),
                                    um.TorchMHA(), um.SDPAWithMask(), um.SDPAWithMask(float_mask=True),
                                    um.GroupedQueryAttention(), um.GQAWithSDPA(), um.ReturnsTuple()],
                         ids=lambda m: type(m).__name__)
def test_correct_user_modules_pass(module):
    assert failing(module.eval()) == set()


# the Pitfall lab's seven bugs, as user modules: each fails its rule and only the rules it should
@pytest.mark.parametrize(("bug", "rules"), [
    ("masked-fill-copy", {"causal", "mask-convention", "matches-reference"}),  # (1) the mask never applied
    ("softmax-dim", {"rows-sum-to-one", "causal", "matches-reference"}),  # (2) columns sum to 1, and the future leaks
    ("scale-by-d-out", {"scaling", "matches-reference"}),  # (3)
    ("diagonal-hidden", {"mask-convention", "matches-reference"}),  # (4) token 0 sees nothing: NaN
])
def test_the_pitfall_labs_bugs_fail_their_rules(bug, rules):
    assert failing(mha(bug)) == rules


def test_forgetting_eval_fails_dropout_placement_only():
    module = um.MyMultiHeadAttention(16, 16, 16, 0.2, 4).train()  # (6) never called .eval()
    assert failing(module) == {"dropout-placement"}
    assert "call module.eval()" in verdict(module, "dropout-placement").evidence
    assert module.training  # the check restores the module's mode


@pytest.mark.parametrize(("cls", "message"), [(um.ViewWithoutContiguous, "view size is not compatible"),
                                              (um.MaskNotSliced, "must match the size")])
def test_bugs_that_make_the_forward_raise_say_so_in_one_line(cls, message):  # (5) and (7)
    with pytest.raises(tracing.TraceError, match=message) as caught:
        checks.check_module(cls(16, 16, 16, 0.0, 4).eval())
    assert "\n" not in str(caught.value)


def test_rows_sum_to_one_names_the_row_and_the_dimension():
    evidence = verdict(mha("softmax-dim"), "rows-sum-to-one").evidence
    assert "row 0" in evidence and "should be 1" in evidence and "dim=-1" in evidence


def test_causal_names_the_first_leaking_position():
    check = verdict(mha("masked-fill-copy"), "causal")
    assert check.status == "fail" and "position 0 sees the future" in check.evidence
    assert verdict(mha(), "causal").status == "pass"


def test_causal_rules_skip_a_module_that_is_not_causal():
    module = um.TorchMHA(causal=False).eval()
    assert verdict(module, "causal").status == "skip" and verdict(module, "mask-convention").status == "skip"
    assert verdict(mha("masked-fill-copy"), "causal", causal=False).status == "skip"  # causal=False says so


@pytest.mark.parametrize(("bug", "words"), [
    ("inverted-sdpa-mask", "inverted"),
    ("diagonal-hidden", "each token hides itself"),
    ("one-future-visible", "one future token is visible"),
    ("masked-fill-copy", "no cell is hidden"),
])
def test_mask_convention_names_the_mistake(bug, words):
    check = verdict(mha(bug), "mask-convention")
    assert check.status == "fail" and words in check.evidence
    assert verdict(mha(), "mask-convention").status == "pass"


@pytest.mark.parametrize(("bug", "words"), [
    ("no-scale", "not scaled"),
    ("scale-by-d-out", "√d_out = √32"),
    ("scale-without-root", "without the square root"),
])
def test_scaling_names_the_wrong_scale(bug, words):
    check = verdict(mha(bug), "scaling")
    assert check.status == "fail" and words in check.evidence and "√head_dim = √8" in check.evidence
    assert verdict(mha(), "scaling").status == "pass"


@pytest.mark.parametrize(("bug", "words"), [
    ("dropout-before-softmax", "before the softmax"),
    ("dropout-in-eval", "in eval mode dropout still"),
])
def test_dropout_placement(bug, words):
    check = verdict(mha(bug, dropout=0.3), "dropout-placement")
    assert check.status == "fail" and words in check.evidence
    assert verdict(mha(dropout=0.3), "dropout-placement").status == "pass"


def test_batch_independence():
    check = verdict(mha("batch-mixing"), "batch-independence")
    assert check.status == "fail" and "changed by" in check.evidence
    assert failing(mha("batch-mixing")) == {"batch-independence", "matches-reference"}
    assert verdict(mha(), "batch-independence").status == "pass"


def test_matches_reference_catches_heads_concatenated_without_the_transpose():
    check = verdict(mha("no-transpose-back"), "matches-reference")
    assert check.status == "fail" and "concatenated heads" in check.evidence
    assert failing(mha("no-transpose-back")) == {"matches-reference", "causal"}  # rows of later positions mix in
    assert verdict(mha(), "matches-reference").status == "pass"


def test_an_explicit_input_and_a_single_item_batch():
    x = torch.randn(1, 5, 16)
    assert failing(mha(), x=x) == set()


def test_a_module_without_attention_is_one_line():
    with pytest.raises(tracing.TraceError, match="no attention found"):
        checks.check_module(um.NoSoftmax())
