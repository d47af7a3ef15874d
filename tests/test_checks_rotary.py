"""The rotary-placement rule: rotary on the wrong tensors — V rotated, q or k alone, q and k rotated over the full
width before the split into heads — is a correct attention computation that every other rule passes, so this rule
names it; rotary on q and k passes in every layout people write (Llama's rotate_half, Meta's view_as_complex,
GPT-NeoX's partial rotary, DeepSeek's decoupled rotary key, Llama 3's scaled angles, a sliding window, a KV cache),
and a module that is not rotary skips it."""

import pytest
import torch
from helpers import alibi
from helpers import rotary_bugs as rb
from helpers import user_modules as um

from attnviz import checks, modern_attention, rotary_rule, variants
from attnviz.config import AttentionConfig
from attnviz.labs.pitfalls import modern

RULE = "rotary-placement"
ON = "on one token repeated at 8 positions"
PASSES = (f"{ON} every score depends only on the distance i − j and no value is turned by its position: rotary on "
          "the queries and keys only")
VALUES = ("values are rotated by position: rotary applied to V (RoPE rotates queries and keys only) — ")
TURNED = ("the value at position 1 is the value at position 0 turned (each rotation pair keeps its length, another "
          "direction); rotate q and k only")
QUERIES = ("scores depend on the query's position, not the distance i − j: rotary applied to the queries only (the "
           f"keys are the same at every position) — {ON}, ")


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval())}


def built(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


# --------------------------------------------------------------------------- the bugs, each named by this rule alone

@pytest.mark.parametrize(("module", "words"), [
    (lambda: built(rb.LlamaRotary, bug="values-too"), VALUES + f"{ON}, head 0: " + TURNED),
    (lambda: built(rb.LlamaRotary, bug="values-instead"), VALUES + f"{ON}, head 0: " + TURNED),
    (lambda: built(rb.LlamaRotary, bug="keys-only"),
     "scores depend on the key's position, not the distance i − j: rotary applied to the keys only (the queries are "
     f"the same at every position) — {ON}, head 1: query 5 · key 5 = -2.104 but query 0 · key 0 = -0.3292, the same "
     "distance 0 apart; rotate the queries too, by their own positions"),
    (lambda: built(rb.LlamaRotary, bug="keys-other-base"),
     "scores depend on the positions, not only on the distance i − j: the queries and the keys are turned by angles "
     f"whose difference is not a function of i − j — {ON}, head 3: query 7 · key 7 = 0.9018 but query 0 · key 0 = "
     "1.114, the same distance 0 apart; rotate both with the same cos and sin, each at its token's position"),
    (lambda: built(rb.MetaRotary, bug="xv-for-xk"),
     QUERIES + "head 3: query 5 · key 3 = -1.102 but query 2 · key 0 = 2.669, the same distance 2 apart; rotate the "
     "keys too, by their own positions; " + VALUES + "head 0: " + TURNED),
    (lambda: built(rb.NeoXRotary, bug="queries-only"),
     QUERIES + "head 3: query 4 · key 3 = -1.677 but query 1 · key 0 = -0.4543, the same distance 1 apart; rotate the "
     "keys too, by their own positions"),
    (lambda: built(modern.RopeOnQueriesOnly, 32, 32, 16, 0.0, 4), QUERIES + "head 1: query 5 · key 4 = "),
    (lambda: built(modern.RopeOnValues, 32, 32, 16, 0.0, 4), VALUES + f"{ON}, head 0: " + TURNED),
    (lambda: built(rb.RotaryBeforeSplit),
     "scores depend on the positions, not only on the distance i − j: the rotation does not act within each head — "
     "the queries and keys, their heads side by side, are the token's vector turned by its position over the full "
     "width, in pairs that cross heads (rotary applied to the whole d_model-wide q and k, its cos and sin built for "
     f"d_model, before the split into heads) — {ON}, head 0: the scores at distance 1 run from -0.8372 to -0.2482 "
     "along the diagonal (query 4 · key 3 = -0.8372, query 1 · key 0 = -0.3174); split q and k into heads first, "
     "then rotate each head with cos and sin built for head_dim"),
], ids=["llama-values-too", "llama-values-instead", "llama-keys-only", "llama-keys-other-base", "meta-xv-for-xk",
        "neox-partial-queries-only", "pitfall-lab-queries-only", "pitfall-lab-values", "rotary-before-the-split"])
def test_rotary_on_the_wrong_tensors_fails_this_rule_and_no_other(module, words):
    results = verdicts(module())
    assert {rule for rule, check in results.items() if check.status == "fail"} == {RULE}, results
    assert results[RULE].evidence.startswith(words), results[RULE].evidence


class BroadcastRotatesValues(um.BroadcastGQA):
    """BroadcastGQA (2 K/V heads broadcast over 4 query heads) with q, k and v rotated: its Trace keeps the 2 K/V
    heads."""

    def __init__(self):
        super().__init__(d_model=32)
        self.cos, self.sin = um.rope_angles(self.head_dim, 64)

    def forward(self, x):
        b, n, _ = x.shape
        group = self.n_heads // self.n_kv_heads
        q = self.wq(x).view(b, n, self.n_kv_heads, group, self.head_dim).permute(0, 2, 3, 1, 4)  # (b, g, s, n, hd)
        k = self.wk(x).view(b, n, self.n_kv_heads, 1, self.head_dim).permute(0, 2, 3, 1, 4)  # (b, g, 1, n, hd)
        v = self.wv(x).view(b, n, self.n_kv_heads, 1, self.head_dim).permute(0, 2, 3, 1, 4)  # (b, g, 1, n, hd)
        q, k, v = (um.rotate(t, self.cos, self.sin) for t in (q, k, v))  # the bug: v rotated too
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5  # (b, g, s, n, n)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)  # (b, g, s, n, n)
        return (torch.softmax(scores, dim=-1) @ v).permute(0, 3, 1, 2, 4).reshape(b, n, -1)  # (b, n, h·hd)


def test_turned_values_of_fewer_kv_heads_name_a_kv_head():
    check = verdicts(built(BroadcastRotatesValues))[RULE]
    assert check == checks.Check(RULE, "fail", VALUES + f"{ON}, K/V head 0: " + TURNED)


# --------------------------------------------------------------------------- rotary on q and k, in every layout

@pytest.mark.parametrize("module", [
    lambda: built(rb.LlamaRotary), lambda: built(rb.MetaRotary), lambda: built(rb.MetaRotary, bug="keys-one-ahead"),
    lambda: built(rb.NeoXRotary), lambda: built(rb.NeoXRotary, rotary_pct=0.25), lambda: built(rb.RotaryValuePositions),
    lambda: built(um.LearnerRotaryGQA, 32, 32, 16, 0.0, 4),
    lambda: built(um.LearnerRotaryGQA, 32, 32, 16, 0.0, 4, num_kv_groups=1, rope_base=500_000.0),
    lambda: built(um.LearnerGQAWithSDPA, 32, 32, 16, 0.0, 4, rotary=True),
    lambda: built(um.LearnerCachedGQA, 32, 32, 16, 0.0, 4, rotary=True),
    lambda: built(um.LearnerCachedRopeMLA, 32, 32, 16, 0.0, 4),
    lambda: built(modern.RotaryAttention, 32, 32, 16, 0.0, 4),
    lambda: built(modern_attention.GroupedQueryAttention, 32, 32, 0.0, 4, 2, rope_base=500_000),
    lambda: built(modern_attention.MultiHeadAttentionWithSWA, 32, 32, 0.0, 4, sliding_window_size=3, rope_base=10_000),
], ids=["llama", "meta-complex", "meta-keys-one-ahead", "neox-partial-half", "neox-partial-quarter",
        "rotary-and-value-positions", "learner-gqa", "learner-mqa-llama3-base", "learner-gqa-sdpa",
        "learner-cached-gqa", "learner-cached-rope-mla", "pitfall-lab-rotary", "attnviz-gqa", "attnviz-swa"])
def test_rotary_on_the_queries_and_keys_passes(module):
    results = verdicts(module())
    assert [check for check in results.values() if check.status == "fail"] == []
    assert results[RULE] == checks.Check(RULE, "pass", PASSES)


@pytest.mark.parametrize("variant", ["mha", "gqa", "mqa", "swa"])
def test_the_books_classes_with_rotary_positions_pass(variant):
    torch.manual_seed(123)
    config = AttentionConfig(variant=variant, d_in=16, d_out=16, num_heads=4, context_length=16, positions="rotary")
    assert verdicts(variants.get(variant).build(config))[RULE].evidence == PASSES


def hf_layer(family: str, **settings):
    """transformers' own attention layer of ``family`` (eager, tiny), in the wrapper a user writes to call it as
    forward(x): the rotary angles its model computes and the additive causal mask."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek
    from transformers.models.llama import modeling_llama as llama

    config_class, attention, rotary = {
        "llama": (transformers.LlamaConfig, llama.LlamaAttention, llama.LlamaRotaryEmbedding),
        "deepseek_v3": (transformers.DeepseekV3Config, deepseek.DeepseekV3Attention,
                        deepseek.DeepseekV3RotaryEmbedding),
    }[family]
    config = config_class(hidden_size=32, num_attention_heads=4, max_position_embeddings=64, **settings)
    config._attn_implementation = "eager"

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.rotary_emb = attention(config, layer_idx=0), rotary(config)

        def forward(self, hidden_states):
            n = hidden_states.shape[1]
            cos, sin = self.rotary_emb(hidden_states, torch.arange(n)[None])  # (1, n, rotary dims) each
            mask = torch.zeros(n, n).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (n, n)
            return self.self_attn(hidden_states, (cos, sin), mask[None, None])[0]  # (b, n, 32)

    torch.manual_seed(0)
    return Layer().eval()


LLAMA3 = {"rope_type": "llama3", "rope_theta": 500_000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
DEEPSEEK = {"num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 8, "qk_rope_head_dim": 4,
            "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
            "intermediate_size": 64, "moe_intermediate_size": 16}


@pytest.mark.parametrize("module", [
    lambda: hf_layer("llama", num_key_value_heads=2, head_dim=8),
    lambda: hf_layer("llama", num_key_value_heads=2, head_dim=8, rope_parameters=LLAMA3),
    lambda: hf_layer("deepseek_v3", rope_interleave=True, **DEEPSEEK),
    lambda: hf_layer("deepseek_v3", rope_interleave=False, **DEEPSEEK),
], ids=["llama", "llama-3-scaled-rope", "deepseek-v3-mla-interleaved", "deepseek-v3-mla-halves"])
def test_transformers_own_rotary_layers_pass(module):
    """Llama with grouped K/V heads, with Llama 3's scaled angles; DeepSeek-V3's latent attention, whose heads carry a
    rotary part after the rest, one rotary key shared by every head (interleaved pairs, or rotate_half's)."""
    results = verdicts(module())
    assert [check for check in results.values() if check.status == "fail"] == []
    assert results[RULE] == checks.Check(RULE, "pass", PASSES)


# --------------------------------------------------------------------------- not rotary: a skip that says why

@pytest.mark.parametrize("module", [
    lambda: built(um.MyMultiHeadAttention, 16, 32, 16, 0.0, 4), lambda: built(alibi.ALiBiAttention),
    lambda: built(um.BloomAttention),
], ids=["book-mha", "alibi", "bloom-alibi"])
def test_a_module_without_rotary_names_skips(module):
    assert verdicts(module())[RULE] == checks.Check(RULE, "skip", "not rotary (no cos, sin, freqs, rope, rotary or "
                                                                  "rotate in its names)")


@pytest.mark.parametrize("module", [
    lambda: built(um.LearnerGQA, 32, 32, 16, 0.0, 4),
    lambda: built(modern_attention.GroupedQueryAttention, 32, 32, 0.0, 4, 2),
], ids=["learner-gqa-rotary-off", "attnviz-gqa-rope-base-none"])
def test_a_module_with_rotary_names_that_turns_nothing_skips(module):
    """LearnerGQA holds cos/sin buffers and attnviz's GroupedQueryAttention calls rope, with rotary switched off."""
    assert verdicts(module())[RULE] == checks.Check(
        RULE, "skip", f"not rotary: {ON} every score QKᵀ and every value is the same — nothing turns the queries, "
                      "keys or values by their position")


def test_positions_that_enter_the_scores_by_no_rotation_are_not_this_rules_to_name():
    """Rotary on q and k of x plus a learned position: neither q nor k is one vector turned by its position."""

    class LearnedThenRotary(rb.LlamaRotary):
        def __init__(self):
            super().__init__()
            self.positions = torch.nn.Parameter(torch.randn(64, 32))

        def forward(self, x):
            return super().forward(x + self.positions[:x.shape[1]])  # (b, n, 32)

    assert verdicts(built(LearnedThenRotary))[RULE] == checks.Check(
        RULE, "skip", f"not checked: {ON} the scores move along a diagonal, but not as rotary moves them: Q or K "
                      "changes with position by more than a turn (a position embedding inside the module?)")


def test_few_tokens_are_checked_on_four_positions_and_many_on_at_most_64():
    module = built(rb.LlamaRotary, bug="values-too")
    assert checks.check_module(module, torch.randn(1, 2, 32), rules=[RULE])[0].evidence.startswith(
        VALUES + "on one token repeated at 4 positions, head 0: ")
    assert rotary_rule.rotary_tokens(module, torch.randn(1, 100, 32)) == 64
    assert rotary_rule.rotary_tokens(built(um.LearnerRotaryGQA, 32, 32, 3, 0.0, 4), torch.randn(1, 2, 32)) == 3
