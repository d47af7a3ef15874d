"""attnviz.models: the book's GPTModel, checkpoint loading vs Hugging Face transformers, attention maps, traces."""

from __future__ import annotations

import builtins
import json
import pathlib
import pickle
import random

import numpy as np
import pytest
import torch
from helpers.checkpoints import random_gpt2

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


@pytest.mark.parametrize("attention, settings", [("multi-head", {}), ("grouped-query", {"num_kv_groups": 2}),
                                                 ("multi-query", {}), ("latent", {}), ("latent", {"latent_dim": 24}),
                                                 ("sliding-window", {"sliding_window_size": 4})])
@pytest.mark.parametrize("qkv_bias", [False, True])
def test_the_memory_a_config_is_refused_by_counts_every_number_its_model_holds(attention, settings, qkv_bias):
    """check_memory refuses a config by model_numbers, before anything is allocated: the count must be the model's
    (every parameter and buffer: the book's 163,009,536 parameters and 12 causal masks of 1,024² for GPT-2 small)."""
    from attnviz.models.gpt import FeedForward, TransformerBlock, model_numbers

    assert sum(model_numbers(GPT_CONFIG_124M).values()) == 163_009_536 + 12 * 1024**2
    cfg = {**TINY, "vocab_size": 50, "qkv_bias": qkv_bias, "attention": attention, **settings}
    for built, reader in ((GPTModel(cfg), "GPTModel"), (TransformerBlock(cfg), "TransformerBlock"),
                          (FeedForward(cfg), "FeedForward")):
        held = sum(tensor.numel() for tensor in [*built.parameters(), *built.buffers()])
        assert sum(model_numbers(cfg, reader).values()) == held, reader


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


def test_more_tokens_than_the_models_positions_is_a_message_saying_what_fits():
    """pos_emb holds context_length positions: the message names the tokens, the positions, and the book's own way to
    keep the last ones (generate_text_simple's idx[:, -context_size:]), not torch's "index out of range in self"."""
    model = tiny_model(context_length=8, vocab_size=50, n_layers=2)
    with pytest.raises(ValueError) as refused:
        model(torch.zeros(1, 9, dtype=torch.long))
    assert str(refused.value) == (
        "in_idx has 9 tokens, more than the 8 positions this GPTModel's pos_emb holds (its context_length): it takes "
        "at most 8. Pass in_idx[:, -8:] (the last ones, as the book's generate_text_simple keeps them) or build it "
        "with context_length ≥ 9.")


def test_a_cache_fed_past_the_models_context_says_so_and_keeps_what_it_held():
    """With the KV cache, the positions run on from current_pos: a step past the context is refused in words before
    anything is appended, so the sequence goes on from where it was (and gives the uncached logits)."""
    model = tiny_model(context_length=8, vocab_size=50, n_layers=2)
    ids = torch.randint(0, 50, (1, 8))
    with torch.no_grad():
        model.reset_kv_cache()
        model(ids[:, :6], use_cache=True)
        with pytest.raises(ValueError) as refused:
            model(torch.zeros(1, 3, dtype=torch.long), use_cache=True)
        assert str(refused.value).startswith("in_idx adds 3 tokens to the 6 the cache holds: positions 6 … 8, past the "
                                             "8 positions this GPTModel's pos_emb holds (its context_length), so it "
                                             "takes at most 2 more. Call reset_kv_cache()")
        assert model.current_pos == 6
        assert all(block.att.ptr_current_pos == 6 for block in model.trf_blocks)
        last = model(ids[:, 6:], use_cache=True)  # (1, 2, vocab)
        assert torch.allclose(last, model(ids)[:, 6:], atol=1e-5)


def test_a_cached_attention_fed_past_its_context_says_so_and_keeps_its_cache():
    """CachedMultiHeadAttention alone (the notebook's way): the book's mask rows self.mask[ptr:ptr + q] run out past
    context_length; the message says how many more fit, and the cache is as it was."""
    from attnviz.models import CachedMultiHeadAttention

    torch.manual_seed(0)
    att = CachedMultiHeadAttention(4, 4, 4, 0.0, num_heads=2).eval()
    x = torch.randn(1, 4, 4)
    with torch.no_grad():
        att(x[:, :3], use_cache=True)
        with pytest.raises(ValueError) as refused:
            att(torch.randn(1, 3, 4), use_cache=True)
        assert str(refused.value) == (
            "x adds 3 tokens to the 3 the cache holds: positions 3 … 5, past the context_length 4 this "
            "CachedMultiHeadAttention was built with (its causal mask, self.mask, is 4 × 4), so it takes at most 1 "
            "more. Call reset_cache() to start a new sequence, pass fewer tokens, or build it with context_length ≥ 6.")
        assert att.ptr_current_pos == 3 and att.cache_k.shape[1] == 3
        assert torch.allclose(att(x[:, 3:], use_cache=True), att(x)[:, 3:], atol=1e-6)
        with pytest.raises(ValueError, match=r"^x has 5 tokens, more than the context_length 4 this "
                                             r"CachedMultiHeadAttention was built with"):
            att(torch.randn(1, 5, 4))


# ============================== checkpoints vs Hugging Face transformers ==============================

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

SMALL = {"n_layer": 2, "n_head": 2, "n_embd": 128, "n_positions": 128}  # head_dim 64: bare files infer 2 heads
TOKENS = [464, 3290, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 383, 3290, 7586, 21831, 11, 290, 262]


def make_hf(seed: int = 0, vocab_size: int = 50257, **sizes):
    """A GPT2LMHeadModel with eager attention and EVERY LayerNorm and bias randomised
    (helpers.checkpoints.random_gpt2)."""
    return random_gpt2(seed, vocab_size=vocab_size, **{**SMALL, **sizes})


def reference(hf, tokens=TOKENS):
    """Hugging Face's logits (n, vocab), attention weights (layers, heads, n, n) and block inputs (layers, n, d)."""
    with torch.no_grad():
        out = hf(torch.tensor([tokens]), output_attentions=True, output_hidden_states=True)
    attentions = torch.stack(out.attentions)[:, 0]  # L × (1, h, n, n) -> (L, h, n, n)
    block_inputs = torch.stack(out.hidden_states[:-1])[:, 0]  # the input of every block -> (L, n, d)
    return out.logits[0], attentions, block_inputs


def hf_state(hf, prefix: bool = True, lm_head: bool = True) -> dict[str, torch.Tensor]:
    state = {key: value.clone().contiguous() for key, value in hf.state_dict().items()}
    if not lm_head:
        state.pop("lm_head.weight")
    if not prefix:
        state = {key.removeprefix("transformer."): value for key, value in state.items()}
    return state


def book_state(hf) -> dict[str, torch.Tensor]:
    """The book's ch05 names, mapped here independently of attnviz.models.loading (from HF's modules)."""
    cfg = hf.config
    d = cfg.n_embd
    model = GPTModel({"vocab_size": cfg.vocab_size, "context_length": cfg.n_positions, "emb_dim": d,
                      "n_heads": cfg.n_head, "n_layers": cfg.n_layer, "drop_rate": 0.0, "qkv_bias": True})
    t = hf.transformer
    with torch.no_grad():
        model.tok_emb.weight.copy_(t.wte.weight)
        model.pos_emb.weight.copy_(t.wpe.weight)
        for block, h in zip(model.trf_blocks, t.h):
            for index, linear in enumerate((block.att.W_query, block.att.W_key, block.att.W_value)):
                linear.weight.copy_(h.attn.c_attn.weight[:, index * d : (index + 1) * d].t())  # Conv1D (in, out)
                linear.bias.copy_(h.attn.c_attn.bias[index * d : (index + 1) * d])
            block.att.out_proj.weight.copy_(h.attn.c_proj.weight.t())
            block.att.out_proj.bias.copy_(h.attn.c_proj.bias)
            block.ff.layers[0].weight.copy_(h.mlp.c_fc.weight.t())
            block.ff.layers[0].bias.copy_(h.mlp.c_fc.bias)
            block.ff.layers[2].weight.copy_(h.mlp.c_proj.weight.t())
            block.ff.layers[2].bias.copy_(h.mlp.c_proj.bias)
            block.norm1.scale.copy_(h.ln_1.weight)
            block.norm1.shift.copy_(h.ln_1.bias)
            block.norm2.scale.copy_(h.ln_2.weight)
            block.norm2.shift.copy_(h.ln_2.bias)
        model.final_norm.scale.copy_(t.ln_f.weight)
        model.final_norm.shift.copy_(t.ln_f.bias)
        model.out_head.weight.copy_(hf.lm_head.weight)
    return model.state_dict()


@pytest.fixture(scope="module")
def hf_small():
    return make_hf(seed=1)


def write(kind: str, hf, root) -> str:
    """Save ``hf`` in one real on-disk format; return the path to load."""
    root.mkdir(parents=True, exist_ok=True)
    if kind == "hf-dir":
        hf.save_pretrained(root)  # config.json + model.safetensors (tied: no lm_head)
        return str(root)
    if kind == "hf-dir-bin":
        hf.config.to_json_file(root / "config.json")
        torch.save(hf_state(hf), root / "pytorch_model.bin")
        return str(root)
    if kind == "bare-prefixed":
        safetensors_torch.save_file(hf_state(hf, prefix=True, lm_head=True), root / "model.safetensors")
        return str(root / "model.safetensors")
    if kind == "bare-unprefixed-no-head":
        safetensors_torch.save_file(hf_state(hf, prefix=False, lm_head=False), root / "gpt2-like.safetensors")
        return str(root / "gpt2-like.safetensors")
    if kind == "bare-with-config":
        hf.config.to_json_file(root / "config.json")
        safetensors_torch.save_file(hf_state(hf, prefix=False, lm_head=False), root / "weights.safetensors")
        return str(root / "weights.safetensors")
    if kind == "book-pth":
        torch.save(book_state(hf), root / "gpt2-small.pth")
        return str(root / "gpt2-small.pth")
    if kind == "book-pth-no-masks":
        state = {key: value for key, value in book_state(hf).items() if not key.endswith("att.mask")}
        torch.save(state, root / "no-masks.pt")
        return str(root / "no-masks.pt")
    if kind == "book-model-and-optimizer":
        model_state = book_state(hf)
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=4e-4)
        torch.save({"model_state_dict": model_state, "optimizer_state_dict": optimizer.state_dict()},
                   root / "model_and_optimizer.pth")
        return str(root / "model_and_optimizer.pth")
    raise AssertionError(kind)


FORMATS = ["hf-dir", "hf-dir-bin", "bare-prefixed", "bare-unprefixed-no-head", "bare-with-config", "book-pth",
           "book-pth-no-masks", "book-model-and-optimizer"]


@pytest.mark.parametrize("kind", FORMATS)
def test_loaded_checkpoint_matches_hugging_face(kind, hf_small, tmp_path):
    from attnviz.models import attention_maps, load_checkpoint

    model = load_checkpoint(write(kind, hf_small, tmp_path / kind))
    assert isinstance(model, GPTModel)
    assert not model.training
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    logits, attentions, _ = reference(hf_small)
    with torch.no_grad():
        ours = model(torch.tensor([TOKENS]))[0]  # (n, vocab)
    assert torch.allclose(ours, logits, atol=1e-4)
    maps = attention_maps(model, TOKENS)  # (L, h, n, n)
    assert maps.shape == (2, 2, len(TOKENS), len(TOKENS))
    assert maps.dtype == np.float32
    assert np.abs(maps - attentions.numpy()).max() <= 1e-5


def test_untied_lm_head_is_read_not_tied(hf_small, tmp_path):
    """A checkpoint whose lm_head differs from wte: the loader must use lm_head (ties only when absent)."""
    from attnviz.models import load_checkpoint

    state = hf_state(hf_small)
    state["lm_head.weight"] = torch.randn_like(state["lm_head.weight"])
    safetensors_torch.save_file(state, tmp_path / "untied.safetensors")
    model = load_checkpoint(tmp_path / "untied.safetensors")
    assert torch.equal(model.out_head.weight, state["lm_head.weight"])
    assert not torch.equal(model.out_head.weight, model.tok_emb.weight)


def test_distilgpt2_shaped_checkpoint_sizes_are_inferred(tmp_path):
    """6 layers, width 128 (head_dim 64 -> 2 heads), 96 positions, eps 1e-5: all from a bare file."""
    from attnviz.models import attention_maps, load_checkpoint

    hf = make_hf(seed=2, n_layer=6, n_head=2, n_embd=128, n_positions=96)
    path = write("bare-unprefixed-no-head", hf, tmp_path)
    model = load_checkpoint(path)
    assert len(model.trf_blocks) == 6
    assert model.tok_emb.weight.shape == (50257, 128)
    assert model.pos_emb.weight.shape == (96, 128)
    assert model.trf_blocks[0].att.num_heads == 2
    assert model.trf_blocks[0].att.head_dim == 64
    assert model.trf_blocks[5].att.mask.shape == (96, 96)
    logits, attentions, _ = reference(hf)
    with torch.no_grad():
        assert torch.allclose(model(torch.tensor([TOKENS]))[0], logits, atol=1e-4)
    assert np.abs(attention_maps(model, TOKENS) - attentions.numpy()).max() <= 1e-5


def test_config_json_sizes_win_over_inference(tmp_path):
    """8 heads of 16 (not 64) and eps 1e-6 can only come from config.json."""
    from attnviz.models import load_checkpoint

    hf = make_hf(seed=3, n_head=8, layer_norm_epsilon=1e-6)
    model = load_checkpoint(write("hf-dir", hf, tmp_path))
    assert model.trf_blocks[0].att.num_heads == 8
    assert model.final_norm.eps == 1e-6
    logits, _, _ = reference(hf)
    with torch.no_grad():
        assert torch.allclose(model(torch.tensor([TOKENS]))[0], logits, atol=1e-4)


def test_fp16_checkpoint_loads_as_float32(hf_small, tmp_path):
    from attnviz.models import load_checkpoint

    state = {key: value.half() for key, value in hf_state(hf_small, lm_head=False).items()}
    safetensors_torch.save_file(state, tmp_path / "half.safetensors")
    model = load_checkpoint(tmp_path / "half.safetensors")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert torch.equal(model.tok_emb.weight, state["transformer.wte.weight"].float())


def test_sharded_safetensors_folder(hf_small, tmp_path):
    from attnviz.models import load_checkpoint

    state = hf_state(hf_small)
    first = {key: value for key, value in state.items() if ".h.1." not in key}
    second = {key: value for key, value in state.items() if ".h.1." in key}
    safetensors_torch.save_file(first, tmp_path / "model-00001-of-00002.safetensors")
    safetensors_torch.save_file(second, tmp_path / "model-00002-of-00002.safetensors")
    weight_map = {key: "model-00001-of-00002.safetensors" for key in first}
    weight_map |= {key: "model-00002-of-00002.safetensors" for key in second}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    hf_small.config.to_json_file(tmp_path / "config.json")
    model = load_checkpoint(tmp_path)
    logits, _, _ = reference(hf_small)
    with torch.no_grad():
        assert torch.allclose(model(torch.tensor([TOKENS]))[0], logits, atol=1e-4)


@pytest.mark.parametrize(
    ("layers", "width", "heads"),
    [(12, 768, 12), (24, 1024, 16), (36, 1280, 20), (48, 1600, 25), (6, 768, 12)],
    ids=["small", "medium", "large", "xl", "distilgpt2"],
)
def test_every_gpt2_size_is_inferred_from_the_tensors(layers, width, heads):
    """Sizes of every GPT-2 (and distilgpt2) from tensor shapes and key names alone (no full-size model built)."""
    from attnviz.models.loading import gpt2_config

    keys = {f"h.{b}.{name}" for b in range(layers) for name in ("ln_1.weight", "attn.c_attn.weight", "attn.bias")}
    cfg = gpt2_config("x", (50257, width), (1024, width), keys | {"wte.weight", "ln_f.weight"}, {})
    assert cfg == {"vocab_size": 50257, "context_length": 1024, "emb_dim": width, "n_heads": heads,
                   "n_layers": layers, "drop_rate": 0.0, "qkv_bias": True, "ln_eps": 1e-5}


def test_loading_builds_no_random_weights_first(hf_small, tmp_path, monkeypatch):
    """The skeleton is built on the meta device: no parameter is ever randomly initialised in real memory."""
    from attnviz.models import load_checkpoint

    calls = []
    original = torch.nn.init.kaiming_uniform_

    def spy(tensor, *args, **kwargs):
        calls.append(tensor.device.type)
        return original(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.nn.init, "kaiming_uniform_", spy)
    load_checkpoint(write("hf-dir", hf_small, tmp_path))
    assert calls
    assert set(calls) == {"meta"}


# ============================== errors a user can act on ==============================


def load_error(path) -> str:
    from attnviz.models import CheckpointError, load_checkpoint

    with pytest.raises(ValueError) as info:
        load_checkpoint(path)
    assert isinstance(info.value, CheckpointError)
    return str(info.value)


def test_assign_names_the_key_and_both_shapes():
    from attnviz.models import assign

    with pytest.raises(ValueError, match=r"h\.0\.attn\.c_proj\.weight.*\(64, 64\).*\(64, 32\)"):
        assign("h.0.attn.c_proj.weight", torch.empty(64, 64), torch.empty(64, 32))
    param = assign("ok", torch.empty(2, 3), torch.ones(2, 3, dtype=torch.float16))
    assert isinstance(param, torch.nn.Parameter)
    assert param.dtype == torch.float32
    from_numpy = assign("wte", torch.empty(2, 3), np.arange(6.0).reshape(2, 3))  # the book's params are NumPy arrays
    assert from_numpy.dtype == torch.float32 and from_numpy.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_truncated_safetensors(hf_small, tmp_path):
    path = write("bare-prefixed", hf_small, tmp_path)
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[: len(data) // 2])
    message = load_error(path)
    assert "truncated" in message
    assert "again" in message


def test_truncated_pth(hf_small, tmp_path):
    path = write("book-pth", hf_small, tmp_path)
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[: len(data) - 200])
    assert "truncated" in load_error(path)


@pytest.mark.parametrize("given", [5, None, b"gpt2.pth"])
def test_a_path_that_is_no_str_or_path_is_named(given):
    from attnviz.models import CheckpointError, load_checkpoint

    with pytest.raises(CheckpointError, match=r"^load_checkpoint takes the path of a checkpoint file or folder \(a str "
                                              rf"or a pathlib\.Path\), got {type(given).__name__}\.$"):
        load_checkpoint(given)


def test_not_gpt2_names_the_missing_key(tmp_path):
    safetensors_torch.save_file({"model.embed_tokens.weight": torch.zeros(10, 4)}, tmp_path / "llama.safetensors")
    message = load_error(tmp_path / "llama.safetensors")
    assert "not a GPT-2 checkpoint" in message
    assert "'wte.weight'" in message


def test_incomplete_gpt2_names_the_missing_key(hf_small, tmp_path):
    state = hf_state(hf_small)
    del state["transformer.h.1.mlp.c_fc.weight"]
    safetensors_torch.save_file(state, tmp_path / "partial.safetensors")
    assert "'transformer.h.1.mlp.c_fc.weight' is missing" in load_error(tmp_path / "partial.safetensors")


def test_other_vocabulary_is_refused(tmp_path):
    hf = make_hf(seed=4, vocab_size=1000)
    message = load_error(write("hf-dir", hf, tmp_path))
    assert "1,000" in message
    assert "50,257" in message


def test_config_that_disagrees_with_the_weights_names_key_and_shapes(hf_small, tmp_path):
    path = write("bare-with-config", hf_small, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_positions": 64}))
    message = load_error(path)
    assert "wpe.weight -> pos_emb.weight" in message
    assert "(64, 128)" in message
    assert "(128, 128)" in message



@pytest.mark.parametrize("kind", ["hf-dir", "book-pth"])
@pytest.mark.parametrize("context", [10**12, 100_000])
def test_config_with_an_absurd_context_is_refused_before_anything_is_built(hf_small, tmp_path, kind, context):
    """n_positions 10¹² made the skeleton's (ctx, ctx) mask overflow: a RuntimeError, a traceback in the app."""
    path = write(kind, hf_small, tmp_path)
    config = {"n_positions": context} if kind == "hf-dir" else {"context_length": context, "n_heads": 2}
    file = tmp_path / ("config.json" if kind == "hf-dir" else "gpt2-small.json")
    existing = json.loads(file.read_text()) if file.is_file() else {}
    file.write_text(json.dumps({**existing, **config}))
    message = load_error(path)
    assert f"({context}, 128)" in message
    assert "(128, 128)" in message


@pytest.mark.parametrize("kind", ["hf-dir", "book-pth"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_with_nan_or_inf_are_refused_naming_the_key(tmp_path, kind, value):
    """A LayerNorm holding NaN or ∞ is refused when loaded, in a message naming its key (the file's, or the model's),
    before any page draws blank maps from it or the Induction lab raises 'All-NaN slice'."""
    hf = make_hf(seed=1)  # not the module's hf_small: it is changed here
    with torch.no_grad():
        hf.transformer.h[1].ln_1.weight[3] = value
    message = load_error(write(kind, hf, tmp_path))
    assert ("h.1.ln_1.weight" if kind == "hf-dir" else "trf_blocks.1.norm1.scale") in message
    assert "NaN or infinite" in message


def test_a_position_table_without_rows_is_refused(hf_small, tmp_path):
    """A wpe of shape (0, d) is refused when loaded, naming the key and saying the position table has no rows — not a
    context_length of 0 that every page would call out of range."""
    state = hf_state(hf_small, prefix=False, lm_head=False)
    state["wpe.weight"] = torch.zeros(0, state["wpe.weight"].shape[1])
    safetensors_torch.save_file(state, tmp_path / "no-positions.safetensors")
    assert "wpe.weight -> pos_emb.weight: the position table (0, 128) has no rows" in load_error(
        tmp_path / "no-positions.safetensors")

def test_config_with_other_layer_count(hf_small, tmp_path):
    path = write("bare-with-config", hf_small, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    assert "says 3 layers but the weights have 2" in load_error(path)


@pytest.mark.parametrize(
    ("change", "expected"),
    [({"model_type": "llama"}, "model_type 'llama'"), ({"activation_function": "relu"}, "activation 'relu'"),
     ({"scale_attn_weights": False}, "scale_attn_weights false: its attention does not divide the scores by √head_dim"),
     ({"scale_attn_by_inverse_layer_idx": True}, "scaled-by-layer"),
     ({"n_inner": 100}, "n_inner=100")],
)
def test_config_of_another_architecture(hf_small, tmp_path, change, expected):
    path = write("hf-dir", hf_small, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    assert expected in load_error(path)


@pytest.mark.parametrize(
    ("change", "expected"),
    [({"n_head": 0}, "n_head must be a positive whole number, got 0"),
     ({"n_head": "2"}, "n_head must be a positive whole number, got '2'"),
     ({"n_layer": True}, "n_layer must be a positive whole number"),
     ({"layer_norm_epsilon": -1}, "layer_norm_epsilon must be a small positive number")],
)
def test_config_with_bad_values(hf_small, tmp_path, change, expected):
    path = write("hf-dir", hf_small, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    assert expected in load_error(path)


def test_unreadable_file_is_a_checkpoint_error(hf_small, tmp_path, monkeypatch):
    path = write("book-pth", hf_small, tmp_path)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(builtins, "open", denied)
    message = load_error(path)
    assert "Could not read" in message
    assert "Permission denied" in message


def test_broken_config_json(hf_small, tmp_path):
    path = write("hf-dir", hf_small, tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    assert "config.json is not a readable JSON file" in load_error(path)


def test_tensorflow_checkpoint_directory_says_how_to_convert(tmp_path):
    for name in ("checkpoint", "hparams.json", "model.ckpt.index", "model.ckpt.meta", "model.ckpt.data-00000-of-00001"):
        (tmp_path / name).write_bytes(b"\0" * 16)
    message = load_error(tmp_path)
    assert "TensorFlow" in message
    assert "torch.save(model.state_dict()" in message
    assert "from_tf=True" in message
    assert "TensorFlow" in load_error(tmp_path / "model.ckpt.index")


class _Marker:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


@pytest.mark.parametrize("how", ["torch.save", "pickle.dump", "pickle protocol 0", "legacy torch.save"])
def test_pickle_that_would_run_code_is_refused_and_never_run(tmp_path, how):
    marker = tmp_path / "code-ran"
    payload = {"tok_emb.weight": torch.zeros(2, 2), "evil": _Marker(marker)}
    path = tmp_path / "evil.pth"
    if how == "torch.save":
        torch.save(payload, path)
    elif how == "legacy torch.save":
        torch.save(payload, path, _use_new_zipfile_serialization=False)
    else:
        with open(path, "wb") as stream:
            pickle.dump(payload, stream, protocol=0 if how == "pickle protocol 0" else None)
    message = load_error(path)
    assert "Refused" in message
    assert "did not run it" in message
    assert not marker.exists()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("suffix", [".bin", ".pth"])
def test_random_bytes_are_not_a_checkpoint_and_not_called_a_pickle(tmp_path, seed, suffix):
    path = tmp_path / f"random{suffix}"
    path.write_bytes(random.Random(seed).randbytes(5000))
    message = load_error(path)
    assert "is not a PyTorch checkpoint" in message
    assert "Python objects" not in message and "Refused" not in message


def test_empty_file_says_it_is_empty(tmp_path):
    (tmp_path / "empty.pth").write_bytes(b"")
    message = load_error(tmp_path / "empty.pth")
    assert "is empty" in message
    assert "()" not in message


def test_the_marker_really_runs_code_when_unpickled(tmp_path):
    """The check above can fail: an unrestricted unpickler does create the marker file."""
    marker = tmp_path / "code-ran"
    pickle.loads(pickle.dumps(_Marker(marker)))
    assert marker.exists()


def test_nonexistent_path(tmp_path):
    assert "No file or folder" in load_error(tmp_path / "nope.safetensors")


def test_directory_with_nothing_loadable(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert "Nothing loadable" in load_error(tmp_path)


def test_unknown_extension(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"\0" * 16)
    message = load_error(tmp_path / "model.onnx")
    assert "unknown checkpoint type '.onnx'" in message
    assert ".safetensors" in message


def test_not_a_state_dict(tmp_path):
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    assert "not a model's state dict" in load_error(tmp_path / "list.pt")


def test_folder_with_one_weights_file_loads_it(hf_small, tmp_path):
    from attnviz.models import load_checkpoint

    write("book-pth", hf_small, tmp_path)
    assert len(load_checkpoint(tmp_path).trf_blocks) == 2
    write("book-pth-no-masks", hf_small, tmp_path)
    assert "several checkpoints" in load_error(tmp_path)


def test_legacy_non_zip_torch_save_loads(tmp_path):
    from attnviz.models import load_checkpoint

    model = tiny_model(seed=6, n_heads=1, emb_dim=64)
    torch.save(model.state_dict(), tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    idx = torch.tensor([TOKENS])
    with torch.no_grad():
        assert torch.equal(load_checkpoint(tmp_path / "legacy.pth")(idx), model(idx))


def test_book_checkpoint_without_biases_and_with_a_cfg_beside_it(tmp_path):
    """A model trained with the book's cfg (qkv_bias False, 2 heads of 16): sizes from <name>.json beside it."""
    from attnviz.models import load_checkpoint

    cfg = {**TINY, "n_heads": 2, "qkv_bias": False}
    model = tiny_model(seed=5, **cfg)
    torch.save(model.state_dict(), tmp_path / "trained.pth")
    (tmp_path / "trained.json").write_text(json.dumps(cfg))
    loaded = load_checkpoint(tmp_path / "trained.pth")
    assert loaded.trf_blocks[0].att.num_heads == 2
    assert loaded.trf_blocks[0].att.W_query.bias is None
    idx = torch.tensor([TOKENS])
    with torch.no_grad():
        assert torch.equal(loaded(idx), model(idx))


# ============================== attention maps and layer traces ==============================


@pytest.fixture(scope="module")
def loaded(hf_small, tmp_path_factory):
    from attnviz.models import load_checkpoint

    return load_checkpoint(write("hf-dir", hf_small, tmp_path_factory.mktemp("trace")))


def test_attention_map_invariants(loaded):
    from attnviz.models import attention_maps

    maps = attention_maps(loaded, TOKENS)  # (L, h, n, n)
    n = len(TOKENS)
    assert np.allclose(maps.sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(maps[..., np.triu_indices(n, k=1)[0], np.triu_indices(n, k=1)[1]] == 0.0)
    assert np.all(maps >= 0.0)


def test_non_causal_run_sees_the_future_and_restores_the_model(loaded):
    from attnviz.models import attention_maps

    loaded.train()
    open_maps = attention_maps(loaded, TOKENS, causal=False)
    assert open_maps[:, :, 0, 1:].min() > 0.0  # the first token now attends to later ones
    assert np.allclose(open_maps.sum(axis=-1), 1.0, atol=1e-5)
    assert loaded.training  # mode and flags restored
    assert all(block.att.causal for block in loaded.trf_blocks)
    loaded.eval()


def test_layer_maps_and_iter_layer_maps_equal_attention_maps(loaded):
    from attnviz.models import attention_maps, iter_layer_maps, layer_maps

    maps = attention_maps(loaded, TOKENS)
    for layer in range(2):
        assert np.array_equal(layer_maps(loaded, TOKENS, layer), maps[layer])
    layers = list(iter_layer_maps(loaded, TOKENS))
    assert [layer for layer, _ in layers] == [0, 1]
    for layer, layer_map in layers:
        assert np.array_equal(layer_map, maps[layer])


def test_maps_accept_token_id_forms(loaded):
    from attnviz.models import layer_maps

    expected = layer_maps(loaded, TOKENS, 1)
    for ids in (tuple(TOKENS), np.array(TOKENS), torch.tensor(TOKENS), torch.tensor([TOKENS])):
        assert np.array_equal(layer_maps(loaded, ids, 1), expected)


@pytest.mark.parametrize(
    ("ids", "layer", "message"),
    [
        ([], 0, "^token_ids is empty"),
        ([1] * 129, 0, "at most 128"),
        ([50257], 0, "0…50256"),
        ([-1], 0, "0…50256"),
        (TOKENS, 2, "from 0 to 1"),
        (TOKENS, -1, "from 0 to 1"),
        (TOKENS, True, "from 0 to 1"),
        ("Your journey", 0, r"^token_ids must be whole numbers \(GPT-2 token ids\), got str 'Your journey'"),
        ([1.5, 2.0], 0, r"^token_ids must be whole numbers \(GPT-2 token ids\), got list"),
        ([True, False], 0, "got list"),
    ],
)
def test_bad_inputs_raise_clear_value_errors(loaded, ids, layer, message):
    from attnviz.models import layer_maps, trace_layer

    with pytest.raises(ValueError, match=message):
        trace_layer(loaded, ids, layer)
    with pytest.raises(ValueError, match=message):
        layer_maps(loaded, ids, layer)


@pytest.mark.parametrize("layer", [0, 1])
def test_trace_layer_matches_hugging_face(loaded, hf_small, layer):
    from attnviz.models import trace_layer

    logits, attentions, block_inputs = reference(hf_small)
    trace = trace_layer(loaded, TOKENS, layer)
    assert trace.layer == layer
    assert trace.causal is True
    assert trace.token_ids == tuple(TOKENS)
    assert set(trace.steps) == set(STAGES) | {"norm1"}
    assert np.abs(trace.steps["weights"][0].numpy() - attentions[layer].numpy()).max() <= 1e-5
    assert torch.allclose(trace.block_inputs, block_inputs, atol=1e-4)  # (L, n, d), HF's hidden_states
    block = loaded.trf_blocks[layer]
    with torch.no_grad():
        assert torch.equal(trace.steps["norm1"][0], block.norm1(trace.block_inputs[layer]))
    probs = torch.softmax(logits, dim=-1)  # (n, vocab)
    expected_probs, expected_ids = torch.topk(probs, 5, dim=-1)  # (n, 5)
    assert trace.top_ids.shape == (len(TOKENS), 5)
    assert trace.top_ids.dtype == np.int64
    assert np.array_equal(trace.top_ids, expected_ids.numpy())
    assert np.allclose(trace.top_probs, expected_probs.numpy(), atol=1e-5)
    assert np.all(np.diff(trace.top_probs, axis=1) <= 0)
    assert trace.steps["weights"].shape == (1, 2, len(TOKENS), len(TOKENS))


def test_trace_path_is_the_recorded_forward(loaded):
    from attnviz.models import trace_layer

    trace = trace_layer(loaded, TOKENS, 1)
    recorder = PathRecorder(layers=[1])
    with torch.no_grad():
        loaded(torch.tensor([TOKENS]), recorder)
    assert trace.path == tuple(recorder.shapes)
    n = len(TOKENS)
    names = [name for name, _ in trace.path]
    assert names[:5] == ["tokens", "tok_emb", "pos_emb", "input", "block 0"]
    assert names[5:8] == ["norm1", "queries", "keys"]
    assert names[-3:] == ["block 1", "final_norm", "logits"]
    assert dict(trace.path)["tokens"] == (1, n)
    assert dict(trace.path)["weights"] == (1, 2, n, n)
    assert dict(trace.path)["logits"] == (1, n, 50257)
    assert [name for name in names if name in STAGES] == list(STAGES)


def test_switch_layer_equals_a_fresh_trace(loaded):
    from attnviz.models import switch_layer, trace_layer

    first = trace_layer(loaded, TOKENS, 0)
    switched = switch_layer(loaded, first, 1)
    fresh = trace_layer(loaded, TOKENS, 1)
    assert switched.layer == 1
    assert switched.path == fresh.path
    assert set(switched.steps) == set(fresh.steps)
    for name, tensor in fresh.steps.items():
        assert torch.equal(switched.steps[name], tensor), name
    assert np.array_equal(switched.top_ids, fresh.top_ids)
    assert first.layer == 0  # the original trace is unchanged
    assert torch.equal(switch_layer(loaded, switched, 0).steps["weights"], first.steps["weights"])


def test_non_causal_trace_and_switch(loaded):
    from attnviz.models import switch_layer, trace_layer

    trace = trace_layer(loaded, TOKENS, 0, causal=False)
    assert trace.causal is False
    assert trace.steps["weights"][0, :, 0, 1:].min() > 0
    switched = switch_layer(loaded, trace, 1)
    assert torch.equal(switched.steps["weights"], trace_layer(loaded, TOKENS, 1, causal=False).steps["weights"])
    assert all(block.att.causal for block in loaded.trf_blocks)


def test_loading_a_checkpoint_imports_no_compiler_stack(hf_small, tmp_path):
    """The skeleton is built on the meta device without the two ops whose meta kernels import torch._dynamo and
    sympy (a slow import, whose objects every later garbage collection of the server walks)."""
    import subprocess
    import sys

    path = write("hf-dir", hf_small, tmp_path / "hf-dir")
    code = f"""
import sys
from attnviz.models import load_checkpoint
model = load_checkpoint({path!r})
assert "torch._dynamo" not in sys.modules and "sympy" not in sys.modules, "the compiler stack was imported"
assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
"""
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
