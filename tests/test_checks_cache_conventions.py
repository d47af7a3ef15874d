"""kv-cache checks the caches real code keeps under other conventions: a cache the caller holds passed as ``past``
(GPT-2's original name) or ``kv_cache``, and a cache kept in lower precision than the module computes (compared at
that precision, the dtype named); its words name the cause the evidence shows for a window cache whose cached mask
drops the window; mask-convention's words for a window_size as long as the module's context (the book's optimized
KV cache length)."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks


def built(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


# ------------------------------------------------------------------ a cache passed in under another name


@pytest.mark.parametrize(("cls", "name"), [(um.PastArgument, "past"), (um.KVCacheArgument, "kv_cache")])
def test_kv_cache_checks_a_cache_passed_in_as_past_or_kv_cache(cls, name):
    results = verdicts(built(cls))
    check = results["kv-cache"]
    assert check.status == "pass", check
    assert f"each given the cache the forward before returned ({name}), give the uncached outputs" in check.evidence
    assert "the cache holds 8 tokens of 64 elements (256 bytes) each" in check.evidence, check
    assert [rule for rule, c in results.items() if c.status == "fail"] == []
    check = verdicts(built(cls, bug="mask-ignores-past"))["kv-cache"]
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: the cached output differs"), check
    assert f"as {name})" in check.evidence


# ------------------------------------------------------------------ a cache kept in lower precision


@pytest.mark.parametrize(("dtype", "name"), [(torch.bfloat16, "bfloat16"), (torch.float16, "float16")])
def test_kv_cache_compares_a_low_precision_cache_at_its_precision_and_says_so(dtype, name):
    check = verdicts(built(um.LowPrecisionCache, cache_dtype=dtype))["kv-cache"]
    assert check.status == "pass", check
    assert f"the cache is kept in {name}, the module computes in float32: compared at {name}'s precision" \
        in check.evidence, check
    assert "(≤ 1e-05)" not in check.evidence


def test_kv_cache_still_fails_a_low_precision_cache_whose_step_is_wrong():
    check = verdicts(built(um.LowPrecisionCache, bug="drops-oldest"))["kv-cache"]
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: the cached output differs"), check
    assert "the cache is kept in bfloat16" in check.evidence, check


# ------------------------------------------------------------------ words


def test_kv_cache_names_a_cached_mask_without_the_window_not_a_cache_one_token_too_long():
    check = verdicts(built(um.LearnerCachedSWA, 16, 32, 16, 0.0, 4, sliding_window_size=3,
                           bug="cached-mask-no-window"))["kv-cache"]
    assert check.status == "fail", check
    assert "too many" not in check.evidence and "one token too long" not in check.evidence, check
    assert "the cached step's mask does not apply the window" in check.evidence, check


def test_mask_convention_says_a_window_size_as_long_as_the_context_is_not_an_attention_window():
    """The book's optimized class: window_size = the context by default, the length of its KV cache."""
    results = verdicts(built(um.WindowSizedCache, context_length=16))
    check = results["mask-convention"]
    assert check.status == "pass", check
    assert "build it with a window of 64 or less" not in check.evidence, check
    assert "window_size = 16 is the length of the module's KV cache, not an attention window" in check.evidence, check
    assert [rule for rule, c in results.items() if c.status == "fail"] == []


def test_kv_cache_skips_a_past_argument_that_counts_tokens_rather_than_holding_a_cache():
    """``past=0`` defaults to a number, not to an empty cache: not a cache the caller holds."""
    check = verdicts(built(um.PastOffset))["kv-cache"]
    assert check == checks.Check("kv-cache", "skip", "the forward takes no use_cache: the module keeps no KV cache")
