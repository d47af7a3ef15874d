"""A GPT model's layer as a producer: layer ``layer`` of the checkpoint (or bundled / session-trained model)
that ``AttentionConfig.checkpoint`` names, with the sizes the model decides.

The Trace holds the same named steps as the book's classes, recorded from the LayerNorm'd block input by the
model's own forward, plus ``Trace.model``: the whole path and the top-5 next-token predictions.  Each block's
input of the last few (tokens, checkpoint, causal) runs is kept (``ATTNVIZ_LAYER_RUNS_MB``), so another layer of
the same text reruns one block (:func:`attnviz.models.switch_layer`).
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import fields, replace

import torch

from attnviz import attention, models, variants, weights
from attnviz.config import MAX_CONTEXT_LENGTH, AttentionConfig, ConfigError
from attnviz.modern_attention import MultiHeadAttentionWithSWA
from attnviz.trace import ModelRun, Trace, make_trace, to_numpy
from attnviz.words import amount

LAYER_RUNS_MB = int(os.environ.get("ATTNVIZ_LAYER_RUNS_MB", "512"))  # block inputs kept for fast layer switches
_DECIDED = ("variant", "d_in", "d_out", "num_heads", "context_length", "dropout", "train", "seed", "device",
            "embedding")  # the settings a checkpoint decides (and qkv_bias, with its own note: _attention_notes)
_DEFAULTS = {f.name: f.default for f in fields(AttentionConfig)}

_layer_runs_lock = threading.Lock()
_layer_runs: collections.OrderedDict[tuple, tuple[object, int]] = collections.OrderedDict()  # -> (LayerTrace, bytes)


def settle(config: AttentionConfig) -> tuple[AttentionConfig, list[str]]:
    """The config this layer runs with: the checkpoint's width, heads and context, eval mode, no seed, the CPU, and
    its attention's own K/V heads or latent, learned positions and no window setting (a layer's window is the file's:
    ``ModelRun.window``).

    Settings the checkpoint decides are replaced by its values; one the caller set to something else is named
    in a note (ignored, not an error).  Only a layer the model does not have is an error."""
    config.validate_checkpoint()
    model = weights.load(config.checkpoint)  # CheckpointError (a ConfigError) says what is wrong with the file
    sizes = weights.sizes(model)
    if config.layer >= sizes.n_layers:
        raise ConfigError(
            f"This checkpoint has {sizes.n_layers} layers: choose a layer from 0 to {sizes.n_layers - 1}.")
    settled = replace(config, variant=variants.checkpoint_variant(sizes.n_kv_heads, sizes.latent_dim),
                      d_in=sizes.emb_dim, d_out=sizes.emb_dim, num_heads=sizes.num_heads,
                      context_length=min(sizes.context_length, MAX_CONTEXT_LENGTH),
                      qkv_bias=sizes.qkv_bias, dropout=0.0, train=False, seed=AttentionConfig.seed, device="cpu",
                      embedding="seeded", positions="learned", rope_base=_DEFAULTS["rope_base"],
                      num_kv_groups=sizes.n_kv_heads, latent_dim=sizes.latent_dim, sliding_window_size=None)
    ignored = [f"{name} = {getattr(config, name)}" for name in _DECIDED
               if getattr(config, name) != getattr(settled, name) and getattr(config, name) != _DEFAULTS[name]]
    notes = _attention_notes(config, settled, sizes)
    if getattr(model, "heads_assumed", False):
        heads = amount(sizes.num_heads, "head")
        if sizes.n_kv_heads is not None:  # and W_key's rows: that many K/V heads of 64
            heads += f" and W_key's {sizes.n_kv_heads * sizes.emb_dim // sizes.num_heads} rows {sizes.n_kv_heads} " \
                     f"K/V {'head' if sizes.n_kv_heads == 1 else 'heads'}"
        notes.append(f"The checkpoint has no config giving its head count: its heads are taken to be 64 wide, as in "
                     f"every GPT-2 size, so width {sizes.emb_dim} gives {heads}. If they are not, put a config.json "
                     + ("(with n_head) beside the file." if sizes.n_kv_heads is None else
                        "(with n_head and n_kv_groups, the K/V heads) beside the file: with narrower heads the same "
                        "W_key holds more K/V heads, so the model is another."))
    notes += _window_notes(model, config.layer)
    if not config.causal and always_causal(model, config.layer):
        notes.append(f"Ignored causal mask = off: this checkpoint's attention is the book's sliding-window class "
                     f"(ch04/06_swa), which always hides the future (on its full-attention layers too), so layer "
                     f"{config.layer} runs with its mask, as trained.")
    if ignored:
        biases = "biases on Q, K and V" if sizes.qkv_bias else "no Q, K, V biases"
        notes.append(f"Ignored {', '.join(ignored)}: this checkpoint decides them (width {sizes.emb_dim}, "
                     f"{sizes.num_heads} heads, {settled.context_length} positions, {biases}, eval mode, the CPU).")
    return settled, notes


def _attention_notes(config: AttentionConfig, settled: AttentionConfig, sizes) -> list[str]:
    """A note for each setting of the attention's kind — Q/K/V biases, positions, K/V heads, latent, window — that
    the caller set and the checkpoint's file decides otherwise or does not use."""
    kv_heads = (f"{amount(sizes.n_kv_heads, 'K/V head')} shared by its {sizes.num_heads} heads"
                if sizes.n_kv_heads is not None else f"a K/V head for each of its {amount(sizes.num_heads, 'head')} "
                                                     "(multi-head attention)")
    why = {
        "qkv_bias": ("this checkpoint was trained with a bias in W_query, W_key and W_value (GPT-2 has them), so "
                     "its layer runs with them, as trained: each query, key and value is x · W + b. Without the "
                     "biases it would not be the model that was trained." if sizes.qkv_bias else
                     "this checkpoint was trained without a bias in W_query, W_key and W_value, so its layer runs "
                     "without them, as trained: each query, key and value is x · W."),
        "positions": "this checkpoint's GPT adds learned positional embeddings to its tokens (the book's GPTModel): "
                     "it has no rotary positions.",
        "rope_base": "this checkpoint's positions are learned: rope_base turns rotary positions only.",
        "num_kv_groups": f"this checkpoint's layers hold {kv_heads}.",
        "latent_dim": ("this checkpoint's attention has no latent." if sizes.latent_dim is None else
                       f"this checkpoint's latent is {sizes.latent_dim} wide."),
        "sliding_window_size": "a checkpoint's layers take their window from its own config (sliding_window), not "
                               "from this setting.",
    }
    return [f"Ignored {name} = {getattr(config, name)}: {reason}" for name, reason in why.items()
            if getattr(config, name) != getattr(settled, name) and getattr(config, name) != _DEFAULTS[name]]


def always_causal(model, layer: int) -> bool:
    """Whether layer ``layer``'s attention hides the future whatever the Causal switch says: the book's
    sliding-window class (``ch04/06_swa``) masks on every layer, its full-attention ones included."""
    return isinstance(model.trf_blocks[layer].att, MultiHeadAttentionWithSWA)


def layer_window(model, layer: int) -> int | None:
    """Layer ``layer``'s own sliding window (a config's schedule may mix window and full layers); None without."""
    return getattr(model.trf_blocks[layer].att, "sliding_window_size", None)


def _window_notes(model, layer: int) -> list[str]:
    """Where the checkpoint's config names a sliding window: what layer ``layer`` runs with (its schedule may make
    it a full-attention layer)."""
    windows = getattr(model, "sliding_windows", None)
    if not windows or all(window is None for window in windows):
        return []
    window = windows[layer]
    if window is None:
        return [f"This checkpoint's config names a sliding window, but layer {layer} is one of its full-attention "
                "layers (sliding_window_stride): it runs full causal attention."]
    context = model.pos_emb.num_embeddings  # the checkpoint's positions: the longest text it runs
    if window >= context:
        return [f"This checkpoint's config names a sliding window of {amount(window, 'token')}, as long as its "
                f"{amount(context, 'position')} or longer: the window covers every position, so layer {layer} runs "
                "full causal attention (each token attends to itself and every token before it)."]
    return [f"This checkpoint's config names a sliding window of {amount(window, 'token')}, and layer {layer} runs "
            f"with it: each token attends to itself and the {amount(window - 1, 'token')} before it; keys further "
            "back have weight 0."]


def trace(text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace:
    """The Trace of layer ``config.layer`` (a settled config): its ten stages from the LayerNorm'd block input,
    the checkpoint's own embedding rows, the whole model's path and its top-5 next tokens at every position."""
    model = weights.load(config.checkpoint)
    n_layers = len(model.trf_blocks)
    layer_trace = _layer_trace(model, config, token_ids)
    steps = {name: to_numpy(value) for name, value in layer_trace.steps.items()}  # norm1 + the ten stages
    with torch.no_grad():
        ids = torch.tensor(token_ids)  # (n,)
        token_rows = model.tok_emb.weight[ids]  # (vocab, d)[(n,)] -> (n, d): the checkpoint's wte rows
        position_rows = model.pos_emb.weight[: len(token_ids)]  # (n, d): its wpe rows
        embeddings = {"token": to_numpy(token_rows), "position": to_numpy(position_rows),
                      "input": to_numpy(token_rows + position_rows)}  # (n, d) each
    block = [(name, shape) for name, shape in layer_trace.recorder.shapes]
    names = [name for name, _ in block]
    first = names.index("latent") if "latent" in names else names.index("queries")  # MLA records its latent first
    attention_shapes = block[first : names.index("output") + 1]  # what att records
    top_ids = layer_trace.top_ids.copy()
    top_probs = layer_trace.top_probs.copy()
    top_ids.setflags(write=False)
    top_probs.setflags(write=False)
    return make_trace(config, text, token_ids, embeddings, steps=steps, output=steps["output"],
                  shapes=(("input", dict(block)["norm1"]), *attention_shapes),  # the attention reads norm1(block input)
                  device="cpu", notes=notes,
                  model=ModelRun(layer=config.layer, n_layers=n_layers, path=tuple(layer_trace.path),
                                 top_ids=top_ids, top_probs=top_probs, window=layer_window(model, config.layer),
                                 always_causal=always_causal(model, config.layer)))


def prepare(config: AttentionConfig) -> None:
    """Nothing is built ahead for a checkpoint's layer: its model is loaded by the first run that needs it
    (:func:`attnviz.weights.load`)."""


def _layer_trace(model, config: AttentionConfig, token_ids: list[int]):
    """``models.trace_layer``, or ``models.switch_layer`` from the block inputs kept for these tokens."""
    key = (config.checkpoint, config.causal, tuple(token_ids))
    with _layer_runs_lock:
        kept = _layer_runs.get(key)
        if kept is not None:
            _layer_runs.move_to_end(key)
    if kept is not None:
        return models.switch_layer(model, kept[0], config.layer)
    layer_trace = models.trace_layer(model, token_ids, config.layer, causal=config.causal)
    shapes_only = attention.Recorder()
    shapes_only.shapes = list(layer_trace.recorder.shapes)
    light = replace(layer_trace, recorder=shapes_only)  # block inputs, predictions, path: not the maps
    size = light.block_inputs.numel() * light.block_inputs.element_size()
    with _layer_runs_lock:
        _layer_runs[key] = (light, size)
        while len(_layer_runs) > 1 and sum(s for _, s in _layer_runs.values()) > LAYER_RUNS_MB * 2**20:
            _layer_runs.popitem(last=False)
    return layer_trace
