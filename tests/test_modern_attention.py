"""The bonus material's attention (GQA, MQA, MLA, SWA, rotary) against formulas written here independently.

The expected parameter names and shapes are the book's bonus classes' (ch04/04_gqa, 05_mla, 06_swa; RoPE from
llama3.py), written out by hand; the reference forward is a per-head loop in float64 NumPy, with the rotation
written pair by pair — none of it calls attnviz's code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attnviz import attention, pipeline, variants
from attnviz.config import AttentionConfig, ConfigError
from attnviz.modern_attention import GroupedQueryAttention, MultiHeadAttentionWithSWA, MultiHeadLatentAttention
from attnviz.producers.book import build_module

TEXT = "Your journey starts with one step and then another one"


# --------------------------------------------------------------------------- independent reference

def rotate_pairs(vectors: np.ndarray, base: float) -> np.ndarray:
    """Split-halves RoPE, one pair at a time: (x_d, x_{d+hd/2}) at position p turns by p · base^(−2d/hd)."""
    n, head_dim = vectors.shape
    half = head_dim // 2
    out = vectors.copy()
    for p in range(n):
        for d in range(half):
            angle = p * base ** (-2.0 * d / head_dim)
            first, second = vectors[p, d], vectors[p, d + half]
            out[p, d] = first * np.cos(angle) - second * np.sin(angle)
            out[p, d + half] = second * np.cos(angle) + first * np.sin(angle)
    return out


def reference(x, weights: dict, num_heads: int, num_kv: int, hidden, *, rope_base=None, latent=False):
    """(attention weights (h, n, n), output (n, d_out)) for one sequence ``x`` (n, d_in), in float64.

    ``hidden(i, j)`` says whether query i must not see key j.  Head h uses K/V head h // (num_heads // num_kv)."""
    w = {name: value.detach().double().numpy() for name, value in weights.items()}
    x = x.detach().double().numpy()

    def linear(inputs, name):
        out = inputs @ w[f"{name}.weight"].T
        return out + w[f"{name}.bias"] if f"{name}.bias" in w else out

    queries = linear(x, "W_query")
    if latent:
        c_kv = linear(x, "W_DKV")
        keys, values = linear(c_kv, "W_UK"), linear(c_kv, "W_UV")
    else:
        keys, values = linear(x, "W_key"), linear(x, "W_value")
    n, d_out = queries.shape
    head_dim = d_out // num_heads
    group_size = num_heads // num_kv
    all_weights, contexts = [], []
    for h in range(num_heads):
        g = h // group_size
        q = queries[:, h * head_dim:(h + 1) * head_dim]
        k = keys[:, g * head_dim:(g + 1) * head_dim]
        v = values[:, g * head_dim:(g + 1) * head_dim]
        if rope_base is not None:
            q, k = rotate_pairs(q, rope_base), rotate_pairs(k, rope_base)
        scores = q @ k.T / np.sqrt(head_dim)
        for i in range(n):
            for j in range(n):
                if hidden(i, j):
                    scores[i, j] = -np.inf
        exp = np.exp(scores - scores.max(axis=1, keepdims=True))
        attn = exp / exp.sum(axis=1, keepdims=True)
        all_weights.append(attn)
        contexts.append(attn @ v)
    output = linear(np.concatenate(contexts, axis=1), "out_proj")
    return np.stack(all_weights), output


def causal(i, j):
    return j > i


def window(size):
    return lambda i, j: not 0 <= i - j < size


def state(module):
    return dict(module.named_parameters())


def inputs(n=7, d_in=24, seed=0):
    return torch.randn(1, n, d_in, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- names, shapes, bias, order

def expected_gqa(d_in, d_out, num_heads, num_kv, bias):
    head_dim = d_out // num_heads
    shapes = {"W_key.weight": (num_kv * head_dim, d_in), "W_value.weight": (num_kv * head_dim, d_in),
              "W_query.weight": (d_out, d_in), "out_proj.weight": (d_out, d_out)}  # no out_proj bias
    if bias:
        shapes.update({"W_key.bias": (num_kv * head_dim,), "W_value.bias": (num_kv * head_dim,),
                       "W_query.bias": (d_out,)})
    return shapes


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("num_kv", [1, 2, 6])
def test_gqa_parameters_are_the_books(num_kv, bias):
    module = GroupedQueryAttention(24, 48, 0.0, 6, num_kv, qkv_bias=bias)
    assert {name: tuple(p.shape) for name, p in module.named_parameters()} == expected_gqa(24, 48, 6, num_kv, bias)
    assert module.num_kv_groups == num_kv and module.group_size == 6 // num_kv and module.head_dim == 8


def test_mla_parameters_are_the_books_with_its_default_latent():
    module = MultiHeadLatentAttention(24, 48, 0.0, 6)
    assert module.latent_dim == 16  # max(16, 48 // 8)
    assert MultiHeadLatentAttention(768, 768, 0.0, 12).latent_dim == 96
    assert {name: tuple(p.shape) for name, p in module.named_parameters()} == {
        "W_query.weight": (48, 24), "W_DKV.weight": (16, 24), "W_UK.weight": (48, 16), "W_UV.weight": (48, 16),
        "out_proj.weight": (48, 48), "out_proj.bias": (48,)}


def test_swa_parameters_are_mha_names_and_shapes():
    module = MultiHeadAttentionWithSWA(24, 48, 0.0, 6, sliding_window_size=3)
    assert {name: tuple(p.shape) for name, p in module.named_parameters()} == {
        "W_query.weight": (48, 24), "W_key.weight": (48, 24), "W_value.weight": (48, 24),
        "out_proj.weight": (48, 48), "out_proj.bias": (48,)}


def test_seeded_weights_follow_the_books_creation_order():
    torch.manual_seed(123)
    module = GroupedQueryAttention(24, 48, 0.0, 6, 2)
    torch.manual_seed(123)
    expected = [nn.Linear(24, 16, bias=False), nn.Linear(24, 16, bias=False), nn.Linear(24, 48, bias=False),
                nn.Linear(48, 48, bias=False)]  # W_key, W_value, W_query, out_proj
    for got, want in zip((module.W_key, module.W_value, module.W_query, module.out_proj), expected):
        assert torch.equal(got.weight, want.weight)
    torch.manual_seed(7)
    mla = MultiHeadLatentAttention(24, 48, 0.0, 6, latent_dim=12)
    torch.manual_seed(7)
    order = [nn.Linear(24, 48, bias=False), nn.Linear(24, 12, bias=False), nn.Linear(12, 48, bias=False),
             nn.Linear(12, 48, bias=False), nn.Linear(48, 48)]
    for got, want in zip((mla.W_query, mla.W_DKV, mla.W_UK, mla.W_UV, mla.out_proj), order):
        assert torch.equal(got.weight, want.weight)


# --------------------------------------------------------------------------- outputs on the same weights

CASES = {
    "gqa": (lambda: GroupedQueryAttention(24, 48, 0.0, 6, 2, qkv_bias=True), 6, 2, causal, {}),
    "mqa": (lambda: GroupedQueryAttention(24, 48, 0.0, 6, 1), 6, 1, causal, {}),
    "mla": (lambda: MultiHeadLatentAttention(24, 48, 0.0, 6, latent_dim=10), 6, 6, causal, {"latent": True}),
    "swa": (lambda: MultiHeadAttentionWithSWA(24, 48, 0.0, 6, sliding_window_size=3), 6, 6, window(3), {}),
    "gqa_rotary": (lambda: GroupedQueryAttention(24, 48, 0.0, 6, 3, rope_base=10_000), 6, 3, causal,
                   {"rope_base": 10_000}),
    "swa_rotary": (lambda: MultiHeadAttentionWithSWA(24, 48, 0.0, 6, sliding_window_size=2, rope_base=500_000), 6, 6,
                   window(2), {"rope_base": 500_000}),
    "mha_rotary": (lambda: attention.MultiHeadAttention(24, 48, 16, 0.0, 6, rope_base=10_000), 6, 6, causal,
                   {"rope_base": 10_000}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_output_and_weights_equal_the_reference(case):
    make, num_heads, num_kv, hidden, extra = CASES[case]
    torch.manual_seed(1)
    module = make().eval()
    x = inputs()
    recorder = attention.Recorder()
    with torch.no_grad():
        output = module(x, recorder)
    ref_weights, ref_output = reference(x[0], state(module), num_heads, num_kv, hidden, **extra)
    assert np.abs(output[0].double().numpy() - ref_output).max() <= 1e-5
    assert np.abs(recorder.steps["weights"][0].double().numpy() - ref_weights).max() <= 1e-5


def test_the_reference_can_fail():
    """Pairing heads with the wrong group (repeat instead of repeat_interleave) changes the output."""
    torch.manual_seed(1)
    module = GroupedQueryAttention(24, 48, 0.0, 6, 2).eval()
    x = inputs()
    _, ref_output = reference(x[0], state(module), 6, 2, causal)
    module.group_size, module.num_kv_groups = 3, 2
    original = torch.Tensor.repeat_interleave
    try:
        torch.Tensor.repeat_interleave = lambda self, repeats, dim: self.repeat(1, repeats, 1, 1)  # [K1, K2, K1, K2]
        with torch.no_grad():
            wrong = module(x)
    finally:
        torch.Tensor.repeat_interleave = original
    assert np.abs(wrong[0].double().numpy() - ref_output).max() > 1e-3


def test_state_dicts_move_between_gqa_and_llama3_style_names():
    """llama3.py's GroupedQueryAttention has the same four bias-free Linear layers: a state dict loads strictly."""
    torch.manual_seed(3)
    ours = GroupedQueryAttention(32, 32, 0.0, 4, 2, rope_base=500_000)
    llama_like = nn.Module()
    shapes = {"W_key": (16, 32), "W_value": (16, 32), "W_query": (32, 32), "out_proj": (32, 32)}
    for name, (out_f, in_f) in shapes.items():
        setattr(llama_like, name, nn.Linear(in_f, out_f, bias=False))
    llama_like.load_state_dict(ours.state_dict(), strict=True)
    ours.load_state_dict(llama_like.state_dict(), strict=True)


# --------------------------------------------------------------------------- the maps the app shows

APP_CONFIGS = {
    "gqa": AttentionConfig(variant="gqa", d_in=64, d_out=64, num_heads=8, num_kv_groups=2),
    "mqa": AttentionConfig(variant="mqa", d_in=64, d_out=64, num_heads=8),
    "mla": AttentionConfig(variant="mla", d_in=64, d_out=64, num_heads=8, latent_dim=12),
    "swa": AttentionConfig(variant="swa", d_in=64, d_out=64, num_heads=8, sliding_window_size=3),
    "gqa_rotary": AttentionConfig(variant="gqa", d_in=64, d_out=64, num_heads=8, num_kv_groups=4,
                                  positions="rotary", rope_base=500_000),
    "mha_rotary": AttentionConfig(variant="mha", d_in=64, d_out=64, num_heads=8, positions="rotary"),
}


@pytest.mark.parametrize("name", list(APP_CONFIGS))
def test_the_apps_maps_are_softmax_on_its_own_input(name):
    config = APP_CONFIGS[name]
    trace = pipeline.run(TEXT, config)
    torch.manual_seed(config.seed)
    module = build_module(config)
    x = torch.from_numpy(np.array(trace.embeddings["input"]))
    hidden = window(config.sliding_window_size) if config.sliding_window_size else causal
    num_kv = {"gqa": config.num_kv_groups, "mqa": 1}.get(config.variant, config.num_heads)
    ref_weights, ref_output = reference(x, state(module), config.num_heads, num_kv, hidden,
                                        rope_base=config.rope_base if config.rotary else None,
                                        latent=config.variant == "mla")
    assert np.abs(trace.steps["weights"][0] - ref_weights).max() <= 1e-5
    assert np.abs(trace.output[0] - ref_output).max() <= 1e-4  # d_out sums of float32 products
    assert trace.config.kv_groups == num_kv


def test_rotary_runs_embed_without_learned_positions():
    rotary = pipeline.run(TEXT, APP_CONFIGS["mha_rotary"])
    learned = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=64, d_out=64, num_heads=8))
    assert not rotary.embeddings["position"].any()
    assert np.array_equal(rotary.embeddings["input"], rotary.embeddings["token"])
    assert np.array_equal(rotary.embeddings["token"], learned.embeddings["token"])  # the same seeded table
    assert np.abs(learned.embeddings["position"]).max() > 0


@pytest.mark.parametrize("size", [1, 2, 5, 40])
def test_swa_weights_are_positive_exactly_inside_the_band(size):
    trace = pipeline.run(TEXT, AttentionConfig(variant="swa", d_in=32, d_out=32, num_heads=4, sliding_window_size=size))
    n = trace.n
    i, j = np.indices((n, n))
    band = (i - j >= 0) & (i - j < size)
    weights = trace.steps["weights"][0]  # (h, n, n)
    assert (weights[:, band] > 0).all()
    assert (weights[:, ~band] == 0).all()
    assert np.allclose(weights.sum(-1), 1, atol=1e-5)


def test_rotary_scores_depend_only_on_the_distance():
    """The same q and k vectors at (i, j) and (i + s, j + s) score the same (the reference's rotation)."""
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(1, 16)), rng.normal(size=(1, 16))
    rows = 40
    qs, ks = np.repeat(q, rows, axis=0), np.repeat(k, rows, axis=0)
    rq, rk = rotate_pairs(qs, 10_000), rotate_pairs(ks, 10_000)
    scores = rq @ rk.T
    for shift in (1, 5, 17):
        assert np.abs(scores[:-shift, :-shift] - scores[shift:, shift:]).max() < 1e-9
    assert np.abs(scores[3, 1] - scores[3, 2]) > 1e-6  # but the distance matters


# --------------------------------------------------------------------------- K/V groups and config checks

def test_head_groups_say_which_kv_head_each_head_uses():
    config = AttentionConfig(variant="gqa", num_heads=12, num_kv_groups=4)
    assert config.kv_groups == 4 and config.group_size == 3
    assert config.head_groups == (0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3)
    assert AttentionConfig(variant="mqa").head_groups == (0,) * 12
    assert AttentionConfig(variant="mha").head_groups == tuple(range(12))
    assert AttentionConfig(variant="gqa").kv_groups == 4  # the default: the divisor of 12 nearest 4
    with pytest.raises(IndexError):
        config.kv_group(12)


def test_grouped_query_attention_left_to_group_its_heads_groups_them_as_the_cost_chart_does():
    """AttentionConfig(variant="gqa", num_heads=4) runs with the K/V heads the Generate page's cost chart draws for
    GQA, 2 for 4 heads, not 4 (plain MHA): one rule (kv_cache.default_kv_heads) gives both, between MHA and MQA
    wherever the heads have a divisor between 1 and themselves, and one K/V head where they have none."""
    from attnviz import kv_cache

    for heads in range(1, 33):
        config = AttentionConfig(variant="gqa", d_in=2 * heads, d_out=2 * heads, num_heads=heads)
        chart = kv_cache.variant_settings(emb_dim=2 * heads, n_heads=heads, n_layers=1).get("GQA", {}).get("n_kv_heads")
        grouped = any(heads % d == 0 for d in range(2, heads))
        # heads that cannot be grouped: the run shares one K/V head (and says so), the chart draws no GQA line
        assert config.kv_groups == (chart if grouped else 1) and (chart is None) == (not grouped), heads
        assert (1 < config.kv_groups < heads) if grouped else config.kv_groups == 1, heads
    defaults = [kv_cache.default_kv_heads(heads) for heads in (1, 2, 4, 6, 8, 12, 16, 25, 32)]
    assert defaults == [1, 1, 2, 3, 4, 4, 4, 5, 4]
    trace = pipeline.run(TEXT, AttentionConfig(variant="gqa", d_in=16, d_out=16, num_heads=4))
    assert trace.config.num_kv_groups == 2 and trace.steps["keys"].shape == (1, trace.n, 2 * 4) and trace.notes == ()


@pytest.mark.parametrize(("heads", "said"), [
    (1, "Grouped-query attention with 1 head has no heads to group: it runs as single-head attention."),
    (2, "Grouped-query attention cannot group 2 heads (no K/V head count lies between 1 and 2): the 2 heads share 1 "
        "K/V head, as in multi-query attention; num_kv_groups=2 gives each its own, as in multi-head attention."),
    (5, "Grouped-query attention cannot group 5 heads"),
])
def test_grouped_query_attention_that_cannot_group_its_heads_says_what_runs(heads, said):
    trace = pipeline.run(TEXT, AttentionConfig(variant="gqa", d_in=10 * heads, d_out=10 * heads, num_heads=heads))
    assert trace.config.num_kv_groups == 1 and trace.steps["keys"].shape[-1] == 10  # one K/V head
    [note] = trace.notes
    assert note.startswith(said), note
    assert pipeline.run(TEXT, trace.config).notes == ()  # the config that ran: its one K/V head asked for


@pytest.mark.parametrize("overrides, words", [
    ({"variant": "gqa", "num_kv_groups": 5}, "does not divide 12 heads"),
    ({"variant": "gqa", "num_kv_groups": -1}, "between 1 and"),
    ({"variant": "swa", "sliding_window_size": 0}, "between 1 and"),
    ({"variant": "mla", "latent_dim": 800}, "wider than d_out"),
    ({"variant": "mla", "latent_dim": 100000}, "between 1 and"),
    ({"variant": "causal", "positions": "rotary"}, "no rotary positions"),
    ({"variant": "mla", "positions": "rotary"}, "no rotary positions"),
    ({"variant": "mha", "positions": "rotary", "d_in": 3, "d_out": 6, "num_heads": 2}, "even"),
    ({"variant": "mha", "positions": "absolute"}, "Unknown positions"),
    ({"variant": "mha", "positions": "rotary", "rope_base": 7}, "rope_base"),
])
def test_configs_that_cannot_work_say_why(overrides, words):
    with pytest.raises(ConfigError, match=words):
        AttentionConfig(**overrides).validate()


def test_registry_lists_the_bonus_variants_with_their_settings():
    assert set(variants.MODERN) <= set(variants.VARIANTS)
    assert variants.get("gqa").not_applicable("num_kv_groups") is None
    assert variants.get("mqa").not_applicable("num_kv_groups")
    assert variants.get("mha").not_applicable("latent_dim")
    assert variants.get("mla").not_applicable("positions")
    assert variants.get("swa").not_applicable("causal")
    assert variants.get("mha").not_applicable("rope_base") is None
    for name in ("mha", "gqa", "mqa", "swa"):
        assert variants.get(name).not_applicable("positions") is None


def test_head_labels_name_the_kv_group_for_the_heads_page():
    config = AttentionConfig(variant="gqa", num_heads=12, num_kv_groups=4)
    assert config.head_label(5) == "head 5 · K/V group 1"
    assert AttentionConfig(variant="mha").head_label(5) == "head 5"


def test_the_diagram_draws_groups_latent_and_rotation():
    from attnviz.views import diagram, steps

    gqa = pipeline.run(TEXT, APP_CONFIGS["gqa_rotary"])
    dot = diagram.shape_dot(gqa.shapes, gqa.config)
    for edge in ('"keys" -> "kv_view"', '"kv_view" -> "kv_groups"', '"kv_groups" -> "rotated_keys"',
                 '"rotated_keys" -> "kv_repeat"', '"kv_repeat" -> "scores"', '"rotated_queries" -> "scores"',
                 '"kv_repeat" -> "context"'):
        assert edge in dot
    assert '"keys" -> "view"' not in dot  # K's 4 heads are not split into the queries' 8
    assert f"(1, 4, {gqa.n}, 8)" in dot and "repeat_interleave(2, dim=1): 4 → 8 heads" in dot
    assert list(steps.stage_labels(gqa))[:2] == ["rotated_queries", "kv_repeat"]
    mla = pipeline.run(TEXT, APP_CONFIGS["mla"])
    dot = diagram.shape_dot(mla.shapes, mla.config)
    for edge in ('"input" -> "W_DKV"', '"W_DKV" -> "latent"', '"latent" -> "W_UK"', '"W_UV" -> "values"'):
        assert edge in dot
    assert f"(1, {mla.n}, 12)" in dot and "(b, n, latent_dim)" in dot
    assert list(steps.stage_labels(mla))[0] == "latent"
    swa = pipeline.run(TEXT, APP_CONFIGS["swa"])
    assert "sliding window W = 3" in diagram.shape_dot(swa.shapes, swa.config)
    assert steps.stage_labels(swa)["masked"] == "3 · window mask"


@pytest.mark.parametrize("seed", [0, 1, 123])
@pytest.mark.parametrize(("build", "window"), [
    (lambda: GroupedQueryAttention(8, 12, 0.0, 4, num_kv_groups=2), None),
    (lambda: MultiHeadLatentAttention(8, 12, 0.0, 4, latent_dim=6), None),
    (lambda: MultiHeadAttentionWithSWA(8, 12, 0.0, 4, sliding_window_size=3), 3),
])
def test_scaling_before_the_mask_gives_the_bonus_classes_weights_bitwise(build, window, seed):
    """As the Steps page says: these classes scale, then mask; the bonus listings mask, then scale inside
    torch.softmax(attn_scores / keys.shape[-1]**0.5) — −∞ ÷ √dₖ is still −∞, so the weights are the same."""
    torch.manual_seed(seed)
    module = build().eval()
    recorder = attention.Recorder()
    with torch.no_grad():
        module(torch.randn(2, 9, 8), recorder)
    offsets = torch.arange(9)[:, None] - torch.arange(9)[None, :]  # (n, n): i − j
    mask_bool = (offsets < 0) | (offsets >= (window or 10))  # (n, n): the future (and keys W or more behind)
    book = torch.softmax(recorder.steps["scores"].masked_fill(mask_bool, -torch.inf) / 3**0.5, dim=-1)  # hd = 3
    assert torch.equal(recorder.steps["weights"], book)
