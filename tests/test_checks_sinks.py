"""Attention sinks (GPT-OSS): a learned logit per head concatenated to each row of scores, the softmax over the keys
and that column, the column dropped after it.  The tracer reads the sliced (n, n) weights as the weights; their rows
sum to less than 1 by design, and ``rows-sum-to-one`` says so (they sum to 1 with the sink's weight);
``matches-reference`` puts the module's sink logits beside its reference's scores — and a module that divides by
head_dim, or drops a key's column instead of the sink's, still fails (the modules are
tests/helpers/user_modules.py's SinkAttention and GptOssLayer).  The sink logits the softmax gets are the module's own
``self.sinks``, each query head its own: another head's, one for every head, a column that changes from query to
query, or the logits added to every score instead of beside them fail ``matches-reference``, saying how."""

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


# ---------------------------------------------------------------- the sink logits are the module's own, one per head

@pytest.mark.parametrize(("sinks_as", "words"), [
    ("flipped", "the sink logits go to other heads than their own: query head 0's sink column holds self.sinks[3]"),
    ("first", "every head's sink column holds the same logit, "),
    ("repeat", "the sink column is not one logit per head: in head 0 it holds "),
    ("added", "the module keeps attention sinks' logits, self.sinks, one per query head (an attention sink: "),
])
def test_sink_logits_used_otherwise_than_one_per_head_fail_matches_reference_saying_how(sinks_as, words):
    torch.manual_seed(0)
    check = verdicts(um.SinkAttention(sinks_as=sinks_as), ("matches-reference",))["matches-reference"]
    assert check.status == "fail", check.evidence
    assert check.evidence.startswith(words), check.evidence
    if sinks_as == "added":
        assert "it adds them to every score of a row instead (head h's scores + sinks[h]), a constant per row that " \
               "the softmax cancels" in check.evidence


def test_each_heads_own_sink_logit_passes_naming_where_it_is_kept():
    torch.manual_seed(0)
    check = verdicts(um.SinkAttention(), ("matches-reference",))["matches-reference"]
    assert check.status == "pass", check.evidence
    assert check.evidence.endswith("the sink logits are self.sinks, each head its own)"), check.evidence


def test_transformers_gpt_oss_attentions_sinks_are_checked_as_its_own():
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    check = verdicts(um.GptOssLayer(), ("matches-reference",))["matches-reference"]
    assert check.status == "pass", check.evidence
    assert check.evidence.endswith("the sink logits are self.self_attn.sinks, each head its own)"), check.evidence
