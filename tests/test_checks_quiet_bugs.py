"""Bugs the checker once passed or blamed on the wrong cause (tests/helpers/quiet_bugs.py): a declared sliding window
that is never applied, or too wide, or wider than the checked text; dropout left on in eval mode; a window applied
after the softmax; a softmax in float16 or bfloat16; flex_attention."""

import re

import pytest
import torch
from helpers import quiet_bugs as qb
from helpers import user_modules as um

from attnviz import checks, tracing


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


def built(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


# ------------------------------------------------------------------ a declared window must be seen


def test_a_declared_window_that_is_never_applied_fails_naming_a_query_and_the_keys_it_should_not_see():
    results = verdicts(built(qb.ForgotWindow, sliding_window_size=3))  # 8 tokens: a window of 3 shows
    check = results["mask-convention"]
    assert check.status == "fail"
    assert "the module's window is 3" in check.evidence
    assert "query 7 sees keys 0 … 4" in check.evidence and "never applied" in check.evidence
    assert {rule for rule, c in results.items() if c.status == "fail"} == {"mask-convention"}


def test_a_window_one_key_too_wide_fails_when_the_tokens_are_one_more_than_w():
    """Mistral-style ``i - j <= W`` with W = 7 on 8 tokens hides nothing beyond the future: W's own band must show."""
    check = verdicts(built(qb.BandedSWA, sliding_window=7, bug="wide"))["mask-convention"]
    assert check.status == "fail"
    assert "query 7 sees key 0" in check.evidence and "diff > W" in check.evidence
    assert verdicts(built(qb.BandedSWA, sliding_window=7))["mask-convention"].status == "pass"


@pytest.mark.parametrize(("bug", "words"), [(None, "sliding window W = 10"), ("wide", "a window of 11")])
def test_a_window_wider_than_the_checked_tokens_is_checked_on_w_plus_two_tokens(bug, words):
    check = verdicts(built(qb.BandedSWA, sliding_window=10, bug=bug))["mask-convention"]
    assert check.status == ("pass" if bug is None else "fail")
    assert check.evidence.startswith("on 12 tokens (the 8 checked never reach a key 10 behind): ")
    assert words in check.evidence


def test_a_forgotten_window_wider_than_the_checked_tokens_fails_on_w_plus_two_tokens():
    check = verdicts(built(qb.ForgotWindow, sliding_window_size=20))["mask-convention"]
    assert check.status == "fail" and "on 22 tokens" in check.evidence and "query 21 sees keys 0 … 1" in check.evidence


def test_a_window_too_wide_to_exercise_cheaply_is_said_not_exercised():
    """Mistral's W = 4,096 would need 4,098 tokens: the pass says the window was not exercised."""
    module = built(um.LearnerSWA, 16, 32, 16, 0.0, 4, sliding_window_size=4096)
    check = verdicts(module)["mask-convention"]
    assert check.status == "pass"
    assert "the module's window of 4096 was not exercised" in check.evidence
    # 4,098 tokens are more than attnviz check's --context-length allows: the advice is a window the check reaches
    assert "check 4098 tokens" not in check.evidence.replace(",", "")
    assert "build it with a window of 64 or less" in check.evidence


# ------------------------------------------------------------------ dropout left on in eval mode


@pytest.mark.parametrize("sdpa", [False, True], ids=["F.dropout", "sdpa"])
def test_dropout_in_eval_mode_fails_dropout_placement_and_the_output_rules_skip_naming_it(sdpa):
    results = verdicts(built(qb.EvalDropout, sdpa=sdpa))
    assert {rule for rule, c in results.items() if c.status == "fail"} == {"dropout-placement"}
    for rule in ("causal", "batch-independence", "matches-reference"):
        assert results[rule].status == "skip"
        assert "dropout acts in eval mode" in results[rule].evidence


def test_checked_without_dropout_placement_the_output_rules_fail_naming_the_dropout():
    """``rules=("causal",)``: no rule is left to fail for the dropout, so the causal rule's failure names it."""
    module = built(qb.EvalDropout)
    (check,) = checks.check_module(module, checks.default_input(module), rules=("causal",))
    assert check.status == "fail" and "dropout acts in eval mode" in check.evidence
    assert "future" not in check.evidence


def test_dropout_placement_tells_an_sdpa_module_to_pass_dropout_p_only_in_training():
    sdpa = verdicts(built(qb.EvalDropout, sdpa=True))["dropout-placement"].evidence
    assert "dropout_p=self.dropout if self.training else 0.0" in sdpa and "F.dropout" not in sdpa
    plain = verdicts(built(qb.EvalDropout))["dropout-placement"].evidence
    assert "training=self.training to F.dropout" in plain


# ------------------------------------------------------------------ a window applied after the softmax


def test_a_window_after_the_softmax_names_a_cell_the_multiply_zeroed_not_a_future_one():
    check = verdicts(built(qb.WindowAfterSoftmax, sliding_window_size=3))["mask-convention"]
    assert check.status == "fail"
    assert "row 3 (query 3), key 0" in check.evidence and "key 1" not in check.evidence


# ------------------------------------------------------------------ a softmax in float16 or bfloat16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_softmax_in_half_precision_is_named_and_its_sum_shows_the_error(dtype):
    results = verdicts(built(qb.LowPrecisionSoftmax, dtype=dtype))
    name = str(dtype).removeprefix("torch.")
    rows = results["rows-sum-to-one"]
    assert rows.status == "fail" and f"the softmax runs in {name}" in rows.evidence
    total = re.search(r"sums to (\S+), should be 1", rows.evidence).group(1)
    assert float(total) != 1.0  # enough digits to show the error
    reference = results["matches-reference"]
    if reference.status == "fail":
        assert f"the softmax runs in {name}" in reference.evidence and "adds to the scores" not in reference.evidence
    assert verdicts(built(qb.LowPrecisionSoftmax, dtype=torch.float32))["rows-sum-to-one"].status == "pass"


# ------------------------------------------------------------------ flex_attention


@pytest.mark.slow  # importing TorchDynamo alone takes about 6 s
def test_flex_attention_is_one_line_saying_attnviz_cannot_trace_it(recwarn):
    pytest.importorskip("torch.nn.attention.flex_attention")
    with pytest.raises(tracing.TraceError) as caught:
        checks.check_module(built(qb.FlexCausal))
    message = str(caught.value)
    assert "\n" not in message and "flex_attention" in message and "Higher Order" not in message
    assert "scaled_dot_product_attention" in message
    assert not [w for w in recwarn if "flex_attention" in str(w.message) or "Dynamo" in str(w.message)]
