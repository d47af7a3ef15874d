"""Picking one of a module's attentions: ``trace_module(module, x, attention=k)`` traces the k-th (counted from 1, as
the checker names them), a model's layers are never stacked as heads, and the Trace says which it shows."""

import math

import numpy as np
import pytest
import torch
from helpers.source_lines import line_of
from helpers.user_modules import LearnerMHAWrapper
from torch import nn

import attnviz
from attnviz import checks, load_trace, tracing
from attnviz.config import InputError
from attnviz.trace_file import trace_npz


class CausalAttention(nn.Module):
    """The book's multi-head attention, one softmax over its heads' (b, h, n, n) scores."""

    def __init__(self, d_in, num_heads, context_length=16, scaled=True):
        super().__init__()
        self.num_heads, self.head_dim, self.scaled = num_heads, d_in // num_heads, scaled
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)
        self.out_proj = nn.Linear(d_in, d_in)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, n, d = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        values = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, hd) @ (b, h, hd, n) -> (b, h, n, n)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)  # (b, h, n, n)
        scale = self.head_dim ** 0.5 if self.scaled else 1.0
        attn_weights = torch.softmax(attn_scores / scale, dim=-1)  # (b, h, n, n)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, d)  # (b, n, d)
        return self.out_proj(context_vec)  # (b, n, d)


class Block(nn.Module):
    """A pre-norm GPT block: attention and a feed-forward, each with a residual."""

    def __init__(self, d_in, num_heads, scaled=True):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_in), nn.LayerNorm(d_in)
        self.att = CausalAttention(d_in, num_heads, scaled=scaled)
        self.ff = nn.Sequential(nn.Linear(d_in, 4 * d_in), nn.GELU(), nn.Linear(4 * d_in, d_in))

    def forward(self, x):
        x = x + self.att(self.norm1(x))  # (b, n, d)
        return x + self.ff(self.norm2(x))  # (b, n, d)


class TwoBlockGPT(nn.Module):
    """A small GPT of two blocks, as a learner writes it after chapter 4 (no embeddings: it takes vectors)."""

    def __init__(self, d_in=16, num_heads=2, second_scaled=True):
        super().__init__()
        self.d_in = d_in
        self.blocks = nn.Sequential(Block(d_in, num_heads), Block(d_in, num_heads, scaled=second_scaled))

    def forward(self, x):
        return self.blocks(x)  # (b, n, d)


class TwoShapes(nn.Module):
    """Two attentions side by side on the same input, of different shapes (2 heads and 1 head), their outputs added:
    neither is computed from the other, and they do not stack into heads."""

    def __init__(self, d_in=16):
        super().__init__()
        self.d_in = d_in
        self.wide, self.narrow = CausalAttention(d_in, 2), CausalAttention(d_in, 1)

    def forward(self, x):
        return self.wide(x) + self.narrow(x)  # (b, n, d)


class TwoWrapperLayers(nn.Module):
    """Two of the book's MultiHeadAttentionWrapper (section 3.6.1) in sequence, each of two one-head CausalAttentions:
    two layers of two heads, though the forward computes four one-head softmaxes."""

    def __init__(self, d_in=16, num_heads=2, context_length=16):
        super().__init__()
        self.d_in = d_in
        self.layers = nn.Sequential(*(LearnerMHAWrapper(d_in, d_in // num_heads, context_length, 0.0, num_heads)
                                      for _ in range(2)))

    def forward(self, x):
        return self.layers(x)  # (b, n, d)


SOFTMAX_LINE = line_of(CausalAttention, "torch.softmax(")


def hand_weights(attention: CausalAttention, x: torch.Tensor) -> torch.Tensor:
    """The layer's weights, softmax(mask(q·kᵀ) / √head_dim), written out from its own projections of ``x``."""
    b, n, d = x.shape
    h = attention.num_heads
    q = (x @ attention.W_query.weight.T).view(b, n, h, d // h).transpose(1, 2)  # (b, h, n, hd)
    k = (x @ attention.W_key.weight.T).view(b, n, h, d // h).transpose(1, 2)  # (b, h, n, hd)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)  # (b, h, n, n)
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # (b, h, n, n)
    return torch.softmax(scores, dim=-1)  # (b, h, n, n)


def layer_inputs(model: TwoBlockGPT, x: torch.Tensor) -> list[torch.Tensor]:
    """What each block's attention is given: its norm of the block's input, the block before's output."""
    first, second = model.blocks
    return [first.norm1(x), second.norm1(first(x))]


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(2, 6, 16)  # (b, n, d)


@pytest.mark.parametrize("num_heads", [1, 2])
@pytest.mark.parametrize("number", [1, 2])
def test_the_picked_layers_weights_are_that_layers_own(x, num_heads, number):
    """Layer 2's weights are softmax(q·kᵀ/√hd) of its own projections of its own input — the block before's output;
    one head a layer stays one head (two layers are not two heads of one), and the Trace names the attention."""
    torch.manual_seed(1)
    model = TwoBlockGPT(num_heads=num_heads).eval()
    with torch.no_grad():
        expected = hand_weights(model.blocks[number - 1].att, layer_inputs(model, x)[number - 1])
        trace = tracing.trace_module(model, x, attention=number)
    assert trace.steps["weights"].shape == (2, num_heads, 6, 6)
    np.testing.assert_allclose(trace.steps["weights"], expected.numpy(), atol=1e-6)
    named = f"attention {number} of 2 on line {SOFTMAX_LINE}"
    assert trace.module_run.attention == number and trace.module_run.attention_named == named
    assert trace.notes == (f"The forward computed 2 attentions; this shows {named}.",)
    assert trace.module_run.stage_lines["weights"] == SOFTMAX_LINE
    marked = [index for index, (_, _, _, stage) in enumerate(trace.module_run.ops) if stage == "weights"]
    softmaxes = [index for index, (name, *_) in enumerate(trace.module_run.ops) if name == "softmax"]
    assert marked == [softmaxes[number - 1]]  # the op diagram marks the stages of the attention shown, no other's


def test_without_attention_the_first_layer_is_shown_alone_and_named(x):
    torch.manual_seed(1)
    model = TwoBlockGPT(num_heads=1).eval()
    with torch.no_grad():
        expected = hand_weights(model.blocks[0].att, layer_inputs(model, x)[0])
        trace = tracing.trace_module(model, x)
    np.testing.assert_allclose(trace.steps["weights"], expected.numpy(), atol=1e-6)  # (2, 1, 6, 6): not 2 "heads"
    assert trace.notes == (f"The forward computed 2 attentions; this shows attention 1 of 2 on line {SOFTMAX_LINE}.",)


def test_two_attentions_of_different_shapes_are_each_picked(x):
    torch.manual_seed(2)
    module = TwoShapes().eval()
    with torch.no_grad():
        for number, attention in ((1, module.wide), (2, module.narrow)):
            trace = tracing.trace_module(module, x, attention=number)
            np.testing.assert_allclose(trace.steps["weights"], hand_weights(attention, x).numpy(), atol=1e-6)
            assert trace.module_run.attention_named == f"attention {number} of 2 on line {SOFTMAX_LINE}"


def test_the_trace_names_the_attention_as_the_checker_names_its_failure(x):
    """A second layer that does not scale: the checker's failure and the Trace of that layer name it alike."""
    torch.manual_seed(3)
    model = TwoBlockGPT(second_scaled=False).eval()
    (check,) = checks.check_module(model, x, rules=["scaling"])
    trace = tracing.trace_module(model, x, attention=2)
    assert check.status == "fail" and check.evidence.startswith(f"{trace.module_run.attention_named}: "), check


@pytest.mark.parametrize(("attention", "words"), [
    (3, f"attention=3: the forward computed 2 attentions (attention 1 of 2 on line {SOFTMAX_LINE}; attention 2 of 2 "
        f"on line {SOFTMAX_LINE}) — pick one with attention=1 … 2, counted from 1 as the checker names them"),
    (0, "attention must be a whole number from 1 (the first attention the forward computes), got 0"),
    (True, "attention must be a whole number from 1 (the first attention the forward computes), got True"),
    ("2", "attention must be a whole number from 1 (the first attention the forward computes), got '2'"),
])
def test_an_attention_the_forward_has_not_is_a_trace_error_naming_how_many_it_has(x, attention, words):
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(TwoBlockGPT().eval(), x, attention=attention)
    assert str(caught.value) == words


def test_a_wrappers_one_head_softmaxes_are_one_attention_of_its_heads(x):
    """The book's wrapper: its heads, each a one-head softmax on the same input, stack into one attention's heads."""
    torch.manual_seed(4)
    wrapper = TwoShapes()
    wrapper.wide = CausalAttention(16, 1)  # two one-head attentions side by side: one layer's two heads
    trace = tracing.trace_module(wrapper.eval(), x)
    assert trace.steps["weights"].shape == (2, 2, 6, 6) and trace.notes == ()
    assert trace.module_run.attention_named == ""
    with pytest.raises(tracing.TraceError) as caught:
        tracing.trace_module(wrapper, x, attention=2)
    assert str(caught.value) == (f"attention=2: the forward computed one attention (on line {SOFTMAX_LINE}) — "
                                 "attention=1 shows it")


def test_a_model_of_wrappers_shows_each_layers_one_head_softmaxes_as_its_heads(x):
    """Layer 2's heads are computed from layer 1's output: the four one-head softmaxes are two attentions of two heads
    each, the Trace's and the checker's "attention 2 of 2" alike."""
    torch.manual_seed(5)
    model = TwoWrapperLayers().eval()
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)  # (n, n)
    for number, given in ((1, x), (2, model.layers[0](x).detach())):  # what the layer's heads are given
        with torch.no_grad():
            expected = torch.stack([torch.softmax(  # softmax(mask(q·kᵀ) / √d_out) of each head, (b, n, n)
                (head.W_query(given) @ head.W_key(given).transpose(1, 2)).masked_fill(future, float("-inf"))
                / math.sqrt(8), dim=-1) for head in model.layers[number - 1].heads], dim=1)  # (b, 2, n, n)
            trace = tracing.trace_module(model, x, attention=number)
        np.testing.assert_allclose(trace.steps["weights"], expected.numpy(), atol=1e-6)
        assert trace.module_run.attention_named.startswith(f"attention {number} of 2 on line ")
        assert trace.notes == (f"The forward computed 2 attentions; this shows {trace.module_run.attention_named}.",)
    (check,) = checks.check_module(model, x, rules=["rows-sum-to-one"])
    assert check.status == "pass" and check.evidence.endswith("— in each of the 2 attentions"), check


def test_a_saved_trace_keeps_which_attention_it_shows(x, tmp_path):
    trace = tracing.trace_module(TwoBlockGPT().eval(), x, attention=2)
    path = tmp_path / "layer2.npz"
    path.write_bytes(trace_npz(trace))
    loaded = load_trace(path).module_run
    assert loaded.attention_named == f"attention 2 of 2 on line {SOFTMAX_LINE}"
    # the Steps page names the block's class that computed the weights, as for the run before it was saved
    from attnviz.views import source

    assert source.module_stage_code(loaded, "weights") == source.module_stage_code(trace.module_run, "weights") == (
        f"# CausalAttention.forward, line {SOFTMAX_LINE} of test_tracing_pick.py\n"
        "attn_weights = torch.softmax(attn_scores / scale, dim=-1)  # (b, h, n, n)")


def test_show_traces_the_attention_it_is_given_and_a_trace_keeps_its_own(x):
    model = TwoBlockGPT().eval()
    with pytest.raises(tracing.TraceError, match=r"^attention=3: the forward computed 2 attentions"):
        attnviz.show(model, "Your journey starts", attention=3)
    trace = tracing.trace_module(model, x)
    with pytest.raises(InputError) as caught:
        attnviz.show(trace, attention=2)
    assert str(caught.value) == (f"show(trace, attention=2): a Trace shows the attention it was traced with (attention "
                                 f"1 of 2 on line {SOFTMAX_LINE}); trace the module again with trace_module(module, "
                                 "x, attention=2)")
