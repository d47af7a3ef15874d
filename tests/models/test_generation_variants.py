"""Generation with the KV cache in a GPT whose blocks use a bonus attention (GQA, MQA, MLA, SWA): every cached step
against a full forward written here from the parameters alone (the variants' formulas, not attnviz's classes), the
cache's real shapes (K/V heads, the latent, at most W keys), and random_gpt's refusals."""

from __future__ import annotations

import math
import re

import pytest
import torch

from attnviz import kv_cache_bytes
from attnviz.models import GPTModel, cache_holds, cache_settings, check_step, check_steps, generate, random_gpt
from attnviz.models.cached_attention import CachedMultiHeadAttentionWithSWA
from attnviz.models.gpt import RANDOM_GPT_CONFIG

PROMPT = [464, 3797, 3332, 319, 262, 2603, 13, 383, 3797, 3332, 319]  # 11 tokens
NEW = 9
MODEL = {"mha": "multi-head", "gqa": "grouped-query", "mqa": "multi-query", "mla": "latent", "swa": "sliding-window"}
SETTINGS = {  # (attention, overrides): small windows so the cache drops keys during the prompt and the steps
    "mha": ("mha", {}),
    "gqa": ("gqa", {"num_kv_groups": 2}),
    "mqa": ("mqa", {}),
    "mla": ("mla", {"latent_dim": 24}),
    "swa3": ("swa", {"sliding_window_size": 3}),
    "swa16": ("swa", {"sliding_window_size": 16}),  # wider than the prompt: the window fills during the steps
}


@pytest.fixture(scope="module", params=list(SETTINGS))
def model(request):
    attention, overrides = SETTINGS[request.param]
    model = random_gpt(MODEL[attention], seed=3, **overrides)
    torch.manual_seed(4)
    with torch.no_grad():  # LayerNorms default to 1 and 0: randomised, so a skipped or swapped one shows
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5) if name.endswith("scale") else param.normal_(0.0, 0.3)
    model.variant = (attention, {**RANDOM_GPT_CONFIG, **overrides})
    return model


def layer_norm(x, p, prefix):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return p[prefix + ".scale"] * (x - mean) / torch.sqrt(var + 1e-5) + p[prefix + ".shift"]


def linear(x, p, prefix):
    out = x @ p[prefix + ".weight"].T
    return out + p[prefix + ".bias"] if prefix + ".bias" in p else out


def reference_attention(x, p, prefix, attention, cfg):
    """One attention layer over the whole sequence x (n, d): returns (weights (h, n, n), output (n, d))."""
    n, d = x.shape
    h = cfg["n_heads"]
    hd = d // h
    q = linear(x, p, prefix + ".W_query").reshape(n, h, hd).permute(1, 0, 2)  # (h, n, hd)
    if attention == "mla":
        c = linear(x, p, prefix + ".W_DKV")  # (n, latent)
        k = linear(c, p, prefix + ".W_UK").reshape(n, h, hd).permute(1, 0, 2)
        v = linear(c, p, prefix + ".W_UV").reshape(n, h, hd).permute(1, 0, 2)
    else:
        groups = {"gqa": cfg["num_kv_groups"], "mqa": 1}.get(attention, h)
        k = linear(x, p, prefix + ".W_key").reshape(n, groups, hd).permute(1, 0, 2)  # (g, n, hd)
        v = linear(x, p, prefix + ".W_value").reshape(n, groups, hd).permute(1, 0, 2)
        head_group = torch.arange(h) // (h // groups)  # query head i reads K/V head i // group_size
        k, v = k[head_group], v[head_group]  # (h, n, hd)
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    hidden = j > i
    if attention == "swa":
        hidden = hidden | (i - j >= cfg["sliding_window_size"])
    scores = (q @ k.transpose(1, 2)) / math.sqrt(hd)  # (h, n, n)
    weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    context = (weights @ v).permute(1, 0, 2).reshape(n, d)
    return weights, linear(context, p, prefix + ".out_proj")


def reference_forward(model, ids):
    """Weights (L, h, n, n) and logits (n, vocab) of a full forward, from the state dict."""
    attention, cfg = model.variant
    p = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    ids = torch.tensor(ids)
    x = p["tok_emb.weight"][ids] + p["pos_emb.weight"][: len(ids)]
    all_weights = []
    with torch.no_grad():
        for layer in range(cfg["n_layers"]):
            prefix = f"trf_blocks.{layer}"
            weights, out = reference_attention(layer_norm(x, p, prefix + ".norm1"), p, prefix + ".att", attention, cfg)
            all_weights.append(weights)
            x = x + out
            hidden = linear(layer_norm(x, p, prefix + ".norm2"), p, prefix + ".ff.layers.0")
            hidden = 0.5 * hidden * (1 + torch.tanh(math.sqrt(2 / math.pi) * (hidden + 0.044715 * hidden ** 3)))
            x = x + linear(hidden, p, prefix + ".ff.layers.2")
        logits = layer_norm(x, p, "final_norm") @ p["out_head.weight"].T
    return torch.stack(all_weights), logits


def test_every_cached_step_equals_the_full_forward_written_here(model):
    result = generate(model, PROMPT, NEW)
    ids = list(PROMPT)
    for index, step in enumerate(result.steps):
        weights, logits = reference_forward(model, result.token_ids[: len(PROMPT) + index])
        rows = weights if index == 0 else weights[:, :, -1:]  # the prefill's rows, then the new token's row
        assert step.weights.shape == tuple(rows.shape)
        assert torch.allclose(torch.from_numpy(step.weights), rows, atol=1e-5), index
        assert torch.allclose(torch.from_numpy(step.logits), logits[-1], atol=1e-5 * logits.abs().max()), index
        assert step.next_token == int(logits[-1].argmax())
        assert check_step(model, result, index).ok and check_steps(model, result)[index].ok
        if index:
            ids.append(step.fed[0])
    assert ids == result.token_ids  # each step fed the token the step before chose
    assert result.token_ids == generate(model, PROMPT, NEW, use_cache=False).token_ids


def test_the_cache_holds_the_variants_real_shapes(model):
    attention, cfg = model.variant
    h, hd = cfg["n_heads"], cfg["emb_dim"] // cfg["n_heads"]
    result = generate(model, PROMPT, NEW)
    for index, step in enumerate(result.steps):
        n = len(PROMPT) + index
        expected = {
            "mha": {"cache_k": (1, n, h, hd), "cache_v": (1, n, h, hd)},  # the book's: before the transpose
            "gqa": {"cache_k": (1, cfg["num_kv_groups"], n, hd), "cache_v": (1, cfg["num_kv_groups"], n, hd)},
            "mqa": {"cache_k": (1, 1, n, hd), "cache_v": (1, 1, n, hd)},
            "mla": {"cache_c_kv": (1, n, cfg["latent_dim"])},
            "swa": {"cache_k": (1, min(n, cfg["sliding_window_size"]), h, hd),  # the book's ch04/06_swa layout
                    "cache_v": (1, min(n, cfg["sliding_window_size"]), h, hd)},
        }[attention]
        assert step.cache_shapes == [expected] * cfg["n_layers"]
        assert step.cache_bytes == cfg["n_layers"] * sum(4 * math.prod(shape) for shape in expected.values())
        assert step.cache_bytes == kv_cache_bytes(context_length=n, **cache_settings(model))


def test_the_shape_the_generate_page_states_is_the_real_caches(model):
    """cache_holds (the Generate page's words) names each layer's cache by the shape it really has, in symbols and in
    this model's sizes, after a prefill and after a step: the book's MHA keeps (b, n, heads, head_dim)."""
    attention, cfg = model.variant
    said = cache_holds(model)
    symbolic, sized = re.search(r"shape `\((b, [^`]*)\)` = `\((1, [^`]*)\)`", said).groups()
    if attention == "mha":
        assert symbolic == "b, n, heads, head_dim", said
    model.reset_kv_cache()
    try:
        with torch.no_grad():
            model(torch.tensor([PROMPT]), use_cache=True)  # the prefill
            for n in (len(PROMPT), len(PROMPT) + 1):
                if n > len(PROMPT):
                    model(torch.tensor([[PROMPT[0]]]), use_cache=True)  # one step
                stated = eval("(" + re.sub(r"\bn\b", str(n), sized) + ")", {"min": min})
                for block in model.trf_blocks:
                    real = {name: tuple(t.shape) for name, t in block.att.cache_tensors().items()}
                    assert set(real.values()) == {stated}, (said, real)
    finally:
        model.reset_kv_cache()


def test_the_books_mha_cache_is_the_books_layout():
    """The GPT's multi-head cache is what the book's ch04/03_kv-cache code keeps: W_key(x).view(b, n, h, hd),
    appended on dim 1."""
    model = random_gpt("multi-head", seed=5).eval()
    att = model.trf_blocks[0].att
    b, h, hd = 1, att.num_heads, att.head_dim
    x = torch.randn(b, 5, att.W_key.in_features)  # (b, n, d_in)
    y = torch.randn(b, 1, att.W_key.in_features)  # (b, 1, d_in): the next token
    att.reset_cache()
    with torch.no_grad():
        att(x, use_cache=True)
        att(y, use_cache=True)
        book_k = torch.cat([att.W_key(x).view(b, 5, h, hd), att.W_key(y).view(b, 1, h, hd)], dim=1)  # (b, 6, h, hd)
        book_v = torch.cat([att.W_value(x).view(b, 5, h, hd), att.W_value(y).view(b, 1, h, hd)], dim=1)
    assert torch.equal(att.cache_k, book_k) and torch.equal(att.cache_v, book_v)
    att.reset_cache()


def test_the_sliding_window_cache_is_the_books_layout():
    """The GPT's sliding-window cache is what the book's ch04/06_swa code keeps: W_key(x).view(b, n, h, hd), appended
    on dim 1 before the transpose, its last W tokens kept (tokens first, as ch04/03_kv-cache's MHA)."""
    torch.manual_seed(5)
    att = CachedMultiHeadAttentionWithSWA(16, 16, 0.0, 4, sliding_window_size=3).eval()  # the GPT's window blocks
    b, h, hd = 1, att.num_heads, att.head_dim
    x = torch.randn(b, 5, att.W_key.in_features)  # (b, n, d_in)
    y = torch.randn(b, 1, att.W_key.in_features)  # (b, 1, d_in): the next token
    att.reset_cache()
    with torch.no_grad():
        att(x, use_cache=True)
        att(y, use_cache=True)
        book_k = torch.cat([att.W_key(x).view(b, 5, h, hd), att.W_key(y).view(b, 1, h, hd)], dim=1)[:, -3:]
        book_v = torch.cat([att.W_value(x).view(b, 5, h, hd), att.W_value(y).view(b, 1, h, hd)], dim=1)[:, -3:]
    assert att.cache_k.shape == (b, 3, h, hd)
    assert torch.equal(att.cache_k, book_k) and torch.equal(att.cache_v, book_v)
    att.reset_cache()


def test_a_reset_starts_a_new_sequence_and_the_plain_forward_is_unchanged(model):
    other = [50, 60, 70, 80, 90, 100, 110]
    first = generate(model, other, 4)
    again = generate(model, PROMPT, NEW)  # the second sequence after the first one's cache was reset
    assert again.token_ids == generate(model, PROMPT, NEW).token_ids and first.token_ids[:7] == other
    for block in model.trf_blocks:
        assert block.att.cache_tensors() == {} and block.att.ptr_current_pos == 0
    weights, logits = reference_forward(model, PROMPT)
    with torch.no_grad():
        assert torch.allclose(model(torch.tensor([PROMPT]))[0], logits, atol=1e-5 * float(logits.abs().max()))


def test_a_sliding_window_of_one_attends_to_the_token_itself_only():
    model = random_gpt("sliding-window", sliding_window_size=1)
    result = generate(model, PROMPT, 3)
    for step in result.steps[1:]:
        assert step.weights[:, :, 0, -1].min() == 1.0 and step.weights[:, :, 0, :-1].max() == 0.0
        assert step.cache_shapes[0]["cache_k"][1] == 1


@pytest.mark.parametrize("attention, settings, message", [
    ("gqa", {"num_kv_groups": 3}, "does not divide"),
    ("mla", {"latent_dim": 999}, "wider than"),
    ("swa", {"sliding_window_size": 0}, "whole number ≥ 1"),
    ("swa", {"sliding_window_size": "4"}, "whole number ≥ 1"),
    ("rnn", {}, "Unknown attention"),
])
def test_random_gpt_refuses_settings_that_cannot_work(attention, settings, message):
    with pytest.raises(ValueError, match=message):
        random_gpt(MODEL.get(attention, attention), **settings)


# ============================== cfg["attention"] and the config's keys ==============================


@pytest.mark.parametrize("name", list(MODEL))
def test_cfg_attention_takes_the_registrys_names_as_the_sidebar_and_the_url_spell_them(name):
    """``GPTModel({..., "attention": "gqa"})`` builds what ``"grouped-query"`` builds: the same classes, the same
    weights after the same seed."""
    cfg = dict(RANDOM_GPT_CONFIG)
    torch.manual_seed(5)
    short = GPTModel({**cfg, "attention": name})
    torch.manual_seed(5)
    long = GPTModel({**cfg, "attention": MODEL[name]})
    assert [type(block.att) for block in short.trf_blocks] == [type(block.att) for block in long.trf_blocks]
    assert short.state_dict().keys() == long.state_dict().keys()
    assert all(torch.equal(short.state_dict()[key], long.state_dict()[key]) for key in long.state_dict())
    assert random_gpt(name).trf_blocks[0].att.cache_tensors() == {}  # random_gpt takes them too


def test_an_unknown_attention_names_every_name_it_takes():
    with pytest.raises(ValueError, match="Unknown attention 'rnn'") as error:
        GPTModel({**RANDOM_GPT_CONFIG, "attention": "rnn"})
    for name in [*MODEL, *MODEL.values()]:
        assert name in str(error.value)


def test_rasbts_n_kv_groups_is_refused_with_attnvizs_name_for_it():
    """rasbt's ``gpt_with_kv_gqa.py`` passes ``cfg["n_kv_groups"]`` as GroupedQueryAttention's ``num_kv_groups``, the
    number of K/V heads: copied here it would silently get attnviz's default of 2."""
    cfg = {**RANDOM_GPT_CONFIG, "attention": "gqa"}
    del cfg["num_kv_groups"]
    with pytest.raises(ValueError) as error:
        GPTModel({**cfg, "n_kv_groups": 4})
    message = str(error.value)
    assert "'n_kv_groups'" in message and "'num_kv_groups'" in message and "number of K/V heads" in message
    assert GPTModel({**cfg, "num_kv_groups": 4}).trf_blocks[0].att.num_kv_groups == 4  # the renamed key works


@pytest.mark.parametrize("key, said", [
    ("qkv_bais", "'qkv_bias'"),  # a typo: the nearest known key
    ("sliding_window_stride", "every layer"),  # rasbt's SWA:full ratio: attnviz's GPT slides on every layer
    ("rope_base", "vocab_size"),  # no near key: the keys GPTModel reads are listed
])
def test_an_unknown_config_key_is_named_not_ignored(key, said):
    with pytest.raises(ValueError) as error:
        GPTModel({**RANDOM_GPT_CONFIG, key: 2})
    assert f"'{key}'" in str(error.value) and said in str(error.value)


def _without(cfg: dict, key: str) -> dict:
    return {name: value for name, value in cfg.items() if name != key}


@pytest.mark.parametrize(("cfg", "said"), [
    ({**RANDOM_GPT_CONFIG, "attention": "swa", "sliding_window_size": 0}, "sliding_window_size must be"),
    ({**RANDOM_GPT_CONFIG, "attention": "swa", "sliding_window_size": -3}, "sliding_window_size must be"),
    ({**RANDOM_GPT_CONFIG, "attention": "swa", "sliding_window_size": 2**63}, "sliding_window_size must be"),
    ({**RANDOM_GPT_CONFIG, "attention": "swa", "sliding_window_size": 2.5}, "sliding_window_size must be"),
    ({**_without(RANDOM_GPT_CONFIG, "num_kv_groups"), "attention": "gqa"}, "needs num_kv_groups"),
    ({**RANDOM_GPT_CONFIG, "attention": "gqa", "num_kv_groups": 3}, "num_kv_groups 3 does not divide the 8 heads"),
    ({**RANDOM_GPT_CONFIG, "attention": "gqa", "num_kv_groups": 0}, "num_kv_groups must be a whole number"),
    (_without(RANDOM_GPT_CONFIG, "emb_dim"), "no 'emb_dim'"),
    ({**RANDOM_GPT_CONFIG, "n_heads": 3}, "emb_dim 128 is not divisible by n_heads 3"),
    ({**RANDOM_GPT_CONFIG, "n_layers": "2"}, "n_layers must be a whole number"),
    ({**RANDOM_GPT_CONFIG, "drop_rate": 1.5}, "drop_rate must be"),
    (None, "config must be a dict"),
    ([1], "config must be a dict"),
])
def test_a_config_that_cannot_build_a_working_model_is_refused_in_words_naming_the_key(cfg, said):
    """A config that cannot build a working model (a window of 0, -3, 2**63 or 2.5, K/V groups missing or that do not
    divide the heads, a missing or indivisible width, a number of another type, not a dict) is a ValueError naming the
    key, never a model whose logits are NaN or Python's own KeyError, AssertionError or TypeError."""
    with pytest.raises(ValueError, match=said):
        GPTModel(cfg)


@pytest.mark.parametrize("window", [0, -3, 2**63])
def test_random_gpt_refuses_the_windows_gptmodel_refuses(window):
    with pytest.raises(ValueError, match="sliding_window_size must be"):
        random_gpt("swa", sliding_window_size=window)
