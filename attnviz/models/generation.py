"""Greedy generation with the KV cache, one recorded step per forward pass, and a step's check against a full forward.

:func:`generate` is the book's ``generate_text_simple_cached`` (``ch04/03_kv-cache``) for attnviz's
``GPTModel``: ``reset_kv_cache()``, one forward of the whole prompt (the prefill), then one forward per new
token that feeds only that token; each next token is the argmax of the last position's logits.  Every
forward is a :class:`Step`: the attention weights of every layer and head for the rows it computed
``(layers, heads, q, k)`` (q = the prompt's length, then 1), what each layer's cache holds afterwards and its
bytes, and the last position's logits with their top 5.  :func:`cache_holds` says what a model's layers cache
(the tensors and their shapes: K/V heads, a latent, at most W tokens).  A cache that keeps only the latest keys (a
sliding window) attends over fewer: its rows are widened to every position so far with the weight 0 those keys get.
``use_cache=False`` recomputes the whole sequence at every step (the book's ``generate_text_simple``) and
keeps the last row of each, so both give comparable steps.
A generation records the :func:`fingerprint` of the model that made it (a hash of its weights and layout), so a
step's check refuses another model, of the same shape or not, rather than comparing numbers that never matched.

The model may be shared (a loaded checkpoint serves every session): generation runs under
:func:`attnviz.models.trace.running` (one run at a time, eval mode, causal), starts with a reset and always
ends with one, so no cache outlives the call.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from attnviz.attention import Recorder
from attnviz.kv_cache import DTYPE_NAMES, window_schedule
from attnviz.models.gpt import GPTModel, PathRecorder, check_model, yes_or_no
from attnviz.models.trace import running, token_sequence
from attnviz.words import amount, listed

TOP_K = 5


@dataclass(frozen=True)
class Step:
    """One forward pass of a generation."""

    position: int  # the position of the first token this forward fed (0 for the prefill)
    fed: list[int]  # the token ids it fed: the prompt, then the one new token (all tokens so far without the cache)
    weights: np.ndarray | None  # float32 (layers, heads, q, k): the rows this step adds; None when not kept
    cache_shapes: list[dict[str, tuple[int, ...]]]  # per layer, what the cache holds after it ({} without a cache)
    cache_token_axes: list[int]  # per layer, the dimension of its cache's shapes that counts the tokens
    cache_bytes: int  # bytes the cache holds after it, every layer
    logits: np.ndarray  # float32 (vocab,): the last position's logits
    top_ids: list[int]  # the TOP_K most likely next tokens, most likely first
    top_probs: list[float]  # their softmax probabilities

    @property
    def next_token(self) -> int:
        """The greedy choice this step makes: the argmax of its logits."""
        return self.top_ids[0]

    def __repr__(self) -> str:
        """A few lines, not the arrays' values (a notebook prints a cell's last value): where the step fed and what it
        chose, each array's name, shape and dtype, the cache's bytes after it."""
        shown = ", ".join(str(token) for token in self.fed[:12])
        lines = [f"Step at position {self.position}: fed {amount(len(self.fed), 'token')} "
                 f"[{shown}{', …' if len(self.fed) > 12 else ''}], next token {self.next_token} "
                 f"(p {self.top_probs[0]:.3g})"]
        if self.weights is None:
            lines.append("  weights: none kept")
        else:
            lines.append(f"  weights (layers, heads, q, k): {self.weights.shape} {self.weights.dtype}")
        lines.append(f"  logits (vocab,): {self.logits.shape} {self.logits.dtype}")
        if any(self.cache_shapes):
            lines.append(f"  cache: {self.cache_bytes:,} bytes after it")
        return "\n".join(lines)


@dataclass(frozen=True)
class Generation:
    """A greedy generation: ``token_ids`` (prompt + new), ``steps`` (``steps[0]`` the prefill, then one per new
    token), the notices the input earned (a prompt cut so that the new tokens fit, new tokens clipped), and the
    :func:`fingerprint` of the model that made it, which :func:`check_step` and :func:`check_steps` compare."""

    token_ids: list[int]
    prompt_length: int
    steps: list[Step]
    use_cache: bool
    notices: list[str] = field(default_factory=list)
    model_fingerprint: str | None = None  # None: made by hand, checked by its steps' layers and heads only

    @property
    def new_tokens(self) -> list[int]:
        return self.token_ids[self.prompt_length:]

    def __repr__(self) -> str:
        """A few lines, not every step's logits (a notebook prints a cell's last value): the tokens, the layers and
        heads, the steps with the shapes of their weights, the cache's bytes at the end, how many notices."""
        new = len(self.token_ids) - self.prompt_length
        weights = [step.weights.shape for step in self.steps if step.weights is not None]  # (layers, heads, q, k)
        layers = amount(len(self.steps[0].cache_token_axes), "layer") if self.steps else "no layers"
        heads = f" × {amount(int(weights[0][1]), 'head')}" if weights else ""
        cache = "with the KV cache" if self.use_cache else "without a cache"
        lines = [f"Generation {cache}: {amount(self.prompt_length, 'prompt token')} + {new} new, {layers}{heads}, "
                 f"{amount(len(self.steps), 'step')}"]
        shown = ", ".join(str(token) for token in self.token_ids[:12])
        lines.append(f"  token_ids: [{shown}{', …' if len(self.token_ids) > 12 else ''}]"
                     + (f" (new_tokens: the last {new})" if new else ""))
        if not weights:
            lines.append("  weights: none kept")
        else:
            later = {1: "", 2: f", then the new token's {weights[1]}"}.get(
                len(weights), f", then one per new token {weights[1]} … {weights[-1]}")
            lines.append(f"  weights (layers, heads, q, k): the prompt's {weights[0]}{later}")
        if self.use_cache and self.steps:
            lines.append(f"  cache: {self.steps[-1].cache_bytes:,} bytes after the last step")
        if self.notices:
            lines.append(f"  {amount(len(self.notices), 'notice')}: generation.notices")
        return "\n".join(lines)


# model -> (the state of its tensors when hashed: names, ids, version counters, data pointers; their SHA-256)
_WEIGHT_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fingerprint(model: GPTModel) -> str:
    """A SHA-256 of what decides ``model``'s numbers: every tensor of its ``state_dict`` (name, shape, dtype, bytes)
    and each layer's attention class, sliding window and LayerNorm eps.  Two models share it only when they compute
    the same (a copy shares it; another seed, another checkpoint, or the same model after a training step does not).

    Hashing GPT-2 small's weights reads 0.7 GB, so their digest is kept per model while its tensors are the same
    objects, unchanged in place (torch's version counters): a generation and its check hash a model once."""
    check_model(model)
    state = model.state_dict(keep_vars=True)
    key = tuple((name, id(tensor), tensor._version, tensor.data_ptr()) for name, tensor in state.items())
    kept = _WEIGHT_DIGESTS.get(model)
    if kept is None or kept[0] != key:
        digest = hashlib.sha256()
        for name, tensor in state.items():
            digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype};".encode())
            digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())  # its bytes, as stored
        kept = key, digest.hexdigest()
        _WEIGHT_DIGESTS[model] = kept
    layout = [(type(block.att).__name__, getattr(block.att, "sliding_window_size", None), block.norm1.eps,
               block.norm2.eps) for block in model.trf_blocks] + [model.final_norm.eps]
    return hashlib.sha256(f"{kept[1]} {layout!r}".encode()).hexdigest()


class _WeightsOnly(Recorder):
    """Keeps the softmax weights only (nothing else is cloned or held)."""

    def record(self, name: str, tensor: torch.Tensor, copy: bool = False, keep: bool = True) -> None:
        super().record(name, tensor, copy=False, keep=keep and name == "weights")


def clip(model: GPTModel, prompt_length: int, max_new_tokens) -> tuple[int, int, list[str]]:
    """(prompt tokens kept, new tokens, notices): every position fed must fit the model's context.

    The new tokens asked for come first: a prompt that leaves them no room gives up its beginning and keeps its last
    ``context_length − max_new_tokens`` tokens (as the book's ``idx[:, -ctx_len:]`` keeps a sequence's end) — but
    never fewer than half the context (or the whole prompt, if shorter), so that a count past the context does not
    reduce the prompt to a token or two; the new tokens are then cut to the room left.  At most one notice, saying
    what was cut."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number ≥ 0, got {max_new_tokens!r}.")
    context_length = model.pos_emb.weight.shape[0]
    asked = int(max_new_tokens)
    least = min(prompt_length, max(1, context_length // 2))  # what the prompt keeps whatever the count
    kept = min(prompt_length, max(context_length - asked, least))
    new = min(asked, context_length - kept)
    if kept < prompt_length and new == asked:
        fit = (", so that the 1 new token fits" if asked == 1 else f", so that the {asked:,} new tokens fit") if asked \
            else ""
        return kept, new, [f"The prompt has {prompt_length:,} tokens and the model's context is {context_length:,}: "
                           f"generation continues its last {kept:,}{fit}."]
    if kept < prompt_length:
        return kept, new, [f"The prompt has {prompt_length:,} tokens and {asked:,} new tokens would pass the model's "
                           f"context of {context_length:,}: generation continues the prompt's last {kept:,} (half "
                           f"the context) and generates {new:,}."]
    if new < asked:
        return kept, new, [f"{asked:,} new tokens would pass the model's context of {context_length:,} tokens "
                           f"({kept:,} in the prompt): generating {new:,}."]
    return kept, new, []


def _cache_state(model: GPTModel) -> tuple[list[dict[str, tuple[int, ...]]], int]:
    shapes, nbytes = [], 0
    for block in model.trf_blocks:
        tensors = block.att.cache_tensors()
        shapes.append({name: tuple(tensor.shape) for name, tensor in tensors.items()})
        nbytes += sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())
    return shapes, nbytes


def layer_windows(model: GPTModel) -> tuple[int | None, ...]:
    """Each layer's sliding window, in order (None: a layer without one): a checkpoint's schedule may mix them."""
    check_model(model)
    return tuple(getattr(block.att, "sliding_window_size", None) for block in model.trf_blocks)


def cache_settings(model: GPTModel) -> dict:
    """The model's sizes as :func:`attnviz.kv_cache_bytes` takes them (``emb_dim``, ``n_heads``, ``n_layers``,
    ``n_kv_heads`` — None with a latent —, ``head_dim``, ``latent_dim``, ``sliding_window_size``, and ``swa_ratio``
    where a layer has a window: :func:`attnviz.kv_cache.window_schedule` of :func:`layer_windows`, so a schedule
    that mixes window and full layers counts each layer's own cache, and ``dtype``: the short name of the dtype
    of the model's weights, which its cache holds, ``"fp32"`` …): with ``context_length`` = the positions fed, it
    gives the bytes :func:`generate`'s steps report.  Raises ValueError when the layers' windows differ, or for
    another object than a GPTModel."""
    att = check_model(model).trf_blocks[0].att
    latent_dim = getattr(att, "latent_dim", None)
    schedule = window_schedule(layer_windows(model))
    kv_heads = None if latent_dim is not None else int(getattr(att, "num_kv_groups", att.num_heads))  # MLA: a latent
    return {"emb_dim": int(model.tok_emb.weight.shape[1]), "n_heads": int(att.num_heads),
            "n_layers": len(model.trf_blocks), "n_kv_heads": kv_heads,
            "head_dim": int(att.head_dim), "latent_dim": None if latent_dim is None else int(latent_dim),
            "sliding_window_size": None, **schedule, "dtype": DTYPE_NAMES[str(model.tok_emb.weight.dtype)[6:]]}


def _layer_holds(settings: dict, window: int | None, token_axis: int) -> str:
    """What one layer with ``window`` (None: full attention) caches, in Markdown; ``token_axis`` 1: keys and values
    kept as the book's bonus KV cache (``ch04/03_kv-cache``, ``06_swa``) keeps them, (b, n, heads, head_dim)."""
    if settings["latent_dim"] is not None:
        return (f"`cache_c_kv`, one latent per token, shape `(b, n, latent_dim)` = `(1, n, {settings['latent_dim']})`: "
                "keys and values are up-projected from it at every step")
    heads, kv_heads = settings["n_heads"], settings["n_kv_heads"]
    what = "`cache_k` and `cache_v`"
    if kv_heads == 1 < heads:
        what += (f" of its one K/V head (shared by {'both' if heads == 2 else f'all {heads}'} query heads, repeated "
                 "after the cache)")
    elif kv_heads < heads:
        what += (f" of its {kv_heads} K/V heads (each shared by {heads // kv_heads} query heads, repeated after the "
                 "cache)")
    if window is not None:
        what += f" of the last W = {window} tokens only"
    n_symbol, n_here = ("n", "n") if window is None else ("min(n, W)", f"min(n, {window})")
    if token_axis == 1:  # the book's MHA and sliding window: their layout, before the heads are transposed
        where = "ch04/03_kv-cache" if window is None else "ch04/03_kv-cache, and ch04/06_swa's window"
        return (f"{what}, shape `(b, {n_symbol}, heads, head_dim)` = `(1, {n_here}, {heads}, {settings['head_dim']})`, "
                f"the layout of the book's bonus KV cache ({where}: new tokens appended on dim 1, transposed to heads "
                "first after)")
    symbol = "heads" if kv_heads == heads else "kv_heads"
    return (f"{what}, shape `(b, {symbol}, {n_symbol}, head_dim)` = "
            f"`(1, {kv_heads}, {n_here}, {settings['head_dim']})`, heads first as the book's bonus code keeps it "
            "(after the transpose)")


def cache_holds(model: GPTModel) -> str:
    """What each layer of ``model``'s cache holds, in Markdown: a sentence naming the layers, the tensors their
    attention keeps, their shape in symbols and in this model's sizes (b = 1).  MHA keeps ``cache_k`` and
    ``cache_v`` of every head; GQA and MQA of their K/V heads only; MLA one latent per token, ``cache_c_kv``; a
    sliding window at most its last W tokens.  A schedule that mixes window and full layers (a checkpoint's
    ``sliding_window_stride``) names each group of layers with what it holds."""
    settings = cache_settings(model)
    windows = layer_windows(model)
    kinds = [(window, getattr(block.att, "cache_token_axis", 2)) for window, block in zip(windows, model.trf_blocks)]
    if len(set(kinds)) == 1:
        lead = "The layer caches" if len(windows) == 1 else f"Each of the {len(windows)} layers caches"
        return f"**{lead}** {_layer_holds(settings, *kinds[0])}."
    parts = []
    for window, axis in dict.fromkeys(kinds):  # in the order of the first layer of each
        layers = [index for index, own in enumerate(kinds) if own == (window, axis)]
        kind = f"a sliding window of {amount(window, 'token')}" if window is not None else "full attention"
        verb = "caches" if len(layers) == 1 else "cache"
        parts.append(f"**{listed('layer', layers)}** ({kind}) {verb} {_layer_holds(settings, window, axis)}")
    sentence = "; ".join(parts)
    return sentence[:2] + sentence[2].upper() + sentence[3:] + "."  # "**Layers 0, 2** (…) cache …; **layer 1** …"


def _forward(model: GPTModel, idx: torch.Tensor, use_cache: bool, keep_weights: bool, last_row: bool):
    """Logits of the last position (vocab,) and, if kept, the weights (layers, heads, q, k) of this forward."""
    n_layers = len(model.trf_blocks)
    recorder = PathRecorder(layers=range(n_layers) if keep_weights else (),
                            recorder_factory=lambda index: _WeightsOnly())
    logits = model(idx, recorder, use_cache=use_cache)  # (1, q, vocab)
    weights = None
    if keep_weights:
        n_keys = model.current_pos if use_cache else idx.shape[1]  # every position so far
        # a cache holds the latest keys; one that dropped older ones (a sliding window) gave them weight 0
        rows = [recorder.blocks[i].steps["weights"][0] for i in range(n_layers)]  # L × (h, q, k_held)
        weights = torch.stack([F.pad(row, (n_keys - row.shape[-1], 0)) for row in rows])  # (L, h, q, n_keys)
        if last_row:
            weights = weights[:, :, -1:, :]  # (L, h, n, n) -> (L, h, 1, n)
        weights = weights.float().cpu().numpy()
    return logits[0, -1].float(), weights  # (1, q, vocab) -> (vocab,)


def _step(position: int, fed: list[int], last_logits: torch.Tensor, weights, model: GPTModel, use_cache: bool) -> Step:
    probs = torch.softmax(last_logits, dim=-1)  # (vocab,)
    argmax = int(torch.argmax(last_logits))  # the greedy choice (the first of equal maxima, as the book's argmax)
    top_ids = torch.topk(probs, TOP_K).indices  # (k,)
    top_ids_list = [argmax, *[int(i) for i in top_ids if int(i) != argmax]][:TOP_K]
    top_probs = probs[top_ids_list]  # (k,)
    shapes, nbytes = _cache_state(model) if use_cache else ([{} for _ in model.trf_blocks], 0)
    axes = [getattr(block.att, "cache_token_axis", 2) for block in model.trf_blocks]
    return Step(position=position, fed=fed, weights=weights, cache_shapes=shapes, cache_token_axes=axes,
                cache_bytes=nbytes, logits=last_logits.cpu().numpy(), top_ids=top_ids_list,
                top_probs=[float(p) for p in top_probs])


def generate(model: GPTModel, token_ids, max_new_tokens: int, *, use_cache: bool = True,
             keep_weights: bool = True) -> Generation:
    """Greedy generation (the book's ``generate_text_simple_cached``), one :class:`Step` per forward.

    ``token_ids``: the prompt, one non-empty sequence of ids as :func:`attnviz.models.trace.token_sequence` takes
    it (a list, a 1-D tensor, a batch of one ``(1, n)``).  Prompt and ``max_new_tokens`` are cut so that every
    position fits the context (:func:`clip`; a notice says so).  ``keep_weights=False`` keeps no attention weights (a
    benchmark's run).  Raises ValueError for a prompt :func:`~attnviz.models.trace.token_sequence` refuses (empty,
    no whole numbers, several sequences, ids outside the vocabulary), a negative count, ``use_cache`` or
    ``keep_weights`` not True or False, or another object than a GPTModel."""
    ids = token_sequence(token_ids, vocab_size=check_model(model).tok_emb.weight.shape[0]).tolist()
    use_cache, keep_weights = yes_or_no(use_cache, "use_cache"), yes_or_no(keep_weights, "keep_weights")
    kept, new, notices = clip(model, len(ids), max_new_tokens)
    ids = ids[len(ids) - kept:]
    device = model.pos_emb.weight.device
    steps: list[Step] = []
    with running(model, causal=True):
        made_by = fingerprint(model)
        model.reset_kv_cache()
        try:
            idx = torch.tensor([ids], device=device)  # (1, n)
            logits, weights = _forward(model, idx, use_cache, keep_weights, last_row=False)  # prefill
            steps.append(_step(0, list(ids), logits, weights, model, use_cache))
            for _ in range(new):
                next_id = steps[-1].next_token  # a) the greedy choice
                ids.append(next_id)  # b) appended to the running sequence
                position = len(ids) - 1
                if use_cache:  # c) fed alone: its keys and values join the cache
                    idx = torch.tensor([[next_id]], device=device)  # (1, 1)
                    logits, weights = _forward(model, idx, True, keep_weights, last_row=False)
                    fed = [next_id]
                else:  # c') the whole sequence again; only its last row is new
                    idx = torch.tensor([ids], device=device)  # (1, n)
                    logits, weights = _forward(model, idx, False, keep_weights, last_row=True)
                    fed = list(ids)
                steps.append(_step(position, fed, logits, weights, model, use_cache))
        finally:
            model.reset_kv_cache()
    return Generation(token_ids=ids, prompt_length=kept, steps=steps, use_cache=use_cache, notices=notices,
                      model_fingerprint=made_by)


@dataclass(frozen=True)
class StepCheck:
    """A step against the uncached forward of the same tokens: the largest differences of its weights and logits.

    Weights lie in [0, 1]: they must agree to ``tolerance``.  Logits are tens in size and float32 keeps about 7
    digits, so a single new row and a full forward (different matrix shapes, so different summation orders)
    differ by ~1e-5 in absolute terms: they must agree to ``tolerance`` relative to the largest logit."""

    weights_diff: float
    logits_diff: float
    logits_scale: float = 1.0  # max |logit| of the uncached forward
    tolerance: float = 1e-5

    @property
    def logits_relative_diff(self) -> float:
        return self.logits_diff / max(1.0, self.logits_scale)

    @property
    def ok(self) -> bool:
        return self.weights_diff <= self.tolerance and self.logits_relative_diff <= self.tolerance


def _check_generation(model: GPTModel, generation) -> Generation:
    """``generation`` when it is a Generation of ``model`` (its steps' layers and heads, then its
    :func:`fingerprint`: another model of the same shape, or this one with other weights, is no model of it); a
    ValueError naming what came instead."""
    if not isinstance(generation, Generation):
        raise ValueError(f"generation must be an attnviz.models.Generation (generate's result), got "
                         f"{type(generation).__name__}.")
    shapes = {step.weights.shape[:2] for step in generation.steps if step.weights is not None}  # (layers, heads)
    here = (len(model.trf_blocks), model.trf_blocks[0].att.num_heads)
    if shapes - {here}:
        (layers, heads), *_ = shapes - {here}
        raise ValueError(f"This generation was made by another model: its steps hold {amount(layers, 'layer')} × "
                         f"{amount(heads, 'head')}, this model has {amount(here[0], 'layer')} × "
                         f"{amount(here[1], 'head')}.")
    if generation.model_fingerprint is not None and generation.model_fingerprint != fingerprint(model):
        raise ValueError(f"This generation was made by another model of the same shape, or by this model before its "
                         f"weights changed: its model's fingerprint is {generation.model_fingerprint[:12]}…, this "
                         f"model's {fingerprint(model)[:12]}…. Check it with the model that made it, or generate "
                         "again with this one.")
    return generation


def rows_of(generation: Generation, index: int) -> tuple[int, int]:
    """(first, end): the positions whose query rows step ``index`` computed."""
    step = generation.steps[index]
    if index == 0:
        return 0, generation.prompt_length
    return step.position, step.position + 1


def check_steps(model: GPTModel, generation: Generation) -> list[StepCheck]:
    """Every step against one uncached forward of the whole generated sequence.

    Attention is causal, so that forward's rows and logits at positions < end are those of a forward of the first
    ``end`` tokens alone (what :func:`check_step` runs): one forward checks every step."""
    _check_generation(check_model(model), generation)
    if any(step.weights is None for step in generation.steps):
        raise ValueError("This generation kept no attention weights (keep_weights=False).")
    fed = generation.token_ids[: rows_of(generation, len(generation.steps) - 1)[1]]  # every position a step fed
    idx = torch.tensor([fed], device=model.pos_emb.weight.device)  # (1, n)
    n_layers = len(model.trf_blocks)
    recorder = PathRecorder(layers=range(n_layers), recorder_factory=lambda index: _WeightsOnly())
    with running(model, causal=True):
        all_logits = model(idx, recorder)[0].float().cpu()  # (1, n, vocab) -> (n, vocab)
    weights = torch.stack([recorder.blocks[i].steps["weights"][0] for i in range(n_layers)])  # (L, h, n, n)
    weights = weights.float().cpu().numpy()
    checks = []
    for index, step in enumerate(generation.steps):
        first, end = rows_of(generation, index)
        logits = all_logits[end - 1]  # (vocab,): the logits this step's last position gives
        checks.append(StepCheck(
            weights_diff=float(np.abs(weights[:, :, first:end, :end] - step.weights).max()),
            logits_diff=float((logits - torch.from_numpy(step.logits)).abs().max()),
            logits_scale=float(logits.abs().max())))
    return checks


def check_step(model: GPTModel, generation: Generation, index: int) -> StepCheck:
    """Run the model without the cache on every token up to step ``index``'s last one and compare: its weights
    rows (every layer and head) and its last logits.  ``index`` counts from 0 (the prompt's step), or from the end
    when negative; a whole number outside them is an IndexError naming the range, anything else (``"0"``, 1.0,
    True) a ValueError naming it too."""
    _check_generation(check_model(model), generation)
    count = len(generation.steps)
    span = f"from 0 to {count - 1} (or −{count} to −1, counted from the end)"
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise ValueError(f"step must be a whole number {span}, got {index!r}.")
    if not -count <= index < count:
        raise IndexError(f"step {index!r} is out of range: this generation has {count} steps, choose step {span}.")
    index = int(index) % count  # the prompt's step is 0 however it is counted
    step = generation.steps[index]
    if step.weights is None:
        raise ValueError("This generation kept no attention weights (keep_weights=False).")
    first, end = rows_of(generation, index)
    idx = torch.tensor([generation.token_ids[:end]], device=model.pos_emb.weight.device)  # (1, end)
    with running(model, causal=True):
        logits, weights = _forward(model, idx, False, True, last_row=False)  # (vocab,), (L, h, end, end)
    weights = weights[:, :, first:end, :end]  # (L, h, q, end): the rows this step computed
    return StepCheck(weights_diff=float(np.abs(weights - step.weights).max()),
                     logits_diff=float((logits.cpu() - torch.from_numpy(step.logits)).abs().max()),
                     logits_scale=float(logits.abs().max()))
