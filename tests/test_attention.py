"""attnviz.attention: the book's printed tensors (Ch. 3) and the invariants every variant keeps."""

from __future__ import annotations

import pytest
import torch
from helpers.book import BOOK_EXERCISE_3_2, BOOK_V1_WEIGHTS_2, BOOK_V2_WEIGHTS
from torch import nn

from attnviz.attention import (
    MAP_STAGES,
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    Recorder,
    SelfAttention_v1,
    SelfAttention_v2,
    SimplifiedSelfAttention,
)
from attnviz.embedding import journey_inputs

ATOL = 1e-4
NEG_INF = float("-inf")


def close(actual: torch.Tensor, expected) -> bool:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    return actual.shape == expected.shape and torch.allclose(actual, expected, atol=ATOL, rtol=0)


@pytest.fixture
def inputs() -> torch.Tensor:
    return journey_inputs()  # (6, 3)


@pytest.fixture
def batch(inputs) -> torch.Tensor:
    return torch.stack((inputs, inputs))  # (2, 6, 3)


# ============================== the book's printed tensors ==============================

BOOK_SIMPLE_SCORES = [
    [0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310],
    [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865],
    [0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605],
    [0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565],
    [0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935],
    [0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450],
]
BOOK_SIMPLE_WEIGHTS = [
    [0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452],
    [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581],
    [0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565],
    [0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720],
    [0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295],
    [0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896],
]
BOOK_SIMPLE_CONTEXT = [
    [0.4421, 0.5931, 0.5790],
    [0.4419, 0.6515, 0.5683],
    [0.4431, 0.6496, 0.5671],
    [0.4304, 0.6298, 0.5510],
    [0.4671, 0.5910, 0.5266],
    [0.4177, 0.6503, 0.5645],
]
BOOK_V1_OUTPUT = [
    [0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203], [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040]
]
BOOK_V2_OUTPUT = [
    [-0.0739, 0.0713], [-0.0748, 0.0703], [-0.0749, 0.0702], [-0.0760, 0.0685], [-0.0763, 0.0679], [-0.0754, 0.0693]
]
BOOK_MASKED_SIMPLE_NORM = [
    [1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
    [0.5517, 0.4483, 0.0000, 0.0000, 0.0000, 0.0000],
    [0.3800, 0.3097, 0.3103, 0.0000, 0.0000, 0.0000],
    [0.2758, 0.2460, 0.2462, 0.2319, 0.0000, 0.0000],
    [0.2175, 0.1983, 0.1984, 0.1888, 0.1971, 0.0000],
    [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529],
]
BOOK_MASKED_SCORES = [
    [0.2899, NEG_INF, NEG_INF, NEG_INF, NEG_INF, NEG_INF],
    [0.4656, 0.1723, NEG_INF, NEG_INF, NEG_INF, NEG_INF],
    [0.4594, 0.1703, 0.1731, NEG_INF, NEG_INF, NEG_INF],
    [0.2642, 0.1024, 0.1036, 0.0186, NEG_INF, NEG_INF],
    [0.2183, 0.0874, 0.0882, 0.0177, 0.0786, NEG_INF],
    [0.3408, 0.1270, 0.1290, 0.0198, 0.1290, 0.0078],
]
BOOK_DROPOUT_ONES = [
    [2, 2, 0, 2, 2, 0],
    [0, 0, 0, 2, 0, 2],
    [2, 2, 2, 2, 0, 2],
    [0, 2, 2, 0, 0, 2],
    [0, 2, 0, 2, 0, 2],
    [0, 2, 2, 2, 2, 0],
]
BOOK_DROPOUT_WEIGHTS = [
    [2.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
    [0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
    [0.7599, 0.6194, 0.6206, 0.0000, 0.0000, 0.0000],
    [0.0000, 0.4921, 0.4925, 0.0000, 0.0000, 0.0000],
    [0.0000, 0.3966, 0.0000, 0.3775, 0.0000, 0.0000],
    [0.0000, 0.3327, 0.3331, 0.3084, 0.3331, 0.0000],
]
BOOK_CAUSAL_OUTPUT = [
    [-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632], [-0.5675, -0.0843], [-0.5526, -0.0981], [-0.5299, -0.1081]
]
BOOK_WRAPPER_OUTPUT = [
    [-0.4519, 0.2216, 0.4772, 0.1063],
    [-0.5874, 0.0058, 0.5891, 0.3257],
    [-0.6300, -0.0632, 0.6202, 0.3860],
    [-0.5675, -0.0843, 0.5478, 0.3589],
    [-0.5526, -0.0981, 0.5321, 0.3428],
    [-0.5299, -0.1081, 0.5077, 0.3493],
]
BOOK_MHA_OUTPUT = [
    [0.3190, 0.4858], [0.2943, 0.3897], [0.2856, 0.3593], [0.2693, 0.3873], [0.2639, 0.3928], [0.2575, 0.4028]
]


def test_simplified_self_attention_book_tensors(inputs):
    trace = Recorder()
    context = SimplifiedSelfAttention()(inputs, trace)
    assert close(trace.steps["scores"][0, 0], BOOK_SIMPLE_SCORES)
    assert close(trace.steps["weights"][0, 0], BOOK_SIMPLE_WEIGHTS)
    assert close(context, BOOK_SIMPLE_CONTEXT)
    assert close(trace.steps["context"], BOOK_SIMPLE_CONTEXT)


def test_simplified_book_naive_normalisation_of_row_2(inputs):
    trace = Recorder()
    SimplifiedSelfAttention()(inputs, trace)
    attn_scores_2 = trace.steps["scores"][0, 0, 1]  # query x^2 against every input
    assert close(attn_scores_2, BOOK_SIMPLE_SCORES[1])
    assert close(attn_scores_2 / attn_scores_2.sum(), [0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656])
    # ... and softmax, not the naive sum, gives the book's weights
    assert close(torch.softmax(attn_scores_2, dim=0), BOOK_SIMPLE_WEIGHTS[1])
    assert not close(attn_scores_2 / attn_scores_2.sum(), BOOK_SIMPLE_WEIGHTS[1])


def test_self_attention_v1_book_tensors(inputs):
    torch.manual_seed(123)
    sa_v1 = SelfAttention_v1(3, 2)
    assert close(sa_v1(inputs), BOOK_V1_OUTPUT)
    trace = Recorder()
    assert close(sa_v1(inputs, trace), BOOK_V1_OUTPUT)
    assert close(trace.steps["queries"][..., 1, :], [0.4306, 1.4551])
    assert close(trace.steps["scores"][0, 0, 1], [1.2705, 1.8524, 1.8111, 1.0795, 0.5577, 1.5440])
    assert close(trace.steps["weights"][0, 0, 1], BOOK_V1_WEIGHTS_2)


def test_self_attention_v2_book_tensors(inputs):
    torch.manual_seed(789)
    sa_v2 = SelfAttention_v2(3, 2)
    trace = Recorder()
    assert close(sa_v2(inputs, trace), BOOK_V2_OUTPUT)
    assert close(trace.steps["weights"][0, 0], BOOK_V2_WEIGHTS)


def _v2_causal_trace(inputs) -> Recorder:
    torch.manual_seed(789)
    sa_v2 = SelfAttention_v2(3, 2, causal=True)
    trace = Recorder()
    sa_v2(inputs, trace)
    return trace


def test_self_attention_v2_causal_weights_are_book_masked_simple_norm(inputs):
    trace = _v2_causal_trace(inputs)
    assert close(trace.steps["weights"][0, 0], BOOK_MASKED_SIMPLE_NORM)


def test_book_masked_scores_are_exactly_minus_inf_above_the_diagonal(inputs):
    trace = _v2_causal_trace(inputs)
    attn_scores = trace.steps["scores"][0, 0]  # unscaled, unmasked
    mask = torch.triu(torch.ones(6, 6), diagonal=1)
    masked = attn_scores.masked_fill(mask.bool(), -torch.inf)  # the book's `masked`
    expected = torch.tensor(BOOK_MASKED_SCORES)
    upper = mask.bool()
    assert torch.all(masked[upper] == NEG_INF)
    assert torch.allclose(masked[~upper], expected[~upper], atol=ATOL, rtol=0)
    # the module's own masked stage is the same after scaling by sqrt(d_k) = sqrt(2)
    recorded = trace.steps["masked"][0, 0]
    assert torch.all(recorded[upper] == NEG_INF)
    assert torch.allclose(recorded[~upper], expected[~upper] / 2**0.5, atol=ATOL, rtol=0)
    # softmax of the book's masked scores (scaled) is masked_simple_norm
    assert close(torch.softmax(masked / 2**0.5, dim=-1), BOOK_MASKED_SIMPLE_NORM)


def test_book_tril_then_renormalise_equals_softmax_of_masked_scores(inputs):
    torch.manual_seed(789)
    trace = Recorder()
    SelfAttention_v2(3, 2)(inputs, trace)  # non-causal, as in the book before masking
    attn_weights = trace.steps["weights"][0, 0]
    mask_simple = torch.tril(torch.ones(6, 6))
    masked_simple = attn_weights * mask_simple
    masked_simple_norm = masked_simple / masked_simple.sum(dim=-1, keepdim=True)
    assert close(masked_simple_norm, BOOK_MASKED_SIMPLE_NORM)
    causal_weights = _v2_causal_trace(inputs).steps["weights"][0, 0]
    assert torch.allclose(masked_simple_norm, causal_weights, atol=1e-6, rtol=0)


def test_book_dropout_of_ones():
    torch.manual_seed(123)
    dropout = nn.Dropout(0.5)
    assert torch.equal(dropout(torch.ones(6, 6)), torch.tensor(BOOK_DROPOUT_ONES, dtype=torch.float32))


def test_book_dropout_of_causal_weights(inputs):
    attn_weights = _v2_causal_trace(inputs).steps["weights"][0, 0]
    torch.manual_seed(123)
    assert close(nn.Dropout(0.5)(attn_weights), BOOK_DROPOUT_WEIGHTS)


def test_causal_attention_book_output(batch):
    torch.manual_seed(123)
    ca = CausalAttention(3, 2, batch.shape[1], 0.0)
    context_vecs = ca(batch)
    assert context_vecs.shape == (2, 6, 2)
    assert close(context_vecs[0], BOOK_CAUSAL_OUTPUT)
    assert close(context_vecs[1], BOOK_CAUSAL_OUTPUT)


def test_multi_head_wrapper_book_output(batch):
    torch.manual_seed(123)
    mha = MultiHeadAttentionWrapper(3, 2, batch.shape[1], 0.0, num_heads=2)
    context_vecs = mha(batch)
    assert context_vecs.shape == (2, 6, 4)
    assert close(context_vecs[0], BOOK_WRAPPER_OUTPUT)
    assert close(context_vecs[1], BOOK_WRAPPER_OUTPUT)


def test_multi_head_attention_book_output(batch):
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 2, batch.shape[1], 0.0, num_heads=2)
    context_vecs = mha(batch)
    assert context_vecs.shape == (2, 6, 2)
    assert close(context_vecs[0], BOOK_MHA_OUTPUT)
    assert close(context_vecs[1], BOOK_MHA_OUTPUT)


@pytest.mark.parametrize(
    ("cls", "kwargs", "expected"),
    [
        (CausalAttention, {}, BOOK_CAUSAL_OUTPUT),
        (MultiHeadAttentionWrapper, {"num_heads": 2}, BOOK_WRAPPER_OUTPUT),
        (MultiHeadAttention, {"num_heads": 2}, BOOK_MHA_OUTPUT),
    ],
)
def test_context_length_1024_gives_the_same_weights_and_outputs(batch, cls, kwargs, expected):
    torch.manual_seed(123)
    short = cls(3, 2, 6, 0.0, **kwargs)
    torch.manual_seed(123)
    long = cls(3, 2, 1024, 0.0, **kwargs)  # the mask buffer is torch.ones + triu: no RNG draws
    short_params = dict(short.named_parameters())
    long_params = dict(long.named_parameters())
    assert short_params.keys() == long_params.keys()
    assert all(torch.equal(short_params[name], long_params[name]) for name in short_params)
    short_trace, long_trace = Recorder(), Recorder()
    assert torch.equal(short(batch, short_trace), long(batch, long_trace))
    assert torch.equal(short_trace.steps["weights"], long_trace.steps["weights"])
    assert close(long(batch)[0], expected)


# ============================== invariants ==============================

SEEDS = (0, 1, 123)
SHAPES = [  # (n, d_in, d_out, heads); d_out is the total width, divisible by heads
    (1, 4, 4, 1),
    (5, 3, 2, 2),
    (7, 8, 12, 3),
    (16, 16, 16, 4),
]
VARIANTS = ("simplified", "v1", "v2", "causal", "wrapper", "mha")
DROPOUT_VARIANTS = ("causal", "wrapper", "mha")


def build(variant: str, d_in: int, d_out: int, heads: int, *, causal: bool, dropout: float = 0.0, context=32):
    if variant == "simplified":
        return SimplifiedSelfAttention(causal=causal)
    if variant == "v1":
        return SelfAttention_v1(d_in, d_out, causal=causal)
    if variant == "v2":
        return SelfAttention_v2(d_in, d_out, causal=causal)
    if variant == "causal":
        return CausalAttention(d_in, d_out, context, dropout, causal=causal)
    if variant == "wrapper":
        return MultiHeadAttentionWrapper(d_in, d_out // heads, context, dropout, heads, causal=causal)
    return MultiHeadAttention(d_in, d_out, context, dropout, heads, causal=causal)


def map_heads(variant: str, heads: int) -> int:
    return heads if variant in ("wrapper", "mha") else 1


def random_input(seed: int, b: int, n: int, d_in: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed + 10_000)
    # small inputs: v1's all-positive torch.rand weights make softmax underflow to 0 for large ones
    return 0.5 * torch.randn(b, n, d_in, generator=generator)  # (b, n, d_in)


def seeded_trace(variant, seed, shape, *, causal, b=2, dropout=0.0, train=False):
    n, d_in, d_out, heads = shape
    torch.manual_seed(seed)
    module = build(variant, d_in, d_out, heads, causal=causal, dropout=dropout).train(train)
    x = random_input(seed, b, n, d_in)
    trace = Recorder()
    output = module(x, trace)
    return module, x, trace, output


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", VARIANTS)
def test_recording_never_changes_outputs(variant, causal, shape, seed):
    n, d_in, d_out, heads = shape
    torch.manual_seed(seed)
    module = build(variant, d_in, d_out, heads, causal=causal)
    x = random_input(seed, 2, n, d_in)
    trace = Recorder()
    assert torch.equal(module(x), module(x, trace))
    assert torch.equal(trace.steps["output"], module(x))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", DROPOUT_VARIANTS)
def test_recording_never_changes_outputs_in_train_mode_with_dropout(variant, causal, seed):
    n, d_in, d_out, heads = 9, 8, 8, 2
    torch.manual_seed(seed)
    module = build(variant, d_in, d_out, heads, causal=causal, dropout=0.5).train()
    x = random_input(seed, 2, n, d_in)
    torch.manual_seed(seed + 1)
    plain = module(x)
    torch.manual_seed(seed + 1)
    recorded = module(x, Recorder())
    torch.manual_seed(seed + 2)
    other_draw = module(x)
    assert torch.equal(plain, recorded)
    assert not torch.equal(plain, other_draw)  # dropout really is active


def sdpa_reference(mha: MultiHeadAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """The fused path: same weights, torch's scaled_dot_product_attention, then out_proj."""
    b, n, _ = x.shape
    h, hd = mha.num_heads, mha.head_dim
    queries = mha.W_query(x).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    keys = mha.W_key(x).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    values = mha.W_value(x).view(b, n, h, hd).transpose(1, 2)  # (b, h, n, hd)
    context = torch.nn.functional.scaled_dot_product_attention(  # (b, h, n, hd)
        queries, keys, values, dropout_p=0.0, is_causal=causal)
    return mha.out_proj(context.transpose(1, 2).reshape(b, n, h * hd))  # (b, n, d_out)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_mha_equals_scaled_dot_product_attention(causal, shape, seed):
    mha, x, _, output = seeded_trace("mha", seed, shape, causal=causal)
    with torch.no_grad():
        assert torch.allclose(output, sdpa_reference(mha, x, causal), atol=1e-5, rtol=0)


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_mha_equals_sdpa_at_gpt2_small_size(qkv_bias):
    torch.manual_seed(123)
    mha = MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12, qkv_bias=qkv_bias).eval()
    x = random_input(0, 1, 1024, 768)
    with torch.no_grad():
        output = mha(x)
        assert output.shape == (1, 1024, 768)
        assert torch.allclose(output, sdpa_reference(mha, x, True), atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(5, 3, 2, 2), (7, 8, 12, 3), (16, 16, 16, 4)])
@pytest.mark.parametrize("causal", [True, False])
def test_mha_scales_by_sqrt_head_dim_not_d_out(causal, shape, seed):
    mha, _, trace, _ = seeded_trace("mha", seed, shape, causal=causal)
    head_dim = shape[2] // shape[3]
    assert mha.head_dim == head_dim
    scores, scaled = trace.steps["scores"], trace.steps["scaled"]
    assert torch.equal(scaled, scores / head_dim**0.5)
    assert not torch.allclose(scaled, scores / shape[2] ** 0.5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_single_head_variants_scale_by_sqrt_d_out(causal, shape, seed):
    for variant in ("v1", "v2", "causal"):
        _, _, trace, _ = seeded_trace(variant, seed, shape, causal=causal)
        assert torch.equal(trace.steps["scaled"], trace.steps["scores"] / shape[2] ** 0.5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(5, 3, 2, 2), (7, 8, 12, 3), (16, 16, 16, 4)])
@pytest.mark.parametrize("variant", ["causal", "wrapper", "mha"])
def test_scaling_before_the_mask_gives_the_books_weights_bitwise(variant, shape, seed):
    """The Steps page says: the classes scale, then mask; the book masks the raw scores, then scales inside
    torch.softmax(attn_scores / keys.shape[-1]**0.5) — −∞ ÷ √dₖ is still −∞, so the weights are the same."""
    module, _, trace, _ = seeded_trace(variant, seed, shape, causal=True)
    n, d_k = shape[0], (shape[2] // shape[3] if variant != "causal" else shape[2])
    mask_bool = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n): the book's mask
    book = torch.softmax(trace.steps["scores"].masked_fill(mask_bool, -torch.inf) / d_k**0.5, dim=-1)  # (b, h, n, n)
    assert torch.equal(trace.steps["weights"], book)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_wrapper_is_the_concatenation_of_its_heads(causal, shape, seed):
    wrapper, x, trace, output = seeded_trace("wrapper", seed, shape, causal=causal)
    n, _, d_out, heads = shape
    head_traces = [Recorder() for _ in wrapper.heads]
    head_outputs = [head(x, head_trace) for head, head_trace in zip(wrapper.heads, head_traces)]
    assert output.shape == (2, n, d_out)
    assert torch.equal(output, torch.cat(head_outputs, dim=-1))
    for stage in MAP_STAGES:
        assert trace.steps[stage].shape == (2, heads, n, n)
        for h, head_trace in enumerate(head_traces):
            assert torch.equal(trace.steps[stage][:, h], head_trace.steps[stage][:, 0])
    assert trace.steps["context"].shape == (2, heads, n, d_out // heads)
    assert all(torch.equal(trace.steps["context"][:, h], head_outputs[h]) for h in range(heads))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", VARIANTS)
def test_weights_rows_sum_to_one_and_maps_are_4d(variant, causal, shape, seed):
    n = shape[0]
    _, _, trace, _ = seeded_trace(variant, seed, shape, causal=causal)
    heads = map_heads(variant, shape[3])
    for stage in MAP_STAGES:
        assert trace.steps[stage].shape == (2, heads, n, n)
    weights = trace.steps["weights"]
    assert torch.allclose(weights.sum(dim=-1), torch.ones(2, heads, n), atol=1e-6, rtol=0)
    assert torch.all(weights >= 0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_unbatched_single_head_maps_are_4d(variant, inputs):
    if variant in ("causal", "wrapper", "mha"):  # the book's batched classes take (b, n, d_in) only
        x, expected = inputs.unsqueeze(0), (1, map_heads(variant, 1), 6, 6)
    else:
        x, expected = inputs, (1, 1, 6, 6)
    torch.manual_seed(123)
    trace = Recorder()
    build(variant, 3, 2, 1, causal=True)(x, trace)
    assert all(trace.steps[stage].shape == expected for stage in MAP_STAGES)
    weight_shapes = [shape for name, shape in trace.shapes if name.split(" ")[0] == "weights"]
    assert len(weight_shapes) == 1
    assert weight_shapes[0][-2:] == (6, 6)  # the real shape stays in ``shapes``


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_causal_upper_triangle_is_exactly_zero_and_masked_is_minus_inf(variant, shape, seed):
    n = shape[0]
    _, _, trace, _ = seeded_trace(variant, seed, shape, causal=True)
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    lower = ~upper
    weights, masked = trace.steps["weights"], trace.steps["masked"]
    assert torch.all(weights[..., upper] == 0.0)
    assert torch.all(masked[..., upper] == NEG_INF)
    assert torch.all(torch.isfinite(masked[..., lower]))
    assert torch.all(weights[..., lower] > 0)
    # scaled is recorded before the in-place mask: finite everywhere
    assert torch.all(torch.isfinite(trace.steps["scaled"]))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[0] > 1])
@pytest.mark.parametrize("variant", VARIANTS)
def test_non_causal_upper_triangle_is_positive(variant, shape, seed):
    n = shape[0]
    _, _, trace, _ = seeded_trace(variant, seed, shape, causal=False)
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    assert torch.all(trace.steps["weights"][..., upper] > 0)
    assert torch.equal(trace.steps["masked"], trace.steps["scaled"])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", DROPOUT_VARIANTS)
def test_dropout_zeroes_cells_and_scales_the_rest_exactly(variant, causal, seed, p):
    _, _, trace, _ = seeded_trace(variant, seed, (12, 8, 8, 2), causal=causal, dropout=p, train=True)
    weights, dropped = trace.steps["weights"], trace.steps["dropped"]
    zeroed = (dropped == 0) & (weights != 0)
    kept = dropped != 0
    assert zeroed.any()
    assert kept.any()
    assert torch.equal(dropped[kept], weights[kept] * (1 / (1 - p)))
    assert torch.all((dropped == 0) | kept)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", DROPOUT_VARIANTS)
def test_eval_mode_dropped_equals_weights(variant, causal, seed):
    _, _, trace, _ = seeded_trace(variant, seed, (12, 8, 8, 2), causal=causal, dropout=0.5, train=False)
    assert torch.equal(trace.steps["dropped"], trace.steps["weights"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[0] > 1])
@pytest.mark.parametrize("variant", VARIANTS)
def test_causality_perturbing_later_tokens_never_changes_earlier_outputs(variant, shape, seed):
    n, d_in, d_out, heads = shape
    torch.manual_seed(seed)
    causal_module = build(variant, d_in, d_out, heads, causal=True)
    torch.manual_seed(seed)
    open_module = build(variant, d_in, d_out, heads, causal=False)
    x = random_input(seed, 2, n, d_in)
    for j in range(1, n):
        perturbed = x.clone()
        perturbed[:, j:] += 1.0 + torch.randn(2, n - j, d_in, generator=torch.Generator().manual_seed(j))
        assert torch.equal(causal_module(x)[:, :j], causal_module(perturbed)[:, :j])
        assert not torch.allclose(open_module(x)[:, :j], open_module(perturbed)[:, :j])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_masking_is_effective_masked_fill_trap(variant, seed):
    """``attn_scores.masked_fill(mask, -inf)`` without the underscore discards its result: the output
    would then equal the unmasked one.  Recompute the book's causal output by hand and compare."""
    n, d_in, d_out, heads = 6, 4, 4, 2
    torch.manual_seed(seed)
    causal_module = build(variant, d_in, d_out, heads, causal=True)
    torch.manual_seed(seed)
    open_module = build(variant, d_in, d_out, heads, causal=False)
    x = random_input(seed, 1, n, d_in)
    trace = Recorder()
    open_module(x, trace)
    scaled = trace.steps["scaled"]  # (1, heads, n, n), identical weights
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    expected_weights = torch.softmax(scaled.masked_fill(upper, -torch.inf), dim=-1)
    causal_trace = Recorder()
    causal_output = causal_module(x, causal_trace)
    assert torch.allclose(causal_trace.steps["weights"], expected_weights, atol=1e-6, rtol=0)
    assert not torch.allclose(causal_output, open_module(x))
    assert torch.equal(causal_output, causal_module(x))  # also without a recorder


# ============================== more of what the book prints ==============================

# 3.6.2: the batched matrix multiplication behind queries @ keys.transpose(2, 3), on the book's (1, 2, 3, 4) tensor
BOOK_A = [[[[0.2745, 0.6584, 0.2775, 0.8573],
            [0.8993, 0.0390, 0.9268, 0.7388],
            [0.7179, 0.7058, 0.9156, 0.4340]],
           [[0.0772, 0.3565, 0.1479, 0.5331],
            [0.4066, 0.2318, 0.4545, 0.9737],
            [0.4606, 0.5159, 0.4220, 0.5786]]]]
BOOK_A_AT = [[[[1.3208, 1.1631, 1.2879],
               [1.1631, 2.2150, 1.8424],
               [1.2879, 1.8424, 2.0402]],
              [[0.4391, 0.7003, 0.5903],
               [0.7003, 1.3737, 1.0620],
               [0.5903, 1.0620, 0.9912]]]]


def test_book_batched_matmul_of_3_6_2():
    a = torch.tensor(BOOK_A)  # (b, h, n, hd) = (1, 2, 3, 4)
    scores = a @ a.transpose(2, 3)  # (1, 2, 3, 4) @ (1, 2, 4, 3) -> (1, 2, 3, 3)
    assert close(scores, BOOK_A_AT)
    for head in range(2):  # the book's "first_head @ first_head.T": one head computed on its own
        assert torch.allclose(scores[0, head], a[0, head] @ a[0, head].T, atol=1e-6)


def test_mha_scores_stage_is_that_batched_matmul():
    """MultiHeadAttention's recorded ``scores`` are exactly queries @ keys.transpose(2, 3) of its recorded heads."""
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 4, 6, 0.0, num_heads=2)
    recorder = Recorder()
    x = journey_inputs().unsqueeze(0)  # (1, 6, 3)
    mha(x, recorder)
    queries = recorder.steps["queries"].view(1, 6, 2, 2).transpose(1, 2)  # (1, 6, 4) -> (1, 2, 6, 2)
    keys = recorder.steps["keys"].view(1, 6, 2, 2).transpose(1, 2)  # (1, 2, 6, 2)
    assert torch.equal(recorder.steps["scores"], queries @ keys.transpose(2, 3))  # -> (1, 2, 6, 6)


def test_book_exercise_3_2_wrapper_with_one_dimensional_heads(batch):
    torch.manual_seed(123)
    mha = MultiHeadAttentionWrapper(3, 1, batch.shape[1], 0.0, num_heads=2)
    context_vecs = mha(batch)  # (2, 6, 3) -> (2, 6, 2 × 1)
    assert context_vecs.shape == (2, 6, 2)
    assert close(context_vecs[0], BOOK_EXERCISE_3_2) and close(context_vecs[1], BOOK_EXERCISE_3_2)


def test_recorded_dropped_stage_is_the_books_dropout_printout(inputs):
    """The book's attn_weights (SelfAttention_v2 after seed 789, masked) through ``dropout(0.5)`` after
    ``torch.manual_seed(123)``: CausalAttention creates the same three Linear layers in the same order, so its
    recorded ``weights`` and ``dropped`` stages are the book's two printouts."""
    torch.manual_seed(789)
    ca = CausalAttention(3, 2, 6, 0.5)
    ca.train()
    recorder = Recorder()
    torch.manual_seed(123)
    ca(inputs.unsqueeze(0), recorder)  # (1, 6, 3) -> (1, 6, 2)
    assert torch.allclose(recorder.steps["weights"][0, 0], _v2_causal_trace(inputs).steps["weights"][0, 0])
    assert close(recorder.steps["dropped"][0, 0], BOOK_DROPOUT_WEIGHTS)
    kept = (recorder.steps["dropped"][0, 0] != 0).float() * 2  # the mask, scaled by 1/(1 − 0.5)
    torch.manual_seed(123)
    assert torch.equal(nn.Dropout(0.5)(torch.ones(6, 6)) * torch.tril(torch.ones(6, 6)), kept)


# ============================== sizes and lengths the book's code would hand to torch ==============================

# each class built with a context, as a user builds it: (class, its constructor given context_length)
BUILT_WITH_A_CONTEXT = [
    pytest.param(CausalAttention, lambda ctx: CausalAttention(3, 2, ctx, 0.0), id="CausalAttention"),
    pytest.param(MultiHeadAttentionWrapper, lambda ctx: MultiHeadAttentionWrapper(3, 2, ctx, 0.0, num_heads=2),
                 id="MultiHeadAttentionWrapper"),
    pytest.param(MultiHeadAttention, lambda ctx: MultiHeadAttention(3, 4, ctx, 0.0, num_heads=2),
                 id="MultiHeadAttention"),
]


@pytest.mark.parametrize("cls, build", BUILT_WITH_A_CONTEXT)
def test_a_context_past_the_memory_is_refused_in_words_before_anything_is_allocated(cls, build):
    """context_length=10**7 asks for a 10**7 × 10**7 mask (400 TB): the class says, not torch's allocator, what is too
    large (the mask, context_length²) and what to make smaller, as GPTModel does."""
    with pytest.raises(ValueError) as refused:
        build(10**7)
    message = str(refused.value)
    assert message.startswith(f"This {cls.__name__} would hold "), message
    assert "more than the" in message and "this machine has free" in message
    assert "context_length smaller" in message and "causal mask" in message and "context_length², " in message


@pytest.mark.parametrize("size", [0, -1, 2.0, "8", True])
@pytest.mark.parametrize("cls, build", BUILT_WITH_A_CONTEXT)
def test_a_context_that_is_not_a_whole_number_is_refused_in_words(cls, build, size):
    with pytest.raises(ValueError, match=rf"^{cls.__name__}'s context_length must be a whole number ≥ 1, got "):
        build(size)


@pytest.mark.parametrize("build, sizes", [
    (lambda: SelfAttention_v1(10**6, 10**6), "d_in or d_out"),
    (lambda: SelfAttention_v2(10**6, 10**6), "d_in or d_out"),
    (lambda: MultiHeadAttention(10**6, 10**6, 8, 0.0, num_heads=2), "num_heads, d_in, d_out or context_length"),
    (lambda: MultiHeadAttention(3, 4, 8, 0.0, num_heads=0), None),
    (lambda: SelfAttention_v2(0, 2), None),
], ids=["v1 wide", "v2 wide", "mha wide", "mha no heads", "v2 no width"])
def test_widths_and_heads_the_classes_cannot_be_built_with_are_refused_in_words(build, sizes):
    with pytest.raises(ValueError) as refused:
        build()
    message = str(refused.value)
    if sizes is None:
        assert "must be a whole number ≥ 1, got 0." in message, message
    else:
        assert f"make {sizes} smaller" in message and "W_query, W_key and W_value" in message, message


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_the_memory_a_class_is_refused_by_counts_every_number_it_holds(monkeypatch, qkv_bias):
    """check_sizes counts what the class builds: its parameters and its mask buffer, every head's for the wrapper."""
    from attnviz import memory

    counted = []
    monkeypatch.setattr(memory, "check_memory", lambda reader, parts, sizes: counted.append(sum(parts.values())))
    for build in (lambda: SelfAttention_v1(3, 2), lambda: SelfAttention_v2(3, 2, qkv_bias=qkv_bias),
                  lambda: CausalAttention(3, 2, 5, 0.0, qkv_bias=qkv_bias),
                  lambda: MultiHeadAttentionWrapper(3, 2, 5, 0.0, num_heads=3, qkv_bias=qkv_bias),
                  lambda: MultiHeadAttention(3, 4, 5, 0.0, num_heads=2, qkv_bias=qkv_bias)):
        counted.clear()
        module = build()
        held = sum(tensor.numel() for tensor in [*module.parameters(), *module.buffers()])
        assert counted[0] == held, type(module).__name__  # the class's own count, before its heads count theirs


@pytest.mark.parametrize("cls, build", BUILT_WITH_A_CONTEXT)
def test_more_tokens_than_the_context_is_a_message_saying_what_fits(cls, build):
    """The book's self.mask[:num_tokens, :num_tokens] is 4 × 4 for 6 tokens: the message names the tokens, the context
    and what to do, not torch's "The size of tensor a (6) must match the size of tensor b (4)"."""
    module = build(4)
    with pytest.raises(ValueError) as refused:
        module(torch.randn(1, 6, 3))
    message = str(refused.value)
    assert message.startswith("x has 6 tokens, more than the context_length 4 this "), message
    assert "(its causal mask, self.mask, is 4 × 4): it takes at most 4. Pass x[:, :4] or build it with " \
           "context_length ≥ 6." in message
    torch.manual_seed(0)
    assert module(torch.randn(1, 4, 3)).shape[1] == 4  # as many tokens as the context: the book's run


@pytest.mark.parametrize("cls, build", BUILT_WITH_A_CONTEXT)
def test_without_the_mask_more_tokens_than_the_context_still_run(cls, build):
    """causal=False never slices the mask: the book's arithmetic runs on any length, as before."""
    module = build(4)
    for part in [module, *module.modules()]:
        if hasattr(part, "causal"):
            part.causal = False
    assert module(torch.randn(1, 6, 3)).shape[1] == 6
