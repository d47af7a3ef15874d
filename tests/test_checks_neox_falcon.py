"""transformers' own GPT-NeoX and Falcon attention layers (eager, tiny configs) in the wrapper a user writes to call
them as forward(x) — the rotary tables or ALiBi and the additive causal mask their model builds, from the
DynamicCache's length — traced and checked; and what the bare layers say, which need those from their model."""

from pathlib import Path

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing

transformers = pytest.importorskip("transformers")


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module)}


def causal_mask(T: int, past: int) -> torch.Tensor:
    """(1, 1, T, past + T): 0 where query past + i may see key j, −∞ in the future."""
    future = torch.arange(past + T)[None, :] > torch.arange(past, past + T)[:, None]  # (T, past + T)
    return torch.zeros(T, past + T).masked_fill(future, float("-inf"))[None, None]


def neox_config():
    config = transformers.GPTNeoXConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                        max_position_embeddings=64, rotary_pct=0.5)
    config._attn_implementation = "eager"
    return config


def neox_layer():
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention, GPTNeoXRotaryEmbedding

    class NeoXLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = GPTNeoXAttention(neox_config(), layer_idx=0)
            self.rotary_emb = GPTNeoXRotaryEmbedding(neox_config())

        def forward(self, hidden_states, past_key_values=None):
            T = hidden_states.shape[1]
            past = past_key_values.get_seq_length() if past_key_values is not None else 0
            cos, sin = self.rotary_emb(hidden_states, torch.arange(past, past + T)[None])  # (1, T, rotary dims)
            return self.attention(hidden_states, causal_mask(T, past), layer_past=past_key_values,
                                  position_embeddings=(cos, sin))[0]  # (b, T, 32)

    torch.manual_seed(0)
    return NeoXLayer().eval()


def test_gpt_neox_attention_passes_every_rule_and_its_cache_says_what_it_holds():
    """One fused query_key_value viewed (b, n, h, 3·hd) and transposed, partial rotary (half of each head),
    matmul · scaling, the mask added, softmax, matmul, the heads put back with reshape for the dense."""
    results = verdicts(neox_layer())
    assert {rule for rule, check in results.items() if check.status != "pass"} == set(), results
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √8 ≈ 2.83"
    assert results["matches-reference"].evidence.startswith("the concatenated heads equal"), results
    assert results["kv-cache"].evidence.endswith(
        "after 8 tokens the cache holds 8 tokens of 64 elements (256 bytes) each: past_key_values.layers[0].keys "
        "(1, 4, 8, 8), past_key_values.layers[0].values (1, 4, 8, 8)"), results["kv-cache"]
    trace = tracing.trace_module(neox_layer(), torch.randn(1, 8, 32))
    assert trace.steps["weights"].shape == (1, 4, 8, 8) and trace.steps["queries"].shape == (1, 4, 8, 8)


def test_the_bare_gpt_neox_attention_says_it_needs_its_mask_and_its_rotary_tables():
    """It takes attention_mask, which it needs, and position_embeddings, None by default, which it unpacks: the
    message names both and how to wrap the module, not only the mask."""
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention

    torch.manual_seed(0)
    with pytest.raises(tracing.TraceError) as caught:
        checks.check_module(GPTNeoXAttention(neox_config(), layer_idx=0).eval())
    assert str(caught.value) == (
        "GPTNeoXAttention.forward needs attention_mask as well as x, and position_embeddings if it rotates q and k "
        "(the rotary cos and sin its model computes; None by default): attnviz calls forward(x) alone: wrap your "
        "module so forward(x) builds the attention_mask / position_embeddings and calls yours (docs/your-module.md "
        "shows a wrapper)")


def test_a_forward_that_raises_with_its_rotary_tables_left_none_says_they_were_not_given():
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(um.RotaryFromCaller(), torch.randn(1, 8, 16))
    line = next(number for number, text in enumerate(Path(um.__file__).read_text().splitlines(), start=1)
                if text.strip().startswith("cos, sin = position_embeddings"))
    assert str(caught.value) == (
        f"the forward raised TypeError (user_modules.py, line {line}): cannot unpack non-iterable NoneType object — "
        "position_embeddings was not given (None), which a rotary layer needs: wrap your module so forward(x) computes "
        "the rotary cos and sin and passes them (docs/your-module.md shows a wrapper)")


def falcon_layer(**settings):
    """FalconAttention with ``settings`` (FalconConfig's: multi_query, alibi, new_decoder_architecture, num_kv_heads)
    in its wrapper: ALiBi's tensor for an alibi config, else the rotary tables; the wrapper declares no sizes."""
    from transformers.models.falcon.modeling_falcon import FalconAttention, FalconRotaryEmbedding, build_alibi_tensor

    config = transformers.FalconConfig(hidden_size=32, num_attention_heads=4, max_position_embeddings=64, **settings)
    config._attn_implementation = "eager"

    class FalconLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attention = FalconAttention(config, layer_idx=0)
            self.rotary_emb = FalconRotaryEmbedding(config)

        def forward(self, hidden_states, past_key_values=None):
            b, T, _ = hidden_states.shape
            past = past_key_values.get_seq_length() if past_key_values is not None else 0
            mask = causal_mask(T, past)  # (1, 1, T, past + T)
            if config.alibi:
                alibi = build_alibi_tensor(torch.ones(b, past + T), config.num_attention_heads, hidden_states.dtype)
                return self.self_attention(hidden_states, alibi, mask, layer_past=past_key_values)[0]  # (b, T, 32)
            cos, sin = self.rotary_emb(hidden_states, torch.arange(past, past + T)[None])  # (1, T, hd) each
            return self.self_attention(hidden_states, None, mask, layer_past=past_key_values,
                                       position_embeddings=(cos, sin))[0]  # (b, T, 32)

    torch.manual_seed(0)
    return FalconLayer().eval()


HOLDS = "after 8 tokens the cache holds 8 tokens of {} elements ({} bytes) each: past_key_values.layers[0].keys " \
        "(1, {heads}, 8, 8), past_key_values.layers[0].values (1, {heads}, 8, 8)"
ALIBI = (" — with the ALiBi bias the module adds to the scores (a slope per head times the key's position, m·j: the "
         "slopes are its own, not checked)")


@pytest.mark.parametrize(("settings", "heads", "alibi"), [
    ({}, 1, False),
    ({"multi_query": False}, 4, False),
    ({"alibi": True}, 1, True),
    ({"alibi": True, "multi_query": False}, 4, True),
], ids=["multi-query-rotary", "multi-head-rotary", "multi-query-alibi", "multi-head-alibi"])
def test_falcon_attention_passes_every_rule(settings, heads, alibi):
    """Falcon-7B's multi-query layout (one K/V head broadcast in the matmul), or every head's; rotary, or ALiBi added
    to the scores before the scale; the context's heads put back with view, permute and reshape for FalconLinear
    (input @ weight.T).  matches-reference compares the concatenated heads (FalconLinear is no nn.Linear call) and
    passes ALiBi's bias; only rotary-placement does not pass, with ALiBi: not rotary."""
    results = verdicts(falcon_layer(**settings))
    assert {rule for rule, check in results.items() if check.status != "pass"} == (
        {"rotary-placement"} if alibi else set()), results
    assert results["rotary-placement"].evidence.startswith("not rotary: " if alibi else "on one token repeated at 8 "
                                                           "positions every score depends only on the distance i − j")
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √8 ≈ 2.83"
    matches = results["matches-reference"].evidence
    assert matches.startswith("the concatenated heads equal") and matches.endswith(ALIBI) == alibi, matches
    assert results["kv-cache"].evidence.endswith(HOLDS.format(16 * heads, 64 * heads, heads=heads)), results["kv-cache"]
    trace = tracing.trace_module(falcon_layer(**settings), torch.randn(1, 8, 32))
    assert trace.steps["weights"].shape == (1, 4, 8, 8) and trace.steps["keys"].shape == (1, heads, 8, 8)


def test_falcons_grouped_query_layout_caches_every_query_heads_keys():
    """Falcon-40B's new_decoder_architecture: 2 K/V heads declared (num_kv_heads), broadcast to the 4 query heads
    before the cache is updated, so the cache holds 4 heads.  kv-cache names the waste, with the sizes the
    FalconAttention the wrapper holds declares (the wrapper declares none)."""
    results = verdicts(falcon_layer(new_decoder_architecture=True, num_kv_heads=2))
    assert {rule for rule, check in results.items() if check.status != "pass"} == {"kv-cache"}, results
    check = results["kv-cache"]
    assert check.evidence.startswith("two sequences: a prefill of 4 tokens, then 2 tokens one by one and the last 2 "
                                     "in one forward (a chunk after the cache), each given the DynamicCache the "
                                     "forward before filled (past_key_values), give the uncached outputs"), check
    assert check.evidence.endswith(
        "but past_key_values.layers[0].keys and past_key_values.layers[0].values hold num_heads = 4 heads where "
        "num_kv_groups = 2 K/V heads are declared (64 elements per token, where 2 K/V heads need 32) — cache the keys "
        "and values before repeat_interleave, and repeat them after reading the cache"), check


def test_the_bare_falcon_attention_says_what_its_model_hands_it():
    from transformers.models.falcon.modeling_falcon import FalconAttention

    config = transformers.FalconConfig(hidden_size=32, num_attention_heads=4)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    with pytest.raises(tracing.TraceError) as caught:
        checks.check_module(FalconAttention(config, layer_idx=0).eval())
    assert str(caught.value).startswith(
        "FalconAttention.forward needs alibi and attention_mask as well as x, and position_embeddings if it rotates q "
        "and k (the rotary cos and sin its model computes; None by default): attnviz calls forward(x) alone"), caught


def test_a_bias_that_is_neither_a_mask_nor_alibi_is_named_when_matches_reference_fails():
    """A learned bias per head and distance (T5's, Swin's) is added to the scores: the reference has none, and the
    failure says so."""
    torch.manual_seed(0)
    with torch.no_grad():
        module = um.RelativeBias().eval()
        module.rel_bias.weight.normal_()
    check = verdicts(module)["matches-reference"]
    assert check.status == "fail" and check.evidence.startswith("the concatenated heads ≠"), check
    assert "— the module adds to the scores something that is neither a mask (−∞, or a push down by at least 10³ or "\
           "one per key, whichever is more) nor ALiBi's slope × key position (the cells it shows move by up to " \
           in check.evidence, check
    assert check.evidence.endswith("against each other in a row): the reference adds nothing"), check
