"""The book's Chapter 4 GPT model (``GPTModel``), built on attnviz's recording ``MultiHeadAttention``.

Class names, attribute names, constructor arguments (the book's ``cfg`` dict) and parameter-creation
order are the book's (``ch04/01_main-chapter-code/gpt.py``), so the book's ch05 ``state_dict`` loads
unchanged.  Four additions, none of which changes the result of a config the book's class takes:

* ``cfg`` may carry ``ln_eps`` (default 1e-5, the book's ``LayerNorm.eps``; GPT-2 configs say
  ``layer_norm_epsilon``);
* ``forward`` takes an optional :class:`PathRecorder`.  Without one, the forward pass is the book's;
  with one, the *same* code also records the (stage, shape) path of the whole model, the residual
  stream entering every block, and a full :class:`~attnviz.attention.Recorder` of the blocks asked for
  (``norm1``, then ``att``'s named steps, then the rest of the block);
* a KV cache as the book's bonus code builds one (``ch04/03_kv-cache``): ``forward(..., use_cache=True)``
  feeds only the new tokens, each block's :class:`CachedMultiHeadAttention` appends their keys and values
  to ``cache_k``/``cache_v`` and masks from ``ptr_current_pos``, the model's position embedding starts at
  ``current_pos``; ``reset_kv_cache()`` empties every cache and both positions.  ``use_cache=False`` (the
  default) is the book's plain forward, unchanged;
* ``cfg["attention"]`` (default multi-head, the book's) may name a bonus attention, as the book's
  ``gpt_with_kv_gqa.py`` / ``_mla.py`` / ``_swa.py`` swap the block's attention: grouped-query
  (``cfg["num_kv_groups"]`` K/V heads), multi-query (one), latent (``cfg["latent_dim"]``) or sliding-window
  (``cfg["sliding_window_size"]``) — :data:`ATTENTIONS`, or the registry's names of the same variants (``gqa``
  …, :data:`BY_VARIANT`, as the sidebar and the URL spell them) —
  each with the cache it really keeps (:mod:`attnviz.models.cached_attention`).  :func:`random_gpt` builds a
  small one with random weights: its text is noise, its cache has the variant's real shapes.

A key ``cfg`` has that GPTModel does not read is refused by name (:func:`check_config`), not ignored: a config
copied from the book's bonus scripts (``n_kv_groups``) would otherwise build with attnviz's default.  A missing
key, or a value that cannot build a working model (a window of 0, a K/V group count that does not divide the heads),
is refused the same way, in words naming the key, by ``GPTModel``, ``TransformerBlock``, ``FeedForward`` and
``LayerNorm`` alike; so is a model whose weights would need more memory than the machine has free, before any is
allocated (:func:`check_memory`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn

from attnviz import rng, variants
from attnviz.attention import MultiHeadAttention, Recorder, check_context, check_tokens_fit, record
from attnviz.config import MAX_SEED
from attnviz.memory import check_memory
from attnviz.models.cached_attention import (
    CachedGroupedQueryAttention,
    CachedMultiHeadAttentionWithSWA,
    CachedMultiHeadLatentAttention,
    KeyValueCache,
)

# The book's GPT_CONFIG_124M (Chapter 4): GPT-2 small.
GPT_CONFIG_124M = {
    "vocab_size": 50257,  # vocabulary size (tiktoken's GPT-2 encoding)
    "context_length": 1024,  # positions in pos_emb
    "emb_dim": 768,  # embedding dimension
    "n_heads": 12,  # attention heads per block
    "n_layers": 12,  # transformer blocks
    "drop_rate": 0.1,  # dropout rate
    "qkv_bias": False,  # the book trains without query/key/value biases; OpenAI's GPT-2 has them
}


class LayerNorm(nn.Module):
    """Section 4.2: normalise the last dimension (biased variance), then ``scale`` and ``shift``."""

    def __init__(self, emb_dim: int, eps: float = 1e-5):
        super().__init__()
        _whole_number("emb_dim", emb_dim)
        _positive_number("eps", eps)
        check_memory("LayerNorm", {"scale and shift, 2 × emb_dim": 2 * emb_dim}, "emb_dim")
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)  # (b, n, d) -> (b, n, 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (b, n, d) -> (b, n, 1)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)  # (b, n, d)
        return self.scale * norm_x + self.shift  # (d,) * (b, n, d) + (d,) -> (b, n, d)


class GELU(nn.Module):
    """Section 4.3: the tanh approximation of GELU that GPT-2 was trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1 + torch.tanh(
            torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))
        ))  # elementwise: (...) -> (...)


class FeedForward(nn.Module):
    """Section 4.3: ``layers`` = Linear(d, 4d), GELU, Linear(4d, d)."""

    def __init__(self, cfg: dict):
        super().__init__()
        check_config(cfg, "FeedForward")
        self.layers = nn.Sequential(
            nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]),
            GELU(),
            nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)  # (b, n, d) -> (b, n, 4d) -> (b, n, d)


class CachedMultiHeadAttention(KeyValueCache, MultiHeadAttention):
    """The book's ``MultiHeadAttention`` with its bonus KV cache (``ch04/03_kv-cache``).

    ``forward(x, recorder=None, use_cache=False)``: without the cache it is the plain class's forward.  With
    it, ``x`` holds only the tokens not seen yet; their keys and values are appended to ``cache_k`` and
    ``cache_v`` and the queries attend over everything cached, masked from ``ptr_current_pos`` (the position
    of ``x``'s first token), which then advances by the number of new tokens.  ``reset_cache()`` empties the
    cache and sets the position back to 0.

    The cache is kept as the book keeps it, before the heads are transposed: ``(b, n, num_heads, head_dim)``,
    the new tokens appended on dim 1 (:attr:`cache_token_axis`), and transposed to ``(b, num_heads, n, head_dim)``
    after.  :meth:`cache_tensors` names what the cache holds, so a variant that keeps something else (a latent per
    token, K/V heads kept after the transpose as the book's ``04_gqa`` keeps them)
    reports its own tensors the same way.
    """

    cache_token_axis = 1  # cache_k/cache_v (b, n, h, hd): the tokens are dim 1, as in the book

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.init_cache()

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None, use_cache: bool = False) -> torch.Tensor:
        if not use_cache:
            return super().forward(x, recorder)
        b, num_tokens, d_in = x.shape  # (b, q, d_in): only the new tokens
        check_context(self, num_tokens, self.ptr_current_pos)  # past the mask's rows: words, and the cache unchanged
        keys_new = self.W_key(x)  # (b, q, d_in) -> (b, q, d_out)
        queries = self.W_query(x)  # (b, q, d_out)
        values_new = self.W_value(x)  # (b, q, d_out)
        record(recorder, "queries", queries)

        keys_new = keys_new.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, q, d_out) -> (b, q, h, hd)
        values_new = values_new.view(b, num_tokens, self.num_heads, self.head_dim)  # (b, q, h, hd)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # -> (b, h, q, hd)

        if self.cache_k is None:
            self.cache_k, self.cache_v = keys_new, values_new  # (b, q, h, hd) each
        else:
            # (b, k, h, hd) + (b, q, h, hd) -> (b, k+q, h, hd)
            self.cache_k = torch.cat([self.cache_k, keys_new], dim=1)
            self.cache_v = torch.cat([self.cache_v, values_new], dim=1)  # (b, k+q, h, hd)
        keys = self.cache_k.transpose(1, 2)  # (b, k, h, hd) -> (b, h, k, hd): every token so far, the new ones last
        values = self.cache_v.transpose(1, 2)  # (b, k, h, hd) -> (b, h, k, hd)
        record(recorder, "keys", keys)
        record(recorder, "values", values)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, q, hd) @ (b, h, hd, k) -> (b, h, q, k)
        record(recorder, "scores", attn_scores)
        attn_scores = attn_scores / keys.shape[-1] ** 0.5  # ÷√head_dim -> (b, h, q, k)
        record(recorder, "scaled", attn_scores, copy=self.causal)
        num_tokens_Q, num_tokens_K = queries.shape[-2], keys.shape[-2]
        if self.causal:
            mask_bool = self.mask.bool()[
                self.ptr_current_pos:self.ptr_current_pos + num_tokens_Q, :num_tokens_K
            ]  # (ctx, ctx) -> (q, k): the rows of the new tokens' positions
            attn_scores.masked_fill_(mask_bool, -torch.inf)  # (b, h, q, k)
        self.ptr_current_pos += num_tokens_Q
        record(recorder, "masked", attn_scores)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, h, q, k), each row sums to 1
        record(recorder, "weights", attn_weights)
        attn_weights = self.dropout(attn_weights)  # (b, h, q, k)
        record(recorder, "dropped", attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)  # (b, h, q, k) @ (b, h, k, hd) -> (b, q, h, hd)
        record(recorder, "context", context_vec.transpose(1, 2))  # per head: (b, h, q, hd)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)  # (b, q, h, hd) -> (b, q, d_out)
        context_vec = self.out_proj(context_vec)  # (b, q, d_out) -> (b, q, d_out)
        record(recorder, "output", context_vec)
        return context_vec


MULTI_HEAD, GROUPED_QUERY, MULTI_QUERY, LATENT, SLIDING_WINDOW = ATTENTIONS = (
    "multi-head", "grouped-query", "multi-query", "latent", "sliding-window")  # what cfg["attention"] may name
# the registry's names of the same attentions (the sidebar's and the URL's): cfg["attention"] may say those too
BY_VARIANT = {variants.MHA: MULTI_HEAD, variants.GQA: GROUPED_QUERY, variants.MQA: MULTI_QUERY,
              variants.MLA: LATENT, variants.SWA: SLIDING_WINDOW}

# the keys GPTModel reads: the book's GPT_CONFIG_124M, then attnviz's additions
CONFIG_KEYS = ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers", "drop_rate", "qkv_bias", "ln_eps",
               "attention", "num_kv_groups", "latent_dim", "sliding_window_size")
# keys of the book's bonus scripts that attnviz names or builds differently: what to do instead
_OTHER_KEYS = {
    "n_kv_groups": "attnviz names it 'num_kv_groups': the number of K/V heads, as rasbt's gpt_with_kv_gqa.py passes "
                   "cfg['n_kv_groups'] to GroupedQueryAttention's num_kv_groups. Rename the key.",
    "sliding_window_stride": "GPTModel(cfg) slides its window on every layer (rasbt's gpt_with_kv_swa.py mixes "
                             "sliding-window and full layers by this ratio; a checkpoint saved with it in its config "
                             "loads with that schedule: models.load_checkpoint): remove the key.",
}


def attention_name(cfg: dict) -> str:
    """``cfg["attention"]`` as one of :data:`ATTENTIONS` (default multi-head); a registry name (``gqa``, the
    sidebar's and the URL's) is taken as the attention it names.  ValueError naming every name taken otherwise."""
    attention = cfg.get("attention", MULTI_HEAD)
    if attention in ATTENTIONS:
        return attention
    if isinstance(attention, str) and attention in BY_VARIANT:
        return BY_VARIANT[attention]
    names = ", ".join(f"{long} ({short})" for short, long in BY_VARIANT.items())
    raise ValueError(f"Unknown attention {attention!r}; choose one of {names}.")


# the book's GPT_CONFIG_124M keys: every GPTModel config names them
REQUIRED_KEYS = tuple(GPT_CONFIG_124M)
# what each class that takes the book's cfg reads from it (GPTModel all of the book's keys; attnviz's own have defaults)
READS = {"GPTModel": REQUIRED_KEYS,
         "TransformerBlock": ("context_length", "emb_dim", "n_heads", "drop_rate", "qkv_bias"),
         "FeedForward": ("emb_dim",)}
# the most blocks GPTModel builds: it builds them one after the other, so 10**9 small blocks would run for hours
# before memory ran out; the deepest GPTs published have about 100 (GPT-3: 96)
MAX_LAYERS = 1000
# the largest sliding_window_size taken: far past any context (a window as long as the context already covers every
# position, so the layer runs full causal attention); torch's int64 mask arithmetic overflows near 2**63
MAX_WINDOW = 2**31 - 1


def check_config(cfg: dict, reader: str = "GPTModel") -> None:
    """ValueError, in words naming the key and what it must be, for a ``cfg`` ``reader`` (a key of :data:`READS`:
    GPTModel, TransformerBlock, FeedForward) cannot build a working model from: not a dict, a key it reads missing,
    a size that is not a positive whole number (``n_layers`` at most :data:`MAX_LAYERS`), a head count that does not
    divide the width, the variant's own setting (:func:`check_settings`), a key GPTModel does not read
    (:func:`check_keys`), rather than building without it; and weights that need more memory than the machine has
    free (:func:`check_memory`), before any is allocated."""
    reads = READS[reader]
    if not isinstance(cfg, dict):
        raise ValueError(f"{reader}'s config must be a dict of the book's keys ({', '.join(reads)}), "
                         f"got {type(cfg).__name__} {cfg!r:.80}.")
    if reader != "FeedForward":  # a block reads the attention's settings too: a misspelt one would be ignored
        check_keys(cfg, reader)
    missing = [key for key in reads if key not in cfg]
    if missing:
        raise ValueError(f"The config has no {', '.join(map(repr, missing))}: {reader} reads the book's "
                         f"GPT_CONFIG_124M keys ({', '.join(reads)}).")
    for key in ("vocab_size", "context_length", "emb_dim", "n_heads"):
        if key in reads:
            _whole_number(key, cfg[key])
    if "n_layers" in reads and (isinstance(cfg["n_layers"], bool) or not isinstance(cfg["n_layers"], int)
                                or not 1 <= cfg["n_layers"] <= MAX_LAYERS):
        raise ValueError(f"n_layers must be a whole number from 1 to {MAX_LAYERS:,} ({reader} builds its blocks one "
                         f"after the other; the deepest GPTs have about 100), got {cfg['n_layers']!r:.40}.")
    if "drop_rate" in reads:
        drop = cfg["drop_rate"]
        if isinstance(drop, bool) or not isinstance(drop, int | float) or not 0 <= drop < 1:
            raise ValueError(f"drop_rate must be a number from 0 up to (not including) 1, got {drop!r}.")
    if "qkv_bias" in reads and not isinstance(cfg["qkv_bias"], bool):
        raise ValueError(f"qkv_bias must be True or False, got {cfg['qkv_bias']!r}.")
    if "n_heads" in reads:
        _positive_number("ln_eps", cfg.get("ln_eps", 1e-5))
        if cfg["emb_dim"] % cfg["n_heads"]:
            raise ValueError(f"emb_dim {cfg['emb_dim']} is not divisible by n_heads {cfg['n_heads']}.")
        check_settings(cfg, attention_name(cfg))
    check_memory(reader, model_numbers(cfg, reader), "emb_dim" if reader == "FeedForward" else
                 "emb_dim or context_length" if reader == "TransformerBlock" else
                 "vocab_size, context_length, emb_dim or n_layers")


def model_numbers(cfg: dict, reader: str = "GPTModel") -> dict[str, int]:
    """The float32 numbers ``reader`` (GPTModel, TransformerBlock, FeedForward) holds for a checked ``cfg``: every
    parameter and buffer, by part (its name, with the sizes that make it), exactly as the classes build them."""
    d = cfg["emb_dim"]
    feed_forward = 8 * d * d + 5 * d  # Linear(d, 4d) and Linear(4d, d), with biases
    if reader == "FeedForward":
        return {"the feed-forward layers, 8 × emb_dim² + 5 × emb_dim": feed_forward}
    attention, bias = attention_name(cfg), int(cfg["qkv_bias"])
    att = d * d + bias * d + d * d  # W_query; out_proj (its bias below)
    if attention in (GROUPED_QUERY, MULTI_QUERY):
        kv = (1 if attention == MULTI_QUERY else cfg["num_kv_groups"]) * (d // cfg["n_heads"])  # K/V heads × head_dim
        att += 2 * (d * kv + bias * kv)  # W_key, W_value; out_proj has no bias, as the book's GQA
    elif attention == LATENT:
        latent = cfg.get("latent_dim") or max(16, d // 8)
        att += d * latent + bias * latent + 2 * (latent * d + bias * d) + d  # W_DKV, W_UK, W_UV; out_proj's bias
    else:
        att += 2 * (d * d + bias * d) + d  # W_key, W_value; out_proj's bias
    mask = cfg["context_length"] ** 2 if attention == MULTI_HEAD else 0  # the book's (ctx, ctx) causal mask buffer
    block = att + feed_forward + 4 * d  # + norm1 and norm2 (scale and shift)
    if reader == "TransformerBlock":
        return {"the attention and feed-forward weights, about 12 × emb_dim²": block,
                "the causal mask, context_length²": mask}
    layers = cfg["n_layers"]
    return {"tok_emb and out_head, 2 × vocab_size × emb_dim": 2 * cfg["vocab_size"] * d,
            "pos_emb, context_length × emb_dim": cfg["context_length"] * d,
            "the blocks' weights, n_layers × about 12 × emb_dim²": layers * block,
            "the blocks' causal masks, n_layers × context_length²": layers * mask,
            "final_norm": 2 * d}


def check_keys(cfg: dict, reader: str = "GPTModel") -> None:
    """ValueError naming a key of ``cfg`` that GPTModel does not read, with what to write instead: attnviz's name
    for a key of the book's bonus scripts, a near known key, or the known keys."""
    for key in cfg:
        if key in CONFIG_KEYS:
            continue
        if key in _OTHER_KEYS:
            hint = _OTHER_KEYS[key]
        elif near := difflib.get_close_matches(str(key), CONFIG_KEYS, n=1, cutoff=0.7):
            hint = f"did you mean {near[0]!r}?"
        else:
            hint = f"{reader} reads {', '.join(CONFIG_KEYS)}."
        raise ValueError(f"The config has a key {reader} does not read, {key!r}: {hint}")


def check_settings(cfg: dict, attention: str) -> None:
    """ValueError in words for the setting ``attention`` (one of :data:`ATTENTIONS`) reads from ``cfg``:
    grouped-query's ``num_kv_groups`` (required, a whole number dividing ``n_heads``), latent's ``latent_dim`` (at
    most ``emb_dim``), sliding-window's ``sliding_window_size`` (1 … :data:`MAX_WINDOW`; None or absent: causal)."""
    if attention == GROUPED_QUERY:
        if cfg.get("num_kv_groups") is None:
            raise ValueError("A grouped-query config needs num_kv_groups: the number of K/V heads, a whole number "
                             f"dividing the {cfg['n_heads']} heads.")
        groups = _whole_number("num_kv_groups", cfg["num_kv_groups"])
        if cfg["n_heads"] % groups:
            raise ValueError(f"num_kv_groups {groups} does not divide the {cfg['n_heads']} heads: each K/V head is "
                             "shared by the same number of query heads.")
    latent = cfg.get("latent_dim")
    if attention == LATENT and latent is not None and _whole_number("latent_dim", latent) > cfg["emb_dim"]:
            raise ValueError(f"latent_dim {cfg['latent_dim']} is wider than the model's {cfg['emb_dim']}.")
    if attention == SLIDING_WINDOW and cfg.get("sliding_window_size") is not None:
        check_window(cfg["sliding_window_size"])


def check_window(window) -> int:
    """``window`` when it is a whole number from 1 to :data:`MAX_WINDOW`; ValueError in words otherwise."""
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"sliding_window_size must be a whole number ≥ 1 and at most {MAX_WINDOW:,} (a window as "
                         f"long as the context already covers every position), got {window!r:.40}.")
    return window


def _whole_number(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a whole number ≥ 1, got {value!r:.40}.")
    return value


def _positive_number(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{key} must be a small positive number, got {value!r:.40}.")
    return value


def build_attention(cfg: dict) -> nn.Module:
    """The block's attention for ``cfg["attention"]`` (default multi-head), every one with its KV cache."""
    attention = attention_name(cfg)
    common = {"d_in": cfg["emb_dim"], "d_out": cfg["emb_dim"], "num_heads": cfg["n_heads"],
              "dropout": cfg["drop_rate"], "qkv_bias": cfg["qkv_bias"]}
    if attention == MULTI_HEAD:
        return CachedMultiHeadAttention(context_length=cfg["context_length"], **common)
    if attention in (GROUPED_QUERY, MULTI_QUERY):
        groups = 1 if attention == MULTI_QUERY else cfg["num_kv_groups"]  # the NUMBER of K/V heads
        return CachedGroupedQueryAttention(num_kv_groups=groups, **common)
    if attention == LATENT:
        return CachedMultiHeadLatentAttention(latent_dim=cfg.get("latent_dim"), **common)
    if attention == SLIDING_WINDOW:
        return CachedMultiHeadAttentionWithSWA(sliding_window_size=cfg.get("sliding_window_size"), **common)
    raise AssertionError(attention)  # attention_name returns one of ATTENTIONS


class TransformerBlock(nn.Module):
    """Section 4.5: pre-LayerNorm attention and feed-forward, each with a shortcut connection.

    ``forward(x, recorder=None)``: with a :class:`Recorder`, records ``norm1`` (the LayerNorm'd block input,
    kept: it is what the attention sees), ``att``'s named steps, then the shapes of ``shortcut1``,
    ``norm2``, ``ff`` and ``shortcut2``.  ``use_cache`` is passed to ``att``.
    """

    def __init__(self, cfg: dict):
        super().__init__()
        check_config(cfg, "TransformerBlock")
        self.att = build_attention(cfg)  # the book's CachedMultiHeadAttention, or the variant cfg names
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"], eps=cfg.get("ln_eps", 1e-5))
        self.norm2 = LayerNorm(cfg["emb_dim"], eps=cfg.get("ln_eps", 1e-5))
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None, use_cache: bool = False) -> torch.Tensor:
        # Shortcut connection for the attention block
        shortcut = x  # (b, n, d)
        x = self.norm1(x)  # (b, n, d)
        record(recorder, "norm1", x)
        # (b, n, d) -> (b, n, d), att records its named steps; with the cache n = the new tokens only
        x = self.att(x, recorder, use_cache=True) if use_cache else self.att(x, recorder)
        x = self.drop_shortcut(x)  # (b, n, d)
        x = x + shortcut  # add the original input back -> (b, n, d)
        record(recorder, "shortcut1", x, keep=False)

        # Shortcut connection for the feed-forward block
        shortcut = x  # (b, n, d)
        x = self.norm2(x)  # (b, n, d)
        record(recorder, "norm2", x, keep=False)
        x = self.ff(x)  # (b, n, d) -> (b, n, d)
        record(recorder, "ff", x, keep=False)
        x = self.drop_shortcut(x)  # (b, n, d)
        x = x + shortcut  # (b, n, d)
        record(recorder, "shortcut2", x, keep=False)
        return x


class PathRecorder:
    """What :meth:`GPTModel.forward` records when one is passed.

    * ``shapes``: (stage, shape) of the whole path, in order: ``tokens``, ``tok_emb``, ``pos_emb``,
      ``input``; per block the traced block's own entries (``norm1``, ``att``'s steps, …) and then
      ``block i`` (the block's output); ``final_norm``, ``logits``.
    * ``blocks``: {layer: Recorder} for every layer in ``layers`` (``recorder_factory(layer)``, default a
      plain :class:`Recorder` that keeps every step).
    * ``block_inputs``: the residual stream entering every block, detached, when ``keep_block_inputs``.
    """

    def __init__(
        self,
        layers: Iterable[int] = (),
        keep_block_inputs: bool = False,
        recorder_factory: Callable[[int], Recorder] | None = None,
    ):
        self.layers = frozenset(layers)
        self.keep_block_inputs = keep_block_inputs
        self.recorder_factory = recorder_factory or (lambda index: Recorder())
        self.shapes: list[tuple[str, tuple[int, ...]]] = []
        self.blocks: dict[int, Recorder] = {}
        self.block_inputs: list[torch.Tensor] = []

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self.shapes.append((name, tuple(tensor.shape)))

    def enter_block(self, index: int, x: torch.Tensor) -> Recorder | None:
        if self.keep_block_inputs:
            self.block_inputs.append(x.detach())
        if index not in self.layers:
            return None
        self.blocks[index] = self.recorder_factory(index)
        return self.blocks[index]

    def leave_block(self, index: int, x: torch.Tensor) -> None:
        if index in self.blocks:
            self.shapes.extend(self.blocks[index].shapes)
        self.add(f"block {index}", x)


class GPTModel(nn.Module):
    """Section 4.6: token + position embeddings, ``n_layers`` transformer blocks, final norm, output head.

    ``forward(in_idx, recorder=None, use_cache=False)``; with ``use_cache`` the tokens sit at positions
    ``current_pos``… (the book's bonus KV cache), after a ``reset_kv_cache()`` that starts a new sequence.
    """

    def __init__(self, cfg: dict):
        super().__init__()
        check_config(cfg)
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])

        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])

        self.final_norm = LayerNorm(cfg["emb_dim"], eps=cfg.get("ln_eps", 1e-5))
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
        self.current_pos = 0  # the position of the next token fed with use_cache=True

    def check_positions(self, num_tokens: int, start: int = 0) -> None:
        """ValueError in words (:func:`attnviz.attention.check_tokens_fit`) when ``num_tokens`` tokens at positions
        ``start`` … (``current_pos`` with the cache) run past the ``context_length`` positions ``pos_emb`` holds,
        where the book's forward would hand torch an index out of range."""
        context_length = self.pos_emb.num_embeddings
        check_tokens_fit(num_tokens, start, context_length, argument="in_idx",
                         limit=f"the {context_length:,} positions this GPTModel's pos_emb holds (its context_length)",
                         cut=f"in_idx[:, -{context_length}:] (the last ones, as the book's generate_text_simple keeps "
                             f"them)", reset="reset_kv_cache()")

    def forward(
        self, in_idx: torch.Tensor, recorder: PathRecorder | None = None, use_cache: bool = False
    ) -> torch.Tensor:
        batch_size, seq_len = in_idx.shape  # (b, n) token ids
        self.check_positions(seq_len, self.current_pos if use_cache else 0)
        tok_embeds = self.tok_emb(in_idx)  # (b, n) -> (b, n, d)
        if use_cache:
            pos_ids = torch.arange(self.current_pos, self.current_pos + seq_len, device=in_idx.device)  # (n,)
            self.current_pos += seq_len
        else:
            pos_ids = torch.arange(seq_len, device=in_idx.device)  # (n,): 0 … n-1
        pos_embeds = self.pos_emb(pos_ids)  # (n,) -> (n, d)
        x = tok_embeds + pos_embeds  # (b, n, d) + (n, d) -> (b, n, d)
        x = self.drop_emb(x)  # (b, n, d)
        if recorder is not None:
            for name, tensor in (("tokens", in_idx), ("tok_emb", tok_embeds), ("pos_emb", pos_embeds), ("input", x)):
                recorder.add(name, tensor)
        for index, block in enumerate(self.trf_blocks):  # = the book's self.trf_blocks(x), one block at a time
            block_recorder = recorder.enter_block(index, x) if recorder is not None else None
            x = block(x, block_recorder, use_cache=use_cache)  # (b, n, d) -> (b, n, d)
            if recorder is not None:
                recorder.leave_block(index, x)
        x = self.final_norm(x)  # (b, n, d)
        logits = self.out_head(x)  # (b, n, d) -> (b, n, vocab)
        if recorder is not None:
            recorder.add("final_norm", x)
            recorder.add("logits", logits)
        return logits

    def reset_kv_cache(self) -> None:
        """Empty every block's KV cache and set the positions back to 0 (a new sequence starts)."""
        for block in self.trf_blocks:
            block.att.reset_cache()
        self.current_pos = 0


def check_model(model) -> GPTModel:
    """``model`` when it is a GPTModel (``random_gpt``'s, a loaded checkpoint's); a ValueError naming what came
    instead: the one check every function of ``attnviz.models`` that takes a model makes first."""
    if not isinstance(model, GPTModel):
        raise ValueError(f"model must be an attnviz.models.GPTModel (random_gpt, or a loaded checkpoint), got "
                         f"{type(model).__name__}.")
    return model


def whole_number_in(value, name: str, low: int, high: int) -> int:
    """``value`` as a whole number from ``low`` to ``high``, or a ValueError naming ``name``, the range and what came
    (True, 1.0 and "1" are refused: a count or an index given as another type is a slip to point out, not to read)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}.")
    return int(value)


def yes_or_no(value, name: str) -> bool:
    """``value`` when it is True or False, or a ValueError naming ``name`` and what came, as a config's yes/no settings
    say it ("False", 0 or None would otherwise be read by their truth: the string "False" as yes)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


# A small GPT for showing a variant's cache: GPT-2's vocabulary (the page's tokens), the bundled model's context.
RANDOM_GPT_CONFIG = {
    "vocab_size": 50257,
    "context_length": 256,
    "emb_dim": 128,
    "n_heads": 8,  # head_dim 16
    "n_layers": 2,
    "drop_rate": 0.0,
    "qkv_bias": False,
    "num_kv_groups": 2,  # gqa: 2 K/V heads, each shared by 4 query heads
    "latent_dim": 32,  # mla: a 32-wide latent instead of 2 × 128 keys and values per token
    "sliding_window_size": 16,  # swa: each query sees itself and the 15 tokens before it
}


def random_gpt(attention: str, seed: int = 123, **settings) -> GPTModel:
    """A :data:`RANDOM_GPT_CONFIG` GPTModel with ``attention`` (one of :data:`ATTENTIONS`, or its registry name
    ``gqa`` …) and random weights (``torch.manual_seed(seed)``), in eval mode.  ``settings`` override the config
    (``num_kv_groups``, ``latent_dim``, ``sliding_window_size``, …).  Its text is noise: it exists to show the
    cache's real shapes."""
    seed = whole_number_in(seed, "seed", 0, MAX_SEED)
    attention = attention_name({"attention": attention})
    check_keys(settings)
    cfg = {**RANDOM_GPT_CONFIG, **settings, "attention": attention}
    check_config(cfg)  # the sizes first: the settings below are read against them
    for name in ("num_kv_groups", "latent_dim"):  # checked for every variant, as the sidebar's settings are
        _whole_number(name, cfg[name])
    check_settings(cfg, attention)
    check_window(cfg["sliding_window_size"])
    with rng.seeded(seed):
        model = GPTModel(cfg)
    return model.eval()
