"""A hidden cell is one the mask hid, never one ALiBi's bias pushed down: the paper's −m·|i − j| with 8, 32 or 64
heads reaches −10³ on its own past 1,100–2,000 tokens (head 1's slope is 2^(−8/H): 0.92 with 64 heads), and with a
score at 1,024, while −∞, finfo.min, −10⁴ and −10⁹ masks, alone or with the bias, still hide the future.  The
tracer's hidden cells and ``explain_weight``'s are the one definition (:func:`attnviz.trace.hidden_by_mask`)."""

import numpy as np
import pytest
import torch
from helpers import alibi

import attnviz
from attnviz import explain, tracing
from attnviz.trace import hidden_by_mask

MASKS = ("none", "-inf", "finfo.min", "-1e4", "-1e9", "masked_bias")


def masked_scores(scaled: torch.Tensor, bias: torch.Tensor, mask: str) -> torch.Tensor:
    """(n, n) the softmax's input: ``scaled`` plus ALiBi's ``bias``, the future hidden as ``mask`` hides it —
    filled with −∞ or finfo.min, −10⁴ or −10⁹ added, or replaced by −10⁴ (GPT-2 4.x's where(…, masked_bias))."""
    n = scaled.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
    scores = scaled + bias  # (n, n)
    if mask in ("-inf", "finfo.min"):
        return scores.masked_fill(future, -torch.inf if mask == "-inf" else torch.finfo(scores.dtype).min)
    if mask in ("-1e4", "-1e9"):
        return scores + future * float(mask)  # (n, n)
    if mask == "masked_bias":
        return torch.where(future, torch.tensor(-1e4), scores)  # (n, n)
    return scores


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("n", [1024, 2048])
@pytest.mark.parametrize("heads", [8, 32, 64])
def test_alibi_hides_nothing_and_every_mask_hides_the_future_with_it(heads, n, mask):
    """Head 1, the steepest (slope 2^(−8/H)), of a layer of ``heads`` heads over ``n`` tokens; scores spread as a
    sharp trained head's (σ = 25), so a score plus the bias reaches −10³ at 1,024 tokens too.  The same cells from
    the scores before the mask (the tracer, ``explain_weight`` on float64 rows) and from an SDPA float mask that
    holds the bias and the mask alone."""
    generator = torch.Generator().manual_seed(heads + n)
    scaled = torch.randn(n, n, generator=generator) * 25.0  # (n, n)
    bias = alibi.alibi_bias(n, alibi.alibi_slopes(heads)[:1])[0]  # (n, n) −m·|i − j|
    expected = torch.ones(n, n, dtype=torch.bool).triu(1) if mask != "none" else torch.zeros(n, n, dtype=torch.bool)
    masked = masked_scores(scaled, bias, mask)  # (n, n)
    assert torch.equal(hidden_by_mask(masked, scaled), expected)
    rows = hidden_by_mask(masked.double().numpy(), scaled.double().numpy())  # (n, n) explain's float64 rows
    assert np.array_equal(rows, expected.numpy())
    if mask != "masked_bias":  # SDPA's attn_mask: the bias and the mask, no score
        assert torch.equal(hidden_by_mask(masked_scores(torch.zeros(n, n), bias, mask)), expected)


def test_the_bound_grows_with_the_row_and_stays_above_every_mask():
    """A push of max(10³, one per key): ALiBi's push of just under one per key is shown, a longer push hidden; without
    the scaled scores the masked value (score + push) must be 10³ + one per key below 0; cells picked from their rows
    (``keys``) are judged by their rows' length, not by how many were picked."""
    keys = 2048
    pushed = torch.tensor([-0.999 * (keys - 1), -keys, -1e4, -1e9, torch.finfo(torch.float32).min, -torch.inf])
    assert hidden_by_mask(pushed, torch.zeros(6), keys=keys).tolist() == [False, True, True, True, True, True]
    assert hidden_by_mask(pushed[:1], torch.zeros(1), keys=keys).tolist() == [False]
    assert hidden_by_mask(torch.full((1,), -1500.0), torch.zeros(1)).tolist() == [True]  # a row of one key
    masked_only = torch.tensor([-(1e3 + keys) + 1, -(1e3 + keys)])
    assert hidden_by_mask(masked_only, keys=keys).tolist() == [False, True]


@pytest.mark.parametrize("n", [8, 300, 1024])
def test_a_minus_ten_thousand_mask_added_before_the_scaling_is_hidden_at_every_length(n):
    """``scores.masked_fill(future, -1e4) / √64``: the push is −1,250, below max(10³, n) for every row a trace holds."""
    torch.manual_seed(0)
    raw = torch.randn(n, n) * 3  # (n, n) scores
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
    scaled = raw / 8  # (n, n)
    masked = raw.masked_fill(future, -1e4) / 8  # (n, n)
    assert torch.equal(hidden_by_mask(masked, scaled), future)


@pytest.mark.parametrize("heads", [8, 32, 64])
def test_the_paper_slopes_are_transformers_and_its_alibi_hides_only_the_future(heads):
    """transformers' own ALiBi (Bloom's build_alibi_tensor, Falcon's the same): the slopes the helper uses, and its
    bias (m·j, the paper's up to a constant per row) under its causal mask (finfo.min) over 2,048 tokens hides
    exactly the future."""
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    n = 2048
    hf_bias = bloom.build_alibi_tensor(torch.ones(1, n), heads, torch.float32)  # (H, 1, n) m·j
    assert torch.allclose(hf_bias[:, 0, 1], alibi.alibi_slopes(heads))
    scaled = torch.randn(n, n, generator=torch.Generator().manual_seed(heads)) * 25.0  # (n, n)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
    for head in (0, heads - 1):
        masked = (scaled + hf_bias[head]).masked_fill(future, torch.finfo(torch.float32).min)  # (n, n)
        assert torch.equal(hidden_by_mask(masked, scaled), future)


@pytest.mark.parametrize(("heads", "mask"), [(64, "-inf"), (32, "sdpa"), (8, "-1e4"), (64, "finfo.min")])
def test_the_tracer_hides_only_the_future_of_a_users_alibi_module_over_2048_tokens(heads, mask):
    """A plain nn.Module with the paper's ALiBi, the first two heads of a layer of ``heads`` (a tensor-parallel
    shard's slopes), masked with −∞, −10⁴, finfo.min, or as SDPA's float attn_mask: the recorded attention's hidden
    cells are the future's, though the bias gives far keys a weight of 0."""
    torch.manual_seed(0)
    module = alibi.ALiBiAttention(heads_in_model=heads, mask=mask).eval()
    n = 2048
    with torch.no_grad():
        attention = tracing.record(module, torch.randn(1, n, 16)).attentions[0]
    assert (attention.weights[0, 0, -1, :64] == 0).all()  # the bias alone zeroes the far keys' weights
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
    hidden = attention.masked_cells()[0]  # (h, n, n)
    assert all(torch.equal(hidden[head], future) for head in range(2))


def test_explain_weight_shows_alibis_far_keys_and_hides_the_future_as_the_tracer_does():
    """explain_weight over 1,024 tokens of the steepest heads of a 64-head ALiBi layer: the last query's row hides
    nothing, its far keys are shown with the weight the bias gives them (0), and the cells picked by hidden_among
    agree with the rows they come from."""
    torch.manual_seed(0)
    module = alibi.ALiBiAttention(heads_in_model=64).eval()
    trace = attnviz.trace_module(module, torch.randn(1, 1024, 16))
    for query in (1023, 600, 0):
        explained = explain.explain_weight(trace, 0, query, 0)
        assert explained.row_hidden.tolist() == [key > query for key in range(1024)]
        assert not explained.masked and explained.reason is None
    assert explain.explain_weight(trace, 0, 1023, 0).weight == 0.0  # the bias's own 0, not the mask's
    cells = [(1023, 0), (1023, 1023), (5, 900), (900, 5)]
    assert explain.hidden_among(trace, 0, cells).tolist() == [False, False, True, False]
