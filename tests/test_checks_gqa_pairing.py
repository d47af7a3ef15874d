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


TILED_NOTE = ("; K and V are both repeated as .repeat does (query head h reads K/V group h mod 2): right with its own "
              "weights, but the checkpoints of Hugging Face's and Llama's grouped-query models (repeat_kv) and the "
              "book's GroupedQueryAttention give query head h K/V group h // 4, as repeat_interleave(4, dim=1) does — "
              "to load their weights, repeat K and V that way")


@pytest.mark.parametrize("how", ["interleave", "repeat"])
def test_keys_and_values_repeated_alike_pass_every_rule(how):
    """``.repeat`` on both is a consistent design (query head h reads K/V head h % g's keys and values): it passes,
    and says that checkpoints of Llama-style models expect repeat_interleave's order (head h reads group h // (h/g))."""
    results = verdicts(built(um.GQAPairing, keys=how, values=how))
    assert all(c.status != "fail" for c in results.values()), results
    assert results["matches-reference"].status == "pass"
    assert results["matches-reference"].evidence.endswith(TILED_NOTE) == (how == "repeat"), results


@pytest.mark.parametrize("kv_heads", [1, 8], ids=["multi-query", "multi-head"])
def test_repeat_in_a_layout_where_it_equals_repeat_interleave_passes_without_a_note(kv_heads):
    """One K/V group (multi-query), or one per query head: .repeat and repeat_interleave give every head the same K/V
    group, so nothing a checkpoint expects differs."""
    check = verdicts(built(um.GQAPairing, n_kv_heads=kv_heads, keys="repeat", values="repeat"),
                     rules=["matches-reference"])["matches-reference"]
    assert check.status == "pass" and "repeat_interleave" not in check.evidence, check


@pytest.mark.slow  # imports transformers
def test_llama_checkpoints_give_query_head_h_the_group_of_repeat_interleave_not_of_repeat():
    """What the note says, against transformers' own LlamaAttention (eager, rotary at angle 0) with the same weights:
    K and V repeated with repeat_interleave give its output, with .repeat another one."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    config = LlamaConfig(hidden_size=16, num_attention_heads=8, num_key_value_heads=2, head_dim=2,
                         max_position_embeddings=64, attention_bias=False)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    llama = LlamaAttention(config, layer_idx=0).eval()
    x = torch.randn(1, 6, 16)
    no_rotation = (torch.ones(1, 6, 2), torch.zeros(1, 6, 2))  # (cos, sin): rotary at angle 0
    mask = torch.full((6, 6), float("-inf")).triu(1)[None, None]  # (1, 1, n, n): the future hidden
    outputs = {}
    with torch.no_grad():
        expected = llama(x, no_rotation, mask)[0]  # (1, n, 16)
        for how in ("interleave", "repeat"):
            module = um.GQAPairing(16, 8, 2, keys=how, values=how).eval()
            for mine, theirs in ((module.wq, llama.q_proj), (module.wk, llama.k_proj), (module.wv, llama.v_proj),
                                 (module.wo, llama.o_proj)):
                mine.weight.copy_(theirs.weight)
            outputs[how] = module(x)  # (1, n, 16)
    assert torch.allclose(outputs["interleave"], expected, atol=1e-5)
    assert (outputs["repeat"] - expected).abs().max() > 0.01


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
