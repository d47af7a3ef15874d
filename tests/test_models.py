"""attnviz.models: the book's GPTModel, checkpoint loading vs Hugging Face transformers, attention maps, traces."""

from __future__ import annotations

import pytest
import torch

from attnviz.attention import STAGES
from attnviz.models import GPT_CONFIG_124M, GPTModel, PathRecorder
from attnviz.models.gpt import GELU, LayerNorm

TINY = {
    "vocab_size": 50257,
    "context_length": 32,
    "emb_dim": 32,
    "n_heads": 4,
    "n_layers": 3,
    "drop_rate": 0.0,
    "qkv_bias": True,
}


def tiny_model(seed: int = 0, **overrides) -> GPTModel:
    torch.manual_seed(seed)
    model = GPTModel({**TINY, **overrides}).eval()
    with torch.no_grad():  # LayerNorms at 1/0 and zero biases would hide mix-ups
        for name, param in model.named_parameters():
            if name.endswith(("scale", "shift", "bias")):
                param.normal_(0.0, 0.5).add_(1.0 if name.endswith("scale") else 0.0)
    return model


# ============================== the book's Chapter 4 model ==============================


def test_gpt_model_is_the_books_124m_model():
    """The book prints 163,009,536 parameters and, for "Hello, I am", these 10 greedy tokens (seed 123)."""
    torch.manual_seed(123)
    model = GPTModel(GPT_CONFIG_124M).eval()
    assert sum(p.numel() for p in model.parameters()) == 163_009_536
    idx = torch.tensor([[15496, 11, 314, 716]])  # "Hello, I am"
    with torch.no_grad():
        for _ in range(10):
            logits = model(idx)  # (1, n, vocab)
            idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)  # (1, n + 1)
    expected = [15496, 11, 314, 716, 27018, 24086, 47843, 30961, 42348, 7267, 49706, 43231, 47062, 34657]
    assert idx.tolist() == [expected]


def test_gpt_model_has_the_books_names():
    model = tiny_model()
    names = set(model.state_dict())
    for name in (
        "tok_emb.weight", "pos_emb.weight", "final_norm.scale", "final_norm.shift", "out_head.weight",
        "trf_blocks.0.att.W_query.weight", "trf_blocks.0.att.W_key.bias", "trf_blocks.0.att.W_value.weight",
        "trf_blocks.0.att.out_proj.weight", "trf_blocks.0.att.mask", "trf_blocks.2.ff.layers.0.weight",
        "trf_blocks.2.ff.layers.2.bias", "trf_blocks.1.norm1.scale", "trf_blocks.1.norm2.shift",
    ):
        assert name in names
    assert "out_head.bias" not in names
    assert isinstance(model.trf_blocks[0].ff.layers[1], GELU)
    assert isinstance(model.trf_blocks[0].drop_shortcut, torch.nn.Dropout)


@pytest.mark.parametrize("n", [1, 5, 32])
def test_logits_shape(n):
    model = tiny_model()
    with torch.no_grad():
        logits = model(torch.randint(0, 50257, (2, n)))  # (2, n, vocab)
    assert logits.shape == (2, n, 50257)


def test_layer_norm_matches_torch_and_uses_biased_variance():
    torch.manual_seed(1)
    norm = LayerNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.scale.normal_()
        norm.shift.normal_()
    x = torch.randn(2, 3, 8)  # (b, n, d)
    expected = torch.nn.functional.layer_norm(x, (8,), norm.scale, norm.shift, eps=1e-5)
    assert torch.allclose(norm(x), expected, atol=1e-6)


def test_ln_eps_from_cfg():
    model = GPTModel({**TINY, "ln_eps": 1e-3})
    assert model.final_norm.eps == 1e-3
    assert model.trf_blocks[0].norm1.eps == 1e-3
    assert GPTModel(TINY).trf_blocks[0].norm2.eps == 1e-5


def test_gelu_is_the_tanh_approximation():
    x = torch.linspace(-6, 6, 101)
    assert torch.allclose(GELU()(x), torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-6)
    assert not torch.allclose(GELU()(x), torch.nn.functional.gelu(x), atol=1e-5)


def test_recorded_forward_is_the_plain_forward():
    model = tiny_model()
    idx = torch.randint(0, 50257, (1, 9))
    recorder = PathRecorder(layers=[1], keep_block_inputs=True)
    with torch.no_grad():
        plain = model(idx)  # (1, n, vocab)
        recorded = model(idx, recorder)  # (1, n, vocab)
    assert torch.equal(plain, recorded)
    assert set(recorder.blocks) == {1}
    assert set(STAGES) | {"norm1"} == set(recorder.blocks[1].steps)
    assert len(recorder.block_inputs) == 3
    names = [name for name, _ in recorder.shapes]
    assert names[:4] == ["tokens", "tok_emb", "pos_emb", "input"]
    assert names[-2:] == ["final_norm", "logits"]
    assert names.index("block 0") < names.index("norm1") < names.index("queries") < names.index("block 1")
    assert dict(recorder.shapes)["logits"] == (1, 9, 50257)
    assert dict(recorder.shapes)["pos_emb"] == (9, 32)
