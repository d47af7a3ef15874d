"""A user's module wrapping nn.MultiheadAttention, checked in eval mode: its own forward without gradients takes
torch's fast path (``torch._native_multi_head_attention``), the traced one the general path the recording sees
(``F.multi_head_attention_forward``).  Every forward of a check runs the general path, so the verdicts are those of
one computation; where the two paths differ (``is_causal=True`` with no mask, or with a mask that is not causal) the
words say so."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing


@pytest.fixture(params=[True, False], ids=["fast-path-enabled", "fast-path-disabled"])
def fast_path(request):
    """torch.backends.mha's fast path enabled (torch's default) or disabled, restored after."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(request.param)
    yield request.param
    torch.backends.mha.set_fastpath_enabled(before)


def built(how: str) -> um.CausalMHA:
    torch.manual_seed(0)
    return um.CausalMHA(how=how).eval()


def takes_the_fast_path(module: um.CausalMHA, monkeypatch) -> bool:
    """Whether the module's own eval-mode forward without gradients calls torch's fast path (a forward the general
    path refuses, is_causal=True without a mask, does not)."""
    calls = []
    native = torch._native_multi_head_attention
    monkeypatch.setattr(torch, "_native_multi_head_attention", lambda *a, **k: calls.append(1) or native(*a, **k))
    try:
        with torch.no_grad():
            module(torch.randn(2, 8, 16))
    except RuntimeError as error:
        assert tracing.CAUSAL_HINT_ERROR in str(error)
    finally:
        monkeypatch.setattr(torch, "_native_multi_head_attention", native)
    return bool(calls)


@pytest.mark.slow  # a whole check_module run: the slow tier
@pytest.mark.parametrize(("how", "fast"), [("bool", True), ("float", False), ("hint", True)])
def test_a_causal_mask_passes_every_rule_on_either_path(how, fast, fast_path, monkeypatch):
    """A boolean mask, a float one, the boolean one with is_causal=True: causal, on both of torch's paths (a float mask
    never takes the fast path)."""
    module = built(how)
    assert takes_the_fast_path(module, monkeypatch) == (fast and fast_path)
    results = {check.rule: check for check in checks.check_module(module)}
    assert [check for check in results.values() if check.status == "fail"] == [], results
    assert results["mask-convention"].evidence == "the hidden cells are exactly the future (above the diagonal)"
    assert results["causal"].status == results["batch-independence"].status == "pass"


def test_is_causal_without_a_mask_is_told_it_is_only_a_hint(fast_path, monkeypatch):
    """The general path raises "Need attn_mask …", the fast path hides nothing: the check cannot run, and says why
    in words a learner can act on, not torch's error alone."""
    module = built("hint-only")
    assert takes_the_fast_path(module, monkeypatch) == fast_path
    with pytest.raises(tracing.TraceError) as raised:
        checks.check_module(module)
    assert str(raised.value) == tracing.CAUSAL_HINT_ALONE
    assert "is_causal=True without an attn_mask" in str(raised.value) and "every token sees the future" in str(
        raised.value)


@pytest.mark.slow  # a whole check_module run: the slow tier
@pytest.mark.parametrize(("how", "found"), [
    ("hint-past", "the mask hides the past instead of the future"),
    ("hint-window", "sliding window W = 3: the hidden cells are the future and the keys 3 or more behind"),
], ids=["hides-the-past", "sliding-window"])
def test_is_causal_with_a_mask_that_is_not_the_causal_one_fails_mask_convention_naming_both_paths(how, found,
                                                                                                  fast_path):
    """The general path hides the future and ignores the mask, the fast path applies it.  Every forward of the check
    runs the general path: mask-convention fails saying what the mask hides (the past, or a sliding window's keys) and
    that the two paths attend differently, and batch-independence and causal pass, with the fast path enabled or
    not."""
    results = {check.rule: check for check in checks.check_module(built(how))}
    assert results["mask-convention"].status == "fail", results
    assert results["mask-convention"].evidence.startswith(found), results
    assert results["mask-convention"].evidence.endswith(checks.CAUSAL_HINT), results
    assert results["batch-independence"].status == results["causal"].status == "pass", results


def test_is_causal_with_a_window_and_need_weights_is_read_as_the_window_both_paths_apply():
    """With need_weights=True (nn.MultiheadAttention's default) both of torch's paths apply the mask given with
    is_causal=True: the window is what the module computes, and mask-convention does not call it a training/inference
    split."""
    module = built("hint-window-weights")
    results = {check.rule: check for check in checks.check_module(module, rules=["mask-convention"])}
    assert checks.CAUSAL_HINT not in results["mask-convention"].evidence, results
    assert "sliding window W = 3" in results["mask-convention"].evidence, results
