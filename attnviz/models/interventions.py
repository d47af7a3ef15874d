"""What attention does, measured: knock heads out, weigh attention by what it moves, follow it through the layers.

* ``ablate(model, token_ids, heads, how)`` — the logits with each ``(layer, head)`` knocked out: its slice of the
  concatenated context, just before ``out_proj``, set to 0 (``"zero"``) or to its mean over this input's positions
  (``"mean"``): in that layer, those heads' own terms context_h · W_O^h are taken out of the attention output — the
  sum ``out_proj`` makes, without them.  The model itself is never changed (it may be shared by other sessions);
  ``knocked_out`` is the same as forward pre-hooks on ``out_proj``, for a model of your own.
* ``ablate_next(model, token_ids, heads, position)`` — the same for the one prediction after ``position``, computed
  on the tokens up to it.
* ``ablation_grid(model, token_ids, T)`` — Δ loss on the second copy of ``[BOS] + x + x`` when each head alone is
  knocked out, every head of a layer in one batched pass from what the intact pass kept of that layer.
* ``value_weighted(model, token_ids)`` — Kobayashi et al. (2020), "Attention is not only a weight":
  ‖α_ij · f^h(x_j)‖ with f^h(x) = (x W_V + b_V) W_O^h, head h's rows of ``out_proj`` (grouped-query: the values of
  head h's K/V head; latent: the values up-projected from the latent); ``value_weighted_module``
  does the same for the book's MultiHeadAttention on its input, ``value_norms`` gives the ‖f^h(x_j)‖ alone.
* ``rollout(maps)`` — Abnar & Zuidema (2020): A_l = 0.5·mean_h(W_l) + 0.5·I, rows renormalised, Ã_l = A_l·Ã_{l−1}.
* ``logit_lens(model, token_ids, position, k)`` — the top-k next tokens read out after every block
  (``final_norm`` then ``out_head`` on that block's output).

Everything runs the book's ``GPTModel`` in eval mode, without gradients, on the CPU, with its causal mask (as trained):
each pass holds ``models.running``'s lock, which an unmasked view in another session takes to switch the mask off, and
which restores the model's mode and mask flags afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F

from attnviz.models.gpt import GPTModel, check_model, whole_number_in
from attnviz.models.trace import _Keep, _token_batch, running, token_sequence

HOW = ("zero", "mean")


def _ids(model: GPTModel, token_ids) -> torch.Tensor:
    """(1, n) token ids of ``model``'s vocabulary and context: the checks ``attention_maps`` makes."""
    return _token_batch(check_model(model), token_ids).cpu()  # (1, n)


def _heads_by_layer(model: GPTModel, heads: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    """{layer: its heads} of ``heads``, each checked against the model, each once (a head named twice is knocked
    out once)."""
    pairs = list(heads) if isinstance(heads, Iterable) and not isinstance(heads, str) else [heads]
    if not all(_is_pair(pair) for pair in pairs):
        raise ValueError(f"heads must be (layer, head) pairs of whole numbers, such as [(0, 1)], got {heads!r}.")
    heads_in_layer: dict[int, list[int]] = {}
    for layer, head in pairs:
        layer, head = int(layer), int(head)
        if not 0 <= layer < len(model.trf_blocks):
            raise ValueError(f"layer {layer} does not exist: the model has {len(model.trf_blocks)} layers")
        if not 0 <= head < model.trf_blocks[layer].att.num_heads:
            raise ValueError(
                f"head {head} does not exist: layer {layer} has {model.trf_blocks[layer].att.num_heads} heads")
        if head not in heads_in_layer.setdefault(layer, []):
            heads_in_layer[layer].append(head)
    return heads_in_layer


def _is_pair(pair) -> bool:
    """True for a (layer, head) pair of whole numbers."""
    return (isinstance(pair, tuple | list | np.ndarray) and len(pair) == 2
            and all(isinstance(number, int | np.integer) and not isinstance(number, bool) for number in pair))


def _check_how(how: str) -> None:
    if how not in HOW:
        raise ValueError(f"how must be one of {', '.join(HOW)}; got {how!r}")


@contextlib.contextmanager
def knocked_out(model: GPTModel, heads: Iterable[tuple[int, int]], how: str = "zero"):
    """Within the block, ``model`` itself runs with each ``(layer, head)`` knocked out (see the module docstring): a
    forward pre-hook on each such layer's ``out_proj``.  It changes the model for every thread that uses it
    meanwhile; ``ablate`` and the rest of this module compute the same without touching the model."""
    check_model(model)
    _check_how(how)
    handles = []
    try:
        for layer, layer_heads in _heads_by_layer(model, heads).items():
            att = model.trf_blocks[layer].att
            handles.append(att.out_proj.register_forward_pre_hook(_knock_out_pre_hook(att.head_dim, layer_heads, how)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def _knock_out_pre_hook(head_dim: int, heads: list[int], how: str) -> Callable:
    """A forward pre-hook for ``out_proj`` that zeroes (or, with ``how="mean"``, mean-ablates) ``heads``' columns of
    its input, the heads' concatenated context."""
    def pre_hook(module, args):
        (context,) = args  # (b, n, h·hd): the heads' concatenated context, before out_proj
        context = context.clone()
        for head in heads:
            cols = slice(head * head_dim, (head + 1) * head_dim)
            part = context[:, :, cols]  # (b, n, hd)
            context[:, :, cols] = 0.0 if how == "zero" else part.mean(dim=1, keepdim=True).expand_as(part)
        return (context,)
    return pre_hook


def _head_terms(att, context: torch.Tensor, how: str) -> torch.Tensor:
    """What each head adds to ``att``'s output, context_h · W_O^h (b, h, n, d) for context (b, h, n, hd); with
    ``how="mean"``, what replacing its context by the mean over positions takes away."""
    if how == "mean":
        context = context - context.mean(dim=2, keepdim=True)  # (b, h, n, hd)
    return context @ _w_o(att)  # (b, h, n, hd) @ (h, hd, d) -> (b, h, n, d)


def _w_o(att) -> torch.Tensor:
    """Each head's rows of ``att.out_proj``, W_O^h: (h·hd, d_out) -> (h, hd, d_out)."""
    return att.out_proj.weight.T.reshape(att.num_heads, att.head_dim, -1)  # (h, hd, d_out)


def _feed_forward_half(block, mid: torch.Tensor) -> torch.Tensor:
    """The second half of ``TransformerBlock.forward`` in eval mode: mid + ff(norm2(mid)), (b, p, d)."""
    return mid + block.ff(block.norm2(mid))  # (b, p, d)


def _block_at(block, x: torch.Tensor, positions: slice) -> torch.Tensor:
    """``block(x)[:, positions]`` in eval mode (b, p, d): the attention reads every position, the feed-forward half
    runs only where it is asked for."""
    mid = x + block.att(block.norm1(x))  # (b, n, d): the first half, every position (the keys need them all)
    return _feed_forward_half(block, mid[:, positions])  # (b, p, d)


def _embed(model: GPTModel, ids: torch.Tensor) -> torch.Tensor:
    return model.drop_emb(model.tok_emb(ids) + model.pos_emb(torch.arange(ids.shape[1])))  # (1, n, d)


def _knocked_forward(model: GPTModel, ids: torch.Tensor, heads: Iterable[tuple[int, int]], how: str) -> torch.Tensor:
    """The last block's output (1, n, d) with each ``(layer, head)`` knocked out, in eval mode, the model untouched:
    in such a layer the heads' own terms are taken out of the attention output (the sum out_proj makes, without
    them) before the feed-forward half."""
    _check_how(how)
    knocked_out = _heads_by_layer(model, heads)
    with running(model, causal=True):  # the model as trained, whatever another session's unmasked view has set
        x = _embed(model, ids)  # (1, n, d)
        for index, block in enumerate(model.trf_blocks):
            if index not in knocked_out:
                x = block(x)  # (1, n, d)
                continue
            parts = _Keep(("context", "output"))
            output = block.att(block.norm1(x), parts)  # (1, n, d), keeping the heads' context (1, h, n, hd)
            removed = _head_terms(block.att, parts.steps["context"], how)[:, knocked_out[index]].sum(dim=1)  # (1, n, d)
            x = _feed_forward_half(block, x + output - removed)  # (1, n, d)
    return x


@torch.no_grad()
def ablate(model: GPTModel, token_ids, heads: Iterable[tuple[int, int]], how: str = "zero") -> torch.Tensor:
    """Logits (n, vocab) of ``token_ids`` with every ``(layer, head)`` in ``heads`` knocked out."""
    x = _knocked_forward(model, _ids(model, token_ids), heads, how)  # (1, n, d)
    return model.out_head(model.final_norm(x))[0]  # (1, n, d) -> (n, vocab)


@torch.no_grad()
def ablate_next(model: GPTModel, token_ids, heads: Iterable[tuple[int, int]], position: int) -> torch.Tensor:
    """Logits (vocab,) predicting the token after ``position`` with every ``(layer, head)`` in ``heads`` zeroed:
    ``ablate(model, token_ids, heads)[position]``, computed on the tokens up to ``position`` only (in a causal model
    later tokens cannot change it) and with one row through the output head."""
    ids = _ids(model, token_ids)  # (1, n)
    position = whole_number_in(position, "position", 0, ids.shape[1] - 1)
    x = _knocked_forward(model, ids[:, : position + 1], heads, "zero")  # (1, position + 1, d)
    return model.out_head(model.final_norm(x[:, -1]))[0]  # (1, d) -> (vocab,)


def position_loss(logits: torch.Tensor, token_ids) -> np.ndarray:
    """Cross-entropy of predicting token i+1 at each position i: (n−1,)."""
    ids = token_sequence(token_ids)  # (n,)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[0] != ids.shape[0]:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a (n, vocab) tensor (ablate's) for the {ids.shape[0]} token ids, got {got}.")
    return F.cross_entropy(logits[:-1], ids[1:], reduction="none").numpy()  # (n-1, vocab) -> (n-1,)


@torch.inference_mode()
def ablation_grid(model: GPTModel, token_ids, T: int, *, how: str = "zero",
                  progress: Callable[[float], None] | None = None) -> tuple[np.ndarray, float]:
    """(Δ loss (layers, heads): the second copy's mean loss with that head alone knocked out minus intact, the intact
    loss).

    Exactly what ``ablate`` computes, one head at a time, with the work no knock-out changes done once: one intact
    pass keeps every block's input, its attention output and its heads' context; a head of layer l knocked out
    removes that head's own term, context_h · W_O^h, from layer l's attention output (the same sum out_proj makes,
    without that head), so only layer l's feed-forward half and the blocks after it run again, one batch row per
    head; the last block's feed-forward half and the 50,257-wide output head see only the second copy's positions.
    """
    _check_how(how)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a function called with the fraction done, or None, got "
                         f"{type(progress).__name__}.")
    ids = _ids(model, token_ids)  # (1, n)
    n = ids.shape[1]
    T = whole_number_in(T, "T (the repeated half's length)", 2, n)  # T - 1 predictions in the second copy
    second = slice(n - T, n - 1)  # positions n−T … n−2 predict the second copy's tokens after its first (repeat_halves)
    kept = []
    with running(model, causal=True):  # the model as trained (the lock is taken per pass, never for the whole grid)
        x = _embed(model, ids)  # (1, n, d)
        for block in model.trf_blocks:
            parts = _Keep(("context", "output"))
            kept.append((x, parts))
            x = block(x, parts)  # (1, n, d)
        intact = _loss_after(model, x[:, second], ids, second)[0].mean().item()
    blocks = list(model.trf_blocks)
    delta = np.zeros((len(blocks), blocks[0].att.num_heads))
    for layer, (block_input, parts) in enumerate(kept):
        removed = _head_terms(blocks[layer].att, parts.steps["context"], how)[0]  # (h, n, d): one row per head
        mid = block_input + parts.steps["output"] - removed  # (1, n, d) + (1, n, d) - (h, n, d) -> (h, n, d)
        last = layer == len(blocks) - 1
        with running(model, causal=True):
            y = _feed_forward_half(blocks[layer], mid[:, second] if last else mid)  # (h, n or p, d)
            for index in range(layer + 1, len(blocks)):
                last_block = index == len(blocks) - 1
                y = _block_at(blocks[index], y, second) if last_block else blocks[index](y)  # (h, n or p, d)
            delta[layer] = _loss_after(model, y, ids, second).mean(dim=1).numpy() - intact
        if progress is not None:
            progress((layer + 1) / len(blocks))
    return delta, intact


def _loss_after(model: GPTModel, x: torch.Tensor, ids: torch.Tensor, positions: slice) -> torch.Tensor:
    """Loss (b, p) of predicting the token after each of ``positions`` from the last block's output there, x (b, p, d).
    Only these positions go through the output head (its 50,257-wide matmul is most of the cost); the log-softmax
    runs over the contiguous vocabulary dimension (over a transposed, strided one it is much slower)."""
    logits = model.out_head(model.final_norm(x))  # (b, p, d) -> (b, p, vocab)
    targets = ids[0, 1:][positions].expand(x.shape[0], -1)  # (b, p)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (b·p, vocab) -> (b·p,)
    return loss.view(x.shape[0], -1)  # (b, p)


# -------------------------------------------------------------------- value-weighted attention

def _check_attention(att, x) -> None:
    """A ValueError naming what came when ``att`` is not a multi-head attention with ``out_proj`` (the book's
    MultiHeadAttention, a GPTModel block's ``.att``), or ``x`` is not the (1, n, d_in) tensor it reads."""
    if not (isinstance(att, torch.nn.Module) and all(hasattr(att, name) for name in ("num_heads", "head_dim",
                                                                                       "out_proj"))
            and (hasattr(att, "W_value") or hasattr(att, "W_DKV"))):  # nn.MultiheadAttention has the other three
        raise ValueError(f"att must be the book's MultiHeadAttention or a GPTModel block's attention "
                         f"(model.trf_blocks[0].att), got {type(att).__name__}.")
    first = att.W_DKV if hasattr(att, "W_DKV") else att.W_value  # the Linear x goes through first
    d_in, dtype = first.in_features, first.weight.dtype
    if not (isinstance(x, torch.Tensor) and x.dim() == 3 and x.shape[0] == 1 and x.shape[-1] == d_in
            and x.dtype == dtype):
        got = f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}" if isinstance(x, torch.Tensor) \
            else type(x).__name__
        raise ValueError(f"x must be a (1, n, {d_in}) {str(dtype).removeprefix('torch.')} tensor, the input att "
                         f"reads, got {got}.")


def value_norms(att, x: torch.Tensor) -> torch.Tensor:
    """‖f^h(x_j)‖ (heads, n), f^h(x) = (x W_V + b_V) W_O^h, of the book's MultiHeadAttention ``att`` on x (1, n, d_in):
    the length of what head h moves from token j, whatever weight it gets."""
    _check_attention(att, x)
    return _head_values(att, x).norm(dim=-1)  # (h, n, d_out) -> (h, n)


def _head_values(att, x: torch.Tensor) -> torch.Tensor:
    """f^h(x_j) (heads, n, d_out): each head's value vectors through its own rows of out_proj.  Grouped-query
    (multi-query) attention: head h's values are its K/V head's, h // group_size; latent attention: the values
    up-projected from the latent, W_UV(W_DKV(x))."""
    h, hd = att.num_heads, att.head_dim
    if hasattr(att, "W_DKV"):  # latent: (1, n, d) -> (1, n, latent_dim) -> (1, n, h·hd)
        values = att.W_UV(att.W_DKV(x))[0].view(-1, h, hd).transpose(0, 1)  # (n, h·hd) -> (h, n, hd)
    elif hasattr(att, "num_kv_groups"):  # grouped-query: g K/V heads, each serving group_size query heads
        values = att.W_value(x)[0].view(-1, att.num_kv_groups, hd).transpose(0, 1)  # (n, g·hd) -> (g, n, hd)
        values = values.repeat_interleave(att.group_size, dim=0)  # (g, n, hd) -> (h, n, hd)
    else:
        values = att.W_value(x)[0].view(-1, h, hd).transpose(0, 1)  # (n, h·hd) -> (h, n, hd)
    return values @ _w_o(att)  # (h, n, hd) @ (h, hd, d_out) -> (h, n, d_out)


def _value_weighted(att, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(‖α_ij f^h(x_j)‖ (heads, n, n), f (heads, n, d_out)) of the book's MultiHeadAttention ``att``
    on x (1, n, d_in)."""
    from attnviz.attention import Recorder

    recorder = Recorder()
    att(x, recorder)
    weights = recorder.steps["weights"][0]  # (h, n, n)
    f = _head_values(att, x)  # (h, n, d_out)
    return weights * f.norm(dim=-1)[:, None, :], f  # (h, n, n) · (h, 1, n) -> (h, n, n)


@torch.no_grad()
def value_weighted_module(att, x: torch.Tensor) -> np.ndarray:
    """‖α_ij · f^h(x_j)‖ (heads, n, n) of the book's MultiHeadAttention on x (1, n, d_in).  The other Chapter 3
    classes have no out_proj: there f^h(x) is the head's value vector itself (not computed here)."""
    _check_attention(att, x)
    was_training = att.training
    att.eval()
    try:
        return _value_weighted(att, x)[0].numpy()
    finally:
        att.train(was_training)


@torch.no_grad()
def value_weighted(model: GPTModel, token_ids) -> np.ndarray:
    """‖α_ij · f^h(x_j)‖ for every layer and head: (layers, heads, n, n)."""
    maps = []
    ids = _ids(model, token_ids)  # (1, n)
    with running(model, causal=True):  # the model as trained
        x = _embed(model, ids)  # (1, n, d)
        for block in model.trf_blocks:
            maps.append(_value_weighted(block.att, block.norm1(x))[0])
            x = block(x)  # (1, n, d)
    return torch.stack(maps).numpy()


# -------------------------------------------------------------------- rollout and logit lens

def rollout(maps) -> np.ndarray:
    """Attention rollout (layers, n, n) of maps (layers, heads, n, n): Ã_l = A_l · Ã_{l−1}, A_l = 0.5·mean_h + 0.5·I."""
    try:
        maps = np.asarray(maps, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"maps must be attention weights (layers, heads, n, n), got {type(maps).__name__}.") from None
    if maps.ndim != 4 or maps.shape[-1] != maps.shape[-2] or not maps.shape[0] or not maps.shape[1]:
        raise ValueError(f"maps must be attention weights (layers, heads, n, n), at least one layer and head; "
                         f"got {maps.shape}.")
    n = maps.shape[-1]
    rolled, out = np.eye(n), []
    for layer in maps:
        a = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(n)  # (n, n)
        a = a / a.sum(axis=-1, keepdims=True)
        rolled = a @ rolled  # (n, n)
        out.append(rolled)
    return np.stack(out)


@torch.no_grad()
def logit_lens(model: GPTModel, token_ids, position: int, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """(ids (layers, k), probabilities (layers, k)): the top-k next tokens at ``position`` read out after every
    block with the model's own final_norm and out_head (on the tokens up to ``position``: later ones cannot change
    it in a causal model)."""
    ids = _ids(model, token_ids)  # (1, n)
    n = ids.shape[1]
    position = whole_number_in(position, "position", 0, n - 1)
    k = whole_number_in(k, "k", 1, model.out_head.weight.shape[0])
    top_ids, top_probs = [], []
    with running(model, causal=True):  # the model as trained
        x = _embed(model, ids[:, : position + 1])  # (1, position + 1, d)
        for block in model.trf_blocks:
            x = block(x)  # (1, position + 1, d)
            probs = torch.softmax(model.out_head(model.final_norm(x[:, -1])), dim=-1)[0]  # (vocab,)
            values, indices = probs.topk(k)
            top_ids.append(indices.numpy())
            top_probs.append(values.numpy())
    return np.stack(top_ids), np.stack(top_probs)
