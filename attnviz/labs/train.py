"""Train a small model of the book's ``GPTModel`` and watch its heads form; ``attnviz train`` runs it.

Data is made here or ships with Python — nothing is downloaded:

* repeated random tokens: ``[BOS] + random prefix + x + x`` with ``|x| = T`` drawn per sequence (ids
  1,000–30,000, as TransformerLens' induction demo), so the repeat starts at a different position every
  time and only content (not absolute position) can find it;
* English and code: the standard library's ``pydoc_data.topics`` and the source of a few
  stdlib modules, split by topic / module into training and held-out parts (``text_tokens``).

``train(cfg, on_step, should_stop)`` runs the loop and reports each step's loss and, every
``cfg.probe_every`` steps, every head's induction and previous-token stripe on a fixed probe batch —
what the Train page draws live.  ``save`` writes a checkpoint ``attnviz.models.load_checkpoint`` reads
(a GPT-2 style directory: ``model.safetensors`` + ``config.json`` + ``training.json``).

The logits of a training step are computed over a sampled part of the vocabulary (every target in the
batch plus ``cfg.negatives`` uniformly drawn ids): the full 50,257-way softmax would dominate a step's
cost on a CPU and is not what forms the heads.  ``per_position_loss`` always uses the full vocabulary.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from attnviz.head_types import BOS_ID, induction_stripe, previous_token_stripe, repeated_random_tokens

VOCAB_SIZE = 50257
EVAL_SEED = 12_345  # the seed of the scores a checkpoint's metadata records (tests draw fresh ones)
RANDOM_LOW, RANDOM_HIGH = 1000, 30000  # id range of the random tokens (TransformerLens' induction demo)

# Held-out code for the previous-token test: modules never used in training.
TRAIN_CODE_MODULES = ("argparse", "textwrap", "dataclasses", "string", "fnmatch", "bisect", "glob", "shlex",
                      "calendar", "difflib", "csv", "configparser", "gettext", "pprint", "tokenize", "abc")
HELDOUT_CODE_MODULES = ("fractions", "heapq", "colorsys", "statistics", "graphlib", "copy")


@dataclass
class TrainConfig:
    """Everything that decides a run (stored in the checkpoint's metadata).

    The defaults are the recipe that forms a textbook induction circuit on a CPU (benchmarks/results/
    train_recipe.md): 2 layers × 2 heads, 128 wide, attention-only, the token embedding frozen at random,
    block 0's value/output maps random and frozen (its heads can only learn *where* to look), trained on
    repeated random tokens alone.  Layer 0's heads become previous-token heads and layer 1's an induction
    head in the same sudden phase change (benchmarks/README.md, "Numbers moved out of the code": the steps at
    which it comes, per seed).
    """

    steps: int = 4000
    seed: int = 0
    # the book's GPTModel config (cfg keys in book_cfg())
    n_layers: int = 2
    n_heads: int = 2
    emb_dim: int = 128
    context_length: int = 256
    drop_rate: float = 0.0
    qkv_bias: bool = True
    tie_embeddings: bool = True  # out_head shares tok_emb's weights (as GPT-2): copying a rare token needs it
    embedding_std: float = 0.1  # tok_emb and pos_emb start N(0, std²); never weight-decayed
    sinusoidal_init: bool = True  # pos_emb starts as the original Transformer's sinusoids (std embedding_std; learned)
    frozen_embeddings: bool = True  # tok_emb (and the tied out_head) stay at their random init: every id alike
    attention_only: bool = True  # every ff's output layer is zero and frozen: the blocks are attention-only
    random_ov_heads: int = 2  # block 0's heads 0…k-1: W_value and out_proj slices random N(0, 1/d), frozen
    # data
    seq_len: int = 128  # tokens per training sequence (BOS included)
    batch_size: int = 32
    text_fraction: float = 0.0  # share of each batch that is English/code
    skip_fraction: float = 0.0  # share that is skip_batch (copy the token two back); the rest: repeat_batch
    repeat_lengths: tuple[int, ...] = ()  # each step's repeats have one of these lengths (as many tokens); () = seq_len
    skip_first: int = 0  # curriculum: the first steps have no repeats (only skip + text): previous-token heads first
    min_repeat: int = 8
    max_repeat: int = 60
    max_copies: int = 4  # x is repeated up to this many times (more copies: more to predict per sequence)
    bos: bool = True  # every sequence starts with <|endoftext|> (50256)
    # optimisation
    lr: float = 5e-3
    warmup_steps: int = 100
    weight_decay: float = 0.0
    negatives: int = 512  # uniformly sampled vocabulary ids added to each step's logits
    predictable_only: bool = True  # random data: count only tokens that earlier ones determine (no noise)
    probe_every: int = 50  # measure the heads every k steps (and at the first and last step)

    def validate(self) -> TrainConfig:
        """This config, or ValueError naming the first field that cannot train (a switch that is not true or false,
        a size below 1, a negative count, a rate ≤ 0 or not finite, a fraction outside [0, 1], heads that do not
        divide emb_dim, sequences longer than the context or too short for a repeat, repeat lengths that are not
        whole numbers from the shortest repeat to ``seq_len``)."""
        for name in ("qkv_bias", "tie_embeddings", "sinusoidal_init", "frozen_embeddings", "attention_only", "bos",
                     "predictable_only"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("steps", "n_layers", "n_heads", "emb_dim", "context_length", "seq_len", "batch_size",
                     "min_repeat", "max_repeat", "max_copies", "probe_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        for name in ("seed", "warmup_steps", "skip_first", "random_ov_heads", "negatives"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number of at least 0, got {value!r}")
        for name in ("drop_rate", "text_fraction", "skip_fraction", "embedding_std", "weight_decay", "lr"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"{name} must be a number of at least 0, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        for name in ("drop_rate", "text_fraction", "skip_fraction"):
            if getattr(self, name) > 1:
                raise ValueError(f"{name} is a fraction from 0 to 1, got {getattr(self, name)!r}")
        if self.lr <= 0:
            raise ValueError(f"lr must be above 0, got {self.lr!r}")
        if self.emb_dim % self.n_heads:
            raise ValueError(f"emb_dim ({self.emb_dim}) must be a multiple of n_heads ({self.n_heads})")
        if self.seq_len > self.context_length:
            raise ValueError(f"seq_len ({self.seq_len}) must be at most context_length ({self.context_length})")
        # [BOS] + x x with |x| = min_repeat: the shortest sequence repeat_batch draws a repeat in (and a probe fits)
        shortest = int(self.bos) + 2 * self.min_repeat
        fits = f"{'BOS and ' if self.bos else ''}x x, |x| = min_repeat ({self.min_repeat})"
        if self.seq_len < shortest:
            raise ValueError(f"seq_len must be at least {shortest} ({fits}), got {self.seq_len}")
        lengths = self.repeat_lengths
        if not isinstance(lengths, list | tuple) or not all(
                isinstance(length, int) and not isinstance(length, bool) for length in lengths):
            raise ValueError(f"repeat_lengths must be a list of whole numbers, got {lengths!r}")
        for length in lengths:  # a step's rows hold batch_size × seq_len tokens: a shorter repeat gives more rows
            if not shortest <= length <= self.seq_len:
                raise ValueError(f"each of repeat_lengths must be from {shortest} ({fits}) to seq_len "
                                 f"({self.seq_len}), got {length}")
        if self.min_repeat > self.max_repeat:
            raise ValueError(f"min_repeat ({self.min_repeat}) must be at most max_repeat ({self.max_repeat})")
        return self

    def book_cfg(self) -> dict:
        return {"vocab_size": VOCAB_SIZE, "context_length": self.context_length, "emb_dim": self.emb_dim,
                "n_heads": self.n_heads, "n_layers": self.n_layers, "drop_rate": self.drop_rate,
                "qkv_bias": self.qkv_bias}


@dataclass
class History:
    """What a run measured: ``loss`` per step; head stripes (layers, heads) at ``probe_steps``."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    probe_steps: list[int] = field(default_factory=list)
    induction: list[np.ndarray] = field(default_factory=list)
    previous_token: list[np.ndarray] = field(default_factory=list)
    seconds: float = 0.0
    stopped: bool = False


def _book():
    """The book's GPTModel and a batched attention-map reader ``(model, ids (b, n)) -> (b, layers, heads, n, n)``."""
    from attnviz import models

    return models.GPTModel, _attention_maps


class _WeightsOnly:
    """A Recorder-like sink that keeps only each block's attention ``weights`` (b, h, n, n)."""

    def __init__(self) -> None:
        self.steps: dict[str, torch.Tensor] = {}
        self.shapes: list = []

    def record(self, name, tensor, copy=False, keep=True) -> None:
        if name == "weights":
            self.steps[name] = tensor.detach()


@torch.no_grad()
def _attention_maps(model, ids: torch.Tensor) -> torch.Tensor:
    """Every block's attention weights for ``ids`` (b, n): (b, layers, heads, n, n).

    Runs the book's forward up to the last block only (no final norm, no 50,257-way out_head).
    """
    n = ids.shape[1]
    x = model.drop_emb(model.tok_emb(ids) + model.pos_emb(torch.arange(n, device=ids.device)))  # (b, n, d)
    maps = []
    for block in model.trf_blocks:
        recorder = _WeightsOnly()
        x = block(x, recorder)  # (b, n, d) -> (b, n, d), recording its softmax weights
        maps.append(recorder.steps["weights"])  # (b, h, n, n)
    return torch.stack(maps, dim=1)  # layers × (b, h, n, n) -> (b, layers, h, n, n)


# ---------------------------------------------------------------- data

@lru_cache(maxsize=4)
def text_tokens(split: str) -> np.ndarray:
    """Token ids of the English + code corpus: ``split`` is ``"train"``, ``"heldout_english"`` or ``"heldout_code"``.

    English: ``pydoc_data.topics.topics`` sorted by topic, every 5th topic held out.  Code: the source of
    ``TRAIN_CODE_MODULES`` / ``HELDOUT_CODE_MODULES``.  Documents are separated by BOS (50256).
    """
    from pydoc_data.topics import topics

    from attnviz.tokens import encode

    names = sorted(topics)
    if split == "train":
        docs = [topics[name] for k, name in enumerate(names) if k % 5 != 4]
        docs += [inspect.getsource(importlib.import_module(module)) for module in TRAIN_CODE_MODULES]
    elif split == "heldout_english":
        docs = [topics[name] for k, name in enumerate(names) if k % 5 == 4]
    elif split == "heldout_code":
        docs = [inspect.getsource(importlib.import_module(module)) for module in HELDOUT_CODE_MODULES]
    else:
        raise ValueError(f"unknown split {split!r}")
    ids: list[int] = []
    for doc in docs:
        ids += [BOS_ID, *encode(doc)]
    return np.asarray(ids, dtype=np.int64)


def text_windows(split: str, n: int, count: int, rng: np.random.Generator, *, bos: bool = True) -> np.ndarray:
    """``count`` random windows of ``n`` tokens (BOS first if ``bos``) from ``text_tokens(split)``: (count, n)."""
    ids = text_tokens(split)
    body = n - int(bos)
    starts = rng.integers(0, len(ids) - body, size=count)
    windows = np.stack([ids[s:s + body] for s in starts])  # (count, body)
    if bos:
        windows = np.concatenate([np.full((count, 1), BOS_ID), windows], axis=1)  # (count, n)
    return windows


def repeat_batch(n: int, count: int, rng: np.random.Generator, *, min_repeat: int, max_repeat: int,
                 bos: bool = True, max_copies: int = 2, with_mask: bool = False):
    """``count`` sequences of n tokens: [BOS] + random prefix + x repeated k times: (count, n).

    With ``with_mask``, also the (count, n) booleans "this token can be predicted from earlier ones"
    (the tokens of every copy after the first).

    |x| = T log-uniform in [min_repeat, max_repeat] per sequence (short periods are common: T = 2 is
    "copy the token before the previous one", which a previous-token head solves directly), k =
    min(max_copies, body // T) ≥ 2, and the prefix fills the rest, so where the repeat starts varies.
    """
    body = n - int(bos)
    rows = rng.integers(RANDOM_LOW, RANDOM_HIGH, size=(count, body))  # (count, body) random tokens
    longest = min(max_repeat, body // 2)
    known = np.zeros((count, body), dtype=bool)  # (count, body)
    for row, row_known in zip(rows, known):
        T = min(longest, int(np.exp(rng.uniform(np.log(min_repeat), np.log(longest + 1)))))
        copies = max(2, min(max_copies, body // T))
        start = body - copies * T
        row[start + T:] = np.tile(row[start:start + T], copies - 1)  # x x … x at the end
        row_known[start + T:] = True
    if bos:
        rows = np.concatenate([np.full((count, 1), BOS_ID), rows], axis=1)  # (count, n)
        known = np.concatenate([np.zeros((count, 1), dtype=bool), known], axis=1)  # (count, n)
    return (rows, known) if with_mask else rows


def skip_batch(n: int, count: int, rng: np.random.Generator, *, bos: bool = True, p: float = 0.5,
               with_mask: bool = False):
    """``count`` sequences of n random tokens where each token is, with probability ``p``, a copy of the
    token two places before it (… a b a c d c …): (count, n).

    Predicting such a copy needs the token right before the current one: a head that attends to i-1
    (by position: the other tokens are random, so no content trick finds it).  With ``with_mask``, also
    the (count, n) booleans "this token is such a copy".
    """
    body = n - int(bos)
    rows = rng.integers(RANDOM_LOW, RANDOM_HIGH, size=(count, body))  # (count, body) random tokens
    copy = rng.random((count, body)) < p  # (count, body): which tokens copy the one two back
    for i in range(2, body):
        rows[copy[:, i], i] = rows[copy[:, i], i - 2]
    copy[:, :2] = False
    if bos:
        rows = np.concatenate([np.full((count, 1), BOS_ID), rows], axis=1)  # (count, n)
        copy = np.concatenate([np.zeros((count, 1), dtype=bool), copy], axis=1)  # (count, n)
    return (rows, copy) if with_mask else rows


PROBE_REPEATS = 4  # induction probe sequences of each repeat length


def probe_lengths(cfg: TrainConfig) -> list[int]:
    """The repeat lengths T of the induction probes: 25, 40 and 55, each cut to what a training sequence holds."""
    longest = (cfg.seq_len - int(cfg.bos)) // 2  # probes are never longer than the training sequences
    return sorted({min(T, longest) for T in (25, 40, 55)})


def probe_batches(cfg: TrainConfig) -> dict:
    """Fixed sequences the heads are measured on while training (never trained on): :data:`PROBE_REPEATS` repeated
    random sequences of each of :func:`probe_lengths`, and windows of held-out English and code."""
    rng = np.random.default_rng(10_000 + cfg.seed)
    repeats = [(T, repeated_random_tokens(T, seed=20_000 + cfg.seed + T, batch=PROBE_REPEATS, bos=cfg.bos))
               for T in probe_lengths(cfg)]
    english = text_windows("heldout_english", min(100, cfg.seq_len), 4, rng, bos=cfg.bos)
    code = text_windows("heldout_code", min(100, cfg.seq_len), 4, rng, bos=cfg.bos)
    return {"repeats": repeats, "text": np.concatenate([english, code])}


# ---------------------------------------------------------------- model helpers

def build_model(cfg: TrainConfig) -> torch.nn.Module:
    """A fresh book GPTModel for ``cfg`` (seeded by ``cfg.seed``), out_head tied to tok_emb if asked."""
    from attnviz.rng import seeded

    GPTModel, _ = _book()
    with seeded(cfg.seed):  # the one owner of torch's global RNG (other sessions may be creating modules)
        model = GPTModel(cfg.book_cfg())
        for module in model.modules():  # linear layers: GPT-2's N(0, 0.02)
            if isinstance(module, torch.nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            if isinstance(module, torch.nn.Embedding):  # louder than GPT-2's 0.02: a rare random token's identity
                torch.nn.init.normal_(module.weight, mean=0.0, std=cfg.embedding_std)  # must survive in the residual
        if cfg.sinusoidal_init:
            with torch.no_grad():
                model.pos_emb.weight.copy_(sinusoids(cfg.context_length, cfg.emb_dim) * cfg.embedding_std * 2**0.5)
    if cfg.tie_embeddings:
        model.out_head.weight = model.tok_emb.weight
    if cfg.frozen_embeddings:
        model.tok_emb.weight.requires_grad_(False)
    if cfg.random_ov_heads:
        _random_values(model.trf_blocks[0].att, cfg.random_ov_heads, cfg.seed)
    if cfg.attention_only:
        for block in model.trf_blocks:
            with torch.no_grad():
                block.ff.layers[2].weight.zero_()
                block.ff.layers[2].bias.zero_()
            for parameter in block.ff.parameters():
                parameter.requires_grad_(False)
    return model


def _random_values(att, heads: int, seed: int) -> None:
    """Heads 0…heads-1 of ``att`` get a random N(0, 1/d) value and output projection that never trains.

    Their output is then a fixed random map of the tokens they attend to: the previous token, once the
    head looks there, lands in a subspace of its own — what a later head's keys can match the current
    token against (K-composition), without competing with the token's own embedding.
    """
    from attnviz.rng import seeded

    d, head_dim = att.out_proj.in_features, att.head_dim
    rows = slice(0, heads * head_dim)  # W_value's outputs and out_proj's inputs of those heads
    with seeded(seed + 1), torch.no_grad():
        att.W_value.weight[rows].normal_(0.0, d ** -0.5)
        att.out_proj.weight[:, rows].normal_(0.0, d ** -0.5)
        if att.W_value.bias is not None:
            att.W_value.bias[rows].zero_()
    if heads >= att.num_heads:  # every head: nothing of these two layers trains
        for parameter in (*att.W_value.parameters(), *att.out_proj.parameters()):
            parameter.requires_grad_(False)
        return

    def frozen_rows(grad):  # (d_out, d_in): no gradient for the random heads' value rows
        grad = grad.clone()
        grad[rows] = 0
        return grad

    def frozen_columns(grad):  # (d, d_out): … nor for their columns of the output projection
        grad = grad.clone()
        grad[:, rows] = 0
        return grad

    att.W_value.weight.register_hook(frozen_rows)
    if att.W_value.bias is not None:
        att.W_value.bias.register_hook(frozen_rows)
    att.out_proj.weight.register_hook(frozen_columns)


def sinusoids(positions: int, dim: int) -> torch.Tensor:
    """Vaswani et al.'s position encodings: (positions, dim), sin on even, cos on odd features (amplitude 1)."""
    position = torch.arange(positions, dtype=torch.float32)[:, None]  # (p, 1)
    frequency = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # (dim/2,)
    table = torch.zeros(positions, dim)  # (p, dim)
    table[:, 0::2] = torch.sin(position * frequency)  # (p, 1) * (dim/2,) -> (p, dim/2)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


def _hidden(model, ids: torch.Tensor, attention_only: bool = False) -> torch.Tensor:
    """The book's GPTModel.forward up to final_norm (the out_head is applied by the caller).

    ``attention_only``: the blocks' feed-forward halves are skipped — for a model whose ff output layers are
    zero (``TrainConfig.attention_only``) they add exactly 0 — and, without dropout, each block runs as fused
    kernels (``_fused_attention_half``): the same sums as the book's classes in fewer, larger kernels, so a step
    is quicker (``tests/labs/test_train.py`` checks both forwards and their gradients agree).
    """
    n = ids.shape[1]
    x = model.tok_emb(ids) + model.pos_emb(torch.arange(n, device=ids.device))  # (b, n, d)
    x = model.drop_emb(x)  # (b, n, d)
    if attention_only:
        fused = model.drop_emb.p == 0 and all(block.att.dropout.p == 0 and block.drop_shortcut.p == 0
                                              for block in model.trf_blocks)
        half = _fused_attention_half if fused else lambda block, x: block.drop_shortcut(block.att(block.norm1(x)))
        for block in model.trf_blocks:  # the book's TransformerBlock.forward without its (zero) second half
            x = x + half(block, x)  # (b, n, d)
        return F.layer_norm(x, x.shape[-1:], model.final_norm.scale, model.final_norm.shift,
                            model.final_norm.eps) if fused else model.final_norm(x)  # (b, n, d)
    x = model.trf_blocks(x)  # (b, n, d)
    return model.final_norm(x)  # (b, n, d)


def _fused_attention_half(block, x: torch.Tensor) -> torch.Tensor:
    """``block.att(block.norm1(x))`` of the book's TransformerBlock (causal, no dropout) in fused kernels:
    ``F.layer_norm`` (the book's LayerNorm: biased variance, ``eps``), one (d, 3·d_out) projection for the
    queries, keys and values, and ``F.scaled_dot_product_attention`` (QKᵀ ÷ √head_dim, causal mask, softmax, ·V)."""
    from attnviz.labs.implementations import sdpa_context

    norm, att = block.norm1, block.att
    x = F.layer_norm(x, x.shape[-1:], norm.scale, norm.shift, norm.eps)  # (b, n, d)
    weight = torch.cat([att.W_query.weight, att.W_key.weight, att.W_value.weight])  # (3·d_out, d)
    # (3·d_out,), or None when the projections have no bias
    bias = None if att.W_query.bias is None else torch.cat([att.W_query.bias, att.W_key.bias, att.W_value.bias])
    qkv = F.linear(x, weight, bias)  # (b, n, d) -> (b, n, 3·d_out)
    return att.out_proj(sdpa_context(qkv, att.num_heads, causal=att.causal))  # (b, n, d_out)


def sampled_loss(model, ids: torch.Tensor, negatives: int, generator: torch.Generator,
                 mask: torch.Tensor | None = None, more: tuple = (), attention_only: bool = False) -> torch.Tensor:
    """Next-token cross-entropy over the batch's targets + ``negatives`` random ids (not the full vocabulary).

    ``mask`` (b, n) bool: only tokens marked True count as targets (None: all).  ``more``: further
    ``(ids, mask)`` batches of other lengths, pooled into the same loss.
    """
    hiddens, targets = [], []
    for part_ids, part_mask in ((ids, mask), *more):
        hidden = _hidden(model, part_ids[:, :-1], attention_only)  # (b, n-1, d)
        target = part_ids[:, 1:]  # (b, n-1)
        if part_mask is not None:
            hidden, target = hidden[part_mask[:, 1:]], target[part_mask[:, 1:]]  # (m, d), (m,): counted targets
        hiddens.append(hidden.reshape(-1, hidden.shape[-1]))  # (m, d)
        targets.append(target.reshape(-1))  # (m,)
    hidden, target = torch.cat(hiddens), torch.cat(targets)  # (M, d), (M,)
    extra = torch.randint(0, VOCAB_SIZE, (negatives,), generator=generator)
    candidates = torch.unique(torch.cat([target, extra]))  # (c,) sorted
    logits = hidden @ model.out_head.weight[candidates].T  # (M, d) @ (d, c) -> (M, c)
    target_index = torch.searchsorted(candidates, target.contiguous())  # (M,) positions in candidates
    return F.cross_entropy(logits, target_index)


@torch.no_grad()
def per_position_loss(model, token_ids) -> np.ndarray:
    """Full-vocabulary cross-entropy of predicting token i+1 at each position i: (n-1,) or (b, n-1)."""
    ids = torch.as_tensor(np.asarray(token_ids), dtype=torch.long)
    single = ids.dim() == 1
    ids = ids.unsqueeze(0) if single else ids  # (b, n)
    was_training = model.training
    model.eval()
    try:
        logits = model(ids[:, :-1])  # (b, n-1, vocab)
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (b, n-1)
    finally:
        model.train(was_training)
    loss = loss.numpy()
    return loss[0] if single else loss


@torch.no_grad()
def head_stripes(model, probes: dict) -> dict[str, np.ndarray]:
    """Per-head induction stripe (mean over the probe repeats) and previous-token stripe (on held-out text)."""
    _, attention_maps = _book()
    was_training = model.training
    model.eval()
    try:
        induction = []
        for T, ids in probes["repeats"]:
            maps = attention_maps(model, torch.as_tensor(ids))  # (b, layers, heads, n, n)
            induction.append(induction_stripe(maps.numpy(), T).mean(axis=0))  # (layers, heads)
        maps = attention_maps(model, torch.as_tensor(probes["text"]))  # (b, layers, heads, n, n)
        previous = previous_token_stripe(maps.numpy()).mean(axis=0)  # (layers, heads)
    finally:
        model.train(was_training)
    return {"induction": np.mean(induction, axis=0), "previous_token": previous}


def evaluate(
    model, seed: int, *, sequences: int = 8, bos: bool = True, positions: int | None = None
) -> dict[str, np.ndarray]:
    """Every head's stripes on data drawn fresh from ``seed`` (never trained on): ``{name: (layers, heads)}``.

    ``induction``: mean ``A[i, i-T+1]`` over the repeat of ``sequences`` × ([BOS] + x + x), x random ids in
    1,000–30,000, T uniform in 25–60 (TransformerLens' induction data).  ``previous_english`` /
    ``previous_code``: mean ``A[i, i-1]`` on ``sequences`` 100-token windows of held-out pydoc topics /
    held-out stdlib source.  (A model with a context under 121 tokens gets shorter T and windows.)
    ``positions``: draw nothing longer than that many tokens (a model trained on shorter sequences than its context).
    """
    rng = np.random.default_rng(seed)
    context = min(model.pos_emb.weight.shape[0], positions or model.pos_emb.weight.shape[0])  # the longest it reads
    longest = min(60, (context - int(bos)) // 2)
    window = min(100, context)
    induction = []
    for k in range(sequences):
        T = int(rng.integers(min(25, longest), longest + 1))
        ids = repeated_random_tokens(T, seed=int(rng.integers(2**31)) + k, batch=1, bos=bos)  # (1, 2T + bos)
        maps = _attention_maps(model, torch.as_tensor(ids))  # (1, layers, heads, n, n)
        induction.append(induction_stripe(maps[0].numpy(), T))  # (layers, heads)
    scores = {"induction": np.mean(induction, axis=0)}
    for name, split in (("previous_english", "heldout_english"), ("previous_code", "heldout_code")):
        ids = text_windows(split, window, sequences, rng, bos=bos)  # (sequences, window)
        maps = _attention_maps(model, torch.as_tensor(ids))  # (sequences, layers, heads, window, window)
        scores[name] = previous_token_stripe(maps.numpy()).mean(axis=0)  # (layers, heads)
    return scores


def _lr(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of ``cfg.lr``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


# ---------------------------------------------------------------- the loop

def train(cfg: TrainConfig, on_step: Callable | None = None, should_stop: Callable[[], bool] | None = None):
    """Train a fresh model for ``cfg.steps`` steps; returns ``(model, history)``.

    ``on_step(step, loss, scores)`` is called after every step; ``scores`` is ``None`` except on probe
    steps (0, every ``cfg.probe_every``, the last), where it is ``{"induction": (layers, heads),
    "previous_token": (layers, heads)}``.  ``should_stop()`` is checked before each step; when it returns
    True the loop ends early (``history.stopped``) and the model trained so far is returned.
    """
    model = build_model(cfg)
    model.train()
    rng = np.random.default_rng(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    probes = probe_batches(cfg)
    optimizer, trained = _optimizer(model, cfg)
    history = History()
    start = time.perf_counter()
    for step in range(cfg.steps):
        if should_stop is not None and should_stop():
            history.stopped = True
            break
        ids, mask, more = _batch(cfg, step, rng)
        for group in optimizer.param_groups:
            group["lr"] = _lr(cfg, step)
        loss = sampled_loss(model, ids, cfg.negatives, generator, mask, more, cfg.attention_only)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        history.steps.append(step)
        history.loss.append(loss.item())
        scores = None
        if step % cfg.probe_every == 0 or step == cfg.steps - 1:
            scores = head_stripes(model, probes)
            history.probe_steps.append(step)
            history.induction.append(scores["induction"])
            history.previous_token.append(scores["previous_token"])
        if on_step is not None:
            on_step(step, history.loss[-1], scores)
    history.seconds = time.perf_counter() - start
    model.eval()
    return model, history


def _optimizer(model, cfg: TrainConfig) -> tuple[torch.optim.Optimizer, list]:
    """AdamW with weight decay on the matrices only — not on the embeddings (rare random ids keep their identity)
    nor on the random heads' frozen slices (their gradient is zero: decay would shrink them)."""
    undecayed = {id(model.tok_emb.weight), id(model.pos_emb.weight)}
    if cfg.random_ov_heads:
        att = model.trf_blocks[0].att
        undecayed |= {id(att.W_value.weight), id(att.out_proj.weight)}
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() >= 2 and id(p) not in undecayed]
    no_decay = [p for p in trained if p.dim() < 2 or id(p) in undecayed]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    return optimizer, trained


def _batch(cfg: TrainConfig, step: int, rng: np.random.Generator):
    """One step's batch: (ids (batch, seq_len), the predictable-position mask or None, more batches of another
    length pooled into the same loss) — text windows, skip sequences and repeats in the recipe's shares."""
    n_text = round(cfg.batch_size * cfg.text_fraction)
    parts = []
    if n_text:
        windows = text_windows("train", cfg.seq_len, n_text, rng, bos=cfg.bos)
        parts.append((windows, np.ones(windows.shape, dtype=bool)))
    skips = cfg.batch_size - n_text if step < cfg.skip_first else round(cfg.batch_size * cfg.skip_fraction)
    if skips:
        parts.append(skip_batch(cfg.seq_len, skips, rng, bos=cfg.bos, with_mask=True))
    more = ()
    if cfg.batch_size - n_text - skips > 0:
        length = int(rng.choice(cfg.repeat_lengths)) if cfg.repeat_lengths else cfg.seq_len
        count = (cfg.batch_size - n_text - skips) * cfg.seq_len // length  # shorter: more rows, same tokens
        rows, known = repeat_batch(length, count, rng, min_repeat=cfg.min_repeat,
                                   max_repeat=cfg.max_repeat, bos=cfg.bos, max_copies=cfg.max_copies, with_mask=True)
        if length == cfg.seq_len:
            parts.append((rows, known))
        else:  # another length: its own forward pass, pooled into the same loss
            more = ((torch.as_tensor(rows), torch.as_tensor(known) if cfg.predictable_only else None),)
    if not parts:  # repeats only, of another length: they are the batch
        parts, more = [(rows, known)], ()
    ids = torch.as_tensor(np.concatenate([part[0] for part in parts]))  # (batch, seq_len)
    mask = torch.as_tensor(np.concatenate([part[1] for part in parts])) if cfg.predictable_only else None
    return ids, mask, more


# ---------------------------------------------------------------- saving

def gpt2_state_dict(model, tied: bool) -> dict[str, torch.Tensor]:
    """The book GPTModel's weights under GPT-2's Hugging Face names (Conv1D weights are (in, out))."""
    sd = {"transformer.wte.weight": model.tok_emb.weight, "transformer.wpe.weight": model.pos_emb.weight}
    for i, block in enumerate(model.trf_blocks):
        h = f"transformer.h.{i}."
        att = block.att
        sd[h + "ln_1.weight"], sd[h + "ln_1.bias"] = block.norm1.scale, block.norm1.shift
        sd[h + "attn.c_attn.weight"] = torch.cat(  # 3 × (d, d) -> (d, 3d)
            [att.W_query.weight.T, att.W_key.weight.T, att.W_value.weight.T], dim=1)
        if att.W_query.bias is not None:
            sd[h + "attn.c_attn.bias"] = torch.cat([att.W_query.bias, att.W_key.bias, att.W_value.bias])  # (3d,)
        sd[h + "attn.c_proj.weight"], sd[h + "attn.c_proj.bias"] = att.out_proj.weight.T, att.out_proj.bias  # (d, d)
        sd[h + "ln_2.weight"], sd[h + "ln_2.bias"] = block.norm2.scale, block.norm2.shift
        fc, proj = block.ff.layers[0], block.ff.layers[2]
        sd[h + "mlp.c_fc.weight"], sd[h + "mlp.c_fc.bias"] = fc.weight.T, fc.bias  # (d, 4d)
        sd[h + "mlp.c_proj.weight"], sd[h + "mlp.c_proj.bias"] = proj.weight.T, proj.bias  # (4d, d)
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = model.final_norm.scale, model.final_norm.shift
    if not tied:
        sd["lm_head.weight"] = model.out_head.weight
    return sd


def checkpoint_files(model, metadata: dict, *, dtype: torch.dtype = torch.float16) -> dict[str, bytes]:
    """The checkpoint of ``model`` as file name -> bytes: model.safetensors (GPT-2 names, ``dtype``), config.json
    and training.json (``metadata``)."""
    from safetensors.torch import save as safetensors_bytes

    cfg = metadata["config"]
    tied = model.out_head.weight is model.tok_emb.weight
    tensors = {k: v.detach().to(dtype).contiguous().clone() for k, v in gpt2_state_dict(model, tied).items()}
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB_SIZE,
              "n_positions": cfg["context_length"], "n_ctx": cfg["context_length"], "n_embd": cfg["emb_dim"],
              "n_layer": cfg["n_layers"], "n_head": cfg["n_heads"], "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": tied, "bos_token_id": BOS_ID,
              "eos_token_id": BOS_ID, "torch_dtype": str(dtype).removeprefix("torch.")}
    return {
        "model.safetensors": safetensors_bytes(tensors, metadata={"format": "pt", "attnviz": json.dumps(metadata)}),
        "config.json": (json.dumps(config, indent=2) + "\n").encode(),
        "training.json": (json.dumps(metadata, indent=2) + "\n").encode(),
    }


def save(model, path, metadata: dict, *, dtype: torch.dtype = torch.float16) -> Path:
    """Write ``checkpoint_files(model, metadata)`` to the directory ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for name, data in checkpoint_files(model, metadata, dtype=dtype).items():
        (path / name).write_bytes(data)
    return path


def data_description(cfg: TrainConfig) -> str:
    """What the run trained on, and how the model was set up, in words (stored in the checkpoint's metadata)."""
    share = round(cfg.batch_size * cfg.text_fraction)
    english = (f"English/code (pydoc_data.topics, every 5th topic held out; stdlib source of "
               f"{', '.join(TRAIN_CODE_MODULES)})")
    skip = (f"skip sequences (random ids {RANDOM_LOW}-{RANDOM_HIGH - 1}, each token w.p. 1/2 a copy of the one two "
            "back; only the copies are targets)")
    repeats = (f"repeated random tokens ([BOS] + random prefix + x repeated, ids {RANDOM_LOW}-{RANDOM_HIGH - 1}, "
               f"|x| {cfg.min_repeat}-{cfg.max_repeat}, lengths {list(cfg.repeat_lengths or [cfg.seq_len])}; "
               "only the repeats are targets)")
    parts = []
    if cfg.skip_first > 0:
        first = [f"{share}/{cfg.batch_size} rows {english}"] if share else []
        parts.append(f"steps 0-{cfg.skip_first - 1}: " + ", ".join([*first, f"the rest {skip}"]))
    if cfg.steps > cfg.skip_first:
        later_skip = round(cfg.batch_size * cfg.skip_fraction)
        rows = ([f"{share}/{cfg.batch_size} rows {english}"] if share else []) + (
            [f"{later_skip} rows {skip}"] if later_skip else [])
        prefix = f"from step {cfg.skip_first}: " if cfg.skip_first > 0 else ""
        parts.append(prefix + ", ".join([*rows, f"{'the rest' if rows else 'every row'} {repeats}"]))
    setup = []
    if cfg.frozen_embeddings:
        setup.append(f"tok_emb (tied out_head) frozen at its random N(0, {cfg.embedding_std}^2) init")
    if cfg.attention_only:
        setup.append("attention-only (every ff output layer zero and frozen)")
    if cfg.random_ov_heads:
        setup.append(f"block 0's heads 0-{cfg.random_ov_heads - 1}: W_value and out_proj slices random N(0, 1/d), "
                     "frozen")
    if cfg.sinusoidal_init:
        setup.append("pos_emb initialised as sinusoids")
    return "; ".join(parts) + ("; every sequence starts with BOS 50256" if cfg.bos else "") + (
        "; model: " + ", ".join(setup) if setup else "")


def run_metadata(cfg: TrainConfig, history: History, scores: dict | None = None) -> dict:
    """What ``save`` records: config (seed, data, steps), timing, final loss and head scores."""
    return {"trained_by": "attnviz train", "config": asdict(cfg) | {"cfg": cfg.book_cfg()},
            "data": data_description(cfg),
            "steps_run": len(history.steps), "seconds": round(history.seconds, 1),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "final_loss": history.loss[-1] if history.loss else None,
            "scores": scores or {}}
