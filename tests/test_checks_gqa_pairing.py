"""Grouped-query modules whose keys and values pair the query heads differently (K repeated with
``repeat_interleave``, V with ``.repeat``, or the reverse): ``matches-reference`` fails them, naming a query head and
the K/V heads it reads its keys and its values from; K and V repeated alike, and every other layout, pass."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, modern_attention
from attnviz.labs.pitfalls import modern as pitfalls


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


def built(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


@pytest.mark.parametrize(("heads", "kv_heads", "keys", "values", "words", "keys_grouped", "values_grouped"), [
    (8, 2, "interleave", "repeat", "query head 1 reads K/V head 0's keys but K/V head 1's values",
     "as repeat_interleave does, (0, 1, 2, 3), (4, 5, 6, 7)", "as .repeat does, (0, 2, 4, 6), (1, 3, 5, 7)"),
    (4, 2, "repeat", "interleave", "query head 1 reads K/V head 1's keys but K/V head 0's values",
     "as .repeat does, (0, 2), (1, 3)", "as repeat_interleave does, (0, 1), (2, 3)"),
    (6, 3, "interleave", "repeat", "query head 1 reads K/V head 0's keys but K/V head 1's values",
     "as repeat_interleave does, (0, 1), (2, 3), (4, 5)", "as .repeat does, (0, 3), (1, 4), (2, 5)"),
], ids=["keys-interleaved-values-repeated", "keys-repeated-values-interleaved", "three-groups"])
def test_keys_and_values_repeated_each_their_own_way_fail_matches_reference_naming_a_head(
        heads, kv_heads, keys, values, words, keys_grouped, values_grouped):
    results = verdicts(built(um.GQAPairing, 24 if heads == 6 else 16, heads, kv_heads, keys=keys, values=values))
    check = results["matches-reference"]
    assert check.status == "fail"
    assert check.evidence.startswith(words)
    assert f"the keys group the query heads {keys_grouped}" in check.evidence
    assert f"the values {values_grouped}" in check.evidence
    assert "repeat K and V the same way, e.g. repeat_interleave(group_size, dim=1) on both" in check.evidence
    assert "the concatenated heads equal softmax" in check.evidence  # the attention itself is right
    assert {rule for rule, c in results.items() if c.status == "fail"} == {"matches-reference"}


@pytest.mark.parametrize("how", ["interleave", "repeat"])
def test_keys_and_values_repeated_alike_pass_every_rule(how):
    """``.repeat`` on both is a consistent design (query head h reads K/V head h % g's keys and values): it passes."""
    results = verdicts(built(um.GQAPairing, keys=how, values=how))
    assert all(c.status != "fail" for c in results.values()), results
    assert results["matches-reference"].status == "pass"


@pytest.mark.parametrize("make", [
    lambda: built(um.CausalSelfAttention),  # multi-head: no head shares K or V
    lambda: built(um.LearnerGQA, 16, 16, 8, 0.0, 4, num_kv_groups=1),  # multi-query: one group each
    lambda: built(um.LearnerGQA, 16, 16, 8, 0.0, 4, num_kv_groups=2),
    lambda: built(um.LearnerRotaryGQA, 16, 16, 8, 0.0, 4, num_kv_groups=2),
    lambda: built(um.LearnerGQAWithSDPA, 16, 16, 8, 0.0, 4, num_kv_groups=2),  # SDPA's enable_gqa
    lambda: built(um.GQAWithSDPA),
    lambda: built(um.BroadcastGQA),  # 2 K/V heads broadcast, never repeated
    lambda: built(um.LearnerMLA, 16, 16, 8, 0.0, 4),
    lambda: built(um.AbsorbedMLA, rope=True),
    lambda: built(modern_attention.GroupedQueryAttention, 16, 16, 0.0, 4, 2),
    lambda: built(modern_attention.GroupedQueryAttention, 16, 16, 0.0, 4, 1),
    lambda: built(pitfalls.RepeatNotInterleave, 16, 16, 0.0, 4, 2),  # the lab's tiled .repeat on both
], ids=["mha", "mqa", "gqa", "rotary-gqa", "sdpa-enable-gqa", "sdpa-enable-gqa-fused", "broadcast-gqa", "mla",
        "absorbed-mla", "attnviz-gqa", "attnviz-mqa", "lab-repeat-on-both"])
def test_modules_that_pair_keys_and_values_alike_pass_matches_reference(make):
    check = verdicts(make())["matches-reference"]
    assert check.status == "pass", check.evidence
    assert "K/V head" not in check.evidence


def test_values_shared_but_keys_per_head_pass_nothing_pairs_them():
    """No module in use shares V but not K; one that does has no keys shared for its values to pair wrongly."""
    check = verdicts(built(um.SharedValuesOnly))["matches-reference"]
    assert check.status == "pass", check.evidence


def test_equal_weights_that_make_every_value_head_alike_are_not_a_pairing():
    """K/V heads equal because their weights are (never by random init): a consistent GQA whose two V heads have one
    weight reads, per query head, the keys of its group and values every head shares — keys grouped (0, 1), (2, 3),
    values all alike: no head reads another group's values than its keys' partner, so it passes."""
    module = built(um.GQAPairing, 16, 4, 2, keys="interleave", values="interleave")
    with torch.no_grad():
        module.wv.weight[module.head_dim:] = module.wv.weight[:module.head_dim]  # V head 1 := V head 0
    check = verdicts(module)["matches-reference"]
    assert check.status == "pass", check.evidence


def test_equal_key_weights_in_multi_head_attention_are_not_a_pairing():
    """Multi-head attention whose query heads 0 and 1 have equal key weights: keys shared, values not — passes."""
    module = built(um.LearnerGQA, 16, 16, 8, 0.0, 4, num_kv_groups=4)
    with torch.no_grad():
        module.W_key.weight[module.head_dim:2 * module.head_dim] = module.W_key.weight[:module.head_dim]
    check = verdicts(module)["matches-reference"]
    assert check.status == "pass", check.evidence
