"""Checks that a module's cached forwards give its uncached outputs and that its cache holds no more than the
variant it declares needs: the ``kv-cache`` rule of :mod:`attnviz.checks`.

What it runs:

* a forward that takes ``use_cache``: two different sequences, each after the module's own
  ``reset_cache()``/``reset_kv_cache()``, fed as a prefill of several tokens and then token by token, the last two
  in one forward (a chunk after a non-empty cache: skipped, said in the pass, for a forward that raises on it or
  takes a model's ``attention_mask``);
* a cache the caller holds — a ``past_key_values`` (``past_key_value``, ``layer_past``, ``past_kv``, ``kv_cache``,
  ``cache``, ``past``) argument, returned beside the output, and no reset — the same way, each forward given the
  cache the one before returned; a forward that returns none is given a Hugging Face ``DynamicCache``
  (transformers imported only then) that it fills in place, the same object every step;
* nothing for a module that is not causal, or that keeps no cache either way: the rule skips.

When it passes:

* every step gives the uncached outputs, ≤ 1e-5;
* a cache kept in lower precision than the module computes — a bfloat16 cache beside float32 outputs — to that
  dtype's precision, named: the dtype of the cache's own tensors, not of another a cached forward writes
  (:class:`_Precision`);
* for a ``window_size`` that is the cache's length W (:func:`attnviz.window_reading.cache_length`, the book's
  optimized class), the prefill is no longer than W and each step past W is compared with the uncached forward of
  the last W tokens, those the cache keeps; for a model whose layers each keep one (:func:`_layer_lengths`), the
  prefill is no longer than the shortest, the steps are compared up to it — past it no uncached forward of the model
  gives what layers whose caches drop their oldest tokens make —, and each layer's cache is held to its own length.

What a failure names — a step that differs is recorded again beside the whole sequence's forward, and the failure
names what the evidence shows:

* the module's position counter: one that never moves, counts forwards, or counts each token twice;
* how many tokens its cache holds — for a declared window W, fewer than the W − 1 a step needs beside its own, or a
  step that sees more than W keys (a rolling cache one token too long, or, the cache holding every token fed, a
  cached mask without the window), or a chunk whose first query sees fewer than the W − 1 keys before it (the step
  attends over the cache trimmed to W); for a cache length W, fewer or more than its last W tokens, the step's own among
  them, in a cache length's words;
* keys read from slots no token was written to;
* a reset that leaves the cache the last sequence filled;
* where the step's mask puts the new tokens (SDPA's ``is_causal`` over the cache: aligned to the top-left);
* which of its queries, keys or values differ — for a rotary module, a query or cached key of the right length
  turned by another angle (rotated at the wrong position: for a rolling window, at its length capped at W − 1; for a
  cache length, at its fill pointer, which its shift moves back); keys or values that are the whole sequence's K/V heads
  in ``.repeat``'s order instead of ``repeat_interleave``'s, or the reverse;
* a cached output of NaN or of another shape, as such;
* in a model of several attention layers (:class:`AttentionLayer`), the layer whose cache or step shows the cause,
  named as the other rules name it ("attention 2 of 2 on line 30: …") and read against its own window, cache length,
  position counter and rotary: the step's attentions in order, up to the first whose step gives another context than
  the whole sequence's;
* right outputs with a position counter — the module's, or an attention layer's — past the tokens fed fail too (a
  reset that keeps it: named so), saying why they agree — a later row of the causal mask, rotary scores that depend
  only on i − j.

What the cache holds:

* a pass says what the cache holds after the sequence: tokens × elements per token, counted along the dimension
  that grows by one from the first token to the second;
* a cache the module resets itself is found by what it holds, not by its name: the tensors it or a submodule keeps
  — inside a tuple, list or dict too, or a KV cache object that is no module (the book's ``KVCache``, a class of the
  user's with ``k`` and ``v``), read by the walk the window readers read
  (:func:`attnviz.declarations.held_objects`) — that hold the tokens: that grow from the first token to the second,
  whether the reset empties them or not, or that the reset empties or replaces and that hold what a token brought
  (not a mask, rotary tables or a step counter); a cache the caller holds is read as the forward returns it after
  the last token;
* the rule fails, its outputs right, only on evidence of the waste its declared variant exists to save: a window
  cache holding more than W tokens, named with the bytes it grows by with every token — a failure, not a note: the
  mask hides the far keys, so only the cache's size shows a memory that grows with the whole text where W entries
  suffice, which a sliding window's cache exists to bound (not the ``DynamicCache`` attnviz hands a layer, which
  keeps every token by its own choice: said in the pass), K/V tensors of ``num_heads`` heads where
  ``num_kv_groups`` K/V heads are declared, full K and V (d_out per token each) where a ``latent_dim`` is — a model
  whose layers declare different windows (window and full layers, the book's ``06_swa`` schedule) has each layer's
  cache held to its own window, a full layer's keeping every token (:func:`_over_window`), a cache the caller holds
  entry by entry, each layer's (:func:`_entry_windows`); each layer's tensors are held to that layer's own K/V heads
  and latent (:func:`_cache_excess`); sizes the module keeps under other names are those it was built with,
  ``check_module``'s ``sizes``, and the heads and head_dim its trace measured, each layer's its own.

An uncached forward that writes to a cache the module keeps (a forward that ignores ``use_cache=False``, or takes no
``use_cache`` and caches on every call: :func:`uncached_appends`) — one that grows, or one allocated once at its full
size whose buffers are written in place and whose pointer moves — fails ``kv-cache`` in those words.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import nn

from attnviz import time_limit, tracing, user_code
from attnviz.declarations import (
    MODULE_INTERNALS,
    declared_size,
    declared_window,
    held_objects,
    is_size,
    layer_windows,
)
from attnviz.rotary_rule import uses_rotary
from attnviz.rule_base import TOLERANCE, Check, NotFinite, lowest_precision, module_output
from attnviz.tokens import counted
from attnviz.window_reading import CACHE_ARGUMENTS, attention_window, cache_length, cache_parameters
from attnviz.words import amount, plural


@dataclass(frozen=True)
class KeptState:
    """What a module keeps, as an uncached forward may change it, without a copy of its cache: every tensor it keeps
    (:func:`_kept_tensors`) with its version counter, which an in-place write moves (a copy of an inference tensor,
    which keeps none), the paths of those that are buffers, and the numbers its modules hold as attributes (a
    position counter: ``ptr``, ``trf_blocks.0.att.ptr_cur``)."""

    tensors: dict[str, tuple[torch.Tensor, int | None]]
    buffers: frozenset[str]
    numbers: dict[str, int | float | bool]


class _Precision:
    """The precision kv-cache compares a cached output at: ``TOLERANCE``, or, for a cache kept in a dtype of lower
    precision than the module's outputs (a bfloat16 cache beside float32 outputs, its keys and values rounded to 8
    significant bits on the way in), that dtype's machine epsilon × the largest uncached output — about what that
    rounding moves an output by, and far below what a wrong mask or position does.  :meth:`learn` reads the tensors a
    cached forward wrote, by their paths; the lowest precision seen holds from then on, until :meth:`narrow` keeps
    only the cache's own tensors (the cache is found after the sequences: a lower-precision tensor a forward writes
    beside it, a scratch copy, loosens nothing).  ``loose``: the steps that passed only at a lower precision than
    float32's, each with its failure's words, to judge again once the precision is narrowed."""

    def __init__(self) -> None:
        self.dtype: torch.dtype | None = None  # the cache's, when of lower precision than the outputs'
        self.computes: torch.dtype | None = None  # the outputs'
        self.largest = 0.0  # the largest |uncached output| compared
        self.seen: dict[str, torch.dtype] = {}  # path -> the dtype of a written tensor of lower precision
        self.loose: list[tuple[float, Callable[[], str]]] = []  # (a step's difference, its failure's words)

    def learn(self, written: Mapping[str, torch.Tensor], output: torch.Tensor) -> None:
        """Notes the lowest-precision floating dtype among the tensors a cached forward ``written`` (path ->
        tensor) when it is lower than that of ``output``, the uncached output it is compared with."""
        if not output.is_floating_point():
            return
        lower = {path: dtype for path, tensor in written.items()
                 if (dtype := lowest_precision([tensor], than=output.dtype)) is not None}
        if not lower:
            return
        self.seen.update(lower)
        dtype = max(lower.values(), key=_eps)
        if self.dtype is None or _eps(dtype) > _eps(self.dtype):
            self.dtype = dtype
        self.computes = output.dtype
        self.largest = max(self.largest, float(output.detach().abs().nan_to_num(nan=0.0, posinf=0.0,
                                                                                 neginf=0.0).max()))

    def narrow(self, cache: _CacheHeld | None) -> bool:
        """Keeps only the precision of the tensors that are the cache (``cache``: what :func:`_cache_held` found;
        None: it was not found, and the precision stays as it is); True when that is higher than the one compared at
        so far."""
        if cache is None:
            return False
        kept = [dtype for path, dtype in self.seen.items() if path in cache.shapes]
        dtype = max(kept, key=_eps, default=None)
        if dtype == self.dtype:
            return False
        self.dtype = dtype
        return True

    def failure(self) -> str | None:
        """The words of the first step in :attr:`loose` that the precision, narrowed, no longer passes."""
        return next((words() for worst, words in self.loose if worst > self.tolerance), None)

    @property
    def tolerance(self) -> float:
        """The largest difference of a cached output from the uncached one that passes."""
        return TOLERANCE if self.dtype is None else max(TOLERANCE, _eps(self.dtype) * self.largest)

    def of(self, reference: torch.Tensor) -> float:
        """The tolerance for a cached step's queries, keys or values beside the whole sequence's ``reference``."""
        if self.dtype is None:
            return TOLERANCE
        return max(TOLERANCE, _eps(self.dtype) * float(reference.detach().float().abs().max()))

    def _kept(self) -> str:
        return f"the cache is kept in {_dtype_name(self.dtype)}, the module computes in {_dtype_name(self.computes)}"

    def within(self) -> str:
        """The pass's bound: "≤ 1e-05", or the cache dtype's, named."""
        if self.dtype is None:
            return f"≤ {TOLERANCE:g}"
        name = _dtype_name(self.dtype)
        return (f"≤ {self.tolerance:.2g}: {self._kept()}: compared at {name}'s precision, its machine epsilon "
                f"{_eps(self.dtype):.2g} × the largest output {self.largest:.2g}")

    def beyond(self) -> str:
        """Words after a failing difference: "" at 1e-5, else the cache dtype's bound it exceeds."""
        if self.dtype is None:
            return ""
        return f" (more than {self.tolerance:.2g}, {_dtype_name(self.dtype)}'s precision: {self._kept()})"


def _eps(dtype: torch.dtype) -> float:
    """The machine epsilon of a floating dtype."""
    return torch.finfo(dtype).eps


def _dtype_name(dtype: torch.dtype | None) -> str:
    """ "bfloat16" for torch.bfloat16."""
    return str(dtype).removeprefix("torch.")


def kept_state(module: nn.Module) -> KeptState:
    """The module's :class:`KeptState` now."""
    tensors, kept = {}, _kept_tensors(module)
    for path, tensor in kept.items():
        version = _version(tensor)
        tensors[path] = (tensor, version) if version is not None else (tensor.detach().clone(), None)
    numbers = {f"{prefix}.{name}" if prefix else name: value for prefix, submodule in module.named_modules()
               for name, value in vars(submodule).items()
               if name not in MODULE_INTERNALS and type(value) in (int, float, bool)}
    buffers = {id(buffer) for buffer in module.buffers()}
    return KeptState(tensors, frozenset(path for path, tensor in kept.items() if id(tensor) in buffers), numbers)


def _tensor_change(before: tuple[torch.Tensor, int | None] | None,
                   after: tuple[torch.Tensor, int | None] | None) -> str | None:
    """How a kept tensor changed between two :class:`KeptState` entries (None: it did not): "appeared as (2, 4, 16,
    8)", "was removed", "changed in place" (the same tensor, its version counter moved) or "was replaced by (…)"
    (another tensor of other values: one of equal values, rebuilt by every forward, is no change)."""
    if before is None and after is None:
        return None
    if before is None:
        return f"appeared as {_shape_words(after[0].shape)}"
    if after is None:
        return "was removed"
    if before[0] is after[0]:
        return "changed in place" if before[1] is not None and before[1] != after[1] else None
    return None if _unchanged(before[0], after[0]) else f"was replaced by {_shape_words(after[0].shape)}"


def _state_changes(before: KeptState, after: KeptState) -> tuple[list[str], list[str]]:
    """The paths of the tensors, and of the numbers, that changed from ``before`` to ``after``."""
    tensors = [path for path in dict.fromkeys([*before.tensors, *after.tensors])
               if _tensor_change(before.tensors.get(path), after.tensors.get(path)) is not None]
    numbers = [path for path in dict.fromkeys([*before.numbers, *after.numbers])
               if before.numbers.get(path, MISSING) != after.numbers.get(path, MISSING)]
    return tensors, numbers


MISSING = object()  # a number an attribute did not hold yet


def _seeded_output(module: nn.Module, x: torch.Tensor, what: str) -> tuple[torch.Tensor | None, str | None]:
    """(the module's uncached output of ``x``, None) — the output every page reads (:func:`tracing.forward_output`)
    — or (None, the error's line, beginning with ``what`` when the forward raises), every random number it draws (a
    dropout) drawn from one seed, so that two such forwards that differ differ by what the module kept; the caller's
    random state is left as it was."""
    devices = [x.device.index or 0] if x.device.type != "cpu" else []
    with torch.random.fork_rng(devices=devices, device_type=x.device.type if devices else "cuda"), torch.no_grad():
        torch.manual_seed(0)
        try:
            return tracing.forward_output(module, x, what=what).detach(), None  # (b, n, d_out)
        except tracing.TraceError as error:
            return None, time_limit.one_line(error)


def _differs(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """How output ``b`` differs from ``a`` (None: it does not, within ``TOLERANCE``)."""
    if a.shape != b.shape:
        return f"is {tuple(b.shape)}, not {tuple(a.shape)}"
    worst = (b.float() - a.float()).abs().max().item()
    return None if worst <= TOLERANCE else f"differs by {worst:.3g}"


def uncached_appends(module: nn.Module, x: torch.Tensor, output: torch.Tensor, before: KeptState,
                      random: bool = False) -> str | None:
    """kv-cache's words for a module whose uncached forward — ``use_cache=False``, or a forward that takes no
    ``use_cache`` — writes to a cache it keeps (None: it does not).  The traced forward of ``x`` (its ``output``)
    changed a tensor the module keeps ``before`` it (:class:`KeptState`: new, grown, replaced by other values or
    written in place — a number that moves alone, a call counter, holds no keys), the same forward again changed a
    tensor again, and that second forward raised (then what the first changed is named) or gave another output.
    What changes only in the first forward (rotary tables built on the first call) and what changes every time but
    is never read back (a log, the last weights kept for plotting: the outputs agree) is no finding; ``random``
    (dropout acts in eval mode): two more forwards with the same random numbers must differ too.  Only when the first
    forward changed a tensor does this run the second: every rule after it would attend to what the ones before
    wrote, until a shape no longer fits.

    A cache that grows is named by its shapes (:func:`_appended_words`); one allocated once at its full size (the
    book's optimized cache, Llama's) by what changed in it and the numbers that moved (:func:`_written_words`)."""
    first = kept_state(module)
    written, counted_first = _state_changes(before, first)
    if not written:
        return None  # no tensor changed: a number alone (a call counter) holds no keys
    again, raised = _seeded_output(module, x, "the second one")
    second = kept_state(module)
    written_again, counted_again = _state_changes(first, second)
    if raised is None:
        what = _differs(output, again)
        if not written_again or what is None:
            return None  # built on the first call, or kept and never read back
        if random and again.shape == output.shape:
            third, raised_third = _seeded_output(module, x, "the third one")
            if raised_third is None and _differs(again, third) is None:
                return None  # the dropout's, not the cache's: the same random numbers give the same output
        what = f"the second one's output {what}"
    else:
        what = raised  # "the second one raised RuntimeError: …"
    grown = [path for path in written_again if path in first.tensors and path in second.tensors
             and second.tensors[path][0].numel() > first.tensors[path][0].numel()]
    takes_use_cache, _ = cache_parameters(module)
    called = "with use_cache=False" if takes_use_cache else "(it takes no use_cache)"
    if grown:
        return _appended_words(called, takes_use_cache, x, grown, before, first, second, what)
    changed = written_again + counted_again if written_again else written + counted_first
    return _written_words(called, takes_use_cache, x, changed, before, first, second, what)


def _appended_words(called: str, takes_use_cache: bool, x: torch.Tensor, grown: list[str], before: KeptState,
                    first: KeptState, second: KeptState, what: str) -> str:
    """kv-cache's words for an uncached forward that appends to a cache that grows (``grown``: the tensors that grew
    again in the second forward)."""
    def shape(state: KeptState, path: str) -> torch.Size | None:
        return state.tensors[path][0].shape if path in state.tensors else None

    sizes = ", ".join(f"{path} from {_shape_words(shape(before, path))} to {_shape_words(shape(first, path))}, then "
                      f"{_shape_words(shape(second, path))}" for path in grown)
    fix = ("append to the cache, and read it, only when use_cache is true (if use_cache: self.cache_k = "
           "torch.cat(…)), then check again" if takes_use_cache else
           "take use_cache=False in the forward and append to the cache, and read it, only when it is true, then "
           "check again")
    return (f"the forward {called} appended to the cache: two uncached forwards of the same {counted(x.shape[1])} "
            f"grew {sizes}, and {what} — each uncached forward attends to the tokens of the ones before; {fix}")


def _written_words(called: str, takes_use_cache: bool, x: torch.Tensor, changed: list[str], before: KeptState,
                   first: KeptState, second: KeptState, what: str) -> str:
    """kv-cache's words for an uncached forward that writes into a cache whose shape stays (``changed``: the tensors
    and numbers the second forward changed again, or, when it raised before changing a tensor, those the first
    changed):
    "the buffer cache_k changed in place (its shape (2, 4, 16, 8) kept)", "ptr went from 0 to 8, then 16"."""
    parts, counters = [], []
    for path in changed:
        if path in first.tensors or path in before.tensors:
            steps = [step for step in (_tensor_change(before.tensors.get(path), first.tensors.get(path)),
                                       _tensor_change(first.tensors.get(path), second.tensors.get(path)))
                     if step is not None]
            steps = list(dict.fromkeys(steps))  # written in place by both forwards: said once
            if steps[0] == "changed in place":
                steps[0] += f" (its shape {_shape_words(first.tensors[path][0].shape)} kept)"
            kind = "buffer" if path in first.buffers or path in second.buffers else "attribute"
            parts.append(f"the {kind} {path} {', then '.join(steps)}")
        else:
            counters.append(path)
            values = [state.numbers.get(path, MISSING) for state in (before, first, second)]
            if values[0] == values[1]:
                values = values[1:]
            values = [value for index, value in enumerate(values) if index == 0 or value != values[index - 1]]
            said = ["nothing" if value is MISSING else repr(value) for value in values]
            parts.append(f"{path} went from {said[0]} to {said[1]}" + "".join(f", then {v}" for v in said[2:]))
    changes = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    move = "".join(f", move {name}" for name in counters[:1]) + "".join(f" and {name}" for name in counters[1:])
    fix = (f"write to the cache{move} and read the cache only when use_cache is true (when it is false, attend to the "
           "new keys and values alone), then check again" if takes_use_cache else
           f"take use_cache=False in the forward, and write to the cache{move} and read the cache only when it is "
           "true, then check again")
    return (f"the forward {called} wrote to the cache: in two uncached forwards of the same {counted(x.shape[1])} "
            f"{changes}, and {what} — each uncached forward attends to what the ones before left in the cache; {fix}")


def _shape_words(shape: torch.Size | None) -> str:
    """ "(2, 2, 8, 8)", or "nothing" for a tensor the module did not keep."""
    return "nothing" if shape is None else f"({', '.join(map(str, shape))})"


RESETS = ("reset_cache", "reset_kv_cache")  # the names a module's own cache reset goes by


def kv_cache(module: nn.Module, x: torch.Tensor, causal: bool = True, *,
             sizes: Mapping[str, int] | None = None, not_finite: NotFinite | None = None,
             layers: Sequence[AttentionLayer] = ()) -> Check:
    """Two sequences in a row, each after the module's reset, fed as a prefill then token by token with
    ``use_cache=True``, must give the uncached outputs; a forward without ``use_cache``, or one token, skips.  A
    cache the caller holds (a ``past_key_values`` argument, and no reset) is checked by passing each forward's
    returned cache to the next, when the module is ``causal`` (else a prefill cannot equal the whole sequence's first
    tokens, which see the later ones).  ``sizes``: the module's sizes by attnviz setting where it does not keep them
    under a known name (:func:`_cache_excess`); ``not_finite``: why the module's uncached output, not finite, cannot
    be compared (:func:`attnviz.checks.not_finite_output`): the verdict of a module that caches.  ``layers``: the
    attentions of a model's forward, one per layer (:class:`AttentionLayer`; fewer than two: the module is read as
    one attention), each cache tensor read against its own layer — its window, its sizes (then ``sizes`` is not
    read) — and a step that differs named by the first layer whose step shows why."""
    rule = "kv-cache"
    layers = tuple(layers) if len(layers) > 1 else ()
    n = x.shape[1]
    plan = _cache_plan(module, n)
    takes_use_cache, cache_name, length, prefill, reset_name = plan[:5]
    if not plan.caches:
        return Check(rule, "skip", "the forward takes no use_cache: the module keeps no KV cache")
    if reset_name is None and cache_name is None:
        return Check(rule, "fail", "the forward takes use_cache but the module has no reset_cache() or "
                                   "reset_kv_cache(): a second sequence would attend to the first one's cache")
    if n == 1:
        return Check(rule, "skip", "1 token: nothing to feed after the prefill from the cache — check 2 or more "
                                   "tokens")
    if plan.caller_holds and not causal:
        return Check(rule, "skip", f"the cache is passed in as {cache_name}, and the module is not causal: its first "
                                   "tokens see the later ones, so a prefill cannot give them: not checked")
    if not_finite is not None:
        return not_finite.verdict(rule)
    if plan.caller_holds:
        return _passed_back(module, x, cache_name, {"use_cache": True} if takes_use_cache else {}, prefill, sizes,
                            length, layers, layer_lengths=plan.layer_lengths)
    reset = _user_reset(module, reset_name)
    refused = _why_no_chunk(module)  # why the module takes no chunk after its cache: then its tokens go one by one
    precision = _Precision()  # the cache's dtype, as the cached forwards show it
    try:
        try:
            difference, refused = _chunk_else_one_by_one(functools.partial(
                _cached_difference, module, reset, [x[:1], x[1:2]], prefill,  # two different sequences
                reset_name=reset_name, precision=precision, length=length, layers=layers,
                compared_to=plan.shortest), refused)
            held = _cache_held(module, reset, x[1:2]) if difference is None else None  # after the second one
            if difference is None and precision.narrow(held):  # a lower-precision tensor that is not the cache
                difference = precision.failure()
        finally:
            reset()
    except time_limit.UserCallError as error:  # the reset's own code failed or never returned: no new sequence
        return Check(rule, "fail", str(error))
    if difference is not None:
        return Check(rule, "fail", difference)
    words = (f"two sequences, each after {reset_name}(): {_plan_words(n, prefill, refused)}, give the uncached outputs "
             f"({precision.within()}){_cropped_words(length, n)}{_layer_lengths_words(plan, n)}")
    return _held_verdict(module, _with_refused(words, refused), held, n, sizes, layers=layers,
                         layer_lengths=plan.layer_lengths)


def _held_verdict(module: nn.Module, words: str, held: _CacheHeld | None, n: int,
                  sizes: Mapping[str, int] | None = None, supplied: str | None = None, *,
                  layers: Sequence[AttentionLayer] = (), cache_name: str | None = None,
                  layer_lengths: Mapping[str, tuple[str, int]] | None = None) -> Check:
    """kv-cache's verdict on cached outputs that were right (``words``): a pass saying what the cache holds after
    ``n`` tokens, or a fail naming the waste its declared variant exists to save (:func:`_cache_excess`).
    ``supplied``: the type of the cache object attnviz handed the forward, which it only adds to — what that object
    keeps is its own choice, so more tokens than the window needs are said in the pass, not failed.  ``layers``: a
    model's attentions (:class:`AttentionLayer`), each tensor held to its own layer's window and sizes;
    ``cache_name``: the argument a cache the caller holds is passed as, whose per-layer entries are the layers';
    ``layer_lengths``: the cache lengths of a model's layers that keep their own (:attr:`_CachePlan.layer_lengths`),
    each tensor held to its layer's."""
    layer_lengths = layer_lengths or {}
    if held is None:
        return Check("kv-cache", "pass", words)
    owners = _tensor_layers(held.tokens, layers, cache_name)
    windows = _held_windows(module, held, owners, caller_holds=cache_name is not None, layer_lengths=layer_lengths)
    excess = _cache_excess(module, held, n, sizes, window=supplied is None, layers=windows, owners=owners,
                           layer_lengths=layer_lengths)
    if excess is not None:
        return Check("kv-cache", "fail", f"{words}, but {excess}")
    words = f"{words}; after {counted(n)} {_by_layer_words(held, windows) or f'the cache holds {held.words()}'}"
    over = _over_window(module, held, windows, sizes, layer_lengths) if supplied is not None else None
    if over is not None:
        window = over.window
        words += (f" — more than a window of W = {window} needs, and not the layer's doing: the {supplied} attnviz "
                  "hands it keeps every token, and the layer only adds to it (a transformers model hands a "
                  "sliding-window layer DynamicCache(config=…), whose DynamicSlidingWindowLayer keeps the last "
                  f"W − 1 = {window - 1})")
    return Check("kv-cache", "pass", words)


KV_CHUNK = 2  # the tokens of kv-cache's last cached forward, fed together after a non-empty cache


def kv_steps(n: int, prefill: int, *, chunk: bool = True) -> list[tuple[int, int]]:
    """(start, stop) of kv-cache's forwards on n tokens: the prefill's ``prefill`` tokens (:func:`kv_prefill`), then
    one token at a time, the last ``KV_CHUNK`` together (a chunk after a non-empty cache: its mask must offset its
    queries by the cached tokens) when ``chunk`` and at least one token goes alone before them."""
    singles = n - KV_CHUNK if chunk and n - prefill > KV_CHUNK else n
    return [(0, prefill), *((i, i + 1) for i in range(prefill, singles)), *([(singles, n)] if singles < n else [])]


def _is_chunk(start: int, stop: int) -> bool:
    """Whether kv-cache's cached forward over tokens ``start`` … ``stop - 1`` is its chunk (:func:`kv_steps`)."""
    return start > 0 and stop - start > 1


class _ChunkRefusedError(Exception):
    """A cached forward raised on kv-cache's chunk (:func:`kv_steps`), every step before it right: a module that takes
    one token per cached step.  Its message: the forward's error, in words."""


def _why_no_chunk(module: nn.Module) -> str | None:
    """Why kv-cache feeds the module no chunk after its cache (None: it does): a forward that takes an
    ``attention_mask`` (a Hugging Face layer) gets the mask for a chunk from its model, and attnviz passes none."""
    if "attention_mask" not in inspect.signature(module.forward).parameters:
        return None
    return ("the forward takes an attention_mask, which its model builds for a chunk after the cache (SDPA's is_causal "
            "alone aligns to the top-left), and attnviz passes none")


def _chunk_else_one_by_one(feed: Callable[..., str | None], refused: str | None) -> tuple[str | None, str | None]:
    """What ``feed(chunk=...)`` returns (:func:`_cached_difference`'s or :func:`_fed_back`'s words), and why no chunk
    after the cache was fed (None: one was): ``feed`` is given the chunk unless ``refused`` already says why not,
    and, when a forward raises on it (:class:`_ChunkRefusedError`), is fed again one token at a time, the error in
    words (:func:`_refused_words`) the reason."""
    try:
        return feed(chunk=refused is None), refused
    except _ChunkRefusedError as error:
        return feed(chunk=False), _refused_words(error)


def _refused_words(error: _ChunkRefusedError) -> str:
    """Why the module took no chunk after its cache: the cached forward raised on it (``error``) — a module written for
    one token a step, or a mask sliced for the new tokens alone (``mask[:n, :n]``, right for one token and no shape
    for a chunk): which, only the module's author knows."""
    return (f"{error} — right if the module takes one token per cached step; "
            "if not, its mask (or positions) does not count the cached keys: slice it from the cached tokens' count")


def _plan_words(n: int, prefill: int, refused: str | None) -> str:
    """How kv-cache fed n tokens: "a prefill of 4 tokens, then 2 tokens one by one and the last 2 in one forward"
    (one by one to the end when the module ``refused`` the chunk)."""
    steps = kv_steps(n, prefill, chunk=refused is None)
    start, stop = steps[-1]
    if not _is_chunk(start, stop):
        return f"a prefill of {counted(prefill)}, then {counted(n - prefill)} one by one"
    return (f"a prefill of {counted(prefill)}, then {counted(start - prefill)} one by one and the last "
            f"{stop - start} in one forward (a chunk after the cache)")


def _with_refused(words: str, refused: str | None) -> str:
    """kv-cache's pass ``words``, saying why the chunk after the cache was not checked (``refused``: the reason)."""
    if refused is None:
        return words
    return f"{words} — a chunk of {KV_CHUNK} after the cache not checked: {refused}"


def _passed_back(module: nn.Module, x: torch.Tensor, cache_name: str, flags: dict, prefill: int,
                 sizes: Mapping[str, int] | None = None, length: tuple[str, int] | None = None,
                 layers: Sequence[AttentionLayer] = (), *,
                 layer_lengths: Mapping[str, tuple[str, int]] | None = None) -> Check:
    """kv-cache for a cache the caller holds: two sequences, each a prefill then token by token, every forward given
    (as ``cache_name``) the cache the forward before returned, must give the uncached outputs — for a cache length
    (``length``, :func:`attnviz.window_reading.cache_length`), past W those of the last W tokens.  A forward that
    returns none is given a cache object the caller holds, which it fills in place (a Hugging Face ``DynamicCache``,
    when transformers is installed), from the first forward on: the same object, or the one it returns.
    ``layer_lengths``: its layers' own cache lengths (:attr:`_CachePlan.layer_lengths`), for :func:`_held_verdict`."""
    rule = "kv-cache"
    sequences = [x[:1], x[1:2]]  # two different sequences, (1, n, d_in) each
    with torch.no_grad():
        expected = [module_output(module, sequence) for sequence in sequences]  # (1, n, d_out) each
        last: dict = {}  # the cache after the last sequence's last token
        refused = _why_no_chunk(module)  # why the module takes no chunk after its cache: then its tokens go one by one
        precision = _Precision()  # the cache's dtype, as the cached forwards show it
        fed = functools.partial(_fed_back, module, sequences, expected, cache_name, flags, prefill,
                                precision=precision, length=length, layers=layers)
        result, refused = _chunk_else_one_by_one(functools.partial(fed, lambda: None, last), refused)
        held = None
        if result == "none returned" and (held := _cache_object()) is not None:
            result, refused = _chunk_else_one_by_one(functools.partial(fed, _cache_object, last), refused)
        if result in ("none returned", "takes no cache object"):  # nothing to feed the next step: nothing to follow
            empty = held is not None and result == "none returned"
            return Check(rule, "skip", f"the cache is passed in as {cache_name} but the forward returns none to pass "
                                       "back" + (f" and leaves the {type(held).__name__} it is given empty"
                                                 if empty else "") + ": not checked")
        if result is not None:
            return Check(rule, "fail", result)
        measured = _returned_held(module, sequences[1], cache_name, flags,
                                  (lambda: None) if held is None else _cache_object, last.get("cache"))
    given = ("the cache the forward before returned" if held is None else
             f"the {type(held).__name__} the forward before filled")
    n = x.shape[1]
    words = (f"two sequences: {_plan_words(n, prefill, refused)}, each given {given} ({cache_name}), give the uncached "
             f"outputs ({precision.within()}){_cropped_words(length, n)}")
    return _held_verdict(module, _with_refused(words, refused), measured, n, sizes,
                         None if held is None else type(held).__name__, layers=layers, cache_name=cache_name,
                         layer_lengths=layer_lengths)


def _returned_held(module: nn.Module, sequence: torch.Tensor, cache_name: str, flags: dict,
                   new_cache: Callable[[], object], last) -> _CacheHeld | None:
    """What a cache the caller holds holds after a sequence: the tensors of ``last`` (the cache the last forward
    returned, or the cache object it filled: :func:`_tensors_in`, named by ``cache_name``), their tokens counted
    along the dimension that grows by one from ``sequence``'s first token, fed with ``new_cache()``, to its second,
    fed with the cache the first returned; None when ``last`` holds no tensor or those forwards raise."""
    now = {path: value.detach() for path, value in _tensors_in(cache_name, last).items()}
    if not now:
        return None
    fed, cache = [], new_cache()
    for tokens in (1, 2):
        try:
            output = tracing.run_forward(module, sequence[:, tokens - 1:tokens], **flags, **{cache_name: cache})
        except tracing.TraceError:  # these forwards ran before without raising: nothing more to say
            return None
        cache = _next_cache(output, tokens, cache)
        fed.append({path: value.shape for path, value in _tensors_in(cache_name, cache).items()})
    return _held(now, fed)


def _cache_object():
    """A new, empty cache object of the kind Hugging Face layers fill in place (transformers' ``DynamicCache``), or
    None when transformers is not installed: it is optional, imported only for a module that needs it."""
    try:
        from transformers import DynamicCache
    except ImportError:
        return None
    return DynamicCache()


def _fed_back(module: nn.Module, sequences: list[torch.Tensor], expected: list[torch.Tensor], cache_name: str,
              flags: dict, prefill: int, new_cache: Callable[[], object], last: dict | None = None, *,
              chunk: bool = True, precision: _Precision | None = None,
              length: tuple[str, int] | None = None, layers: Sequence[AttentionLayer] = ()) -> str | None:
    """The first cached forward that raises or differs, in words; None when none does; "none returned" when a
    forward returns no cache and was given no cache object it filled.  Each sequence starts from ``new_cache()``
    (None, or an empty cache object), each forward is given the cache the forward before returned (or, returning
    none, the object it was given); ``last["cache"]`` is the cache after the last forward.  ``chunk``: the last
    tokens in one forward (:func:`kv_steps`); one that raises on them is :class:`_ChunkRefusedError`.  ``precision``
    learns the dtype the returned cache keeps its tensors in (:class:`_Precision`).  ``length``: (the name, W) of the
    module's cache length (:func:`attnviz.window_reading.cache_length`): a step that ends past W is compared with the
    uncached forward of the last W tokens (:func:`kv_cropped`).  ``layers``: a model's attentions, read one by one
    for a step that differs (:func:`_step_cause`)."""
    precision = _Precision() if precision is None else precision
    kept = None if length is None else length[1]
    for number, (sequence, whole) in enumerate(zip(sequences, expected), start=1):
        cache = first = new_cache()
        crops = {} if kept is None else {  # (start, stop) -> the uncached output of the last W tokens at the step's
            (start, stop): module_output(module, sequence[:, stop - kept:stop])[:, start - stop:]  # (1, q, d_out)
            for start, stop in kv_cropped(sequence.shape[1], kept, chunk=chunk)}

        def rerun(start: int, *, sequence=sequence) -> dict:  # the forwards before ``start`` again
            cache = new_cache()
            for before, stop in kv_steps(sequence.shape[1], prefill):
                if before == start:
                    break
                output = tracing.run_forward(module, sequence[:, before:stop], **flags, **{cache_name: cache})
                cache = _next_cache(output, stop, cache)
            return {**flags, cache_name: cache}

        for start, stop in kv_steps(sequence.shape[1], prefill, chunk=chunk):
            try:
                output = tracing.run_forward(module, sequence[:, start:stop], what="a cached forward",
                                             **flags, **{cache_name: cache})
            except tracing.TraceError as error:  # the cache's code raised on its own cache: the rule fails
                if first is not None and number == 1 and start == 0:
                    return "takes no cache object"  # a forward that raises given one is not written for one
                if _is_chunk(start, stop):
                    raise _ChunkRefusedError(str(error)) from error
                return f"{error} (given the cache the forward before returned as {cache_name})"
            got = tracing.first_tensor(output)
            wanted = crops.get((start, stop), whole[:, start:stop])  # (1, q, d_out)
            problem = _cached_output_problem(got, wanted, sequence[:, start:stop])
            if problem is not None:
                return f"sequence {number}, {_step_words(start, stop)}: {problem}"
            got = got.detach()  # (1, q, d_out)
            cache = _next_cache(output, stop, cache)
            if cache is None or (start == 0 and _empty(cache)):
                return "none returned"
            precision.learn(_tensors_in(cache_name, cache), whole)
            worst = (got.float() - wanted.float()).abs().nan_to_num(nan=math.inf).max().item()
            if worst > precision.tolerance:
                step = _step_words(start, stop)
                cause = _step_cause(module, sequence, start, stop, functools.partial(rerun, start),
                                    precision=precision, layers=layers)
                given = ("the cache the forward before returned" if first is None else
                         f"the {type(first).__name__} the forward before filled")
                uncached = ("the uncached one" if (start, stop) not in crops else
                            f"the uncached forward of the last {counted(kept)} ({length[0]} = {kept}, the cache's "
                            "length)")
                if cause is not None:
                    return (f"sequence {number}, {step}: the cached output differs from {uncached} by "
                            f"{worst:.3g}{precision.beyond()} — {cause} (each forward given {given} as {cache_name})")
                return (f"sequence {number}, {step}: the cached output differs from {uncached} by "
                        f"{worst:.3g}{precision.beyond()} — given {given} as {cache_name}, the step does not compute "
                        "what the whole sequence computes at that position")
        if last is not None:
            last["cache"] = cache
    return None


def _next_cache(output, stop: int, given):
    """The cache the next forward is given: the one this forward returned, else the cache object it was given (Hugging
    Face layers fill theirs in place and return only the output and the weights)."""
    returned = _returned_cache(output, tracing.first_tensor(output), stop)
    if given is not None and not isinstance(given, tuple | list | torch.Tensor) and isinstance(returned, torch.Tensor):
        return given  # given a cache object, a tensor beside the output is not the cache (the weights, say)
    return returned if returned is not None else given


def _empty(cache) -> bool:
    """Whether a cache object holds no token (a ``get_seq_length()`` of 0: the forward did not fill it)."""
    length = getattr(cache, "get_seq_length", None)
    return callable(length) and length() == 0


def _returned_cache(output, out: torch.Tensor, keys: int):
    """The cache a forward returned beside its output ``out`` (Hugging Face's ``(out, present)``, or a
    ``past_key_values`` entry): what follows the output; None when nothing does — attention weights (…, q, ``keys``)
    are not a cache."""
    if isinstance(output, dict):
        return next((output[name] for name in (*CACHE_ARGUMENTS, "present", "presents")
                     if output.get(name) is not None), None)
    if not isinstance(output, tuple | list):
        return None
    weights = (out.shape[-2], keys)  # (q, keys): the shape of the step's attention weights
    rest = [item for item in output[1:] if item is not None
            and not (isinstance(item, torch.Tensor) and item.dim() >= 2 and tuple(item.shape[-2:]) == weights)]
    return rest[0] if rest else None


def _user_reset(module: nn.Module, name: str):
    """The module's reset method ``name`` as a call without arguments under the time limit of a user's call, whose
    failure is a one-line :class:`attnviz.time_limit.UserCallError` naming it."""
    return functools.partial(time_limit.call_in_words, f"{type(module).__name__}.{name}()", getattr(module, name))


class _CachePlan(NamedTuple):
    """What kv-cache runs on a module, read once for the run, its count and its diagnosis's count alike: whether its
    forward takes ``use_cache``, the name of a cache argument the caller holds (:func:`cache_parameters`), its cache's
    length (the name, W: :func:`attnviz.window_reading.cache_length`, the book's ``window_size``; None: none) and the
    tokens its prefill feeds at once (:func:`kv_prefill`), and the module's own cache reset (:func:`_reset_name`);
    for a model that keeps no cache length itself, its layers' own (:func:`_layer_lengths`, read once: each cache
    tensor is held to its layer's), and where the module resets its cache itself, the prefill no longer than the
    shortest."""

    takes_use_cache: bool
    cache_name: str | None
    length: tuple[str, int] | None
    prefill: int
    reset_name: str | None
    layer_lengths: Mapping[str, tuple[str, int]] = {}

    @property
    def shortest(self) -> int | None:
        """The shortest of the layers' cache lengths (:attr:`layer_lengths`); None: the layers keep none."""
        return min((kept for _, kept in self.layer_lengths.values()), default=None)

    @property
    def caller_holds(self) -> bool:
        """Whether kv-cache hands each forward the cache the forward before returned (:func:`_passed_back`), as the
        caller that holds the cache does: the forward takes a cache argument, and either no ``use_cache`` (a nanoGPT
        fork's ``kv_cache``) or the module has no reset of its own (Hugging Face's ``past_key_value`` with
        ``use_cache``)."""
        return self.cache_name is not None and (self.reset_name is None or not self.takes_use_cache)

    @property
    def caches(self) -> bool:
        """Whether the module keeps a cache kv-cache can feed: its forward takes use_cache or a cache argument."""
        return self.takes_use_cache or self.cache_name is not None

    @property
    def kept(self) -> int | None:
        """W, the tokens a cache of the module's length keeps; None: no cache length."""
        return None if self.length is None else self.length[1]


def _cache_plan(module: nn.Module, n: int) -> _CachePlan:
    """kv-cache's plan for ``module`` on n tokens (:class:`_CachePlan`)."""
    takes_use_cache, cache_name = cache_parameters(module)
    length = cache_length(module)
    reset_name = _reset_name(module)
    plan = _CachePlan(takes_use_cache, cache_name, length, kv_prefill(n, None if length is None else length[1]),
                      reset_name)
    if length is not None:
        return plan
    plan = plan._replace(layer_lengths=_layer_lengths(module))
    return plan if plan.caller_holds else plan._replace(prefill=kv_prefill(n, plan.shortest))


def _layer_lengths(module: nn.Module) -> dict[str, tuple[str, int]]:
    """Each submodule's path (``layers[0]``) -> (the name, W) of its own KV cache's length
    (:func:`attnviz.window_reading.cache_length`: the book's optimized class's ``window_size``), for the submodules
    that keep one — in a model of such layers, each its own."""
    return {path: found for path, sub in held_objects(module).items()
            if path and isinstance(sub, nn.Module) and (found := cache_length(sub)) is not None}


def _layer_lengths_words(plan: _CachePlan, n: int) -> str:
    """kv-cache's words, after its pass, for a model whose layers keep KV caches of their own lengths (the ``plan``'s
    :attr:`_CachePlan.layer_lengths`) when the n tokens go past the shortest: up to which token the cached steps were
    compared, and why not after it."""
    shortest = plan.shortest
    if shortest is None or n <= shortest:
        return ""
    named = [f"{path}.{name} = {kept}" for path, (name, kept) in plan.layer_lengths.items()]
    which = (f"{named[0]} is that layer's KV cache length (mask-convention: not an attention window)"
             if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]} are those layers' KV cache lengths "
             "(mask-convention: not attention windows)")
    return (f" up to token {shortest - 1}; {which}, so from token {shortest} "
            "on the model's cached outputs are not compared with its uncached ones: a layer whose cache is full drops "
            "its oldest tokens by the class's design, so its later tokens see fewer keys than the whole sequence's, "
            "and the layers after it read what it makes of them")


def _reset_name(module: nn.Module) -> str | None:
    """The name of the module's own cache reset (:data:`RESETS`), None when it has none."""
    return next((name for name in RESETS if callable(getattr(module, name, None))), None)


def kv_prefill(n: int, length: int | None = None) -> int:
    """How many of n tokens kv-cache's prefill feeds at once (the rest go one by one: :func:`kv_steps`): half, and no
    more than a cache of ``length`` tokens holds (:func:`attnviz.window_reading.cache_length`)."""
    return max(1, min(n - 1, n // 2, length or n))


def kv_cropped(n: int, length: int, *, chunk: bool = True) -> list[tuple[int, int]]:
    """The cached forwards (start, stop) of kv-cache on n tokens (:func:`kv_steps`) that end past a cache of
    ``length`` tokens: each is compared with the uncached forward of the last ``length`` tokens, those its cache
    keeps."""
    return [(start, stop) for start, stop in kv_steps(n, kv_prefill(n, length), chunk=chunk) if stop > length]


def _cropped_words(length: tuple[str, int] | None, n: int) -> str:
    """kv-cache's words, after its pass, for a module whose ``length`` = (name, W) is its cache's length (None: no
    such window), when n tokens go past it: which outputs the cached steps were compared with, and why."""
    if length is None or n <= length[1]:
        return ""
    name, kept = length
    return (f"; {name} = {kept} is the length of the module's KV cache (mask-convention: not an attention window), "
            f"so from token {kept} on each cached step is compared with the uncached forward of the last "
            f"{counted(kept)} (what the cache keeps) — the whole sequence's outputs differ there by the class's "
            "design: its uncached queries see every earlier token")


def planned_forwards(module: nn.Module, n: int) -> int:
    """How many forwards of the module kv-cache runs on n tokens when it passes: two uncached sequences and, per
    sequence, the prefill and each step after it (:func:`kv_steps`; for a cache length W,
    :func:`attnviz.window_reading.cache_length`: a prefill of at most W, and one uncached forward of the last W tokens
    per step past W), then the forwards that find the cache and measure
    a token's size in it (three for a cache the module resets, two for a cache the caller holds); none for a forward
    that takes no cache, or one token.  A failing check runs fewer, and its diagnosis up to
    :func:`diagnosis_forwards` more."""
    plan = _cache_plan(module, n)
    if not plan.caches or n < 2:
        return 0
    resets = plan.takes_use_cache and plan.reset_name is not None
    steps = len(kv_steps(n, plan.prefill)) + (len(kv_cropped(n, plan.kept)) if plan.kept is not None else 0)
    return 2 * (1 + steps) + (3 if resets else 2)


def diagnosis_forwards(module: nn.Module, n: int) -> int:
    """How many forwards beyond :func:`planned_forwards` the diagnosis of a step that differs runs at most: three
    finding the cache and measuring a token's size in it, one recording of the whole sequence, the forwards before the
    failing step again (at most n − prefill) and the step (the cause); none where kv-cache runs no forward."""
    plan = _cache_plan(module, n)
    return n - plan.prefill + 5 if plan.caches and n > 1 else 0


def _cached_difference(module: nn.Module, reset, sequences: list[torch.Tensor], prefill: int, *,
                       reset_name: str = "reset_cache", chunk: bool = True,
                       precision: _Precision | None = None, length: tuple[str, int] | None = None,
                       layers: Sequence[AttentionLayer] = (), compared_to: int | None = None) -> str | None:
    """The first cached forward that raises, or whose output differs from the uncached one, with its likely cause
    (None: none).  An uncached forward that raises is a TraceError: the module fails without its cache too.
    ``chunk``: the last tokens in one forward (:func:`kv_steps`); one that raises on them is
    :class:`_ChunkRefusedError`.  ``precision`` learns the dtype of what the cached forwards write into the module
    (:class:`_Precision`), and the outputs are compared at it.  ``length``: (the name, W) of the module's cache
    length (:func:`attnviz.window_reading.cache_length`): a step that ends past W is compared with the uncached forward
    of the last W tokens (:func:`kv_cropped`), computed before any cached forward, as an uncached forward may reset
    the cache's pointer.  ``layers``: a model's attentions, read one by one for a step that differs
    (:func:`_cache_cause`).  ``compared_to``: the shortest of a model's layers' cache lengths
    (:attr:`_CachePlan.shortest`): a step that ends past it is run, its output not compared."""
    precision = _Precision() if precision is None else precision
    # whose position counters are read: the module, then each of its attention layers (None: not known)
    counting = [module, *(None if layer.module is module else layer.module for layer in layers)]
    # the int attributes of each that a cached forward changed: its position counter among them
    moved: list[set[str]] = [set() for _ in counting]
    ahead = None  # words for the first step after which a usual position counter is past the tokens fed
    left: list[str] = []  # the tensors the first sequence's forwards filled that the reset left as they were
    emptied: dict[str, tuple[torch.Tensor, int | None]] = {}  # what the module keeps right after the first reset
    with torch.no_grad():
        # uncached first: a run may reset positions
        expected = [module_output(module, sequence) for sequence in sequences]
        kept = None if length is None else length[1]
        cropped = [{} if kept is None else {  # (start, stop) -> the uncached output of the last W tokens at the step's
            (start, stop): module_output(module, sequence[:, stop - kept:stop])[:, start - stop:]  # (1, q, d_out)
            for start, stop in kv_cropped(sequence.shape[1], kept, chunk=chunk)} for sequence in sequences]
        for number, (sequence, whole, crops) in enumerate(zip(sequences, expected, cropped), start=1):
            before_reset = _held_tensors(module)
            reset()
            if number == 2:
                now = _held_tensors(module)
                filled = [name for name, held in before_reset.items() if not _same_held(emptied.get(name), held)]
                left = [name for name in filled if _same_held(now.get(name), before_reset[name])
                        and sequences[0].shape[1] in before_reset[name][0].shape]  # holding the tokens fed
            emptied = _held_tensors(module)  # what the forwards after this reset replace or change is their cache
            started = [_counters(owner) for owner in counting]  # {} for a layer not known
            for forwards, (start, stop) in enumerate(kv_steps(sequence.shape[1], prefill, chunk=chunk)):
                before = [_counters(owner) for owner in counting]
                try:
                    output = tracing.run_forward(module, sequence[:, start:stop], what="a cached forward",
                                                 use_cache=True)
                except tracing.TraceError as error:  # the cache's code raised (or called sys.exit): the rule fails
                    if _is_chunk(start, stop):  # every step before it right: a module that takes one token a step
                        raise _ChunkRefusedError(str(error)) from error
                    return str(error)
                after = [_counters(owner) for owner in counting]
                for changed, now_ints, then in zip(moved, after, before):
                    changed |= {name for name, value in now_ints.items() if then.get(name) != value}
                got = tracing.first_tensor(output)
                wanted = crops.get((start, stop), whole[:, start:stop])  # (1, q, d_out)
                problem = _cached_output_problem(got, wanted, sequence[:, start:stop])
                if problem is not None:
                    return f"sequence {number}, {_step_words(start, stop)}: {problem}"
                got = got.detach()  # (1, q, d_out)
                now = _held_tensors(module)
                precision.learn({name: held for name, (held, _) in now.items()
                                 if not _same_held(emptied.get(name), now[name])}, whole)
                worst = (got.float() - wanted.float()).abs().nan_to_num(nan=math.inf).max().item()
                if worst > TOLERANCE and (compared_to is None or stop <= compared_to):
                    counter, *per_layer = [_counter(then, now_ints, changed, number, forwards)
                                           for then, now_ints, changed in zip(before, after, moved)]
                    cause = (_reset_cause(reset_name, left, counter, layers, per_layer) if number == 2 and left
                             else None)
                    uncached = ("the uncached one" if (start, stop) not in crops else
                                f"the uncached forward of the last {counted(kept)} ({length[0]} = {kept}, the cache's "
                                "length)")
                    words = functools.partial(_step_failure, module, reset, sequence, prefill, number, start, stop,
                                              worst, uncached, cause or counter, precision, layers, per_layer)
                    if worst > precision.tolerance:
                        return words()
                    precision.loose.append((worst, words))  # passed at a lower precision: judged again
                ahead = ahead or next((_in_layer(layer, words) for layer, owner, now_ints, first, changed
                                       in zip((None, *layers), counting, after, started, moved) if owner is not None
                                       and (words := _counter_ahead(owner, now_ints, first, changed, number, stop))
                                       is not None), None)
    return ahead


def _step_failure(module: nn.Module, reset, sequence: torch.Tensor, prefill: int, number: int, start: int, stop: int,
                  worst: float, uncached: str, cause: str | _Counter | None, precision: _Precision,
                  layers: Sequence[AttentionLayer] = (), counters: Sequence[_Counter | None] = ()) -> str:
    """kv-cache's words for the cached step ``start`` … ``stop - 1`` of sequence ``number`` whose output differs by
    ``worst`` from ``uncached`` (the words for what it is compared with), beyond ``precision``: the cause already
    named (words), else the one the evidence shows (:func:`_cache_cause`, given the position counter or None, and
    each of the ``layers``' own, ``counters``)."""
    if not isinstance(cause, str):
        cause = _cache_cause(module, reset, sequence, prefill, start, stop, cause, precision, layers, counters)
    return (f"sequence {number}, {_step_words(start, stop)}: the cached output differs from {uncached} by "
            f"{worst:.3g}{precision.beyond()} — {cause}")


def _held_tensors(module: nn.Module) -> dict[str, tuple[torch.Tensor, int | None]]:
    """Every tensor the module keeps (:func:`_kept_tensors`): path -> (the tensor, its version counter: an in-place
    change moves it; None for an inference tensor, :func:`_version`)."""
    return {path: (tensor, _version(tensor)) for path, tensor in _kept_tensors(module).items()}


def _same_held(a: tuple[torch.Tensor, int | None] | None, b: tuple[torch.Tensor, int | None] | None) -> bool:
    """Whether two of :func:`_held_tensors`' entries are the same tensor, unchanged in between (as far as its version
    counter tells: an inference tensor has none)."""
    return a is not None and b is not None and a[0] is b[0] and a[1] == b[1]


def _reset_cause(reset_name: str, kept: list[str], counter: _Counter | None,
                 layers: Sequence[AttentionLayer] = (), counters: Sequence[_Counter | None] = ()) -> str:
    """Words for a reset that leaves the cache the first sequence filled (``kept``: the tensors the cached forwards
    replaced or changed, still the same after the reset), and perhaps the position too (``counter``).  When every
    tensor kept is one attention layer's (``layers``: :class:`AttentionLayer`, :func:`_tensor_layers`), the first such
    layer is named ("attention 2 of 2 on line 30: …"), with its own tensors and its own position counter
    (``counters``, in the order of ``layers``)."""
    owners = _tensor_layers(kept, layers)
    at = None if len(owners) < len(kept) else min(next(index for index, one in enumerate(layers) if one is owner)
                                                  for owner in owners.values())
    layer = None if at is None else layers[at]
    where = in_layer = ""
    if layer is not None:
        kept = [name for name in kept if owners[name] is layer]
        counter = counters[at] if at < len(counters) else None
        own_reset = None if layer.module is None else _reset_name(layer.module)
        where = f" ({layer.path}.{own_reset}())" if layer.path and own_reset else ""
        in_layer = " in this layer"
    names = "/".join(kept)
    if counter is not None and counter.usual and counter.before != 0:
        words = (f"{reset_name}() resets nothing{in_layer}: the second sequence starts at {counter.name} = "
                 f"{counter.before}, not 0, and still attends over the first one's keys ({names} keep them) — in the "
                 f"reset{where}, empty {names} and set {counter.name} back to 0")
    else:
        words = (f"after {reset_name}() the next sequence still attends over the last one's keys{in_layer}: empty "
                 f"{names} in the reset{where}")
    return _in_layer(layer, words)


def _counter_ahead(module: nn.Module, after: dict[str, int], started: dict[str, int], moved: set[str], number: int,
                   stop: int) -> str | None:
    """Words for a position counter (one of POSITION_NAMES that the cached forwards move) that is past the ``stop``
    tokens fed so far after a cached forward whose output was right — a reset that left it where the last sequence
    did (``started``: the module's ints right after this sequence's reset), or a forward that adds too much — and why
    the outputs agree: a causal mask's later row still shows every cached key, and a rotary module's scores depend
    only on i − j, which moving every position alike keeps; None when it counts them (a counter behind them may be a
    window's fill pointer: not named)."""
    name = next((name for name in POSITION_NAMES if name in after and name in moved), None)
    if name is None or after[name] <= stop:
        return None
    why = ("the outputs agree only because the shift does not show yet: the mask still shows every cached key, and "
           "rotary scores depend only on the distance i − j, which moving every position alike keeps; the position "
           "reaches the end of a rotary table or mask before the tokens do" if uses_rotary(module) else
           "the outputs agree only because a later row of the causal mask still shows every cached key; the position "
           "reaches the mask's end before the tokens do")
    where = f"{name} is {after[name]} after {counted(stop)} of sequence {number}, where it should be {stop}"
    if started.get(name, 0) != 0:
        return (f"the cached outputs agree with the uncached ones, but the reset forgets the position: {where} (the "
                f"reset left it at {started[name]}; {why}) — set it back to 0 in the reset")
    return (f"the cached outputs agree with the uncached ones, but the position runs ahead of the tokens: {where}, so "
            f"the next token is treated as position {after[name]}, not {stop} ({why}) — add exactly the new tokens' "
            "count (x.shape[1]) after each cached forward")


def _step_words(start: int, stop: int) -> str:
    """kv-cache's name for the cached forward over tokens ``start`` … ``stop - 1``."""
    if _is_chunk(start, stop):
        return f"tokens {start} … {stop - 1} (a chunk of {stop - start} after {counted(start)} cached)"
    return f"token {start}" if start > 0 else f"{_tokens_up_to(stop)} (the prefill)"


def _cached_output_problem(got, wanted: torch.Tensor, fed: torch.Tensor) -> str | None:
    """Words for a cached forward's output ``got`` that cannot be compared with the uncached ``wanted``: no tensor,
    another shape than one vector per token fed (``fed`` (1, q, d_in)), or NaN / ∞ where the uncached output is
    finite; None when it can be compared."""
    if not isinstance(got, torch.Tensor):
        return "the cached forward returned no tensor"
    if got.shape != wanted.shape:
        return (f"the cached forward returned shape {tuple(got.shape)} for an input of shape {tuple(fed.shape)}: an "
                f"attention module returns one vector per token, {tuple(wanted.shape)}, with the cache too")
    bad = ~torch.isfinite(got) & torch.isfinite(wanted)  # (1, q, d_out)
    if bad.any():
        positions = bad.any(dim=-1)  # (1, q)
        what = "NaN" if torch.isnan(got[bad]).any() else "∞"
        return (f"the cached forward returns {what} at {int(positions.sum())} of {positions.numel()} positions "
                "where the uncached one is finite — the cached path computes something invalid (a division by 0, an "
                "empty softmax row, a NaN it multiplies by?)")
    return None


def _tokens_up_to(stop: int) -> str:
    """"token 0" for the first token alone, "tokens 0 … 3" for the first four."""
    return "token 0" if stop == 1 else f"tokens 0 … {stop - 1}"


POSITION_NAMES = ("ptr_current_pos", "ptr_cur", "current_pos", "cache_pos", "pos", "offset", "start_pos")


@dataclass(frozen=True)
class _Counter:
    """The module's position counter around the cached forward that differs."""

    name: str
    before: int  # its value before that forward
    after: int  # and after it
    usual: bool  # kept under one of POSITION_NAMES and trusted (:func:`_counter`); else: the one int the forwards moved
    number: int  # the sequence (1 or 2)
    forwards: int  # the cached forwards of this sequence before that one


def _counters(module: nn.Module | None) -> dict[str, int]:
    """The module's own int attributes (not bool): its position counter, if it keeps one, among them ({} for None: a
    layer not known)."""
    if module is None:
        return {}
    return {name: value for name, value in vars(module).items()
            if isinstance(value, int) and not isinstance(value, bool) and not name.startswith("_")}


def _counter(before: dict[str, int], after: dict[str, int], moved: set[str], number: int,
             forwards: int) -> _Counter | None:
    """The module's position counter: an int under one of POSITION_NAMES that the cached forwards changed, or that
    is the only candidate (no other int changed: a counter that never moves); else the one int attribute the cached
    forwards changed, kept as not usual — its words then need the step's mask to agree (None: neither).  A usual
    name alone is no evidence: OPT keeps a constant ``offset = 2``."""
    usual = [name for name in POSITION_NAMES if name in before and name in after]
    changed = sorted(name for name in moved if name in before and name in after)
    trusted = [name for name in usual if name in changed] or (usual if not set(changed) - set(usual) else [])
    names = trusted or (changed if len(changed) == 1 else [])
    if not names:
        return None
    return _Counter(names[0], before[names[0]], after[names[0]], bool(trusted), number, forwards)


def _cache_cause(module: nn.Module, reset, sequence: torch.Tensor, prefill: int, start: int, stop: int,
                 counter: _Counter | None, precision: _Precision | None = None,
                 layers: Sequence[AttentionLayer] = (), counters: Sequence[_Counter | None] = ()) -> str:
    """The likely cause of a cached step that differs: the module's position counter, else the first of its attention
    layers' own (``layers``, their ``counters``) that shows one, how many tokens its cache holds (its growth per token,
    each layer's against its own window), else what the step's attentions show (:func:`_step_cause`)."""
    for layer, one in ((None, counter), *zip(layers, counters)):
        if one is not None and one.usual:  # its value alone: a counter that never moves, counts forwards …
            words = _counter_cause(one, start, stop, one.before, mask_shows=False)
            if words is not None:
                return _in_layer(layer, words)
    words = _held_cause(module, reset, sequence, stop, layers)
    if words is not None:
        return words

    def rerun() -> dict:  # the forwards of this sequence before ``start`` again, from a reset
        reset()
        for before, step_stop in kv_steps(sequence.shape[1], prefill):
            if before == start:
                break
            tracing.run_forward(module, sequence[:, before:step_stop], use_cache=True)
        return {"use_cache": True}

    return (_step_cause(module, sequence, start, stop, rerun, counter, precision=precision, layers=layers,
                        counters=counters)
            or "the cached step does not compute what the whole sequence computes at that position")


def _counter_cause(counter: _Counter, start: int, stop: int, position: int, *, mask_shows: bool = True) -> str | None:
    """Words for a position counter that does not count the tokens fed so far — never moves, counts forwards, counts
    each token k times (k × the tokens fed, moved by k × the step's) —, when the step puts its first token at
    ``position`` (the counter's own value, or where the step's mask puts it); None when it counts them.  A counter
    that is merely another number than the tokens fed (a cache's fill pointer moves back when a window drops keys)
    is named only when ``mask_shows``: the step's mask puts the token where the counter says."""
    name, value = counter.name, counter.before
    what = name if counter.usual else f"{name} (the int the cached forwards change)"
    if counter.number == 2 and start == 0 and value != 0 and position == value:
        return (f"the reset forgets the position: after the reset the second sequence starts at {name} = {value}, "
                "not 0 — set it back to 0 in the reset too")
    if value == start or position != value:
        return None
    if start > 0 and counter.after == value:
        return (f"the position never advances: {what} is still {value} after {stop} tokens, so the mask (or the "
                f"rotary angles) treat a later token as position {value}; add the new tokens' count after each cached "
                "forward")
    if start > 0 and value == counter.forwards:
        return (f"the position counts forwards, not tokens: {what} is {value} before token {start}, after "
                f"{amount(counter.forwards, 'cached forward')} of {counted(start)}, so the mask (or the rotary angles) "
                f"treat token {start} as position {value}; add the new tokens' count (x.shape[1]), not 1, after each "
                "cached forward")
    times = value // start if start > 0 and value % start == 0 else 0
    if times > 1 and counter.after - value == times * (stop - start):  # every forward adds its tokens' count k times
        return (f"the position counts each token {'twice' if times == 2 else f'{times} times'}: {what} is {value} "
                f"after {counted(start)}, where it should be {start}, and moves by {counter.after - value} for "
                f"{counted(stop - start)}, so the step treats token {start} as position {value} — add the new tokens' "
                "count (x.shape[1]) once per cached forward")
    if not mask_shows:
        return None
    return (f"the position is wrong: {what} is {value} before token {start}, and the step's mask treats token {start} "
            f"as position {value}; it must count the tokens fed so far ({start})")


def _kept_window(module: nn.Module) -> int | None:
    """The W that bounds what a module's cache keeps, read either way it is declared (:func:`declared_window`): its
    attention window (:func:`attnviz.window_reading.attention_window`: a rolling cache keeps the last W − 1 before a
    step, or W after it) or, for the book's optimized class, its cache's length (:func:`cache_length`: it keeps the
    last W); None: it declares none."""
    return declared_window(module)


def _caller_holds(module: nn.Module) -> bool:
    """Whether the module's caller holds its cache, as kv-cache ran it (:attr:`_CachePlan.caller_holds`): each
    forward given back what the forward before returned; False where its forward's parameters cannot be read."""
    try:
        return _cache_plan(module, 2).caller_holds  # any n: it sizes the prefill alone
    except (TypeError, ValueError):
        return False


def _held_cause(module: nn.Module, reset, sequence: torch.Tensor, stop: int,
                layers: Sequence[AttentionLayer] = ()) -> str | None:
    """Words for a cache that holds fewer tokens than ``stop`` — for a module that declares a window W, fewer than the
    W − 1 the next step needs beside its own (a rolling cache keeps W − 1 or W: more is the step's to show,
    :func:`_step_cause`), and for a cache length W (:func:`cache_length`) fewer than its last W — or more than
    ``stop``: its tensors' size now ÷ what one token adds (a second token's size
    less the first's); None when they hold ``stop``, or as many as the window needs, or it cannot tell.  A model's
    cache tensor under one of its attention layers (``layers``: :class:`AttentionLayer`) is held to that layer's
    window, its words beginning with the attention's name ("attention 2 of 2 on line 30: …")."""
    found = _found_cache(module, reset, sequence)
    if found is None:  # these forwards ran before without raising; the cause stays unnamed
        return None
    held, fed, _ = found
    owners = _tensor_layers(held, layers)
    reading = functools.cache(lambda owner: (_kept_window(owner), cache_length(owner)))  # once per layer
    sizes = [{name: shape.numel() for name, shape in shapes.items()} for shapes in fed]
    for name, value in held.items():
        size = value.numel()
        first, second = sizes[0].get(name), sizes[1].get(name)
        per_token = None if first is None or second is None else second - first
        if not per_token or per_token < 0 or size % per_token or first % per_token:
            continue  # a cache that does not grow by a whole token's size (a buffer allocated once): no count
        words = _held_words(*reading(_owner(owners.get(name), module)), name, size // per_token, stop,
                            first // per_token)
        if words is not None:
            return _in_layer(owners.get(name), words)
    return None


def _held_words(window: int | None, length: tuple[str, int] | None, name: str, tokens: int, stop: int,
                at_first: int) -> str | None:
    """:func:`_held_cause`'s words for the cache tensor ``name``, holding ``tokens`` after ``stop`` fed and
    ``at_first`` after the first alone, of a module (the model, or the attention layer whose cache it is) that keeps
    ``window`` (:func:`_kept_window`) and ``length`` (:func:`cache_length`)."""
    if length is not None and window is not None and tokens < min(stop, window):
        return (f"the cache keeps too little: {name} holds {counted(tokens)} after {stop}, where a cache of length "
                f"{length[0]} = {window} keeps the last {min(stop, window)}, the newest among them — hold the last "
                "W tokens, the new ones included (trim to the last W after writing them)")
    if window is not None and tokens < min(stop, window - 1):
        return (f"the cache keeps too little: {name} holds {counted(tokens)} after {stop}, where a window of W = "
                f"{window} needs the last {window - 1} before the next token — keep the last W − 1 before "
                "appending the new token (or the last W after it)")
    if window is None and tokens < stop:
        return (f"the cache keeps too little: {name} holds {counted(tokens)} after {stop} — every earlier token's "
                "keys and values must stay")
    if tokens > stop:
        first = "" if at_first == 1 else f", and {counted(at_first)} after the first alone"
        return (f"the cache holds tokens more than once: {name} holds {counted(tokens)} after {stop}{first} — "
                "add each forward's keys and values once")
    return None


def _kept_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """path -> every tensor the module keeps (:func:`attnviz.declarations.held_objects`: a buffer or an attribute of
    it or a submodule, or one inside the containers and KV cache objects these hold — ``kv[0]``, ``cache["k"]``,
    ``kv_cache.k``, ``kv_caches[1].keys``); never a parameter, and a tensor kept under two paths once."""
    return _tensors_in("", module)


def _tensors_in(name: str, value) -> dict[str, torch.Tensor]:
    """path -> the tensors ``value`` holds, read as :func:`attnviz.declarations.held_objects` reads what a module
    keeps: ``value`` itself when it is a tensor, else the items of its lists, tuples and dicts and the attributes of
    its KV cache objects, paths beginning with ``name`` (a cache the caller holds: ``past_key_values[0]``,
    ``past_key_values.layers[0].keys``, ``cache.cache[1][0]``)."""
    return {path: found for path, found in held_objects(value, name).items() if isinstance(found, torch.Tensor)}


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter, which every in-place change moves on (None: an inference tensor keeps none)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def _reset_changed(before: torch.Tensor, version: int | None, after: torch.Tensor | None) -> bool:
    """Whether the reset emptied or replaced a tensor the module kept, ``before`` (its version counter then:
    ``version``; None: ``before`` is a copy): gone, changed in place (the counter moved), or another tensor that
    differs from it."""
    if after is None or (version is not None and _version(before) != version):
        return True
    return after is not before and not _unchanged(before, after)


def _stand_in(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor of ``tensor``'s shape and dtype on the meta device: what it held, sized, without a copy of it."""
    return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")


def _unchanged(before: torch.Tensor | None, after: torch.Tensor | None) -> bool:
    """Both there, of one shape and dtype, and equal (NaN equal to NaN; a tensor without data, on the meta device,
    counts as unchanged: no evidence)."""
    if before is None or after is None or before.shape != after.shape or before.dtype != after.dtype:
        return False
    try:
        return torch.equal(before, after) or bool(before.is_floating_point() and torch.allclose(
            before, after, rtol=0.0, atol=0.0, equal_nan=True))
    except (RuntimeError, NotImplementedError):
        return True


def _found_cache(module: nn.Module, reset, sequence: torch.Tensor) \
        -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Size]], dict[str, str]] | None:
    """The module's cache, found by what it holds, as it is now (after the cached forwards so far: stand-ins of its
    tensors' shapes and dtypes, :func:`_stand_in`, as only their sizes are read), its tensors' shapes after
    ``reset()`` and ``sequence``'s first token fed with ``use_cache=True``, then after its second: what one token adds,
    and which of them are views into another's memory (:func:`_views`); None when one of the forwards raises.  It
    copies only what the reset emptied, after one token: a tensor the reset leaves is told by its version counter
    (:func:`_reset_changed`), not by a copy.

    The cache is every tensor the module keeps (:func:`_kept_tensors`, by its path: ``k``, ``kv[0]``, ``cache["k"]``)
    that holds the tokens: one that grows from the first token to the second, whether the reset emptied it or not (a
    reset that empties ``k_cache`` alone, of a forward that starts ``v_cache`` afresh with it), or one the reset
    empties or replaces (it differs after the reset from now) that holds what a token brought (fed first after a
    reset, the second token leaves it otherwise than the first does).  A weight, a mask or rotary table no forward
    changes, and a step counter (the same whichever token came first) are not the cache."""
    kept = _kept_tensors(module)
    versions = {path: _version(value) for path, value in kept.items()}
    now = {path: value if versions[path] is not None else value.clone() for path, value in kept.items()}
    with torch.no_grad():
        try:
            reset()
            emptied = _kept_tensors(module)
            reset_changed = {path for path, value in now.items()
                             if _reset_changed(value, versions[path], emptied.get(path))}
            sizes = {path: _stand_in(value) for path, value in now.items()}
            views = _views(now)
            del kept, now, emptied  # the sequence's cache is not held longer than the module holds it
            tracing.run_forward(module, sequence[:, 1:2], use_cache=True)  # another token first
            other = {path: value.detach().clone() for path, value in _kept_tensors(module).items()
                     if path in reset_changed}  # the one copy: what the reset emptied, after another first token
            reset()
            tracing.run_forward(module, sequence[:, 0:1], use_cache=True)
            first = _kept_tensors(module)
            brought = {path for path in reset_changed if path in first
                       and not _unchanged(first[path], other.get(path))}
            fed = [{path: value.shape for path, value in first.items() if path in sizes}]
            del first, other
            tracing.run_forward(module, sequence[:, 1:2], use_cache=True)
            fed.append({path: value.shape for path, value in _kept_tensors(module).items() if path in sizes})
        except tracing.TraceError:
            return None
    cache = {path: size for path, size in sizes.items() if path in fed[0] and path in fed[1]
             and (fed[1][path].numel() > fed[0][path].numel() or path in brought)}
    return (cache, [{path: shapes[path] for path in cache} for shapes in fed],
            {path: whole for path, whole in views.items() if path in cache and whole in cache})


def _views(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """path -> the path of another of ``tensors`` whose memory holds all of this one's (``self.k = self.kv[0]`` beside
    ``self.kv``): a view, its elements counted once, in the tensor it views.  Of two over the same bytes, the first
    path holds the second; a tensor without data (the meta device) views nothing."""
    spans = [(path, _span(tensor)) for path, tensor in tensors.items()]
    views = {}
    for index, (path, (storage, low, high)) in enumerate(spans):
        views.update((path, other) for other_index, (other, (other_storage, other_low, other_high)) in enumerate(spans)
                     if path not in views and storage is not None and other_storage == storage
                     and other_low <= low and high <= other_high
                     and ((other_low, other_high) != (low, high) or other_index < index))
    return {path: _whole(path, views) for path in views}


def _whole(path: str, views: dict[str, str]) -> str:
    """The tensor at the end of ``path``'s chain of views: a view of a view counts in the tensor both view."""
    seen = {path}
    while path in views and views[path] not in seen:
        path = views[path]
        seen.add(path)
    return path


def _span(tensor: torch.Tensor) -> tuple[int | None, int, int]:
    """(the address of the tensor's storage, the first byte of it the tensor reads, one past its last); a storage of
    None for a tensor without data (the meta device) or without elements."""
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return None, 0, 0
    low = tensor.data_ptr()  # the first element's byte (strides are never negative in torch)
    reach = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))  # elements past the first
    return tensor.untyped_storage().data_ptr(), low, low + (reach + 1) * tensor.element_size()


@dataclass(frozen=True)
class _CacheHeld:
    """What a module's cache tensors hold after a sequence: their shapes and sizes, and — from the dimension of each
    that grows by one when a second token is fed — the tokens they hold and what one token takes."""

    shapes: dict[str, tuple[int, ...]]  # every cache tensor's shape after the sequence (batch 1)
    elements: int  # all of them together
    bytes: int
    tokens: dict[str, int]  # the tensors that grow by a token: how many tokens each holds
    grown: dict[str, int]  # and the dimension each grows along
    per_token: int  # elements a token takes in those tensors together (0: none grows), a view's counted in its base
    per_token_bytes: int
    views: dict[str, str] = field(default_factory=dict)  # a tensor that views another's memory -> that one
    item_bytes: dict[str, int] = field(default_factory=dict)  # the bytes of one element of each tensor

    def shapes_words(self) -> str:
        """ "cache_k (1, 8, 4, 8), cache_v (1, 8, 4, 8)"; a view named with the tensor it views: "k (1, 4, 8, 8) in
        kv"."""
        return ", ".join(f"{name} ({', '.join(map(str, shape))})" + (f" in {self.views[name]}" if name in self.views
                                                                      else "") for name, shape in self.shapes.items())

    def token_bytes(self, names: Iterable[str]) -> int:
        """The bytes one token takes in the tensors ``names`` that grow by a token (a view's counted in its base)."""
        return sum(math.prod(self.shapes[name]) // self.tokens[name] * self.item_bytes.get(name, 0)
                   for name in names if name in self.tokens and name not in self.views)

    def words(self) -> str:
        """ "8 tokens of 64 elements (256 bytes) each: cache_k (1, 8, 4, 8), cache_v (1, 8, 4, 8)"; for a cache that
        does not grow, its size.  A view is named with the tensor it views: "k (1, 4, 8, 8) in kv"."""
        shapes = self.shapes_words()
        if not self.tokens:
            return (f"{shapes}: {self.elements:,} {plural(self.elements, 'element')} ({self.bytes:,} "
                    f"{plural(self.bytes, 'byte')}), no more than after the first token")
        return (f"{counted(max(self.tokens.values()))} of {self.per_token:,} elements ({self.per_token_bytes:,} bytes) "
                f"each: {shapes}")


def _cache_held(module: nn.Module, reset, sequence: torch.Tensor) -> _CacheHeld | None:
    """What the module's cache (:func:`_found_cache`) holds now, after ``sequence``'s cached forwards; None when it
    keeps no tensor that holds the tokens, or the forwards that find it raise."""
    found = _found_cache(module, reset, sequence)
    return None if found is None or not found[0] else _held(*found)


def _held(now: dict[str, torch.Tensor], fed: list[dict[str, torch.Size]],
          views: dict[str, str] | None = None) -> _CacheHeld:
    """What the cache tensors ``now`` hold, their tokens counted along the one dimension of each that grows by one
    from the first token (``fed[0]``, their shapes then) to the second (``fed[1]``); memory two of them share counted
    once: a view (``views``, else :func:`_views` of ``now``) adds no elements or bytes to the tensor it views."""
    views = _views(now) if views is None else views
    shapes = [{name: tuple(shape) for name, shape in fed_shapes.items()} for fed_shapes in fed]
    tokens, grown_along, per_token, per_token_bytes = {}, {}, 0, 0
    for name, value in now.items():
        first, second = shapes[0].get(name), shapes[1].get(name)
        if first is None or second is None or not len(first) == len(second) == value.dim():
            continue
        grown = [dim for dim, (a, b) in enumerate(zip(first, second)) if a != b]
        if len(grown) != 1 or second[grown[0]] - first[grown[0]] != 1 or value.shape[grown[0]] == 0:
            continue
        tokens[name], grown_along[name] = value.shape[grown[0]], grown[0]
        if name not in views:
            per_token += value.numel() // tokens[name]
            per_token_bytes += value.numel() // tokens[name] * value.element_size()
    counted_once = [value for name, value in now.items() if name not in views]
    return _CacheHeld({name: tuple(value.shape) for name, value in now.items()},
                      sum(v.numel() for v in counted_once), sum(v.numel() * v.element_size() for v in counted_once),
                      tokens, grown_along, per_token, per_token_bytes, dict(views),
                      {name: value.element_size() for name, value in now.items()})


def _cache_excess(module: nn.Module, held: _CacheHeld, n: int, sizes: Mapping[str, int] | None = None, *,
                  window: bool = True, layers: dict[str, tuple[str, int | None]],
                  owners: Mapping[str, AttentionLayer] | None = None,
                  layer_lengths: Mapping[str, tuple[str, int]] | None = None) -> str | None:
    """Words for a cache that shows, after n tokens, the known waste of the variant the module declares (its own
    attributes in any spelling of :func:`declared_size`, else ``sizes``: the sizes it was built with, and the heads
    and head_dim its uncached trace measured — :func:`cache_sizes`), its outputs right; None when it shows none — then
    the PASS line says what the cache holds and names no cause.  The evidence, one check per variant:
    :func:`_window_excess` (not read with ``window=False``: a cache object attnviz supplied keeps what it keeps),
    :func:`_repeated_heads`, :func:`_full_keys_values`.  Anything else a cache keeps (a rotary key, its tokens'
    positions) is no evidence of waste.  A wrapper that declares no variant is read through the one submodule that
    does (:func:`_declaring`) — but for its windows, which :func:`_over_window` reads layer by layer where they
    differ, by the paths of the cache's tensors under ``module`` (``layers``: :func:`_held_windows`; its layers' own
    cache lengths, ``layer_lengths``: :attr:`_CachePlan.layer_lengths`).  A model's
    cache tensors of each attention layer (``owners``: :func:`_tensor_layers`) are held to that layer's own variant and
    sizes (:attr:`AttentionLayer.sizes`, not ``sizes``), the words naming the first attention that shows it
    ("attention 2 of 2 on line 30: …; attention 3 of 3 … does the same"); when every layer shows it, the words name
    every layer's tensors together, as for the model read as one."""
    sizes = dict(sizes or {})
    if window and (words := _window_excess(module, held, n, sizes, layers, layer_lengths)) is not None:
        return words
    parts = _layer_parts(held, owners or {})
    for check in (_repeated_heads, _full_keys_values):
        found = [(layer, words) for layer, part in parts
                 if (words := check(_declaring(_owner(layer, module)), part, n,
                                    sizes if layer is None else dict(layer.sizes))) is not None]
        if not found:
            continue
        if len(found) == len(parts) > 1 and (words := check(_declaring(module), held, n, sizes)) is not None:
            return words  # every layer's: said of them all at once
        layer, words = found[0]
        others = [other.named for other, _ in found[1:] if other is not None]
        also = f"; {', '.join(others)} {'does' if len(others) == 1 else 'do'} the same" if others else ""
        return _in_layer(layer, words) + also
    return None


def _window_excess(module: nn.Module, held: _CacheHeld, n: int, sizes: dict[str, int],
                   layers: dict[str, tuple[str, int | None]],
                   layer_lengths: Mapping[str, tuple[str, int]] | None = None) -> str | None:
    """``sliding_window_size`` W: a tensor holding more than W tokens along the dimension that grows
    (:func:`_over_window`), named with the bytes the cache holds, what each token adds and what W tokens take.  A
    failure, not a note in the pass: the mask hides the keys W or more behind, so every output is right and only the
    cache's size shows it — a memory that grows with the whole text where W entries suffice (the book's SWA cache,
    ``ch04/06_swa``, keeps W), which is what a sliding window's cache exists to bound."""
    over = _over_window(module, held, layers, sizes, layer_lengths)
    if over is None:
        return None
    longest, window, layer = over.longest, over.window, over.layer
    kept = held.tokens[longest]
    if layer is None:
        per_token = held.per_token_bytes
        grows = (f" — the cache's {kept * per_token:,} bytes grow by {per_token:,} with every token, where the last "
                 f"{window} take {window * per_token:,}:" if per_token else " —")
        return (f"the cache keeps more than the window needs: {longest} holds {counted(kept)} after {n}, and a "
                f"window of W = {window} needs only the last {window}{grows} drop the older keys and values after each "
                "forward (keep the last W)")
    per_token = held.token_bytes(path for path, (at, _) in over.layers.items() if at == layer)
    grows = (f" — its cache's {kept * per_token:,} bytes grow by {per_token:,} with every token, where the last "
             f"{window} take {window * per_token:,}:" if per_token else " —")
    others = [at for at in over.over if at != layer]
    also = f"; {', '.join(others)} {'does' if len(others) == 1 else 'do'} the same" if others else ""
    full = list(dict.fromkeys(at for at, said in over.layers.values() if said is None))
    every = (f"; the full-attention {plural(len(full), 'layer')} {', '.join(full)} rightly "
             f"{'keeps' if len(full) == 1 else 'keep'} every token" if full else "")
    return (f"a window layer's cache keeps more than its window needs: {longest} holds {counted(kept)} after {n}, and "
            f"its layer, {layer}, has a window of W = {window}, so it needs only the last {window}{grows} drop that "
            f"layer's older keys and values after each forward (keep the last W){also}{every}")


def _size(module: nn.Module, sizes: dict[str, int], setting: str) -> int | None:
    """The module's size for ``setting`` (:func:`declared_size`), else the one in ``sizes``."""
    return declared_size(module, setting) or sizes.get(setting)


def _elements_per_token(held: _CacheHeld) -> dict[str, int]:
    """The tensors that grow by a token -> the elements one token takes in each."""
    return {name: math.prod(shape) // held.tokens[name] for name, shape in held.shapes.items() if name in held.tokens}


def _repeated_heads(module: nn.Module, held: _CacheHeld, n: int, sizes: dict[str, int]) -> str | None:
    """``num_kv_groups`` fewer than ``num_heads``: K/V tensors (batch, a head dimension, tokens, head_dim in any
    order) whose head dimension is ``num_heads`` — the heads repeated before caching."""
    groups, heads = _size(module, sizes, "num_kv_groups"), _size(module, sizes, "num_heads")
    head_dim = _head_dim(module) or sizes.get("head_dim")
    if groups is None or heads is None or head_dim is None or groups >= heads:
        return None
    repeated = [name for name, shape in held.shapes.items() if name in held.tokens and len(shape) == 4
                and shape[-1] == head_dim and held.grown[name] not in (0, 3)
                and shape[3 - held.grown[name]] == heads]  # (b, h, n, hd) or (b, n, h, hd) with h = num_heads
    if not repeated:
        return None
    per_token = _elements_per_token(held)
    size = sum(per_token[name] for name in repeated)
    return (f"{' and '.join(repeated)} {'hold' if len(repeated) > 1 else 'holds'} num_heads = {heads} heads "
            f"where num_kv_groups = {groups} K/V heads are declared ({size} elements per token, where "
            f"{groups} K/V heads need {size * groups // heads}) — cache the keys and values before "
            "repeat_interleave, and repeat them after reading the cache")


def _full_keys_values(module: nn.Module, held: _CacheHeld, n: int, sizes: dict[str, int]) -> str | None:
    """``latent_dim`` below d_out: tensors of d_out elements per token each, or 2 × d_out per token together — full K
    and V cached beside (or instead of) the latent."""
    latent, d_out = _size(module, sizes, "latent_dim"), _d_out(module) or sizes.get("d_out")
    per_token = _elements_per_token(held)
    if latent is None or d_out is None or latent >= d_out or not per_token:
        return None
    full = [name for name, size in per_token.items() if size == d_out]  # a whole K or V per token
    total = sum(size for name, size in per_token.items() if name not in held.views)
    if not full and total < 2 * d_out:
        return None
    names = full or list(per_token)
    held_words = (f"{d_out} elements per token{' each' if len(full) > 1 else ''}, d_out = {d_out}" if full
                  else f"{total} elements per token, 2 × d_out = {2 * d_out} or more")
    return (f"{' and '.join(names)} {'hold' if len(names) > 1 else 'holds'} {held_words}: full keys and values where "
            f"latent_dim = {latent} is declared — cache the latent (the down-projection's output) and compute K and V "
            "from it at each step")


class _OverWindow(NamedTuple):
    """A cache tensor that holds more tokens than its window: :func:`_over_window`'s finding."""

    longest: str  # the tensor, of those over their window, holding the most tokens
    window: int  # its window W
    layer: str | None = None  # the layer whose own window W is; None: the module's one window
    layers: dict[str, tuple[str, int | None]] = {}  # per layer: every cache tensor -> (its layer, that layer's window)
    over: tuple[str, ...] = ()  # per layer: the window layers whose caches hold more than their W, in module order


def _over_window(module: nn.Module, held: _CacheHeld, layers: dict[str, tuple[str, int | None]],
                 sizes: Mapping[str, int] | None = None,
                 layer_lengths: Mapping[str, tuple[str, int]] | None = None) -> _OverWindow | None:
    """The tensor holding the most tokens when it holds more than W — the window the module, or its submodules,
    declare (:func:`_kept_window`; not the cache length of one of its layers, ``layer_lengths``:
    :attr:`_CachePlan.layer_lengths`), else
    ``sizes``'; for a module whose layers declare different windows (the book's
    ``06_swa`` model: window layers and, every ``sliding_window_stride``-th, a full one), each tensor against its own
    layer's window (``layers``: :func:`_held_windows`), a full layer's keeping every token; None when none holds
    more."""
    window = _kept_window(module)
    if any(said is not None for _, said in layers.values()):
        over = {path: (layer, said) for path, (layer, said) in layers.items()
                if said is not None and held.tokens[path] > said}
        if not over:
            return None
        longest = max(over, key=held.tokens.get)
        return _OverWindow(longest, over[longest][1], over[longest][0], layers,
                           tuple(dict.fromkeys(layer for layer, _ in over.values())))
    if layer_lengths:
        window = None  # its layers' own cache lengths, each held to its own layer's tensors above
    window = window or dict(sizes or {}).get("sliding_window_size")
    longest = max(held.tokens, key=held.tokens.get, default=None)
    if window is None or longest is None or held.tokens[longest] <= window:
        return None
    return _OverWindow(longest, window)


def _by_layer_words(held: _CacheHeld, layers: dict[str, tuple[str, int | None]]) -> str | None:
    """For a module whose layers declare different windows (``layers``: :func:`_held_windows`), what each layer's
    cache holds, its window beside it: "each layer's cache holds what its attention needs — layers[0], layers[1] (a
    window of W = 3): 3 tokens; layers[2] (full attention): 8 tokens — layers[0].cache_k (1, 2, 3, 8), …"; None for
    any other module."""
    if not any(said is not None for _, said in layers.values()):
        return None
    kept: dict[str, tuple[int | None, int]] = {}  # layer -> (its window, the most tokens one of its tensors holds)
    for path, (layer, said) in layers.items():
        kept[layer] = (said, max(kept.get(layer, (said, 0))[1], held.tokens[path]))
    groups: dict[tuple[int | None, int], list[str]] = {}
    for layer, held_by_layer in kept.items():  # in module order
        groups.setdefault(held_by_layer, []).append(layer)
    parts = "; ".join(f"{', '.join(names)} ({'full attention' if said is None else f'a window of W = {said}'}): "
                      f"{counted(tokens)}" for (said, tokens), names in groups.items())
    return f"each layer's cache holds what its attention needs — {parts} — {held.shapes_words()}"


def _held_windows(module: nn.Module, held: _CacheHeld, owners: Mapping[str, AttentionLayer] | None = None,
                  caller_holds: bool = False,
                  layer_lengths: Mapping[str, tuple[str, int]] | None = None) -> dict[str, tuple[str, int | None]]:
    """Each cache tensor -> (its layer, that layer's window) as kv-cache holds the tensors of a module whose layers
    declare different windows: :func:`_tensor_windows` for a module that keeps no one window (:func:`_kept_window`),
    else :func:`_beside_plain_layers`; for a cache the caller holds (``caller_holds``), or a model whose layers keep
    their own cache lengths (``layer_lengths``: :attr:`_CachePlan.layer_lengths`), each tensor's attention layer
    (``owners``: :func:`_tensor_layers`) and the window it keeps (None: a full layer), when one of them keeps one."""
    if caller_holds or layer_lengths:
        return _entry_windows(owners or {})
    windows = layer_windows(module)
    return (_tensor_windows(held, windows) if _kept_window(module) is None
            else _beside_plain_layers(module, held, windows))


def _entry_windows(owners: Mapping[str, AttentionLayer]) -> dict[str, tuple[str, int | None]]:
    """Each tensor of a cache the caller holds -> (its attention layer's path, else its name; the window that layer
    keeps, :func:`_kept_window`, None for a full layer), a tensor whose layer is not known left out; {} when no layer
    keeps a window."""
    kept = functools.cache(_kept_window)  # once per layer
    found = {path: (layer.path or layer.named, kept(layer.module)) for path, layer in owners.items()
             if layer.module is not None}
    return found if any(said is not None for _, said in found.values()) else {}


def _tensor_windows(held: _CacheHeld, windows: dict[str, int | None]) -> dict[str, tuple[str, int | None]]:
    """Each cache tensor that grows by a token -> (the deepest object on its path that declares a window of its own,
    that window: ``windows``, :func:`attnviz.declarations.layer_windows`, W or None for a full layer); tensors under
    none are left out."""
    found = {}
    for path in held.tokens:
        layer = max((at for at in windows if at == "" or path.startswith((f"{at}.", f"{at}["))), key=len, default=None)
        if layer is not None:
            found[path] = (layer, windows[layer])
    return found


def _beside_plain_layers(module: nn.Module, held: _CacheHeld,
                         windows: dict[str, int | None]) -> dict[str, tuple[str, int | None]]:
    """For a module that declares one window W only through its submodules (:func:`_kept_window`; the module itself,
    its attribute or config, declares none) and holds a cache tensor in an attention layer of its own that declares no
    window at all — a submodule with a forward of its own, no object on the tensor's path keeping a window: the book's
    plain cached MultiHeadAttention beside a sliding-window layer —, each tensor -> (its layer, that layer's window,
    None for the plain layer's, which rightly keeps every token), as :func:`_tensor_windows` reads a model whose
    layers disagree (``windows``: :func:`attnviz.declarations.layer_windows`); {} for any other module (its one W
    holds every cache tensor, a list of caches on the model included)."""
    if "" in windows:
        return {}
    found = _tensor_windows(held, windows)
    layers = [path for path, value in held_objects(module).items() if path and isinstance(value, nn.Module)
              and getattr(type(value), "forward", nn.Module.forward) is not nn.Module.forward]
    plain = {}
    for path in held.tokens:
        layer = min((at for at in layers if path.startswith((f"{at}.", f"{at}["))), key=len, default=None)
        if path not in found and layer is not None:
            plain[path] = (layer, None)
    return {**found, **plain} if plain else {}


@dataclass(frozen=True)
class AttentionLayer:
    """One of the attentions a model's forward computes, as kv-cache reads a model layer by layer (:func:`kv_cache`'s
    ``layers``): its name in a failure, the submodule that computes it and that submodule's path as
    :func:`attnviz.declarations.held_objects` spells it (``layers[1]``), and its sizes by attnviz setting
    (:func:`cache_sizes`, read from its own trace)."""

    named: str  # "attention 2 of 2 on line 30"
    module: nn.Module | None = None  # None: not known; the model's own readings stand for it
    path: str | None = None
    sizes: Mapping[str, int] = field(default_factory=dict)


def _tensor_layers(paths: Iterable[str], layers: Sequence[AttentionLayer],
                   cache_name: str | None = None) -> dict[str, AttentionLayer]:
    """Each cache tensor's path -> the attention layer (of ``layers``) whose cache it is: for a cache the model keeps,
    the deepest layer whose submodule's path the tensor's begins with (``layers[1].cache_k``: the layer at
    ``layers[1]``); for one the caller holds, passed as ``cache_name``, the layer whose place in ``layers`` is the index
    of the per-layer entry the tensor is in (``past_key_values[1][0]``, ``past_key_values.layers[1].keys``: the
    second), when there is one entry per layer.  A tensor of no layer is left out."""
    if len(layers) < 2:
        return {}
    if cache_name is not None:
        entry = re.compile(rf"{re.escape(cache_name)}(?:\.\w+)?\[(\d+)\]")  # past_key_values[1], ….layers[1]
        indices = {path: int(found.group(1)) for path in paths if (found := entry.match(path))}
        return ({path: layers[index] for path, index in indices.items()}
                if set(indices.values()) == set(range(len(layers))) else {})
    found = {}
    for path in paths:
        layer = max((one for one in layers if one.path and path.startswith((f"{one.path}.", f"{one.path}["))),
                    key=lambda one: len(one.path), default=None)
        if layer is not None:
            found[path] = layer
    return found


def _owner(layer: AttentionLayer | None, module: nn.Module) -> nn.Module:
    """The submodule whose attributes say ``layer``'s window, sizes and rotary; ``module`` where it is not known."""
    return module if layer is None or layer.module is None else layer.module


def _in_layer(layer: AttentionLayer | None, words: str) -> str:
    """A cause's ``words``, beginning with the name of the attention it is in ("attention 2 of 2 on line 30: …")."""
    return words if layer is None else f"{layer.named}: {words}"


def _layer_parts(held: _CacheHeld, owners: Mapping[str, AttentionLayer]) -> list[tuple[AttentionLayer | None,
                                                                                        _CacheHeld]]:
    """``held`` split by attention layer (``owners``: :func:`_tensor_layers`), in the order its tensors come: each
    layer with its own tensors that grow by a token, then (None, the rest) — or (None, ``held``) for a cache of no
    layers."""
    if not owners:
        return [(None, held)]
    groups: dict[int, list[str]] = {}
    layers: dict[int, AttentionLayer | None] = {}
    for path in held.tokens:
        layer = owners.get(path)
        groups.setdefault(id(layer), []).append(path)
        layers[id(layer)] = layer
    return [(layers[key], _part(held, paths)) for key, paths in sorted(groups.items(),
                                                                       key=lambda item: layers[item[0]] is None)]


def _part(held: _CacheHeld, paths: Iterable[str]) -> _CacheHeld:
    """What the tensors ``paths`` of ``held`` hold, as :func:`_held` counts a cache: a view counted in its base when
    both are among them."""
    keep = [path for path in held.shapes if path in set(paths)]
    views = {path: whole for path, whole in held.views.items() if path in keep and whole in keep}
    counted_once = [path for path in keep if path not in views]
    elements = {path: math.prod(held.shapes[path]) for path in keep}
    growing = [path for path in counted_once if path in held.tokens]
    return _CacheHeld({path: held.shapes[path] for path in keep}, sum(elements[path] for path in counted_once),
                      sum(elements[path] * held.item_bytes.get(path, 0) for path in counted_once),
                      {path: held.tokens[path] for path in keep if path in held.tokens},
                      {path: held.grown[path] for path in keep if path in held.grown},
                      sum(elements[path] // held.tokens[path] for path in growing),
                      held.token_bytes(growing), views, {path: held.item_bytes[path] for path in keep
                                                         if path in held.item_bytes})


def cache_sizes(given: Mapping[str, int] | None, attention: tracing.Attention) -> dict[str, int]:
    """The module's sizes by attnviz setting for :func:`_cache_excess` where it keeps them under other names: those
    it was built with (``given``), else what its uncached trace measured — its query heads, head_dim and their
    product (d_out), and its K/V heads when they are fewer (a grouped-query module that broadcasts its K/V heads)."""
    sizes = {}
    if attention.queries is not None and attention.keys is not None:
        heads, head_dim, kv_heads = attention.weights.shape[1], attention.queries.shape[-1], attention.keys.shape[1]
        sizes = {"num_heads": heads, "head_dim": head_dim, "d_out": heads * head_dim}
        if 0 < kv_heads < heads:
            sizes["num_kv_groups"] = kv_heads
    sizes.update({setting: value for setting, value in (given or {}).items() if is_size(value)})
    return sizes


def _declaring(module: nn.Module) -> nn.Module:
    """The module whose attributes declare its attention's variant (``num_kv_groups``, ``latent_dim`` or
    ``sliding_window_size``, in any spelling): itself when it declares one, else the one submodule that does (a
    wrapper of transformers' ``FalconAttention``, which keeps ``num_heads`` and ``num_kv_heads``); itself when none or
    several do."""
    def declares(child: nn.Module) -> bool:
        return any(declared_size(child, setting) is not None for setting in user_code.VARIANT_SETTINGS)

    if declares(module):
        return module
    declaring = [child for _, child in module.named_modules() if declares(child)]
    return declaring[0] if len(declaring) == 1 else module


def _d_out(module: nn.Module) -> int | None:
    """The module's d_out (any spelling), else num_heads × head_dim (None: it keeps neither)."""
    d_out, heads, head_dim = declared_size(module, "d_out"), declared_size(module, "num_heads"), _head_dim(module)
    return d_out if d_out is not None else None if heads is None or head_dim is None else heads * head_dim


def _head_dim(module: nn.Module) -> int | None:
    """The module's head_dim attribute, else its d_out ÷ num_heads (None: it keeps neither)."""
    head_dim = getattr(module, "head_dim", None)
    if is_size(head_dim):
        return head_dim
    d_out, heads = declared_size(module, "d_out"), declared_size(module, "num_heads")
    return d_out // heads if d_out is not None and heads is not None and d_out % heads == 0 else None


def _step_cause(module: nn.Module, sequence: torch.Tensor, start: int, stop: int, rerun: Callable[[], dict],
                counter: _Counter | None = None, *, precision: _Precision | None = None,
                layers: Sequence[AttentionLayer] = (), counters: Sequence[_Counter | None] = ()) -> str | None:
    """What the cached step over tokens ``start`` … ``stop - 1`` shows, recorded again (``rerun()`` runs the forwards
    before it and gives its keyword arguments) beside the whole sequence's uncached forward (:func:`_attention_cause`);
    None when that names no cause.  A model's attentions (``layers``, as many as each forward computes) are read in
    order, each held to its own layer's window and rotary: the first that shows a cause is named ("attention 2 of 2 on
    line 30: …"), with its own position counter (``counters``, else ``counter``); one whose step gives the whole
    sequence's context lets the next be read, with the same inputs, and one that differs without showing why ends the
    search — the layers after it are given other inputs."""
    try:
        wholes = tracing.each_attention(tracing.record(module, sequence))  # one per layer, as ``layers`` are
        steps = tracing.stacked_heads(tracing.step_attentions(module, sequence[:, start:stop], **rerun())[1])
    except (tracing.TraceError, time_limit.UserCallError):
        return None
    if not steps:
        return None
    if not layers or len(wholes) != len(layers) or len(steps) != len(layers):
        return _attention_cause(module, module, tracing.combine(wholes), steps[0], start, stop, counter,
                                precision)
    for layer, whole, step, own in zip(layers, wholes, steps, [*counters, *[None] * len(layers)]):
        words = _attention_cause(module, _owner(layer, module), whole, step, start, stop, own or counter, precision)
        if words is not None:
            return _in_layer(layer, words)
        if not _gives_whole_context(whole, step, start, stop, precision):
            return None
    return None


def _gives_whole_context(whole: tracing.Attention, step: tracing.Attention, start: int, stop: int,
                         precision: _Precision | None) -> bool:
    """Whether a cached step's attention gives the context the whole sequence's gives its tokens, ``start`` …
    ``stop - 1`` (weights @ values, per head), beyond ``precision``: then the next layer is given the same inputs."""
    mine, theirs = _context_of(step), _context_of(whole)
    if mine is None or theirs is None:
        return False
    theirs = theirs[..., start:stop, :]  # (1, h, q, hd)
    if mine.shape != theirs.shape:
        return False
    worst = (mine.float() - theirs.float()).abs().nan_to_num(nan=math.inf).max().item()
    return worst <= (TOLERANCE if precision is None else precision.of(theirs))


def _context_of(attention: tracing.Attention) -> torch.Tensor | None:
    """An attention's context (b, h, q, hd): as recorded, else its weights @ its values (an SDPA call's)."""
    if attention.context is not None:
        return attention.context
    values = attention.values
    weights = attention.dropped if attention.dropped is not None else attention.weights  # (b, h, q, k)
    if values is None or values.dim() != weights.dim() or values.shape[-2] != weights.shape[-1] \
            or values.shape[1] not in (1, weights.shape[1]):
        return None
    return weights.to(values.dtype) @ values  # (b, h, q, k) @ (b, h, k, hd) -> (b, h, q, hd)


def _attention_cause(module: nn.Module, layer: nn.Module, whole: tracing.Attention, step: tracing.Attention, start: int,
                     stop: int, counter: _Counter | None = None, precision: _Precision | None = None) -> str | None:
    """What one attention of a cached step (``step``) shows beside the whole sequence's (``whole``), read against the
    window, cache length and rotary of ``layer`` (the attention layer that computes it, else ``module``): how many keys
    it attends over (more than the tokens fed: all-zero keys are slots never written, else tokens held twice; more
    than a declared window W lets a query see: a rolling cache one token too long), where its mask puts its first
    token, and which of its queries, keys or values differ from the whole sequence's (beyond the cache dtype's
    ``precision``, :class:`_Precision`); None when that names no cause."""
    keys = step.weights.shape[-1]
    empty = 0 if step.keys is None else int((step.keys == 0).flatten(0, 1).all(0).all(-1).sum())  # all-zero keys
    if keys > stop and empty and keys - empty == stop:
        return (f"the step attends over {amount(keys, 'key')} after {counted(stop)}, and {empty} of them "
                f"{'is' if empty == 1 else 'are'} all zeros: cache slots no token was written to — the position it "
                "reads the cache up to runs ahead of the tokens fed; it must count them")
    if keys > stop:
        return (f"the step attends over {counted(keys)} after {stop}: the cache holds tokens more than once — add "
                "each forward's keys and values once")
    window = _kept_window(layer)
    seen = int((~step.masked_cells()).sum(-1).max()) if window is not None else 0  # the most keys a query sees
    length = cache_length(layer)
    if length is not None and window is not None and seen > window:  # W is what the cache keeps, not a mask
        extra = "one token" if seen == window + 1 else f"{seen - window} tokens"
        fix = (f"once the cache it is given holds {window} tokens, drop the oldest before appending the new ones"
               if _caller_holds(module) else
               f"once it holds {window} tokens, shift the oldest out before writing the new ones")
        return (f"the step attends over {amount(seen, 'key')} where the cache's length ({length[0]} = {window}) "
                f"keeps {window}: the cache keeps {extra} too many — {fix}")
    if attention_window(layer) is not None and seen > window and keys == stop:  # all held: the mask lets it see them
        row = int(((~step.masked_cells()).sum(-1) > window).flatten(0, -2).any(0).nonzero()[0])  # the first such query
        return (f"the cached step's mask does not apply the window: the cache holds all {counted(stop)} fed, and query "
                f"{start + row} sees {amount(seen, 'key')} where a window of W = {window} allows {window} — hide the "
                "keys W or more behind (diff >= W) in the cached forwards' mask too, as the uncached one does")
    if window is not None and seen > window:
        extra = "one token" if seen == window + 1 else f"{seen - window} tokens"
        return (f"the step attends over {amount(seen, 'key')} where a window of W = {window} allows {window}: the "
                f"cache keeps {extra} too many — keep the last W − 1 = {window - 1} before appending the new token "
                f"(or the last W = {window} after it)")
    if length is not None and window is not None and keys < min(stop, window):
        return (f"the step attends over only {amount(keys, 'key')} where the cache's length ({length[0]} = {window}) "
                f"keeps the last {counted(min(stop, window))}, the step's own among them: the cache keeps too little "
                f"— hold the last W = {window} tokens, the new ones included: W slots, and once they are full shift "
                "out only the tokens past W before writing the new ones")
    if window is not None and keys < min(stop, window):
        return (f"the step attends over only {amount(keys, 'key')} where a window of W = {window} needs "
                f"{min(stop, window)}: the cache keeps too little — keep the last W − 1 = {window - 1} before "
                f"appending the new token (or the last W = {window} after it)")
    if window is None and keys < stop:
        return (f"the step attends over only {counted(keys)} after {stop}: the cache keeps too little — every earlier "
                "token's keys and values must stay")
    chunk_short = (stop - start > 1 and attention_window(layer) is not None
                   and keys < min(start, window - 1) + stop - start)  # fewer keys than the chunk needs, not the mask
    first_seen = int((~step.masked_cells())[..., 0, :].sum(-1).max()) if chunk_short else None  # its first query's
    if first_seen is not None and first_seen < min(start + 1, window):
        return (f"the chunk's first query (token {start}) sees only {amount(first_seen, 'key')} where a window of W = "
                f"{window} shows it {min(start + 1, window)}: the step attends over the last {amount(keys, 'key')}, "
                f"what the cache keeps after the step, and a chunk of {stop - start} needs the W − 1 = {window - 1} "
                f"keys before it as well as its own — attend over the cached keys and the new ones (the last "
                f"W − 1 + {stop - start} = {window - 1 + stop - start}), and trim the cache after the step")
    offset = _mask_offset(step.masked_cells()[0].all(0)) if window is None and keys == stop else None
    if offset is not None and not offset[0] <= start <= offset[1]:
        return _offset_cause(offset, start, stop, keys, counter, is_causal=bool(step.is_causal))
    rolling = window is not None and keys < stop  # a rolling window cache: the step's keys are the last ``keys``
    if (keys != stop and not rolling) or whole.weights.shape[1] != step.weights.shape[1]:
        return None
    compared = [(stage, getattr(step, stage), getattr(whole, stage)) for stage in ("queries", "keys", "values")]
    rows, held = slice(start, stop), slice(stop - keys, stop)
    for stage, mine, theirs in compared:
        if mine is None or theirs is None:
            continue
        theirs = theirs[:, :, rows] if stage == "queries" else theirs[:, :, held]  # (1, h, q or k, hd)
        if mine.shape != theirs.shape:
            continue
        moved = (mine.float() - theirs.float()).abs().amax(dim=(0, 1, 3))  # (q or k,): the worst per token
        if moved.max() <= (TOLERANCE if precision is None else precision.of(theirs)):
            continue
        first = int(moved.argmax()) + (start if stage == "queries" else held.start)
        words = _head_order_cause(stage, mine, theirs) if stage != "queries" else None
        if words is None and stage != "values" and (counter is None or counter.before == start):
            words = _rotary_cause(layer, stage, mine, theirs, start, keys - (stop - start))
        if words is not None:
            return words
        if stage == "queries":
            return (f"the step hides the right keys, but its query for token {first} differs from the whole "
                    f"sequence's by {moved.max().item():.3g}, from the same input: what it takes from its position "
                    f"(rotary angles, a position embedding) is computed for another position — give token {first} "
                    f"position {first} (the tokens already cached plus its index in the step)")
        which = "keys" if stage == "keys" else "values"
        return (f"the step hides the right keys, but the cached {which} of token {first} differ from the whole "
                f"sequence's by {moved.max().item():.3g}: the cache must hold each token's {which} as the whole "
                "sequence computes them")
    return None


def _head_order_cause(stage: str, mine: torch.Tensor, theirs: torch.Tensor) -> str | None:
    """Words for a step whose keys or values (1, H, k, hd) are the whole sequence's K/V heads repeated in the other
    order: for some number g of K/V heads that divides H, ``.repeat`` gives head h K/V head h mod g, and
    ``repeat_interleave`` K/V head h ÷ (H/g); None when no such reordering gives the step's heads."""
    heads = theirs.shape[1]
    which = "keys" if stage == "keys" else "values"
    for groups in range(2, heads):
        if heads % groups:
            continue
        size = heads // groups  # query heads per K/V head
        as_repeat = [(head % groups) * size for head in range(heads)]  # the whole's interleaved heads, repeated
        as_interleave = [head // size for head in range(heads)]  # the whole's repeated heads, interleaved
        for order, mine_uses, theirs_uses in ((as_repeat, ".repeat (K1, K2, K1, K2)",
                                               "repeat_interleave (K1, K1, K2, K2)"),
                                              (as_interleave, "repeat_interleave (K1, K1, K2, K2)",
                                               ".repeat (K1, K2, K1, K2)")):
            if torch.allclose(mine.float(), theirs[:, order].float(), atol=TOLERANCE, rtol=0):
                return (f"the step hides the right keys, but its {which} are the whole sequence's K/V heads in another "
                        f"order: the cached step repeats them with {mine_uses}, the whole sequence with "
                        f"{theirs_uses} — use repeat_interleave(group_size, dim=1) on both")
    return None


def _rotary_cause(module: nn.Module, stage: str, mine: torch.Tensor, theirs: torch.Tensor, start: int,
                  cached: int | None = None) -> str | None:
    """Words for a rotary module's step whose queries or cached keys (1, h, q or k, hd) have the whole sequence's
    lengths but other directions — what a rotation by the wrong position's angle does (it keeps a vector's length);
    None when the module is not rotary or a length differs.  ``cached``: the keys the cache held before the step —
    queries turned as if at that position, where a rolling window (or a cache of the book's length,
    :func:`cache_length`, whose fill pointer its shift moves back) keeps fewer than ``start``, are named so."""
    differs = (mine.float() - theirs.float()).abs().amax(dim=-1) > TOLERANCE  # (1, h, tokens)
    mine_lengths, theirs_lengths = mine.float().norm(dim=-1), theirs.float().norm(dim=-1)  # (1, h, tokens) each
    if not uses_rotary(module) or not torch.allclose(mine_lengths[differs], theirs_lengths[differs], rtol=1e-4,
                                                 atol=TOLERANCE):
        return None
    first = int(differs.any(dim=1)[0].nonzero()[0]) + (start if stage == "queries" else 0)
    turned = "the same length, another direction"
    window = _kept_window(module)
    length = cache_length(module)
    if stage == "queries" and cached is not None and window is not None and cached < start \
            and _turned_by(mine[..., :1, :], theirs[..., :1, :], cached - start) and length is not None:
        return (f"the step hides the right keys, but its query for token {start} is the whole sequence's turned by "
                f"another angle ({turned}): rotated at position {cached}, the number of keys the cache holds before "
                f"the new ones (its fill pointer: a cache of length {length[0]} = {window}, once full, shifts its "
                f"oldest tokens out and moves the pointer back to W minus the new tokens), not the token's position "
                f"{start} — the rotary position offset must not be the cache's fill pointer; take it from a count of "
                "the tokens fed so far, which the cache's length does not cap")
    if stage == "queries" and cached is not None and window is not None and cached < start \
            and _turned_by(mine[..., :1, :], theirs[..., :1, :], cached - start):
        return (f"the step hides the right keys, but its query for token {start} is the whole sequence's turned by "
                f"another angle ({turned}): rotated at position {cached}, the number of keys the cache holds (a "
                f"rolling window of W = {window} keeps at most W − 1 = {window - 1}), not the token's position {start} "
                "— the rotary position offset is the cache's length, capped at W − 1; take it from a count of the "
                "tokens fed so far (a position counter the window does not cap)")
    if stage == "queries":
        return (f"the step hides the right keys, but its query for token {first} is the whole sequence's turned by "
                f"another angle ({turned}): the new queries and keys are rotated at the wrong position — rotate them "
                f"at offset start_pos = {start} (the tokens already cached)")
    return (f"the step hides the right keys, but the cached key of token {first} is the whole sequence's turned by "
            f"another angle ({turned}): the keys are rotated at the wrong positions — rotate only the new keys, at "
            "offset start_pos (the tokens already cached), and cache them rotated")


def _turned_by(mine: torch.Tensor, theirs: torch.Tensor, shift: int) -> bool:
    """Whether ``mine`` (…, hd) is ``theirs`` turned by ``shift`` positions in rotary's first pair, whose angle is one
    radian a position in every layout (rotate_half's dims 0 and hd/2, or interleaved 0 and 1), either sense."""
    half = theirs.shape[-1] // 2
    for second in (half, 1):
        x, y = theirs[..., 0].double(), theirs[..., second].double()
        for angle in (shift, -shift):
            cos, sin = math.cos(angle), math.sin(angle)
            if torch.allclose(mine[..., 0].double(), x * cos - y * sin, atol=1e-4) and \
                    torch.allclose(mine[..., second].double(), x * sin + y * cos, atol=1e-4):
                return True
    return False


def _mask_offset(hidden: torch.Tensor) -> tuple[int, float] | None:
    """Where a step's causal mask puts its first query, from its hidden cells (q, k): the (lowest, highest) position
    p such that query i sees exactly keys 0 … p + i (highest ∞ when no row hides a key); None when the hidden cells
    are not such a triangle."""
    low, high = -1, math.inf
    for row, hidden_row in enumerate(hidden.tolist()):
        seen = hidden_row.index(True) if True in hidden_row else len(hidden_row)  # the visible keys: a prefix
        if any(not cell for cell in hidden_row[seen:]):
            return None
        if seen < len(hidden_row):
            low, high = max(low, seen - 1 - row), min(high, seen - 1 - row)
        else:
            low = max(low, seen - 1 - row)
    return (low, high) if low <= high else None


def _offset_cause(offset: tuple[int, float], start: int, stop: int, keys: int, counter: _Counter | None, *,
                  is_causal: bool = False) -> str:
    """Words for a step whose mask puts its first token at ``offset`` (lowest, highest), not at ``start``;
    ``is_causal``: the mask is an SDPA call's ``is_causal=True``, which aligns it to the top-left."""
    low, high = offset
    where = f"position {low}" if low == high else f"position {low} or later"
    if counter is not None and low <= counter.before <= high:
        words = _counter_cause(counter, start, stop, counter.before)
        if words is not None:
            return words
    seen = (f"hides nothing (token {start} sees the tokens after it)" if high == math.inf else
            f"lets token {start} see no key" if low < 0 else f"lets token {start} see keys 0 … {low}")
    positions = f"{start}" if stop - start == 1 else f"{start} … {stop - 1}"
    if counter is not None and counter.after != counter.before and low <= counter.after <= high:
        return (f"the mask is sliced after the position is advanced: this step's mask {seen}, as the rows from "
                f"{counter.name} = {counter.after} (its value after the step) do; slice the mask at the position "
                f"before the step ({counter.before}), then add the new tokens' count")
    if is_causal and low <= 0 <= high and start > 0:
        last = "" if stop - start == 1 else f", query {stop - 1} keys 0 … {stop - 1 - start}"
        return (f"the mask is is_causal=True, which SDPA aligns to the top-left: over the {keys} keys the cache holds "
                f"query {start} sees key 0 only{last}, as if the step started at position 0 — is_causal fits only a "
                f"forward whose queries and keys are the same tokens; after a cache pass an explicit attn_mask whose "
                f"rows start at the cached tokens' count (query {start} sees keys 0 … {start}), or offset the mask by "
                "it")
    if low <= 0 <= high and start > 0:
        return (f"the mask is built for the new tokens alone: it treats token {start} as position 0, so it sees only "
                f"key 0 of the {keys} the cache holds; take the mask's rows from the position the step starts at "
                f"({positions}) and as many columns as the cache holds")
    return (f"the step's mask treats token {start} as {where}: it {seen}; the mask's rows must start at the position "
            f"the step starts at ({positions})")
