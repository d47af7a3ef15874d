"""check_module's rules on modules written as users write them: each rule passes the correct code and fails its bug."""

import copy
import inspect
import re
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import user_modules as um
from helpers.source_lines import line_of
from torch import nn

from attnviz import checks, time_limit, tracing, variants
from attnviz.config import AttentionConfig


def failing(module, **kwargs) -> set[str]:
    return {check.rule for check in checks.check_module(module, **kwargs) if check.status == "fail"}


def verdict(module, rule, **kwargs) -> checks.Check:
    return next(check for check in checks.check_module(module, **kwargs) if check.rule == rule)


def user_modules_line(text: str) -> int:
    """The number of the line of tests/helpers/user_modules.py that holds ``text``."""
    lines = Path(um.__file__).read_text().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if text in line)


def cached_softmax_line() -> int:
    """The number of the line of ``LearnerCachedMHA.forward`` that holds its softmax."""
    lines, first = inspect.getsourcelines(um.LearnerCachedMHA.forward)
    return first + next(at for at, text in enumerate(lines) if "torch.softmax" in text)


def mha(bug=None, dropout=0.0):
    torch.manual_seed(0)
    return um.MyMultiHeadAttention(16, 32, 16, dropout, 4, bug=bug).eval()  # head_dim 8: √d_out ≠ head_dim


def test_the_rules_have_stable_ids_in_order():
    assert checks.RULES == ("rows-sum-to-one", "causal", "mask-convention", "scaling", "rotary-placement",
                            "dropout-placement", "batch-independence", "matches-reference", "kv-cache")
    assert [check.rule for check in checks.check_module(mha())] == list(checks.RULES)


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
def test_the_books_classes_pass_every_rule_that_applies(variant):
    torch.manual_seed(123)
    module = variants.get(variant).build(AttentionConfig(variant=variant, d_in=16, d_out=16, num_heads=4,
                                                          context_length=16, dropout=0.1)).eval()
    results = checks.check_module(module)
    assert [c for c in results if c.status == "fail"] == []
    skipped = {c.rule for c in results if c.status == "skip"}
    assert {"kv-cache", "rotary-placement"} <= skipped  # learned positions: no rotary
    assert skipped - {"kv-cache", "rotary-placement"} == ({"scaling"} if variant == "simplified" else
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


def test_a_forward_that_raises_inside_a_rule_is_one_line_naming_the_rule():
    """A hand-rolled dropout whose mask has the wrong shape raises in training mode only: in dropout-placement."""
    module = mha("dropout-mask-shape", dropout=0.1)
    with pytest.raises(tracing.TraceError, match=r"^the forward raised RuntimeError \(user_modules\.py, line \d+\): "
                                                 r".* \(while checking dropout-placement\)$") as caught:
        checks.check_module(module)
    assert "\n" not in str(caught.value)
    assert not module.training  # handed over in eval mode, given back in eval mode


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


def test_causal_false_given_for_a_module_that_masks_says_it_was_given_and_names_the_hidden_cells():
    """The caller, not the module, says it is not causal: the evidence says so (the API's words and the CLI's
    flag), and mask-convention says the module masks anyway, naming what it hides."""
    results = {c.rule: c for c in checks.check_module(mha(), causal=False)}
    assert results["causal"] == checks.Check("causal", "skip", "not checked: causal=False was given")
    check = results["mask-convention"]
    assert check.status == "fail" and "is not causal" not in check.evidence
    assert check.evidence == ("causal=False was given, but the module masks: it hides the 28 cells "
                              "above the diagonal (the future), e.g. head 0, row 0 (query 0), key 1")
    unmasked = verdict(um.Bidirectional().eval(), "mask-convention", causal=False)
    assert unmasked == checks.Check("mask-convention", "skip",
                                    "causal=False was given, and the module hides no cell")


def test_a_window_masked_anyway_is_named_as_a_window():
    torch.manual_seed(0)
    module = um.LearnerSWA(16, 16, 16, 0.0, 4, sliding_window_size=3).eval()
    evidence = verdict(module, "mask-convention", causal=False).evidence
    assert evidence.startswith("causal=False was given, but the module masks: it hides the future and "
                               "the keys 3 or more behind (a sliding window of 3), e.g.")


def test_causal_true_given_for_a_module_that_does_not_mask_says_it_was_given():
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.Bidirectional().eval(), causal=True)}
    assert results["causal"].status == "fail" and "sees the future" in results["causal"].evidence
    assert results["mask-convention"] == checks.Check(  # an nn.MultiheadAttention: told its attn_mask, not masked_fill
        "mask-convention", "fail", "causal=True was given, but no cell is hidden: nn.MultiheadAttention masks only "
        "through its attn_mask: pass attn_mask=torch.ones(n, n, dtype=torch.bool).triu(1) (True hides), with "
        "is_causal=True if you like")


def test_inferred_not_causal_says_what_said_so():
    """causal=None: a module without a mask is found not causal; a ``causal = False`` attribute is named as what
    said so, and a module that masks anyway disagrees with it (the attribute is never read by its forward)."""
    torch.manual_seed(0)
    unmasked = {c.rule: c for c in checks.check_module(um.Bidirectional().eval())}
    assert unmasked["causal"].evidence == "the module is not causal (no mask hides the future)"
    assert unmasked["mask-convention"].evidence == "the module is not causal and hides no cell"
    assert verdict(um.TorchMHA(causal=False).eval(), "causal").evidence == (
        "not checked: the module's causal attribute is False")
    module = mha()
    module.causal = False  # the flag a forward forgets to read
    results = {c.rule: c for c in checks.check_module(module)}
    assert results["causal"].evidence == "not checked: the module's causal attribute is False"
    assert results["mask-convention"].status == "fail"
    assert results["mask-convention"].evidence.startswith(
        "the module's causal attribute is False, but the module masks: it hides the 28 cells above the diagonal")


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


DROPPED_SCORE = ("a score it drops becomes 0, and the softmax still gives its key exp(0)/Σ — more or less than "
                 "before, never 0 —, while the scores it keeps are multiplied by 1/(1 − p), which sharpens each row; ")
AFTER_SOFTMAX = ": apply the dropout to the weights after the softmax"


@pytest.mark.parametrize(("bug", "words"), [
    ("dropout-before-softmax", "the dropout on line {} acts on the scores before the mask and the softmax: "
                               f"{DROPPED_SCORE}the rows still sum to 1, but they are not the weights with some keys "
                               f"dropped{AFTER_SOFTMAX}"),
    ("dropout-after-mask", f"the dropout on line {{}} acts on the masked scores before the softmax: {DROPPED_SCORE}a "
                           "hidden score it drops becomes 0 too, so in training mode a key the mask hides gets weight "
                           f"exp(0)/Σ (its row is NaN where the fill is −∞: 0 · −∞){AFTER_SOFTMAX}"),
    ("dropout-in-eval", "in eval mode dropout still"),
])
def test_dropout_placement(bug, words):
    """A dropout on the scores leaves rows that sum to 1: its verdict names its line, says what a dropped score
    becomes, and where it is against the mask."""
    check = verdict(mha(bug, dropout=0.3), "dropout-placement", rules=["dropout-placement"])
    if "{}" in words:
        line = user_modules_line('if self.bug == "dropout-after-mask":' if bug == "dropout-after-mask"
                                 else 'if self.bug == "dropout-before-softmax":') + 1
        assert check.evidence == words.format(line), check.evidence
    assert check.status == "fail" and words.split("{}")[-1] in check.evidence
    assert verdict(mha(dropout=0.3), "dropout-placement", rules=["dropout-placement"]).status == "pass"


def test_the_book_wrappers_dropout_is_read_from_each_heads_call():
    """MultiHeadAttentionWrapper's heads are recorded one by one: its dropout acts after the softmax, and handed over
    in training mode it fails as MultiHeadAttention does."""
    torch.manual_seed(0)
    wrapper = um.LearnerMHAWrapper(16, 8, 16, 0.2, num_heads=2)
    check = verdict(wrapper.eval(), "dropout-placement", rules=["dropout-placement"])
    assert check.status == "pass" and "in training mode dropout acts on the weights after the softmax" in check.evidence
    check = verdict(wrapper.train(), "dropout-placement", rules=["dropout-placement"])
    assert check.status == "fail" and "call module.eval()" in check.evidence, check.evidence


def test_a_wrapper_whose_heads_drop_in_eval_mode_fails_dropout_placement_and_the_rules_that_need_two_forwards_skip():
    """The wrapper's heads are recorded one by one and stacked: a head's dropout that drops in eval mode is the
    module's; it passed dropout-placement, and causal failed blaming the mask, before."""
    torch.manual_seed(0)
    wrapper = um.LearnerEvalDropoutWrapper(16, 8, 16, 0.5, num_heads=2)
    by_rule = {check.rule: check for check in checks.check_module(wrapper)}
    placement, causal = by_rule["dropout-placement"], by_rule["causal"]
    assert placement.status == "fail" and "in eval mode dropout still changes" in placement.evidence, placement.evidence
    assert causal.status == "skip" and "dropout acts in eval mode" in causal.evidence, causal.evidence


def test_a_dropout_that_never_drops_in_training_mode_fails():
    check = verdict(mha("dropout-never-trains", dropout=0.3), "dropout-placement", rules=["dropout-placement"])
    assert check.status == "fail" and "(p = 0.3) is called with training=False" in check.evidence, check.evidence


@pytest.mark.parametrize(("module", "words", "p_zero"), [
    # the book's MultiHeadAttention built with dropout 0: its dropout is where the book puts it, and drops nothing
    (mha(), "the dropout on the weights after the softmax, where the book puts it, has p = 0", True),
    (um.CausalSelfAttention(dropout=0.0), "dropout has p = 0, as has scaled_dot_product_attention's dropout_p", True),
    (um.CausalSelfAttention(dropout=0.0, flash=False), "the dropout on the weights after the softmax", True),
    (mha("dropout-not-called", dropout=0.3), "the forward never calls self.dropout (p = 0.3)", False),
    (um.LearnerMHAWrapper(16, 8, 16, 0.0, num_heads=2), "the dropout on the weights after the softmax", True),
    (um.GroupedQueryAttention(), "the module has no dropout (no nn.Dropout, no F.dropout call)", False),
    (um.GQAWithSDPA(), "scaled_dot_product_attention's dropout_p is 0 and the module has no nn.Dropout", True),
    (um.TorchMHA(), "nn.MultiheadAttention's dropout is 0 and the module has no nn.Dropout", True),
])
def test_dropout_placement_says_why_no_dropout_acts(module, words, p_zero):
    """A module whose dropout drops nothing passes, and the words say why: a p of 0 (with how to see where the dropout
    acts), an nn.Dropout never called, or no dropout at all — not "no dropout acts", which a learner reads as
    "your dropout is missing"."""
    check = verdict(module.eval(), "dropout-placement", rules=["dropout-placement"])
    assert check.status == "pass" and words in check.evidence, check.evidence
    assert ("attnviz check --dropout 0.1" in check.evidence) == p_zero  # how to see where a dropout of p = 0 acts


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


@pytest.mark.parametrize("module", [um.ValuesAfterSoftmax(), um.BlockWithoutOutProj(),
                                    um.BlockWithoutOutProj(feed_forward=False)],
                         ids=["values-after-softmax", "block-with-feed-forward", "block-returns-residual"])
def test_matches_reference_passes_a_correct_module_whose_later_linear_takes_something_else(module):
    """A Linear after the attention whose input is x (V projected late) or x + context (a residual) is not the
    context: the rule compared x with the reference and failed correct modules."""
    torch.manual_seed(0)
    check = verdict(module.eval(), "matches-reference")
    assert check.status == "pass", check.evidence
    assert failing(module) == set()


def test_matches_reference_fails_a_wrong_module_with_its_own_context_as_evidence():
    """The evidence's module value is the module's own context (weights · V) at the index named, not its input."""
    torch.manual_seed(0)
    module = um.ValuesAfterSoftmax(diagonal=2).eval()  # one future token visible
    x = checks.default_input(module)
    check = verdict(module, "matches-reference", x=x)
    assert check.status == "fail" and "the context ≠" in check.evidence
    index = tuple(int(i) for i in re.search(r"at index \(([\d, ]+)\)", check.evidence).group(1).split(","))
    own = float(re.search(r"\(module (\S+),", check.evidence).group(1))
    context = module(x).detach()  # (b, n, d_out): the context is what this module returns
    assert own == pytest.approx(context[index].item(), rel=1e-3)
    assert own != pytest.approx(x[index].item(), rel=1e-3)  # the rule compared x with the reference


def test_one_token_skips_the_rules_that_need_a_later_token_in_words():
    """With one token nothing comes after it: causal passed as "j = 1 … 0" and mask-convention as "exactly the
    future" though no cell could be hidden."""
    results = {c.rule: c for c in checks.check_module(mha(), torch.randn(2, 1, 16))}
    for rule in ("causal", "mask-convention"):
        assert results[rule].status == "skip" and results[rule].evidence.startswith("1 token:"), results[rule]
    assert "1 … 0" not in results["causal"].evidence
    assert [c.rule for c in results.values() if c.status == "fail"] == []
    assert {c.rule for c in results.values() if c.status == "pass"} == {
        "rows-sum-to-one", "scaling", "dropout-placement", "batch-independence", "matches-reference"}


def test_matches_reference_says_the_heads_equal_and_the_context_equals():
    """The evidence read "the concatenated heads equals softmax(…)"."""
    assert verdict(mha(), "matches-reference").evidence.startswith("the concatenated heads equal softmax(")
    torch.manual_seed(0)
    one_head = um.MyMultiHeadAttention(16, 32, 16, 0.0, 1).eval()
    assert verdict(one_head, "matches-reference").evidence.startswith("the context equals softmax(")


def test_two_tokens_name_their_one_j_and_their_one_prefill_token():
    """At 2 tokens causal read "(j = 1 … 1)" and a cache bug "tokens 0 … 0 (the prefill)"."""
    x = torch.randn(2, 2, 16)
    assert verdict(mha(), "causal", x=x).evidence.endswith("moves no output before j (j = 1)")
    assert verdict(mha(), "causal", x=torch.randn(2, 3, 16)).evidence.endswith("(j = 1 … 2)")

    class CachedOffByOne(um.LearnerCachedMHA):  # every cached forward adds 1
        def forward(self, x, use_cache=False):
            return super().forward(x, use_cache) + (1.0 if use_cache else 0.0)  # (b, n, d_out)

    torch.manual_seed(0)
    check = verdict(CachedOffByOne(16, 32, 16, 0.0, 4).eval(), "kv-cache", x=x)
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 0 (the prefill):"), check
    check = verdict(CachedOffByOne(16, 32, 16, 0.0, 4).eval(), "kv-cache", x=torch.randn(2, 8, 16))
    assert check.evidence.startswith("sequence 1, tokens 0 … 3 (the prefill):"), check


def test_one_token_that_hides_itself_still_fails_mask_convention():
    check = verdict(mha("diagonal-hidden"), "mask-convention", x=torch.randn(2, 1, 16))
    assert check.status == "fail" and "each token hides itself" in check.evidence



def test_an_inverted_sdpa_mask_built_in_the_forward_is_called_inverted_without_being_told_causal():
    """A boolean mask made with masked_fill's convention and handed to SDPA (True = keep) hides the past and the
    diagonal: no buffer or flag says causal, and the rules skipped causal and called it "not causal"."""
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.InvertedSDPAMask().eval())}
    assert results["causal"].status == "fail" and "position 0 sees the future" in results["causal"].evidence
    evidence = results["mask-convention"].evidence
    assert results["mask-convention"].status == "fail" and "the mask is inverted" in evidence
    assert "SDPA's boolean attn_mask keeps where it is True" in evidence
    assert "row 7 (query 7) hides every key" in evidence and "NaN" in evidence  # the last query keeps nothing


@pytest.mark.slow  # a whole check_module run: the slow tier
def test_nanogpt_flash_path_without_is_causal_is_told_to_pass_is_causal():
    """nanoGPT's flash path with is_causal=False (its slow path's bias buffer says causal) fails mask-convention
    saying SDPA was given no mask and to pass is_causal=True — not "masked_fill returns a copy", a call it never
    makes."""
    torch.manual_seed(0)
    check = verdict(um.FlashWithUnusedBias().eval(), "mask-convention", rules=["mask-convention"])
    assert check == checks.Check(
        "mask-convention", "fail", "no cell is hidden: scaled_dot_product_attention was given no mask: pass "
        "is_causal=True (or a causal attn_mask)")


@pytest.mark.slow  # a whole check_module run: the slow tier
def test_a_module_named_causal_that_hides_nothing_is_told_how_to_check_it_as_causal():
    """nanoGPT's flash path with is_causal=False and no mask buffer: nothing says causal but its name, and the causal
    rule skipped as for an encoder, exit 0."""
    torch.manual_seed(0)
    check = verdict(um.CausalFlashAttention().eval(), "causal", rules=["causal"])
    assert check == checks.Check("causal", "skip", "the module is not causal (no mask hides the future) — yet its "
                                 "name, CausalFlashAttention, says causal: to check it as causal, give attnviz check "
                                 "--causal (check_module's causal=True)")
    torch.manual_seed(0)
    check = verdict(um.CausalFlashAttention().eval(), "causal", rules=["causal"], causal=True)
    assert check.status == "fail", check


@pytest.mark.slow  # a whole check_module run: the slow tier
@pytest.mark.parametrize(("mask", "words"), [
    ("past", "use triu(…, diagonal=1); nn.MultiheadAttention's boolean attn_mask hides where it is True"),
    ("kept", "NaN weights. Pass torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1) (is_causal=True alone is "
             "no mask to nn.MultiheadAttention: only a hint that attn_mask is this one)"),
], ids=["past", "inverted"])
def test_a_boolean_mask_given_to_multihead_attention_is_not_called_a_float_one(mask, words):
    """nn.MultiheadAttention turns a boolean attn_mask into a float one before the call the tracer reads: a boolean
    mask that hides the past, or is inverted, is told nn.MultiheadAttention's boolean convention and the mask to
    pass, never "a float attn_mask is added to the scores"."""
    torch.manual_seed(0)
    check = verdict(um.WrappedMHABoolMask(mask=mask).eval(), "mask-convention", rules=["mask-convention"])
    assert check.status == "fail" and words in check.evidence, check
    assert "float attn_mask" not in check.evidence


@pytest.mark.slow  # a whole check_module run: the slow tier
def test_a_mask_that_hides_the_diagonal_names_the_query_left_with_no_key():
    """Each query hiding itself leaves query 0 no key: with −∞ its weights are NaN, with a finite fill (finfo.min)
    the softmax spreads it over every key, the future's too — the causal rule blamed "the values of earlier tokens"."""
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.DiagonalHidden(fill="min").eval(),
                                                      rules=["causal", "mask-convention"])}
    assert results["mask-convention"].evidence.endswith(
        "; row 0 (query 0) hides every key, and its fill is finite, so the softmax spreads that row evenly over every "
        "key, the future included"), results["mask-convention"]
    assert results["causal"].evidence.endswith(
        " — query 0 hides every key, itself included, and the fill is finite, so the softmax spreads its weight evenly "
        "over every key, the future's too (see mask-convention)"), results["causal"]
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.DiagonalHidden(fill="-inf").eval(),
                                                      rules=["mask-convention", "matches-reference"])}
    evidence = results["matches-reference"].evidence
    assert results["matches-reference"].status == "fail" and "the module's is NaN at index (0, 0, 0) (reference " in \
        evidence and evidence.endswith("— a query with every key hidden, whose softmax is 0/0 (see mask-convention)")
    check = results["mask-convention"]
    assert check == checks.Check("mask-convention", "fail", "the diagonal is hidden too: each token hides itself (hide "
                                 "exactly the keys after each query, j > i); row 0 (query 0) hides every key, so its "
                                 "softmax is 0/0: NaN weights")


@pytest.mark.parametrize(("fill", "weights"), [("-inf", "are NaN (a softmax of 0/0)"), ("min", "sum to 1")])
def test_rows_sum_to_one_says_which_rows_its_pass_leaves_out(fill, weights):
    """A pass of rows-sum-to-one beside NaN weights reads as if every row were fine: it names the rows that hide
    every key, which no sum judges, and the rule that does."""
    torch.manual_seed(0)
    check = verdict(um.DiagonalHidden(fill=fill).eval(), "rows-sum-to-one", rules=["rows-sum-to-one"])
    assert check.status == "pass" and check.evidence.endswith(
        f"rows with a visible key sum to 1; 4 rows hide every key, and their weights {weights}: mask-convention "
        "judges that"), check


def test_a_mask_that_hides_the_past_instead_of_the_future_says_so():
    torch.manual_seed(0)
    check = verdict(um.TrilInsteadOfTriu().eval(), "mask-convention")
    assert check.status == "fail" and "hides the past instead of the future" in check.evidence
    assert "triu(…, diagonal=1)" in check.evidence


@pytest.mark.parametrize("in_place", [False, True], ids=["w / d", "w /= d"])
def test_a_scale_after_the_softmax_fails_rows_sum_to_one_and_scaling_in_words(in_place):
    """softmax(s) / √d: the softmax's output sums to 1, but the weights that multiply V sum to 1/√d."""
    torch.manual_seed(0)
    module = um.ScaleAfterSoftmax(in_place=in_place).eval()  # d_out 16: the rows sum to 1/4
    results = {c.rule: c for c in checks.check_module(module)}
    assert results["rows-sum-to-one"].status == "fail"
    assert "sums to 0.25" in results["rows-sum-to-one"].evidence
    assert "after the softmax" in results["rows-sum-to-one"].evidence
    assert results["scaling"].status == "fail" and "after the softmax" in results["scaling"].evidence
    assert "√head_dim = √16" in results["scaling"].evidence
    assert results["matches-reference"].status == "fail"  # Q, K, V are found: the context is compared
    assert failing(module) == {"rows-sum-to-one", "scaling", "matches-reference"}


def test_matches_reference_says_where_it_lost_v_when_it_skips():
    """A tensor acting on the weights before ``@ V`` (here a redundant renormalisation) hides V from the tracer: the
    skip says which call on which line, not only "could not all be identified"."""
    torch.manual_seed(0)
    check = verdict(um.RenormalisedWeights().eval(), "matches-reference")
    assert check.status == "skip"
    assert "no weights @ V" in check.evidence and "the / on line" in check.evidence


def test_matches_reference_says_where_it_lost_q_and_k_when_it_skips():
    torch.manual_seed(0)
    check = verdict(um.SoftCappedScores().eval(), "matches-reference")
    assert check.status == "skip"
    assert "no Q @ Kᵀ before the softmax" in check.evidence and "the tanh on line" in check.evidence


def test_an_explicit_input_and_a_single_item_batch():
    x = torch.randn(1, 5, 16)
    assert failing(mha(), x=x) == set()


def test_a_module_without_attention_is_one_line():
    with pytest.raises(tracing.TraceError, match="no attention found"):
        checks.check_module(um.NoSoftmax())


@pytest.mark.parametrize(("module", "message"), [
    (um.DropsTheBatch(), r"returned shape \(1, 8, 16\) for an input of shape \(2, 8, 32\)"),
    (um.ReturnsTransposed(), r"returned shape \(2, 16, 8\) for an input of shape \(2, 8, 32\)"),
    (um.SoftmaxOverFeatures(), r"attention weights must have shape \(\.\.\., n, n\)"),
], ids=["drops-the-batch", "returns-transposed", "softmax-over-features"])
def test_a_module_that_is_not_one_vector_per_token_cannot_be_checked_and_says_why(module, message):
    with pytest.raises(tracing.TraceError, match=message) as caught:
        checks.check_module(module)
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- today's attention: GQA, MQA, MLA, SWA, rotary

def learner(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(16, 32, 16, 0.0, 4, *args, **kwargs).eval()  # head_dim 8


@pytest.mark.parametrize(("cls", "args"), [
    (um.LearnerGQA, (2,)),  # 4 query heads, 2 K/V heads
    (um.LearnerGQA, (1,)),  # multi-query
    (um.LearnerRotaryGQA, (2,)),
    (um.LearnerGQAWithSDPA, (2,)),
    (um.LearnerMLA, ()),
    (um.LearnerSWA, ()),
], ids=["gqa", "mqa", "gqa-rotary", "gqa-sdpa", "mla", "swa"])
def test_todays_attention_written_by_a_learner_passes(cls, args):
    results = checks.check_module(learner(cls, *args))
    assert [c for c in results if c.status == "fail"] == []
    not_rotary = set() if cls is um.LearnerRotaryGQA else {"rotary-placement"}
    assert {c.rule for c in results if c.status == "skip"} == {"kv-cache"} | not_rotary  # no use_cache


def test_matches_reference_compares_a_gqa_modules_repeated_keys_and_catches_a_wrong_context():
    module = learner(um.LearnerGQA, 2)
    recording = tracing.record(module, checks.default_input(module))
    attention = tracing.combine(recording.attentions)
    assert attention.keys.shape[1] == 4  # per query head, after repeat_interleave
    assert checks.matches_reference(recording, attention, True).status == "pass"
    attention.values = attention.values.flip(1)  # heads paired with the wrong K/V group
    assert checks.matches_reference(recording, attention, True).status == "fail"


@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_mask_convention_recognises_a_sliding_window_and_reports_w(window):
    module = learner(um.LearnerSWA, window)
    check = verdict(module, "mask-convention")
    assert check.status == "pass" and f"sliding window W = {window}" in check.evidence
    sees = {1: "only itself", 2: "keys i − 1, i", 3: "keys i − 2 … i", 5: "keys i − 4 … i"}[window]
    assert check.evidence.endswith(f"(query i sees {sees})"), check.evidence  # not "i - 0 … i" for W = 1
    assert verdict(module, "causal").status == "pass"
    assert verdict(module, "matches-reference").status == "pass"


def test_a_window_off_by_one_fails_mask_convention_naming_diff_ge_w():
    module = learner(um.LearnerSWA, 3, bug="window-off-by-one")
    check = verdict(module, "mask-convention")
    assert check.status == "fail" and "a window of 4" in check.evidence and "diff >= W" in check.evidence
    assert failing(module) == {"mask-convention"}


def test_a_plain_causal_mask_is_no_window():
    assert "exactly the future" in verdict(mha(), "mask-convention").evidence


# ---------------------------------------------------------------- the KV cache

def cached(bug=None):
    torch.manual_seed(0)
    return um.LearnerCachedMHA(16, 32, 16, 0.0, 4, bug=bug).eval()


def test_kv_cache_passes_a_correct_cached_module_and_leaves_it_reset():
    module = cached()
    check = verdict(module, "kv-cache")
    assert check.status == "pass" and "reset_cache()" in check.evidence and "prefill of 4 tokens" in check.evidence
    assert failing(module) == set()
    assert module.cache_k is None and module.ptr_current_pos == 0


@pytest.mark.parametrize("bug", [None, "reset-keeps-cache"])
def test_kv_cache_reads_a_cache_of_inference_tensors(bug):
    """A forward under @torch.inference_mode() caches inference tensors, which keep no version counter: the rule's
    own code raised reading it ("Inference tensors do not track version counter")."""
    torch.manual_seed(0)
    module = um.CachedInInferenceMode(16, 32, 16, 0.0, 4, bug=bug).eval()
    check = verdict(module, "kv-cache")
    if bug is None:
        assert check.status == "pass" and "two sequences, each after reset_cache()" in check.evidence, check
    else:
        assert check.status == "fail" and "after reset_cache() the next sequence still attends over the last one's " \
            "keys: empty cache_k/cache_v in the reset" in check.evidence, check


def test_kv_cache_skips_one_token_in_words_and_runs_no_cached_forward():
    """With one token there is no token to feed from the cache: the rule passed on a prefill alone."""
    module = cached("position-never-advances")  # would fail on a second token
    check = verdict(module, "kv-cache", x=torch.randn(2, 1, 16))
    assert check.status == "skip" and check.evidence.startswith("1 token:"), check
    assert checks._planned_forwards(module, torch.randn(2, 1, 16), ["kv-cache"], causal=True) == 1


@pytest.mark.parametrize(("bug", "words"), [
    ("position-never-advances", "sequence 1, token 4: the cached output differs"),
    ("position-never-advances", "the position never advances: ptr_current_pos is still 0"),
    ("reset-forgets-position", "sequence 2, tokens 0 … 3 (the prefill)"),
    ("reset-forgets-position", "the reset forgets the position"),
    ("keeps-too-little", "the cache keeps too little: cache_k holds 3 tokens after 4"),
    ("advances-by-one", "sequence 1, token 4: the cached output differs"),
    ("advances-by-one", "the position counts forwards, not tokens: ptr_current_pos is 1 before token 4, after 1 "
                        "cached forward of 4 tokens, so the mask (or the rotary angles) treat token 4 as position 1; "
                        "add the new tokens' count (x.shape[1]), not 1, after each cached forward"),
    ("advances-before-slicing", "sequence 1, tokens 0 … 3 (the prefill): the cached output differs"),
    ("advances-before-slicing", "the mask is sliced after the position is advanced: this step's mask hides nothing "
                                "(token 0 sees the tokens after it), as the rows from ptr_current_pos = 4 (its value "
                                "after the step) do; slice the mask at the position before the step (0), then add "
                                "the new tokens' count"),
    ("mask-for-new-tokens", "sequence 1, token 4: the cached output differs"),
    ("mask-for-new-tokens", "the mask is built for the new tokens alone: it treats token 4 as position 0, so it sees "
                            "only key 0 of the 5 the cache holds; take the mask's rows from the position the step "
                            "starts at (4) and as many columns as the cache holds"),
    ("reset-to-one", "sequence 1, tokens 0 … 3 (the prefill): the cached output differs"),
    ("reset-to-one", "the position is wrong: ptr_current_pos is 1 before token 0, and the step's mask treats token 0 "
                     "as position 1; it must count the tokens fed so far (0)"),
    ("appends-twice", "sequence 1, token 4: the cached output differs"),
    ("appends-twice", "the cache holds tokens more than once: cache_k holds 9 tokens after 5, and 2 tokens after the "
                      "first alone — add each forward's keys and values once"),
])
def test_kv_cache_fails_each_cache_bug_naming_the_step_and_the_cause(bug, words):
    module = cached(bug)
    check = verdict(module, "kv-cache")
    assert check.status == "fail" and words in check.evidence
    assert failing(module) == {"kv-cache"}  # uncached, the module is right


class KeepsOneToken(um.LearnerCachedMHA):
    """A cache bounded to the last token: every cached forward after the prefill sees one earlier key."""

    def forward(self, x, use_cache=False):
        output = super().forward(x, use_cache=use_cache)
        if use_cache:
            self.cache_k, self.cache_v = self.cache_k[:, -1:], self.cache_v[:, -1:]
        return output


def test_kv_cache_names_a_position_counter_kept_under_its_own_name_by_what_the_cached_forwards_do():
    """A counter not under a usual name (``tokens_seen``) is the one int the cached forwards change; it is named as
    the cause only because the step's mask puts the new token where the counter says (position 1, not 4)."""
    torch.manual_seed(0)
    check = verdict(um.CountsTokensSeen().eval(), "kv-cache")
    assert check.status == "fail" and check.evidence.endswith(
        "the position counts forwards, not tokens: tokens_seen (the int the cached forwards change) is 1 before token "
        "4, after 1 cached forward of 4 tokens, so the mask (or the rotary angles) treat token 4 as position 1; add "
        "the new tokens' count (x.shape[1]), not 1, after each cached forward"), check
    torch.manual_seed(0)
    assert verdict(um.CountsTokensSeen(fixed=True).eval(), "kv-cache").status == "pass"


def test_kv_cache_does_not_trust_a_usual_position_name_that_no_cached_forward_moved():
    """A constant int under a usual name (OPT's ``self.offset = 2``; here ``pos = 0``) beside the counter the cached
    forwards do move (``tokens_seen``) is not the position: the cause stays the moving counter's, on mask evidence."""
    torch.manual_seed(0)
    check = verdict(um.CountsTokensSeenWithPos().eval(), "kv-cache")
    assert check.status == "fail" and "pos is still 0" not in check.evidence, check
    assert check.evidence.endswith(
        "the position counts forwards, not tokens: tokens_seen (the int the cached forwards change) is 1 before token "
        "4, after 1 cached forward of 4 tokens, so the mask (or the rotary angles) treat token 4 as position 1; add "
        "the new tokens' count (x.shape[1]), not 1, after each cached forward"), check


def test_kv_cache_keeps_the_generic_words_when_the_evidence_names_no_cause():
    """A cached step that adds a constant: its mask, keys, queries and values are all the whole sequence's, so no
    cause is named."""
    torch.manual_seed(0)
    check = verdict(CachedPlusOne(16, 32, 16, 0.0, 4).eval(), "kv-cache")
    assert check.evidence.endswith("the cached step does not compute what the whole sequence computes at that "
                                   "position"), check


class CachedPlusOne(um.LearnerCachedMHA):  # every cached forward adds 1 after the attention
    def forward(self, x, use_cache=False):
        return super().forward(x, use_cache) + (1.0 if use_cache else 0.0)  # (b, n, d_out)


def test_kv_cache_does_not_count_tokens_in_a_cache_allocated_once():
    """The book's optimized cache allocates cache_k at the context's size: its size says nothing of the tokens it
    holds, so a mask bug is not named "keeps too little" (its size after 5 tokens ÷ its size after 1 is 1)."""
    torch.manual_seed(0)
    assert verdict(um.PreallocatedCache().eval(), "kv-cache").status == "pass"
    torch.manual_seed(0)
    check = verdict(um.PreallocatedCache(bug="mask-for-new-tokens").eval(), "kv-cache")
    assert check.status == "fail" and "keeps too little" not in check.evidence, check
    assert check.evidence.endswith("the mask is built for the new tokens alone: it treats token 4 as position 0, so it "
                                   "sees only key 0 of the 5 the cache holds; take the mask's rows from the position "
                                   "the step starts at (4) and as many columns as the cache holds"), check


def test_one_cell_and_one_token_are_named_in_the_singular():
    module = mha()
    module.causal = False  # the flag a forward forgets to read
    assert verdict(module, "mask-convention", x=torch.randn(1, 2, 16)).evidence.startswith(
        "the module's causal attribute is False, but the module masks: it hides the 1 cell above the diagonal")
    torch.manual_seed(0)
    keeps_one = KeepsOneToken(16, 32, 16, 0.0, 4).eval()
    assert "the step attends over only 2 tokens after 5: the cache keeps too little" in verdict(
        keeps_one, "kv-cache").evidence  # cache_k's size stays 1 token: no count from its growth (see preallocated)


def test_a_reset_that_forgets_the_position_only_shows_after_an_earlier_sequence():
    module = cached("reset-forgets-position")
    x = checks.default_input(module)
    assert "sequence 2" in checks.kv_cache(module, x).evidence  # the first sequence starts at 0 and passes


def test_kv_cache_skips_a_module_without_use_cache_and_fails_one_without_a_reset():
    assert "takes no use_cache" in verdict(mha(), "kv-cache").evidence

    class NoReset(um.LearnerCachedMHA):
        reset_cache = None

    torch.manual_seed(0)
    check = verdict(NoReset(16, 32, 16, 0.0, 4).eval(), "kv-cache")
    assert check.status == "fail" and "no reset_cache() or reset_kv_cache()" in check.evidence


def test_kv_cache_feeds_back_a_cache_the_caller_holds():
    """Hugging Face's convention (``past_key_values`` in, ``(out, present)`` out, nothing kept by the module) is
    checked by passing each forward's returned cache to the next: correct, it passes; a mask that ignores the past
    tokens fails at the first token fed from the cache."""
    torch.manual_seed(0)
    module = um.PastKeyValues().eval()
    check = verdict(module, "kv-cache")
    assert check.status == "pass", check
    assert "each given the cache the forward before returned (past_key_values)" in check.evidence
    assert "prefill of 4 tokens" in check.evidence
    assert failing(module) == set()
    torch.manual_seed(0)
    check = verdict(um.PastKeyValues(bug="mask-ignores-past").eval(), "kv-cache")
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: the cached output differs"), check
    assert "past_key_values" in check.evidence


@pytest.mark.parametrize("returns_cache", [False, True], ids=["returns-out-and-weights", "returns-the-cache"])
def test_kv_cache_checks_a_hugging_face_cache_object_filled_in_place(returns_cache):
    """A layer written as Hugging Face's are (``past_key_values.update(k, v, self.layer_idx)`` on a ``DynamicCache``
    the caller holds, returned or not) is given one and fed the same object back: correct, it passes; its bugs fail
    naming the cause."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    check = verdict(um.CacheObjectAttention(returns_cache=returns_cache).eval(), "kv-cache", rules=["kv-cache"])
    assert check == checks.Check("kv-cache", "pass", "two sequences: a prefill of 4 tokens, then 2 tokens one by one "
                                                     "and the last 2 in one forward (a chunk after the cache), "
                                                     "each given the DynamicCache the forward before filled "
                                                     "(past_key_values), give the uncached outputs (≤ 1e-05); after 8 "
                                                     "tokens the cache holds 8 tokens of 64 elements (256 bytes) each: "
                                                     "past_key_values.layers[0].keys (1, 4, 8, 8), "
                                                     "past_key_values.layers[0].values (1, 4, 8, 8)")
    given = " (each forward given the DynamicCache the forward before filled as past_key_values)"
    torch.manual_seed(0)
    module = um.CacheObjectAttention(bug="mask-ignores-past", returns_cache=returns_cache).eval()
    check = verdict(module, "kv-cache", rules=["kv-cache"])
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: the cached output differs")
    assert check.evidence.endswith("the mask is built for the new tokens alone: it treats token 4 as position 0, so it "
                                   "sees only key 0 of the 5 the cache holds; take the mask's rows from the position "
                                   "the step starts at (4) and as many columns as the cache holds" + given), check
    torch.manual_seed(0)
    module = um.CacheObjectAttention(bug="updates-twice", returns_cache=returns_cache).eval()
    check = verdict(module, "kv-cache", rules=["kv-cache"])
    assert check.status == "fail" and check.evidence.endswith(
        "the step attends over 10 tokens after 5: the cache holds tokens more than once — add each forward's keys "
        "and values once" + given), check


def llama_layer(rotary_from_0=False):
    """transformers' own LlamaAttention (eager) at tiny sizes, in the wrapper a user writes to call it as forward(x):
    the rotary angles and the additive causal mask its model would build, from the DynamicCache's length."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    class LlamaLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                 max_position_embeddings=64)
            config._attn_implementation = "eager"
            self.self_attn = LlamaAttention(config, layer_idx=0)
            self.rotary_emb = LlamaRotaryEmbedding(config)

        def forward(self, hidden_states, past_key_values=None):
            T = hidden_states.shape[1]
            past = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(T)[None] + (0 if rotary_from_0 else past)  # (1, T): the bug starts at 0
            cos, sin = self.rotary_emb(hidden_states, position_ids)  # (1, T, head_dim) each
            future = torch.arange(past + T)[None, :] > torch.arange(past, past + T)[:, None]  # (T, past + T)
            mask = torch.zeros(T, past + T).masked_fill(future, float("-inf"))[None, None]  # (1, 1, T, past + T)
            return self.self_attn(hidden_states, (cos, sin), mask, past_key_values=past_key_values)[0]  # (b, T, 32)

    torch.manual_seed(0)
    return LlamaLayer().eval()


def test_kv_cache_checks_transformers_own_llama_and_gpt2_attention_with_a_dynamic_cache():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = transformers.GPT2Config(n_embd=64, n_head=4)
    config._attn_implementation = "sdpa"  # causal through is_causal, alone
    torch.manual_seed(0)
    check = verdict(GPT2Attention(config, layer_idx=0).eval(), "kv-cache", rules=["kv-cache"])
    assert check.status == "pass" and "each given the DynamicCache the forward before filled" in check.evidence
    results = {c.rule: c for c in checks.check_module(llama_layer())}
    assert [c for c in results.values() if c.status != "pass"] == []
    assert "each given the DynamicCache the forward before filled (past_key_values)" in results["kv-cache"].evidence
    check = verdict(llama_layer(rotary_from_0=True), "kv-cache", rules=["kv-cache"])
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: the cached output differs")
    assert ("the step hides the right keys, but its query for token 4 is the whole sequence's turned by another angle "
            "(the same length, another direction): the new queries and keys are rotated at the wrong position — rotate "
            "them at offset start_pos = 4 (the tokens already cached) (each forward given the DynamicCache"
            in check.evidence), check


def test_a_cache_argument_of_a_tuple_cache_names_the_mask_that_ignores_the_past():
    torch.manual_seed(0)
    check = verdict(um.PastKeyValues(bug="mask-ignores-past").eval(), "kv-cache")
    assert check.evidence.endswith("the mask is built for the new tokens alone: it treats token 4 as position 0, so "
                                   "it sees only key 0 of the 5 the cache holds; take the mask's rows from the "
                                   "position the step starts at (4) and as many columns as the cache holds (each "
                                   "forward given the cache the forward before returned as past_key_values)"), check


def test_kv_cache_skips_a_cache_argument_whose_cache_never_comes_back():
    class ReturnsNoCache(um.PastKeyValues):
        def forward(self, x, past_key_values=None, use_cache=False):
            return super().forward(x, past_key_values)[0]

    torch.manual_seed(0)
    check = verdict(ReturnsNoCache().eval(), "kv-cache")
    assert check == checks.Check("kv-cache", "skip", "the cache is passed in as past_key_values but the forward "
                                                     "returns none to pass back: not checked")


def test_kv_cache_skips_a_cache_argument_of_a_module_that_is_not_causal():
    """Unmasked, the whole sequence's first tokens see the later ones, which a prefill cannot: not a cache fault."""
    torch.manual_seed(0)
    check = verdict(um.PastKeyValues(bug="no-mask").eval(), "kv-cache")
    assert check == checks.Check("kv-cache", "skip", "the cache is passed in as past_key_values, and the module is not "
                                                     "causal: its first tokens see the later ones, so a prefill cannot "
                                                     "give them: not checked")


def test_kv_cache_uses_reset_kv_cache_when_that_is_the_modules_name():
    class Renamed(um.LearnerCachedMHA):
        reset_kv_cache = um.LearnerCachedMHA.reset_cache
        reset_cache = None

    torch.manual_seed(0)
    check = verdict(Renamed(16, 32, 16, 0.0, 4).eval(), "kv-cache")
    assert check.status == "pass" and "reset_kv_cache()" in check.evidence


def test_a_cached_forward_that_raises_fails_the_rule_in_one_line():
    torch.manual_seed(0)  # a context of 10: the second prefill asks the mask for rows 8 … 11
    module = um.LearnerCachedMHA(16, 32, 10, 0.0, 4, bug="reset-forgets-position").eval()
    check = verdict(module, "kv-cache")
    assert check.status == "fail" and check.evidence.startswith("a cached forward raised RuntimeError")
    assert "\n" not in check.evidence


def test_kv_cache_passes_a_sliding_window_cache_that_keeps_only_w_tokens():
    module = learner(um.LearnerCachedSWA, 3)
    results = {c.rule: c for c in checks.check_module(module)}
    assert results["kv-cache"].status == "pass" and "sliding window W = 3" in results["mask-convention"].evidence
    assert [c for c in results.values() if c.status == "fail"] == []
    module(torch.randn(1, 6, 16), use_cache=True)
    assert module.cache_k.shape[2] == 3  # it really keeps only the window


@pytest.mark.parametrize(("module", "holds"), [
    (lambda: cached(), "8 tokens of 64 elements (256 bytes) each: cache_k (1, 8, 4, 8), cache_v (1, 8, 4, 8)"),
    (lambda: learner(um.LearnerCachedGQA, 2),
     "8 tokens of 32 elements (128 bytes) each: cache_k (1, 2, 8, 8), cache_v (1, 2, 8, 8)"),
    (lambda: learner(um.LearnerCachedGQA, 2, rotary=True),
     "8 tokens of 32 elements (128 bytes) each: cache_k (1, 2, 8, 8), cache_v (1, 2, 8, 8)"),
    (lambda: learner(um.LearnerCachedMLA, 8), "8 tokens of 8 elements (32 bytes) each: cache_c_kv (1, 8, 8)"),
    (lambda: learner(um.LearnerCachedSWA, 3),
     "3 tokens of 64 elements (256 bytes) each: cache_k (1, 4, 3, 8), cache_v (1, 4, 3, 8)"),
    (lambda: um.PreallocatedCache().eval(), "cache_k (1, 4, 16, 8), cache_v (1, 4, 16, 8): 1,024 elements (4,096 "
                                            "bytes), no more than after the first token"),
    (lambda: learner(um.LearnerCachedRopeMLA, 8, 4),
     "8 tokens of 12 elements (48 bytes) each: cache_c_kv (1, 8, 8), cache_k_rope (1, 8, 4)"),
    (lambda: learner(um.CachedGQAWithPositions, 2),
     "8 tokens of 33 elements (136 bytes) each: cache_k (1, 2, 8, 8), cache_v (1, 2, 8, 8), cache_positions (8)"),
])
def test_kv_cache_says_what_a_correct_cache_holds_after_the_sequence(module, holds):
    """A plain MHA cache and the learner's GQA (with and without rotary), MLA and SWA caches pass, and the evidence
    says what the cache holds per token after the last sequence (K/V heads × head_dim × 2, the latent, W tokens)."""
    check = verdict(module(), "kv-cache")
    assert check.status == "pass" and check.evidence.endswith(f"; after 8 tokens the cache holds {holds}"), check


@pytest.mark.parametrize("module", [lambda: learner(um.LearnerCachedRopeMLA, 8, 4),
                                    lambda: learner(um.CachedGQAWithPositions, 2)], ids=["rope-mla", "gqa-positions"])
def test_a_correct_cache_that_holds_more_than_k_and_v_of_its_variant_passes_every_rule(module):
    """A cache is failed for its size only on evidence of the known waste: DeepSeek's MLA caching a rotary key beside
    its latent (declared as rope_dim, not qk_rope_head_dim), a GQA keeping its tokens' positions beside K and V."""
    assert failing(module()) == set()


@pytest.mark.parametrize(("module", "words"), [
    (lambda: learner(um.LearnerCachedSWA, 3, bug="keeps-all"),
     "the cache keeps more than the window needs: cache_k holds 8 tokens after 8, and a window of W = 3 needs only "
     "the last 3 — the cache's 2,048 bytes grow by 256 with every token, where the last 3 take 768: drop the older "
     "keys and values after each forward (keep the last W)"),
    (lambda: learner(um.LearnerCachedGQA, 2, bug="caches-repeated"),
     "cache_k and cache_v hold num_heads = 4 heads where num_kv_groups = 2 K/V heads are declared (64 elements per "
     "token, where 2 K/V heads need 32) — cache the keys and values before repeat_interleave, and repeat them after "
     "reading the cache"),
    (lambda: learner(um.LearnerCachedMLA, 8, bug="caches-kv"),
     "cache_k and cache_v hold 32 elements per token each, d_out = 32: full keys and values where latent_dim = 8 "
     "is declared — cache the latent (the down-projection's output) and compute K and V from it at each step"),
])
def test_kv_cache_fails_a_cache_that_holds_more_than_its_variant_needs(module, words):
    """The outputs are right, but the cache wastes the memory the variant exists to save: more than W tokens, more
    K/V heads than num_kv_groups, more than latent_dim per token."""
    module = module()
    check = verdict(module, "kv-cache")
    assert check.status == "fail" and check.evidence.startswith("two sequences, each after reset_cache(): a prefill "
                                                                "of 4 tokens, then 2 tokens one by one and the last 2 "
                                                                "in one forward (a chunk after the cache), give the "
                                                                "uncached outputs (≤ 1e-05), but "), check
    assert check.evidence.endswith(words), check
    assert failing(module) == {"kv-cache"}


MIXED_PLAN = ("two sequences, each after reset_kv_cache(): a prefill of 4 tokens, then 2 tokens one by one and the "
              "last 2 in one forward (a chunk after the cache), give the uncached outputs (≤ 1e-05)")
K_AND_V = "layers[{0}].cache_k (1, 2, {1}, 8), layers[{0}].cache_v (1, 2, {1}, 8)"  # (b, h, tokens, hd) each


@pytest.mark.parametrize(("layers", "keeps_all", "verdict_words"), [
    ((3, 2), False, ("pass", f"{MIXED_PLAN}; after 8 tokens each layer's cache holds what its attention needs — "
                             "layers[0], layers[1] (a window of W = 3): 3 tokens; layers[2] (full attention): 8 tokens "
                             f"— {K_AND_V.format(0, 3)}, {K_AND_V.format(1, 3)}, {K_AND_V.format(2, 8)}")),
    ((2, 1), False, ("pass", f"{MIXED_PLAN}; after 8 tokens each layer's cache holds what its attention needs — "
                             "layers[0] (a window of W = 3): 3 tokens; layers[1] (full attention): 8 tokens — "
                             f"{K_AND_V.format(0, 3)}, {K_AND_V.format(1, 8)}")),
    ((3, 2), True, ("fail", f"{MIXED_PLAN}, but a window layer's cache keeps more than its window needs: "
                            "layers[0].cache_k holds 8 tokens after 8, and its layer, layers[0], has a window of "
                            "W = 3, so it needs only the last 3 — its cache's 1,024 bytes grow by 128 with every "
                            "token, where the last 3 take 384: drop that layer's older keys and values after each "
                            "forward (keep the last W); layers[1] does the same; the full-attention layer layers[2] "
                            "rightly keeps every token")),
], ids=["two-window-one-full", "one-window-one-full", "window-layers-keep-all"])
def test_kv_cache_checks_each_layer_against_its_own_window(layers, keeps_all, verdict_words):
    """A model that alternates window and full layers, as the book's bonus SWA model does: kv-cache holds each window
    layer's cache to that layer's own W and fails one that keeps every token, naming it, while each full layer's
    cache keeps every token and passes — with one window layer as with several."""
    n_layers, stride = layers
    torch.manual_seed(0)
    module = um.WindowAndFullLayers(n_layers=n_layers, sliding_window_stride=stride, keeps_all=keeps_all).eval()
    assert verdict(module, "kv-cache", rules=["kv-cache"]) == checks.Check("kv-cache", *verdict_words)


@pytest.mark.parametrize(("window_keeps_all", "verdict_words"), [
    (False, ("pass", f"{MIXED_PLAN}; after 8 tokens each layer's cache holds what its attention needs — window "
                     "(a window of W = 3): 3 tokens; full (full attention): 8 tokens — window.cache_k (1, 2, 3, 8), "
                     "window.cache_v (1, 2, 3, 8), full.cache_k (1, 8, 2, 8), full.cache_v (1, 8, 2, 8)")),
    (True, ("fail", f"{MIXED_PLAN}, but a window layer's cache keeps more than its window needs: window.cache_k "
                    "holds 8 tokens after 8, and its layer, window, has a window of W = 3, so it needs only the last 3 "
                    "— its cache's 1,024 bytes grow by 128 with every token, where the last 3 take 384: drop that "
                    "layer's older keys and values after each forward (keep the last W); the full-attention layer "
                    "full rightly keeps every token")),
], ids=["right", "window-layer-keeps-all"])
def test_kv_cache_holds_a_plain_layer_beside_a_window_layer_to_no_window(window_keeps_all, verdict_words):
    """The book's cached MultiHeadAttention, which keeps no window attribute at all, beside a sliding-window layer,
    which declares its W: kv-cache holds the window layer's cache to W and lets the full layer's keep every token.
    An attention layer of the model's own that declares no window is a full layer."""
    torch.manual_seed(0)
    module = um.CachedWindowBesideFull(window_keeps_all=window_keeps_all).eval()
    assert verdict(module, "kv-cache", rules=["kv-cache"]) == checks.Check("kv-cache", *verdict_words)


@pytest.mark.parametrize(("bug", "words"), [
    ("rerotate", "the step hides the right keys, but the cached key of token 1 is the whole sequence's turned by "
                 "another angle (the same length, another direction): the keys are rotated at the wrong positions — "
                 "rotate only the new keys, at offset start_pos (the tokens already cached), and cache them rotated"),
    ("no-offset", "the step hides the right keys, but its query for token 4 is the whole sequence's turned by another "
                  "angle (the same length, another direction): the new queries and keys are rotated at the wrong "
                  "position — rotate them at offset start_pos = 4 (the tokens already cached)"),
    ("repeat-on-cached-path", "the step hides the right keys, but its keys are the whole sequence's K/V heads in "
                              "another order: the cached step repeats them with .repeat (K1, K2, K1, K2), the whole "
                              "sequence with repeat_interleave (K1, K1, K2, K2) — use repeat_interleave(group_size, "
                              "dim=1) on both"),
])
def test_kv_cache_names_rotary_and_grouped_query_cache_bugs(bug, words):
    module = learner(um.LearnerCachedGQA, 2, rotary=bug != "repeat-on-cached-path", bug=bug)
    check = verdict(module, "kv-cache")
    assert check.status == "fail" and check.evidence.endswith(words), check
    assert failing(module) == {"kv-cache"}


def test_a_float64_module_is_checked_on_its_own_dtype():
    module = um.CausalSelfAttention(n_embd=16, n_head=4, flash=False).double()
    assert all(check.passed for check in checks.check_module(module))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_module_is_refused_not_failed(dtype):
    """The rules compare to 1e-5: a correct bfloat16 module failed rows-sum-to-one and matches-reference."""
    module = um.CausalSelfAttention(n_embd=16, n_head=4, flash=False).to(dtype)
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(tracing.TraceError, match=rf"weights are {name}.*copy.deepcopy\(module\).float\(\)"):
        checks.check_module(module)
    assert all(check.passed for check in checks.check_module(copy.deepcopy(module).float()))


def test_check_module_takes_text_and_numpy_as_trace_module_does():
    import numpy as np

    module = um.CausalSelfAttention(n_embd=16, n_head=4, flash=False)
    assert all(check.passed for check in checks.check_module(module, "Your journey starts with one step"))
    x = np.random.default_rng(0).standard_normal((2, 6, 16))
    assert all(check.passed for check in checks.check_module(module, x))


@pytest.mark.parametrize(("module", "x", "message"), [
    (um.CausalSelfAttention(n_embd=16, n_head=4), torch.randn(6, 16), r"x must be \(batch, n, d_in\)"),
    (um.CausalSelfAttention(n_embd=16, n_head=4), torch.randn(2, 0, 16), "at least one item, one token"),
    ("module", None, "module must be a torch.nn.Module, got str"),
])
def test_check_module_names_bad_input(module, x, message):
    with pytest.raises(tracing.TraceError, match=message):
        checks.check_module(module, x)


def test_nan_after_the_attention_is_named_not_passed():
    """Every rule compares outputs; NaN outputs compare as unchanged, so they passed every rule (exit 0)."""
    with pytest.raises(tracing.TraceError, match="the NaN comes after the attention"):
        checks.check_module(um.NaNAfterAttention(d_in=16, d_out=16))


DIAGONAL_NAN = ("the output is NaN at 2 of 16 positions (first: item 0, position 0), and NaN equals nothing, so it "
                "cannot be compared; NaN first appears in the attention weights on line {line} (head 0, query 0: "
                "every key hidden, so its softmax is 0/0)")


@pytest.mark.parametrize(("rules", "verdict_words"), [
    (["causal", "mask-convention", "batch-independence"], ("skip", "not checked: {nan} — fix that (see "
                                                                   "mask-convention), then check again")),
    (["causal", "batch-independence"], ("fail", "cannot be checked: {nan} — fix that, then check again")),
], ids=["beside mask-convention", "alone"])
def test_a_nan_output_is_not_passed_by_the_rules_that_compare_outputs(rules, verdict_words):
    """Query 0 hides every key: its output is NaN, which equals nothing, so comparing outputs shows no change.  causal
    and batch-independence say they could not check, and where the NaN starts; a skip points to the rule that fails
    for it, and without that rule they fail, so the check never passes the module."""
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.DiagonalHidden(fill="-inf").eval(), rules=rules)}
    line = user_modules_line("w = torch.softmax(s, dim=-1)  # (b, h, n, n)")
    status, words = verdict_words
    for rule in ("causal", "batch-independence"):
        assert results[rule] == checks.Check(rule, status, words.format(nan=DIAGONAL_NAN.format(line=line)))


def test_a_nan_output_from_a_later_layer_is_named_there():
    """The second layer's query 0 hides every key: the rules that compare outputs say the NaN starts in that layer's
    weights, pointing to mask-convention, which reads every layer and fails the second's hidden diagonal, naming it."""
    torch.manual_seed(0)
    module = um.TwoCachedLayers(second_bug="diagonal-hidden").eval()
    results = {c.rule: c for c in checks.check_module(module, rules=["rows-sum-to-one", "causal", "mask-convention"])}
    line = cached_softmax_line()
    nan = DIAGONAL_NAN.format(line=line).replace("attention weights on", "attention weights of attention 2 of 2 on")
    assert results["causal"] == checks.Check("causal", "skip", f"not checked: {nan} — fix that (see mask-convention), "
                                                                "then check again")
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "fail", f"attention 2 of 2 on line {line}: the diagonal is hidden too: each token hides "
                                   "itself (the second.mask buffer, triu(…, diagonal=0), marks the cells hidden: build "
                                   "it with diagonal=1); row 0 (query 0) hides every key, so its softmax is 0/0: NaN "
                                   "weights")
    assert results["rows-sum-to-one"].status == "pass"  # query 0's keys are all hidden: no row with a visible key


MHA_SOFTMAX = "attn_weights = torch.softmax(attn_scores, dim=-2 if self.bug"  # MyMultiHeadAttention's softmax line
SWA_SOFTMAX = "attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))"  # LearnerSWA's


@pytest.mark.parametrize(("module", "rule", "line", "starts", "ends"), [
    (lambda: um.SmallGPT(last_bug="softmax-dim"), "rows-sum-to-one", MHA_SOFTMAX, "attention 2 of 2 on line {line}: "
     "head 0, row 0 sums to ", ", should be 1 — the softmax ran over dim=-2 (the queries), so columns sum to 1: use "
     "dim=-1 (the keys)"),
    (lambda: um.SmallGPT(n_layers=3, last_bug="one-future-visible"), "mask-convention", MHA_SOFTMAX,
     "attention 3 of 3 on line {line}: one future token is visible: row i sees key i + 1 (the attns.2.mask buffer, "
     "triu(…, diagonal=2), marks the cells hidden: build it with diagonal=1)", ""),
    (lambda: um.WindowThenFull(window_bug="window-off-by-one", full_first=True), "mask-convention", SWA_SOFTMAX,
     "attention 2 of 2 on line {line}: the hidden cells are the future and the keys 4 or more behind (a window of 4), "
     "but the module's window is 3: each query keeps W + 1 = 4 keys", "hide diff >= W, not diff > W"),
    (lambda: um.SmallGPT(last_bug="no-scale"), "scaling", MHA_SOFTMAX, "attention 2 of 2 on line {line}: the scores "
     "are not scaled: divide by √head_dim = √4 ≈ 2", ""),
    (lambda: um.SmallGPT(last_bug="no-scale"), "matches-reference", MHA_SOFTMAX, "attention 2 of 2 on line {line}: the "
     "concatenated heads ≠ softmax(mask(QKᵀ/√d_head))·V from its own Q, K, V: off by ", "the difference is the scale "
     "alone: with the scores scaled as the module scales them (unscaled, not ÷√4), the reference matches (see "
     "scaling)"),
    (lambda: um.SmallGPT(last_bug="dropout-in-eval"), "dropout-placement", MHA_SOFTMAX, "attention 2 of 2 on line "
     "{line}: in eval mode dropout still changes the attention weights: pass training=self.training to F.dropout (or "
     "use nn.Dropout)", ""),
], ids=["gpt-softmax-over-queries", "gpt-future-visible", "window-layer-one-key-wide", "gpt-unscaled",
        "gpt-unscaled-reference", "gpt-dropout-in-eval"])
def test_a_later_layers_weights_are_checked_and_named(module, rule, line, starts, ends):
    """A model of several attention layers whose last layer's softmax, mask, scale or dropout is wrong fails the rule
    that reads it in the recorded attentions, which reads each of them, and the failure names the attention and the
    line of its softmax."""
    torch.manual_seed(0)
    check = verdict(module().eval(), rule, rules=[rule])
    assert check.status == "fail" and check.evidence.startswith(starts.format(line=user_modules_line(line))), check
    assert check.evidence.endswith(ends), check


@pytest.mark.parametrize(("bugs", "words"), [
    ({"last_bug": "softmax-dim"}, "attention 2 of 2 on line {line}: the mask hides the future, but the softmax ran "
                                  "over dim=-2 (the queries): each weight is divided by a sum over every query, later "
                                  "ones included — use dim=-1 (the keys)"),
    ({"first_bug": "no-transpose-back"}, "attention 2 of 2 on line {line}: the mask hides the future and the weights "
                                         "before position 1 do not move, yet each head's weights @ V there does, while "
                                         "nothing of attention 1 of 2 on line {line} before it does: the leak is "
                                         "between them — in how that attention's heads are put back together "
                                         "(transpose(1, 2) before view), or in this attention's V"),
    ({"first_bug": "one-future-visible"}, ""),  # mask-convention names it: the later layers are not blamed
], ids=["last-softmax-over-queries", "first-heads-put-back-wrong", "first-sees-a-future-key"])
def test_causal_names_the_attention_a_models_leak_is_in(bugs, words):
    """causal looks for where a model's leak is in each attention in order and names the first that moves: a later
    layer's softmax over the queries is named there, not in how the first layer's heads are put back together."""
    torch.manual_seed(0)
    check = verdict(um.SmallGPT(**bugs).eval(), "causal", rules=["causal"])
    cause = f" — {words.format(line=user_modules_line(MHA_SOFTMAX))}" if words else ""
    assert check.status == "fail" and check.evidence.endswith(f"sees the future{cause}"), check


@pytest.mark.parametrize("full_first", [False, True], ids=["window-then-full", "full-then-window"])
def test_a_full_layer_beside_a_window_layer_is_held_to_no_window(full_first):
    """A plain attention that keeps no window, beside a sliding-window layer whose W the model declares: each attention
    is held to the window of the layer that computed it, so the full layer, first or second, is not failed as "the
    window is never applied"."""
    torch.manual_seed(0)
    module = um.WindowThenFull(full_first=full_first).eval()
    window = (f"on line {user_modules_line(SWA_SOFTMAX)}: sliding window W = 3: the hidden cells are the future and "
              "the keys 3 or more behind (query i sees keys i − 2 … i)")
    full = f"on line {user_modules_line(MHA_SOFTMAX)}: the hidden cells are exactly the future (above the diagonal)"
    first, second = (full, window) if full_first else (window, full)
    assert verdict(module, "mask-convention", rules=["mask-convention"]) == checks.Check(
        "mask-convention", "pass", f"attention 1 of 2 {first}; attention 2 of 2 {second}")


@pytest.mark.parametrize("full_first", [False, True], ids=["window-then-full", "full-then-window"])
def test_a_full_layer_that_attends_in_a_helper_method_is_held_to_no_window(full_first):
    """The model calls each layer's ``attend`` (GPT-2's legacy cache convention), where the attention is computed: the
    full layer's attention, in a method of its own and not its forward, is held to its own layer's window, none — it
    was held to the window layer's W = 3 beside it and failed as "the window is never applied"."""
    torch.manual_seed(0)
    full, window = um.PastArgument(), um.PastWindow(sliding_window_size=3)
    module = um.PastLayers(*((full, window) if full_first else (window, full))).eval()
    window_line, full_line = (line_of(cls.attend, "scaled_dot_product_attention") for cls in (um.PastWindow,
                                                                                            um.PastArgument))
    window_words = (f"on line {window_line}: sliding window W = 3: the hidden cells are the future and "
                    "the keys 3 or more behind (query i sees keys i − 2 … i)")
    full_words = f"on line {full_line}: the hidden cells are exactly the future (above the diagonal)"
    first, second = (full_words, window_words) if full_first else (window_words, full_words)
    assert verdict(module, "mask-convention", rules=["mask-convention"]) == checks.Check(
        "mask-convention", "pass", f"attention 1 of 2 {first}; attention 2 of 2 {second}")


def test_nan_queries_are_not_checked_by_the_rules_that_compare_what_they_make():
    """One weight of W_query is NaN (never initialised): the reference computed from the module's own Q is NaN too,
    and every score seems to move: matches-reference says it could not check, and rotary-placement that the queries
    hold NaN, blaming neither a bias added to the scores nor a position embedding."""
    torch.manual_seed(0)
    module = um.LearnerRotaryGQA(16, 16, 16, 0.0, 4, num_kv_groups=2).eval()
    with torch.no_grad():
        module.W_query.weight[0, 0] = float("nan")
    results = {c.rule: c for c in checks.check_module(module, rules=["rows-sum-to-one", "rotary-placement",
                                                                     "matches-reference"])}
    assert results["matches-reference"] == checks.Check(
        "matches-reference", "skip", "not checked: the output is NaN at 16 of 16 positions (first: item 0, position "
        "0), and NaN equals nothing, so it cannot be compared; NaN first appears in the queries (head 0, position 0) — "
        "fix that (see rows-sum-to-one), then check again")
    assert results["rotary-placement"] == checks.Check(
        "rotary-placement", "skip", "not checked: on one token repeated at 8 positions the queries hold NaN or ∞, and "
        "NaN equals nothing, so how they turn with position cannot be seen — fix that, then check again")


def test_a_nan_output_is_not_passed_by_kv_cache():
    """The cached module's uncached output is NaN at query 0: kv-cache says it cannot compare NaN outputs, not that the
    step's mask position is wrong."""
    torch.manual_seed(0)
    module = um.LearnerCachedMHA(16, 16, 16, 0.0, 2, bug="diagonal-hidden").eval()
    check = verdict(module, "kv-cache", rules=["mask-convention", "kv-cache"])
    line = cached_softmax_line()
    assert check == checks.Check("kv-cache", "skip", f"not checked: {DIAGONAL_NAN.format(line=line)} — fix that (see "
                                                     "mask-convention), then check again")


# ---------------------------------------------------------------- progress: a slow module's check says how far it is

def forwards_of(module, **kwargs) -> tuple[list, list, int]:
    """The check's verdicts, its progress reports and how many forwards the module really ran."""
    reports, ran = [], []
    hook = module.register_forward_pre_hook(lambda *args: ran.append(1))
    try:
        results = checks.check_module(module, progress=reports.append, **kwargs)
    finally:
        hook.remove()
    return results, reports, len(ran)


@pytest.mark.parametrize(("module", "forwards"), [
    (mha(), 1 + 7 + 1 + 2),  # the trace, causal (one per position after the first), dropout-placement, batch
    (um.LearnerCachedMHA(16, 16, 16, 0.0, 4).eval(), 1 + 7 + 1 + 2 + 2 * (1 + 1 + 2 + 1) + 3),  # kv-cache: 2
    # uncached, then per sequence a prefill of 4, 2 tokens one by one and a chunk of 2, then 3 finding and measuring
    (learner(um.LearnerRotaryGQA, 2), 1 + 7 + 1 + 1 + 2),  # rotary-placement: one token repeated at every position
    (um.CacheLengthMHA(16, 16, 16, 0.0, 4, window_size=3).eval(), 1 + 7 + 1 + 2 + 2 * (1 + 5 + 4) + 3),  # a cache
    # of 3: per sequence a prefill of 3, 3 tokens one by one and a chunk of 2, and the last 3 tokens' uncached forward
    # for each of the 4 steps past token 2
], ids=["mha", "cached", "rotary", "cache-length"])
def test_progress_reports_each_rule_as_it_is_done_and_counts_every_forward(module, forwards):
    results, reports, ran = forwards_of(module)
    done = [report for report in reports if report.check is not None]
    assert [report.check for report in done] == results  # each verdict as its rule finishes, in order
    assert [report.rules_done for report in done] == list(range(1, 10)) and {r.rules_total for r in reports} == {9}
    assert ran == forwards == reports[-1].forwards  # every forward counted, none missed
    assert {report.forwards_planned for report in reports[1:]} == {forwards}  # the plan was right from the trace on
    assert reports[0].rule is None and reports[0].forwards == 0  # the traced forward, before any rule
    running = [report.rule for report in reports if report.check is None and report.rule is not None]
    assert set(running) == {"causal", "dropout-placement", "batch-independence"} | (
        {"kv-cache"} if isinstance(module, um.LearnerCachedMHA | um.CacheLengthMHA) else set()) | (
        {"rotary-placement"} if isinstance(module, um.LearnerRotaryGQA) else set())


def test_the_first_timed_forward_says_roughly_how_long_the_check_takes():
    """A module that sleeps 20 ms a forward: once causal's first three forwards are timed the estimate is the whole
    check, roughly (its arithmetic: tests/test_check_estimate.py)."""
    module = um.SleepyAttention(pause=0.02).eval()
    started = time.perf_counter()
    _, reports, ran = forwards_of(module)
    took = time.perf_counter() - started
    first = next(report for report in reports if report.seconds_left is not None)
    estimate = first.seconds + first.seconds_left
    assert (first.rule, first.forwards) == ("causal", 4)  # the traced forward gives no pace; 3 of causal's do
    assert first.forwards_planned == ran == 11 and 0.3 * took < estimate < 3 * took
    assert reports[-1].seconds_left == 0


@pytest.mark.parametrize("module", [
    lambda: um.MHAWithoutBatchFirst(masked=False).eval(), lambda: cached("mask-for-new-tokens"),
    lambda: cached("appends-twice"), lambda: learner(um.LearnerCachedGQA, 2, rotary=True, bug="rerotate"),
], ids=["batch-first", "mask-for-new-tokens", "appends-twice", "rerotate"])
def test_a_failures_diagnosis_runs_no_more_forwards_than_the_plan_and_its_stated_allowance(module):
    """The plan counts a passing check's forwards; a failing rule's diagnosis (the cause it names) runs up to
    ``_diagnosis_forwards`` more, which the docs state."""
    module = module()
    x = checks.default_input(module) if not isinstance(module, um.MHAWithoutBatchFirst) else torch.randn(8, 8, 32)
    _, reports, ran = forwards_of(module, x=x)
    planned = reports[1].forwards_planned  # the plan once the trace said whether the module is causal
    assert ran <= planned + checks._diagnosis_forwards(module, x, list(checks.RULES)), (ran, planned)
    n = x.shape[1]
    assert checks._diagnosis_forwards(module, x, ["batch-independence"]) == 2
    assert checks._diagnosis_forwards(module, x, ["causal"]) == 1
    expected = n - n // 2 + 5 if isinstance(module, um.LearnerCachedMHA | um.LearnerCachedGQA) else 0
    assert checks._diagnosis_forwards(module, x, ["kv-cache"]) == expected


def test_rules_runs_only_those_rules_and_their_forwards():
    module = um.LearnerCachedMHA(16, 16, 16, 0.0, 4).eval()
    results, reports, ran = forwards_of(module, rules=["kv-cache", "causal"])
    assert [check.rule for check in results] == ["causal", "kv-cache"]  # in RULES order
    assert [check.status for check in results] == ["pass", "pass"]
    assert ran == 1 + 7 + 10 + 3 and reports[-1].rules_total == 2  # kv-cache: 2 × (uncached, prefill, 2 tokens, chunk)
    assert [c.rule for c in checks.check_module(module, rules="scaling")] == ["scaling"]
    with pytest.raises(ValueError, match="no rule 'causality': the rules are rows-sum-to-one, causal"):
        checks.check_module(module, rules=["causality"])


def test_a_progress_callback_that_raises_stops_the_check_after_the_rules_reported():
    module = um.MyMultiHeadAttention(16, 16, 16, 0.1, 4).train()
    reports, ran = [], []
    module.register_forward_hook(lambda *args: ran.append(1))  # forwards that ran to the end

    def stop_at_batch_independence(report):
        reports.append(report)
        if report.rule == "batch-independence":
            raise KeyboardInterrupt  # Ctrl-C, or Streamlit stopping the script run at its next element

    with pytest.raises(KeyboardInterrupt):
        checks.check_module(module, progress=stop_at_batch_independence)
    assert [r.check.rule for r in reports if r.check is not None] == ["rows-sum-to-one", "causal", "mask-convention",
                                                                     "scaling", "rotary-placement", "dropout-placement"]
    assert module.training and not module._forward_pre_hooks  # its mode, and no hook of the check's left on it
    assert len(ran) == 1 + 7 + 1  # stopped before batch-independence's first forward


def test_a_module_in_training_mode_is_traced_in_training_mode_once():
    """dropout-placement asks "does dropout act when handed over?" and "where does it act?" of one training forward."""
    module = um.MyMultiHeadAttention(16, 16, 16, 0.0, 4).train()  # training mode, but no dropout acts
    ran = []
    module.register_forward_pre_hook(lambda *args: ran.append(module.training))
    assert failing(module) == set()
    assert ran.count(True) == 1 and len(ran) == 1 + 7 + 1 + 2  # one training forward; the trace, causal, batch


class ExitsWhenCached(um.LearnerCachedMHA):
    """A learner's cached module with a debugging ``sys.exit`` left in its cached branch."""

    def forward(self, x, use_cache=False):
        if use_cache:
            sys.exit("stop here")
        return super().forward(x)


def test_a_cached_forward_that_calls_sys_exit_fails_the_rule_in_words():
    """kv-cache runs the cached forwards as every rule runs a forward: a ``sys.exit`` there is the rule's failure in
    one line, not the end of the notebook's kernel or of ``attnviz check``."""
    torch.manual_seed(0)
    check = verdict(ExitsWhenCached(16, 32, 16, 0.0, 4).eval(), "kv-cache")
    assert check.status == "fail"
    assert check.evidence.startswith("a cached forward called sys.exit('stop here')"), check.evidence


class LoopsWhenCached(um.LearnerCachedMHA):
    """A learner's cached module whose cached branch waits in a ``while`` loop for a cache that never fills."""

    def forward(self, x, use_cache=False):
        while use_cache and self.cache_k is None:  # the cache is filled further down: the loop never ends
            x = x + 0
        return super().forward(x, use_cache=use_cache)


def test_a_cached_forward_that_never_returns_fails_the_rule_in_words_and_the_check_goes_on(monkeypatch):
    monkeypatch.setattr(time_limit, "SECONDS", 0.5)  # every forward of the check runs under it: milliseconds each
    torch.manual_seed(0)
    results = checks.check_module(LoopsWhenCached(16, 32, 16, 0.0, 4).eval(), rules=["kv-cache", "causal"])
    assert [(c.rule, c.status) for c in results] == [("causal", "pass"), ("kv-cache", "fail")]
    assert results[1].evidence == ("LoopsWhenCached.forward(use_cache=True) ran for 0.5 s without returning "
                                   "(an endless loop?)")


def test_matches_reference_says_its_reference_follows_the_causal_flag_given():
    """With causal=False given for a masked module, the reference masks nothing too: its failure says so, rather than
    read as a second fault beside mask-convention's."""
    torch.manual_seed(0)
    (check,) = checks.check_module(mha(), causal=False, rules=["matches-reference"])
    assert check.status == "fail"
    assert check.evidence.endswith("— the reference masks nothing: causal=False was given")
    (found,) = checks.check_module(mha(), rules=["matches-reference"])  # causal found from the mask: no word of it
    assert found.status == "pass"


class ResetRaises(um.LearnerCachedMHA):
    """A learner's cached module whose reset touches a buffer it never made."""

    def reset_cache(self):
        self.cache_k.zero_()  # None until the first cached forward: AttributeError


class ResetLoops(um.LearnerCachedMHA):
    """A learner's cached module whose reset waits for a cache that is never filled."""

    def reset_cache(self):
        while self.cache_k is None:
            pass
        super().reset_cache()


def test_a_reset_that_raises_or_never_returns_fails_the_rule_in_one_line_and_the_check_goes_on(monkeypatch):
    """kv-cache calls the module's reset_cache() as it calls a forward: an exception there, or a loop, is the rule's
    failure in words — not a traceback in ``attnviz check`` and the app, nor a tab that waits for ever."""
    torch.manual_seed(0)  # ResetRaises never loops: the default time limit
    results = checks.check_module(ResetRaises(16, 32, 16, 0.0, 4).eval(), rules=["kv-cache", "causal"])
    assert [(c.rule, c.status) for c in results] == [("causal", "pass"), ("kv-cache", "fail")]
    assert results[1].evidence == ("ResetRaises.reset_cache() raised AttributeError: 'NoneType' object has no "
                                   "attribute 'zero_'")
    monkeypatch.setattr(time_limit, "SECONDS", 0.5)  # every forward of the check runs under it: milliseconds each
    stopped = verdict(ResetLoops(16, 32, 16, 0.0, 4).eval(), "kv-cache")
    assert (stopped.status, stopped.evidence) == (
        "fail", "ResetLoops.reset_cache() ran for 0.5 s without returning (an endless loop?)")


def test_a_forward_that_never_returns_is_a_trace_error_for_the_check(monkeypatch):
    monkeypatch.setattr(time_limit, "SECONDS", 0.5)
    with pytest.raises(tracing.TraceError, match=r"^EndlessLoop\.forward ran for 0\.5 s without returning"):
        checks.check_module(um.EndlessLoop(16, 16, 16, 0.0, 4))


def test_one_token_says_matches_reference_compares_only_v_and_the_heads_order():
    """With one token every weight is 1: a module that does not scale its scores matches the reference at 1 token, and
    the pass says that the one weight is 1 whatever the scores; at 2 tokens it fails."""
    one = verdict(mha("no-scale"), "matches-reference", x=torch.randn(2, 1, 16))
    assert one.status == "pass" and "with 1 token the one weight is 1 whatever the scores" in one.evidence
    assert verdict(mha("no-scale"), "matches-reference", x=torch.randn(2, 2, 16)).status == "fail"


@pytest.mark.parametrize(("module", "who"), [
    (um.MaskedByCaller(), "the module's is_causal attribute is True"),
    (um.WrapsMaskedByCaller(), "its attn (MaskedByCaller) has is_causal = True"),
], ids=["the-module", "a-submodule"])
def test_an_is_causal_attribute_means_causal_and_a_layer_that_masks_nothing_fails_in_those_words(module, who):
    """A layer that says ``is_causal = True`` but masks only through a mask its caller passes, called alone: the
    rules called it "not causal" and skipped both causal rules."""
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(module.eval())}
    assert results["causal"].status == "fail"
    assert f"position 0 sees the future — {who}, yet no mask hides the future: the flag masks nothing by itself" \
        in results["causal"].evidence
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "fail", f"{who}, yet no cell is hidden: the flag masks nothing by itself; the forward must "
        "hide the future (masked_fill, or SDPA's is_causal=True)")
    recording = tracing.record(module, checks.default_input(module))
    assert tracing.infer_causal(recording, recording.attentions[0], module)


def test_hugging_face_gpt2_attention_alone_in_eager_mode_fails_causal_saying_eager_masks_only_through_its_mask():
    """GPT2Attention used alone has is_causal = True; its eager attention masks nothing without the model's
    attention_mask, and its SDPA attention masks through is_causal."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    def layer(implementation):
        config = transformers.GPT2Config(n_embd=64, n_head=4)
        config._attn_implementation = implementation
        torch.manual_seed(0)
        return GPT2Attention(config, layer_idx=0).eval()

    results = {c.rule: c for c in checks.check_module(layer("eager"))}
    eager = ("GPT2Attention's eager attention masks only through attention_mask, which its model builds: pass it the "
             "causal mask, or build the layer with attn_implementation=\"sdpa\" (it reads is_causal)")
    assert results["causal"].status == "fail" and results["causal"].evidence.endswith(
        f"position 0 sees the future — the module's is_causal attribute is True, yet no mask hides the future: {eager}")
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "fail", f"the module's is_causal attribute is True, yet no cell is hidden: {eager}")
    assert failing(layer("sdpa")) == set()


def test_heads_merged_without_the_transpose_say_the_leak_comes_after_weights_at_v():
    """The weights hide exactly the future (mask-convention passes) and the output still leaks: the evidence sent
    the user to the mask."""
    results = {c.rule: c for c in checks.check_module(mha("no-transpose-back"))}
    assert results["mask-convention"].status == "pass"
    assert results["causal"].status == "fail" and results["causal"].evidence.endswith(
        "position 0 sees the future — the mask hides the future and each head's weights @ V before position 1 does "
        "not move, so the leak comes after weights @ V: check how the heads are put back together (transpose(1, 2) "
        "before view)")
    assert "weights @ V" not in verdict(mha("masked-fill-copy"), "causal").evidence  # a mask that never applied


def test_heads_split_without_the_transpose_name_the_split():
    """``W_key(x).view(b, heads, n, head_dim)``, no transpose: causal fails naming the view's line and how to split
    (view(b, n, heads, head_dim), then transpose(1, 2)), as the merge's twin bug is named; that bug's verdict says
    nothing of a split."""
    results = {c.rule: c for c in checks.check_module(mha("no-transpose-split"), rules=["causal"])}
    line = user_modules_line("keys = self.W_key(x).view(b, self.num_heads, num_tokens, self.head_dim)")
    assert results["causal"].status == "fail" and results["causal"].evidence.endswith(
        f"position 0 sees the future — the mask hides the future, but the view on line {line} splits a (…, n, d) "
        "tensor straight into (…, heads, n, head_dim), which gives each head's position the features of other "
        "tokens, later ones too: split with view(b, n, heads, head_dim), then transpose(1, 2)"), results["causal"]
    assert "splits a (…, n, d) tensor" not in verdict(mha("no-transpose-back"), "causal", rules=["causal"]).evidence


def test_a_leak_past_a_right_mask_is_placed_in_the_weights_or_the_values():
    """The weights hide exactly the future: a softmax over the queries leaks through the weights themselves, values
    made from the whole sequence leak through weights @ V."""
    assert verdict(mha("softmax-dim"), "causal").evidence.endswith(
        "position 0 sees the future — the mask hides the future, but the softmax ran over dim=-2 (the queries): each "
        "weight is divided by a sum over every query, later ones included — use dim=-1 (the keys)")
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.CentredValues().eval())}
    assert results["mask-convention"].status == "pass"
    assert results["causal"].evidence.endswith(
        "position 0 sees the future — the mask hides the future and the weights before position 1 do not move, yet "
        "each head's weights @ V there does: the values of earlier tokens depend on later ones")


@pytest.mark.parametrize(("module", "fix"), [
    (um.KeepMaskOffByOne(), "(the bias buffer, tril(…, diagonal=1), marks the cells kept: build it with diagonal=0)"),
    (um.KeepMaskOffByOne(inline=True), "(the tril(…, diagonal=1) on line {line} marks the cells kept: use "
                                       "diagonal=0)"),
    (mha("one-future-visible"), "(the mask buffer, triu(…, diagonal=2), marks the cells hidden: build it with "
                                "diagonal=1)"),
], ids=["keep-mask-buffer", "keep-mask-in-the-forward", "hide-mask-buffer"])
def test_a_mask_off_by_one_names_the_call_the_module_made(module, fix):
    """nanoGPT's keep-mask ``tril(ones, diagonal=1)`` applied as ``masked_fill(bias == 0, …)``: the failure names the
    mask as the module builds it (its buffer, or the tril on its line) and the diagonal to use, not "(triu(…,
    diagonal=2); use 1)", a call its code does not contain."""
    torch.manual_seed(0)
    line = user_modules_line("keep = torch.ones(T, T).tril(diagonal=1)")
    check = verdict(module.eval(), "mask-convention")
    assert check == checks.Check("mask-convention", "fail",
                                 "one future token is visible: row i sees key i + 1 " + fix.format(line=line))


def test_a_mask_filled_with_0_names_its_masked_fill_and_minus_infinity():
    """``s = s.masked_fill(mask, 0.0)`` keeps the copy and fills the future with 0 before the softmax, so e⁰ = 1
    reaches the keys after each query: mask-convention and matches-reference both name that masked_fill's line and
    −∞, and matches-reference never says it "adds to the scores something that is neither a mask … nor ALiBi's
    slope"."""
    torch.manual_seed(0)
    line = user_modules_line("s = s.masked_fill(self.mask.bool()[:n, :n], 0.0)")
    results = {check.rule: check for check in checks.check_module(um.ZeroFilledMask().eval(),
                                                                  rules=["mask-convention", "matches-reference"])}
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "fail", f"no cell is hidden: the masked_fill on line {line} sets the future (above the "
        "diagonal) to 0.0, not −∞, so the softmax still gives those keys weight — fill with float(\"-inf\") (or "
        "-torch.inf)")
    check = results["matches-reference"]
    assert check.status == "fail", check
    assert check.evidence.endswith(f"— the future's weights are not zero: the masked_fill on line {line} sets the "
                                   "future (above the diagonal) to 0.0, not −∞, before the softmax, so e⁰ = 1 reaches "
                                   "every key after the query, which the reference hides — fill with float(\"-inf\") "
                                   "(or -torch.inf), as mask-convention says"), check
    assert "adds to the scores" not in check.evidence, check


@pytest.mark.parametrize(("value", "future", "words"), [
    (-0.0, True, "the future's weights are not zero: the where on line 3 sets the future (above the diagonal) to -0.0, "
                 "not −∞, before the softmax, so e⁰ = 1 reaches every key after the query"),
    (-10.0, False, "the masked cells' weights are not zero: the where on line 3 sets the cells of its triangular mask "
                   "to -10.0, not −∞, before the softmax, so e to that number, above 0, still weighs them"),
])
def test_a_finite_fill_is_named_from_its_value_and_cells(value, future, words):
    """matches-reference reads the fill's number and cells, not its own sentence: −0.0 is e⁰ = 1 too."""
    evidence = checks._finite_fill_words(checks.FiniteFill(value, future, "where on line 3"))
    assert evidence.startswith(words + ", which the reference hides"), evidence


class EinsumTransposedWeights(torch.nn.Module):
    """TransformerLens-style einsum attention that transposes its weights after the softmax (``bhqk->bhkq``) before
    multiplying them by V: each position mixes the values of the tokens that attend to it, the future."""

    def __init__(self, d_model=16, n_heads=2):
        super().__init__()
        self.W_Q, self.W_K, self.W_V = (torch.nn.Parameter(torch.randn(n_heads, d_model, d_model // n_heads))
                                        for _ in range(3))

    def forward(self, x):
        n = x.shape[1]
        q, k, v = (torch.einsum("bpd,hde->bphe", x, w) for w in (self.W_Q, self.W_K, self.W_V))  # (b, n, h, dh)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / q.shape[-1] ** 0.5  # (b, h, n, n)
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), float("-inf"))
        pattern = torch.einsum("bhqk->bhkq", scores.softmax(dim=-1))  # (b, h, n, n): the bug
        return torch.einsum("bhqk,bkhe->bqhe", pattern, v).flatten(2)  # (b, n, d_model)


def test_weights_transposed_after_the_softmax_are_named_when_causal_fails():
    """The einsum that transposes the weights after the softmax is named as the cause of the causal failure: its
    columns, not its rows, sum to one."""
    torch.manual_seed(0)
    module, x = EinsumTransposedWeights().eval(), torch.randn(2, 3, 16)
    recording = tracing.record(module, x)
    attention = tracing.combine(recording.attentions)
    check = checks.causal_rule(module, x, recording.output, True, attention=attention)
    line = Path(__file__).read_text().splitlines().index(
        '        pattern = torch.einsum("bhqk->bhkq", scores.softmax(dim=-1))  # (b, h, n, n): the bug') + 1
    assert check.status == "fail" and check.evidence.endswith(
        f"sees the future — the einsum on line {line} transposes the weights after the softmax (each column sums to "
        "1, not each row), so position i mixes the values of the tokens that attend to it, the future's: multiply "
        "the weights by V as the softmax made them, (…, query, key)"), check
    assert attention.unrecorded["context"] == (f"the einsum on line {line} transposes the weights after the "
                                               "softmax — each column sums to 1, not each row")


def test_a_float_sdpa_mask_that_hides_the_past_is_told_about_float_masks_and_its_own_tril():
    """A float additive mask with −∞ below the diagonal, with no buffer to say causal: causal fails, and
    mask-convention names the tril that builds it and says where −∞ belongs in a float attn_mask — nothing of SDPA's
    boolean convention."""
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.SDPAFloatMaskBelow().eval())}
    assert results["causal"].status == "fail"
    line = user_modules_line('mask = torch.full((n, n), float("-inf")).tril(-1)')
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "fail", "the mask hides the past instead of the future (the triangle below the diagonal, "
        f"not above it): the tril(…, diagonal=-1) on line {line} marks the cells hidden: use triu(…, diagonal=1); a "
        "float attn_mask is added to the scores: −∞ belongs above the diagonal only, "
        "torch.full((n, n), float('-inf')).triu(1)")
    assert "boolean" not in results["mask-convention"].evidence


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "with-its-mask"])
def test_multihead_attention_without_batch_first_says_so(masked):
    """nn.MultiheadAttention built without batch_first=True reads (batch, n, d) as batch tokens of n items: the
    message says so and how to build it (after torch's attn_mask shape error, with a causal mask)."""
    with pytest.raises(tracing.TraceError) as caught:
        checks.check_module(um.MHAWithoutBatchFirst(masked=masked).eval())
    words = ("(self.mha) has batch_first=False, so it reads your (2, 8, 32) input as 2 tokens × 8 items: build it "
             "with batch_first=True (or pass it (n, batch, d))")
    if masked:  # torch's own error first: the (8, 8) mask is not (2, 2)
        assert re.match(r"the forward raised RuntimeError \(user_modules\.py, line \d+\): The shape of the 2D "
                        "attn_mask is", str(caught.value)), str(caught.value)
        assert str(caught.value).endswith(f" — the nn.MultiheadAttention {words}")
    else:
        line = user_modules_line("return self.mha(x, x, x, need_weights=False)[0]")
        assert str(caught.value) == f"the nn.MultiheadAttention on line {line} {words}"


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "with-its-mask"])
def test_multihead_attention_without_batch_first_is_named_when_batch_and_tokens_are_as_many(masked):
    """With batch = n the (n, n) mask fits and the weights' shapes look right: the module traces and attends across
    the items at each position; batch-independence fails, and the cause is the module's own batch_first, which the
    rule confirms by setting it for one forward (no item moves then) and restoring it."""
    torch.manual_seed(0)
    module = um.MHAWithoutBatchFirst(masked=masked).eval()
    check = verdict(module, "batch-independence", x=torch.randn(8, 8, 32))
    assert check.status == "fail" and check.evidence.endswith(
        "when only the other items changed: the nn.MultiheadAttention (self.mha) has batch_first=False, so it reads "
        "your (8, 8, 32) input as 8 tokens × 8 items and attends across the items (your batch is as long as your "
        "sequence, so no shape shows it); with batch_first=True no item moves: build it with batch_first=True (or "
        "pass it (n, batch, d))"), check
    assert module.mha.batch_first is False
    assert failing(um.TorchMHA().eval(), x=torch.randn(8, 8, 32)) == set()  # batch_first=True: nothing to name


@pytest.mark.parametrize("layout", ["heads", "tokens", "values-first"])
def test_einsum_for_weights_at_v_passes_every_rule_that_applies(layout):
    """weights·V as torch.einsum read V as the weights (the equation's first operand is a string): matches-reference
    raised a RuntimeError, a traceback from the CLI."""
    torch.manual_seed(0)
    results = checks.check_module(um.EinsumAttention(layout=layout).eval())
    assert {c.rule: c.status for c in results} == {**dict.fromkeys(checks.RULES, "pass"), "kv-cache": "skip",
                                                   "rotary-placement": "skip"}
    assert verdict(um.EinsumAttention(layout=layout).eval(), "matches-reference").evidence.startswith(
        "the concatenated heads equal")


def test_einsums_operands_are_read_as_queries_keys_and_values_per_head():
    torch.manual_seed(0)
    module = um.EinsumAttention(layout="tokens").eval()
    x = torch.randn(2, 5, 16)
    attention = tracing.combine(tracing.record(module, x).attentions)
    with torch.no_grad():
        q, k, v = module.qkv(x).view(2, 5, 3, 4, 4).unbind(2)  # (b, n, h, hd) each
    for recorded, wanted in ((attention.queries, q), (attention.keys, k), (attention.values, v)):
        assert torch.allclose(recorded, wanted.transpose(1, 2))  # (b, h, n, hd)
    assert attention.context.shape == (2, 4, 5, 4)


def test_grouped_query_attention_that_broadcasts_its_kv_heads_passes():
    """q (b, g, h/g, n, hd) @ k (b, g, 1, n, hd)ᵀ, no repeat: the reference paired 4 query heads with 2 key heads and
    raised a RuntimeError."""
    torch.manual_seed(0)
    assert failing(um.BroadcastGQA().eval()) == set()


def test_a_rule_whose_own_code_fails_reaches_the_tests(monkeypatch):
    """With ATTNVIZ_RAISE_RULE_ERRORS=1 (tests/conftest.py sets it) a rule's own exception is raised, not a skip:
    a bug of attnviz's is never hidden from the tests as a verdict."""
    monkeypatch.setenv("ATTNVIZ_RAISE_RULE_ERRORS", "1")
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="The size of tensor a"):
        checks.check_module(um.WiderEachCall().eval())


def test_a_rule_whose_own_code_fails_on_the_modules_data_is_skipped_in_words(monkeypatch):
    """An exception a rule's code raises on what the module gave it is that rule's verdict, never a traceback: the
    other rules stand (for users: the tests set ATTNVIZ_RAISE_RULE_ERRORS, which this one unsets)."""
    monkeypatch.delenv("ATTNVIZ_RAISE_RULE_ERRORS", raising=False)
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.WiderEachCall().eval())}
    assert list(results) == list(checks.RULES)
    assert results["causal"].status == "skip"
    assert results["causal"].evidence.startswith("could not be checked: the rule failed on what the module gave it "
                                                 "(RuntimeError: The size of tensor a")
    assert "\n" not in results["causal"].evidence
    assert results["rows-sum-to-one"].status == "pass" and results["matches-reference"].status == "pass"


def test_baddbmms_alpha_is_the_scale():
    """torch.baddbmm(mask, q, kᵀ, alpha=1/√hd) (Bloom, GPT-NeoX, Falcon) failed scaling: "the scores are not
    scaled"."""
    torch.manual_seed(0)
    assert failing(um.BaddbmmAttention().eval()) == set()
    assert verdict(um.BaddbmmAttention().eval(), "scaling").evidence == (
        "the scores are divided by √head_dim = √4 ≈ 2")
    assert verdict(um.BaddbmmAttention(alpha=1.0).eval(), "scaling").evidence == (
        "the scores are not scaled: divide by √head_dim = √4 ≈ 2")
    assert verdict(um.BaddbmmAttention(alpha=0.1).eval(), "scaling").evidence.startswith(
        "the scores are multiplied by 0.1, i.e. divided by 10")


def test_heads_folded_into_the_batch_are_read_as_heads_when_the_module_declares_them():
    """(b·h, n, n) weights are read as h heads where the module declares num_heads, and matches-reference compares
    the concatenated heads; undeclared, they are b·h items of one head, and a note says to declare num_heads."""
    torch.manual_seed(0)
    trace = tracing.trace_module(um.BaddbmmAttention().eval(), torch.randn(1, 8, 16))
    assert trace.steps["weights"].shape == (1, 4, 8, 8) and trace.num_heads == 4
    assert trace.steps["queries"].shape == (1, 4, 8, 4) and trace.steps["context"].shape == (1, 4, 8, 4)
    assert verdict(um.BaddbmmAttention().eval(), "matches-reference").evidence.startswith(
        "the concatenated heads equal")
    undeclared = tracing.trace_module(um.BaddbmmAttention(declare_heads=False).eval(), torch.randn(1, 8, 16))
    assert undeclared.steps["weights"].shape == (4, 1, 8, 8)
    assert any("4 maps for 1 item" in note and "num_heads" in note for note in undeclared.notes), undeclared.notes


def test_blooms_own_forward_is_read_through_its_views():
    """Bloom's eager forward — keyword baddbmm on (b·h, n, hd), .view(b, h, n, n), masked_fill(finfo.min), softmax,
    .view(b·h, n, n), bmm — failed mask-convention ("the causal mask never reached the scores") and skipped scaling
    and matches-reference ("the view on line … comes between them")."""
    torch.manual_seed(0)
    results = {check.rule: check for check in checks.check_module(um.BloomAttention().eval())}
    assert {rule for rule, check in results.items() if check.status != "pass"} == {"kv-cache", "rotary-placement"}
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √4 ≈ 2"
    assert results["mask-convention"].evidence.startswith("the hidden cells are exactly the future")
    assert results["matches-reference"].evidence.startswith("the concatenated heads equal")
    trace = tracing.trace_module(um.BloomAttention().eval(), torch.randn(1, 8, 16))
    assert trace.steps["weights"].shape == (1, 4, 8, 8) and trace.steps["scores"].shape == (1, 4, 8, 8)
    assert trace.steps["queries"].shape == (1, 4, 8, 4) and trace.steps["context"].shape == (1, 4, 8, 4)
    unscaled = verdict(um.BloomAttention(scaled=False).eval(), "scaling")
    assert unscaled.status == "fail" and unscaled.evidence == "the scores are not scaled: divide by √head_dim = √4 ≈ 2"


def test_a_head_mask_after_the_softmax_is_read_through():
    """GPT-2's ``attn_weights * head_mask`` (a (1, h, 1, 1) of 1s with head 1 at 0) failed rows-sum-to-one,
    mask-convention and matches-reference as a mask applied after the softmax; a (b, 1, n, 1) of 1s (no padded
    query) stopped the walk to V, so matches-reference skipped."""
    torch.manual_seed(0)
    assert failing(um.HeadMaskAfterSoftmax().eval()) == set()
    assert verdict(um.HeadMaskAfterSoftmax().eval(), "matches-reference").evidence.startswith(
        "the concatenated heads equal")
    trace = tracing.trace_module(um.HeadMaskAfterSoftmax().eval(), torch.randn(1, 8, 16))
    assert abs(trace.steps["weights"].sum(-1) - 1).max() < 1e-5  # (1, 4, 8): the softmax's weights, head 1 too
    assert any(note.startswith("Head 1 is masked to 0 after the softmax") for note in trace.notes), trace.notes
    assert verdict(um.HeadMaskAfterSoftmax(query_mask=True).eval(), "matches-reference").evidence.startswith(
        "the concatenated heads equal")
    assert failing(um.HeadMaskAfterSoftmax(query_mask=True).eval()) == set()


MASK_AFTER_SOFTMAX = ("the mask is applied after the softmax: rows no longer sum to 1 — mask the scores with −∞ "
                      "before the softmax")


def test_a_mask_applied_after_the_softmax_is_named_by_every_rule_it_fails():
    """nanoGPT with softmax, then masked_fill(bias == 0, 0.0): rows-sum-to-one reads the weights that multiply V, not
    the softmax's output, and fails; rows-sum-to-one, causal, mask-convention and matches-reference each name the
    mask applied after the softmax, none a masked_fill whose copy is dropped; scaling passes."""
    torch.manual_seed(0)
    results = {c.rule: c for c in checks.check_module(um.MaskAfterSoftmax().eval())}
    assert {rule for rule, c in results.items() if c.status == "fail"} == {
        "rows-sum-to-one", "causal", "mask-convention", "matches-reference"}
    assert results["rows-sum-to-one"].evidence.startswith("head 0, row 0 of the weights that multiply V sums to 0.")
    for rule in ("rows-sum-to-one", "causal", "mask-convention", "matches-reference"):
        assert MASK_AFTER_SOFTMAX in results[rule].evidence, (rule, results[rule].evidence)
        assert "masked_fill returns a copy" not in results[rule].evidence
    assert results["scaling"].status == "pass"


def test_a_mask_after_the_softmax_then_renormalised_passes():
    """Masking the softmax's output and dividing each row by its sum is a correct causal attention."""
    torch.manual_seed(0)
    results = checks.check_module(um.MaskAfterSoftmax(renormalise=True).eval())
    assert [c for c in results if c.status == "fail"] == []
    assert {c.rule for c in results if c.status == "skip"} == {"kv-cache", "rotary-placement"}


def test_a_forward_that_caches_by_default_is_called_uncached_where_attnviz_means_uncached():
    """``forward(x, use_cache=True)``: the trace and every rule's uncached forward pass ``use_cache=False``, so the
    cache does not grow from forward to forward — the traced forward caches nothing, every rule but rotary-placement
    passes, kv-cache names the cache, and a use_cache=True given is passed as given."""
    import attnviz

    torch.manual_seed(0)
    module = um.CachesByDefault(32, 4, 2).eval()
    x = torch.randn(2, 8, 32)  # (b, n, d_in)
    attnviz.trace_module(module, x)
    assert module.k_cache is None  # the traced forward cached nothing
    results = {check.rule: check for check in checks.check_module(module, x)}
    assert {check.rule for check in results.values() if check.status != "pass"} == {"rotary-placement"}  # not rotary
    assert results["kv-cache"].evidence.endswith("k_cache (1, 2, 8, 8), v_cache (1, 2, 8, 8)")
    torch.manual_seed(0)
    told = um.NanochatGQA(32, 4, 2).eval()  # the same module, whose forward caches only when told to
    assert torch.equal(tracing.run_forward(module, x), tracing.run_forward(told, x))
    assert module.k_cache is None and tracing.run_forward(module, x[:, :3], use_cache=True).shape == (2, 3, 32)
    assert module.k_cache.shape == (2, 2, 3, 8)  # use_cache=True given is passed as given


class KeepsItsLastOutput(nn.Module):
    """A learner's small GPT that keeps its last output for plotting (no cache: every forward rewrites it), whose
    last layer's dropout acts in eval mode."""

    def __init__(self):
        super().__init__()
        self.gpt = um.SmallGPT(last_bug="dropout-in-eval")
        self.last_output = None

    def forward(self, x):
        out = self.gpt(x)  # (b, n, d_in)
        self.last_output = out.detach()  # (b, n, d_in)
        return out


def test_a_later_layers_eval_mode_dropout_is_not_taken_for_a_cache_write():
    """Two forwards of a model whose later layer's dropout acts in eval mode differ, and so does what it keeps for
    plotting: with the same random numbers they agree, so the kv-cache rule finds no cache written, and
    dropout-placement names the layer."""
    torch.manual_seed(0)
    found = {check.rule: check for check in checks.check_module(KeepsItsLastOutput().eval(),
                                                                rules=["kv-cache", "dropout-placement"])}
    assert "adds to" not in found["kv-cache"].evidence and "writes to" not in found["kv-cache"].evidence, found
    assert found["dropout-placement"].status == "fail", found
    assert found["dropout-placement"].evidence.startswith("attention 2 of 2 on line"), found


@pytest.mark.parametrize(("statuses", "expected"), [
    (("pass", "skip"), ("skip", "attention 2 of 2 on line {line}: not checked here")),
    (("skip", "pass"), ("skip", "attention 1 of 2 on line {line}: not checked here")),
    (("skip", "skip"), ("skip", "not checked here")),
    (("pass", "pass"), ("pass", "holds — in each of the 2 attentions")),
], ids=["second-skips", "first-skips", "both-skip", "both-pass"])
def test_a_rule_that_could_not_check_one_of_a_models_attentions_does_not_pass(statuses, expected):
    """A rule's verdict on a model of two attentions: where it could not check one of them, the verdict is a skip
    naming that attention, not a pass that holds for the other alone."""
    module = um.SmallGPT().eval()
    recording = tracing.record(module, checks.default_input(module))
    each = tracing.each_attention(recording)
    words = {"pass": "holds", "skip": "not checked here"}
    check = checks._in_every_attention(
        "scaling", lambda index, one: checks.Check("scaling", statuses[index], words[statuses[index]]), each,
        recording, tracing.class_file(module))
    line = user_modules_line(MHA_SOFTMAX)
    assert (check.status, check.evidence) == (expected[0], expected[1].format(line=line)), check
