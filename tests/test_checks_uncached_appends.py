"""A forward that appends to its KV cache when told not to (``use_cache=False``, or a forward that takes no
use_cache and caches on every call): kv-cache fails in words that say so, from two uncached forwards of the same
tokens, and the rules that would run the module again skip, saying why, instead of failing on what the cache
leaks or stopping on a shape error; a log of the keys seen is not taken for a cache appended to."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks

SKIPPED = ("causal", "rotary-placement", "dropout-placement", "batch-independence")


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval())}


def built(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs)


def test_a_forward_that_caches_with_use_cache_false_fails_kv_cache_and_stops_no_rule():
    results = verdicts(built(um.CachesWhenToldNot))
    assert [rule for rule, check in results.items() if check.status == "fail"] == ["kv-cache"], results
    evidence = results["kv-cache"].evidence
    assert evidence.startswith(
        "the forward with use_cache=False appended to the cache: two uncached forwards of the same 8 tokens grew "
        "cache_k from nothing to (2, 4, 8, 4), then (2, 4, 16, 4), cache_v from nothing to (2, 4, 8, 4), then (2, 4, "
        "16, 4), and the second one's output differs by "), evidence
    assert evidence.endswith("each uncached forward attends to the tokens of the ones before; append to the cache, "
                             "and read it, only when use_cache is true (if use_cache: self.cache_k = torch.cat(…)), "
                             "then check again"), evidence
    for rule in SKIPPED:
        assert results[rule] == checks.Check(rule, "skip", checks.APPENDED_SKIP)
    for rule in ("rows-sum-to-one", "mask-convention", "scaling", "matches-reference"):  # the first forward's
        assert results[rule].status == "pass", results[rule]


def test_a_forward_without_use_cache_that_caches_says_to_take_it():
    evidence = verdicts(built(um.AlwaysCaches))["kv-cache"]
    assert evidence.status == "fail"
    assert evidence.evidence.startswith("the forward (it takes no use_cache) appended to the cache: "), evidence
    assert evidence.evidence.endswith("take use_cache=False in the forward and append to the cache, and read it, only "
                                      "when it is true, then check again"), evidence


@pytest.mark.parametrize("batch", [1, 2])
def test_the_rules_after_it_never_stop_on_the_cache_it_grew(batch):
    """One item or two: rotary-placement and batch-independence feed other batch sizes, where the grown cache no
    longer fits."""
    module = built(um.CachesWhenToldNot).eval()
    results = checks.check_module(module, torch.randn(batch, 6, 16))
    assert {check.rule: check.status for check in results}["kv-cache"] == "fail"


def test_a_log_of_the_keys_seen_is_no_append_and_kv_cache_fails_the_cached_steps_that_keep_nothing():
    """``log=True``: no cache, only a log never read back — the rules that run the module again run; kv-cache fails
    it on what it is, a forward that takes use_cache and keeps no earlier token for its cached steps."""
    results = verdicts(built(um.CachesWhenToldNot, log=True))
    assert [rule for rule, check in results.items() if check.status == "fail"] == ["kv-cache"], results
    evidence = results["kv-cache"].evidence
    assert evidence.startswith("sequence 1, token 4: the cached output differs from the uncached one by "), evidence
    assert "the step attends over only 1 token after 5: the cache keeps too little" in evidence, evidence
    assert results["causal"].status == "pass", results["causal"]
    assert results["batch-independence"].status == "pass", results["batch-independence"]


def test_a_preallocated_cache_written_with_use_cache_false_fails_kv_cache_naming_what_changed():
    """Buffers allocated once at the context's size never grow: what changed is their contents and the pointer."""
    results = verdicts(built(um.PreallocatedBuffers, bug="ignores-use-cache"))
    assert [rule for rule, check in results.items() if check.status == "fail"] == ["kv-cache"], results
    evidence = results["kv-cache"].evidence
    assert evidence.startswith(
        "the forward with use_cache=False wrote to the cache: in two uncached forwards of the same 8 tokens the "
        "buffer cache_k changed in place (its shape (2, 4, 16, 8) kept), the buffer cache_v changed in place (its "
        "shape (2, 4, 16, 8) kept) and ptr went from 0 to 8, then 16, and the second one's output differs by "
    ), evidence
    assert evidence.endswith(
        "each uncached forward attends to what the ones before left in the cache; write to the cache, move ptr and "
        "read the cache only when use_cache is true (when it is false, attend to the new keys and values alone), "
        "then check again"), evidence
    for rule in SKIPPED:
        assert results[rule] == checks.Check(rule, "skip", checks.APPENDED_SKIP)
    for rule in ("rows-sum-to-one", "mask-convention", "scaling", "matches-reference"):  # the first forward's
        assert results[rule].status == "pass", results[rule]


def test_a_preallocated_cache_allocated_by_the_first_uncached_forward_fails_kv_cache():
    """The book's optimized cache allocates its buffers on the first forward that writes: they appear, then only
    their contents change."""
    evidence = verdicts(built(um.PreallocatedBuffers, bug="ignores-use-cache", lazy=True))["kv-cache"]
    assert evidence.status == "fail", evidence
    assert evidence.evidence.startswith(
        "the forward with use_cache=False wrote to the cache: in two uncached forwards of the same 8 tokens the "
        "buffer cache_k appeared as (2, 4, 16, 8), then changed in place, the buffer cache_v appeared as (2, 4, 16, "
        "8), then changed in place and ptr went from 0 to 8, then 16, and the second one's output differs by "
    ), evidence


def test_a_preallocated_cache_that_overflows_at_context_length_fails_kv_cache_instead_of_stopping_the_check():
    """Eight tokens fill a context of 8: the second uncached forward writes past the end and raises."""
    evidence = verdicts(built(um.PreallocatedBuffers, bug="ignores-use-cache", context_length=8))["kv-cache"]
    assert evidence.status == "fail", evidence
    assert evidence.evidence.startswith("the forward with use_cache=False wrote to the cache: in two uncached forwards "
                                        "of the same 8 tokens the buffer cache_k changed in place"), evidence
    said = "ptr went from 0 to 8, and the second one raised RuntimeError (user_modules.py, line "
    assert said in evidence.evidence, evidence


@pytest.mark.parametrize("lazy", [False, True])
def test_a_preallocated_cache_that_honours_use_cache_passes_every_rule(lazy):
    """Its reset moves ptr back and leaves the buffers' stale slots, which no forward reads."""
    results = verdicts(built(um.PreallocatedBuffers, lazy=lazy))
    assert {rule for rule, check in results.items() if check.status != "pass"} == {"rotary-placement"}, results
    assert results["rotary-placement"].evidence.startswith("not rotary"), results["rotary-placement"]


def test_state_an_uncached_forward_changes_without_reading_it_back_is_no_finding():
    """Rotary tables built on the first call, a forward counter and the last weights kept for plotting change in
    the traced forward; the tables stay put in the next, and the counter and weights are never read back."""
    module, reports = built(um.KeepsWhatItSaw).eval(), []
    results = {check.rule: check for check in checks.check_module(module, progress=reports.append)}
    assert {rule for rule, check in results.items() if check.status != "pass"} == {"kv-cache"}, results
    assert results["kv-cache"].evidence == "the forward takes no use_cache: the module keeps no KV cache"
    assert reports[-1].forwards == reports[-1].forwards_planned == 1 + 1 + 7 + 1 + 1 + 2  # the second forward planned


def test_a_counter_beside_dropout_in_eval_mode_is_the_dropouts_finding_not_the_caches():
    """Two uncached forwards differ (the dropout) and each moves the counter: the outputs of two more, drawn with the
    same random numbers, agree, so what the module keeps is not what they read."""
    results = verdicts(built(um.KeepsWhatItSaw, dropout_in_eval=True))
    assert results["dropout-placement"].status == "fail", results["dropout-placement"]
    assert results["kv-cache"].evidence == "the forward takes no use_cache: the module keeps no KV cache"
    assert results["causal"] == checks.Check("causal", "skip", checks.DROPOUT_IN_EVAL)
