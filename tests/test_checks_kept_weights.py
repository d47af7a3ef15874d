"""A module that keeps a copy of its attention weights for plotting (``self.last_attn_weights = w.detach()``,
``.clone()``, ``.cpu()``, ``.detach().cpu().numpy()``, a list of maps) or of its scores before the softmax
(``.detach()``, ``.cpu()``) is traced and checked exactly as the same module without the copy: the walk from the
softmax to ``weights @ V`` passes by a copy the output is not made from, and both walks read through ``.cpu()`` of a
tensor on the CPU (the tensor itself) — every rule passes for a correct module and a real bug is still found."""

import functools

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing

KEEPS = ("detach", "detach-clone", "clone", "cpu", "numpy", "append", "scores", "scores-cpu")


def built(**kwargs) -> torch.nn.Module:
    torch.manual_seed(123)
    return um.KeepsItsWeights(**kwargs).eval()


def table(module, rules=None) -> dict[str, tuple[str, str]]:
    """Every rule's (result, evidence)."""
    return {check.rule: (check.status, check.evidence) for check in checks.check_module(module, rules=rules)}


@functools.cache
def without_copy(rules=None, **kwargs) -> dict[str, tuple[str, str]]:
    return table(built(keep=None, **kwargs), rules)


@pytest.mark.parametrize("keep", KEEPS)
def test_a_correct_module_that_keeps_its_weights_passes_every_rule_as_without_the_copy(keep):
    results = table(built(keep=keep, rotary=True))
    assert results == without_copy(rotary=True)
    assert {rule for rule, (status, _) in results.items() if status != "pass"} == {"kv-cache"}, results


@pytest.mark.parametrize("keep", KEEPS)
def test_weights_scaled_after_the_softmax_are_found_behind_a_kept_copy(keep):
    """The weights divided by √head_dim after the copy is taken: the rows that multiply V sum to 1/√8."""
    rules = ("rows-sum-to-one", "matches-reference")
    results = table(built(keep=keep, bug="weights-scaled"), rules)
    assert results == without_copy(rules, bug="weights-scaled")
    assert [status for status, _ in results.values()] == ["fail", "fail"], results


@pytest.mark.parametrize("keep", ["detach", "numpy", "append"])
def test_rotary_on_the_values_is_found_behind_a_kept_copy(keep):
    rules = ("rotary-placement",)
    results = table(built(keep=keep, rotary=True, bug="values-rotated"), rules)
    assert results == without_copy(rules, rotary=True, bug="values-rotated")
    assert results["rotary-placement"][0] == "fail", results


@pytest.mark.parametrize("keep", ["detach", "cpu", "append"])
def test_the_trace_of_a_module_that_keeps_its_weights_has_every_stage(keep):
    module, x = built(keep=keep), torch.randn(1, 6, 32)  # (b, n, d_in)
    trace = tracing.trace_module(module, x)
    reference = tracing.trace_module(built(keep=None), x)
    assert set(trace.steps) == set(reference.steps) >= {"queries", "keys", "values", "weights", "context"}
    for stage in reference.steps:
        assert (trace.steps[stage] == reference.steps[stage]).all(), stage
    kept = module.maps[-1] if keep == "append" else module.last_attn_weights  # (1, h, n, n)
    assert (trace.steps["weights"] == kept.numpy()).all()
