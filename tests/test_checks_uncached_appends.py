"""A forward that appends to its KV cache when told not to (``use_cache=False``, or a forward that takes no
use_cache and caches on every call): kv-cache fails in words that say so, from two uncached forwards of the same
tokens, and the rules that would run the module again skip, saying why, instead of failing on what the cache
leaks or stopping on a shape error; a cache that only logs what it saw is no finding."""

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


def test_a_cache_that_only_logs_what_it_saw_is_no_finding():
    results = verdicts(built(um.CachesWhenToldNot, log=True))
    assert not results["kv-cache"].evidence.startswith("the forward with use_cache=False appended"), results
    assert results["causal"].status == "pass", results["causal"]
    assert results["batch-independence"].status == "pass", results["batch-independence"]
