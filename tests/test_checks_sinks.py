"""Attention sinks (GPT-OSS): a learned logit per head concatenated to each row of scores, the softmax over the keys
and that column, the column dropped after it.  The tracer reads the sliced (n, n) weights as the weights; their rows
sum to less than 1 by design, and ``rows-sum-to-one`` says so (they sum to 1 with the sink's weight);
``matches-reference`` puts the module's sink logits beside its reference's scores — and a module that divides by
head_dim, or drops a key's column instead of the sink's, still fails (the modules are
tests/helpers/user_modules.py's SinkAttention and GptOssLayer)."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks

RULES = ("rows-sum-to-one", "causal", "mask-convention", "scaling", "matches-reference")


def verdicts(module, rules=RULES) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval(), rules=rules)}


@pytest.mark.parametrize("sink_first", [False, True])
def test_attention_with_a_sink_passes_and_the_row_sums_say_why_they_are_short_of_one(sink_first):
    torch.manual_seed(0)
    results = verdicts(um.SinkAttention(sink_first=sink_first))
    for rule in RULES:
        assert results[rule].status == "pass", (rule, results[rule].evidence)
    assert "attention sink" in results["rows-sum-to-one"].evidence
    assert "less than 1 by design" in results["rows-sum-to-one"].evidence
    assert "sink logits" in results["matches-reference"].evidence


def test_sink_attention_dividing_by_head_dim_fails_scaling_and_matches_reference():
    torch.manual_seed(0)
    results = verdicts(um.SinkAttention(divide_by=16))
    assert results["scaling"].status == "fail", results["scaling"].evidence
    assert results["matches-reference"].status == "fail", results["matches-reference"].evidence


def test_dropping_a_keys_column_instead_of_the_sinks_fails():
    torch.manual_seed(0)
    results = verdicts(um.SinkAttention(drop="key"))
    assert results["causal"].status == "fail", results["causal"].evidence
    assert results["matches-reference"].status == "fail", results["matches-reference"].evidence


def test_transformers_gpt_oss_attention_with_sinks_is_checked_not_refused():
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    results = verdicts(um.GptOssLayer(), (*RULES, "rotary-placement"))
    for rule, check in results.items():
        assert check.status == "pass", (rule, check.evidence)


def test_the_trace_of_a_sink_module_shows_the_keys_weights_and_says_where_the_rest_went():
    from attnviz import tracing

    torch.manual_seed(0)
    trace = tracing.trace_module(um.SinkAttention().eval(), torch.randn(1, 6, 64))
    assert any("attention sink" in note for note in trace.notes), trace.notes
