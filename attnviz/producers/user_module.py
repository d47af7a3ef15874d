"""A user's own attention module as a producer: the class listed on the command line, built from the settings
and traced (:mod:`attnviz.tracing`) on seeded embeddings at its input width.

``torch.manual_seed(config.seed)`` right before building gives the same weights on every run; a built module is
kept per (label, sizes, dropout, seed) and runs in eval mode unless dropout is asked to run.  A module that
cannot be built, raises, computes no attention over its tokens, returns no (batch, n, d_out) output or
attention weights that are not finite is a ConfigError with the one-line reason, never a traceback; the last is a
:class:`NonFiniteWeightsError` that keeps the run, so that the module can still be checked on it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import replace

import numpy as np
import torch

from attnviz import tracing
from attnviz.config import AttentionConfig, ConfigError
from attnviz.producers import book
from attnviz.rng import built_once, seeded
from attnviz.trace import Trace

SHOWN_QUERIES = 8  # the rows a NaN message names before "…"
KEPT_FAILURES = 64  # the failed probe runs remembered (per module and sizes), the oldest forgotten first
# what to do when the forward refuses the width attnviz read off a module whose constructor takes none
BUILT_WIDTH = "take it as a constructor argument (d_in, hidden_size, n_embd …), which the sidebar's d_in sets"


class NonFiniteWeightsError(ConfigError):
    """The run's attention weights hold NaN or ±∞ in some rows: nothing draws, scores or explains them, but
    ``trace`` (that run) still gives the module and its tokens to what checks the code."""

    def __init__(self, message: str, trace: Trace):
        super().__init__(message)
        self.trace = trace


def settle(config: AttentionConfig) -> tuple[AttentionConfig, list[str]]:
    """The config the module runs: what the module decides itself — its input and output width, its heads,
    whether it masks the future — replaces the settings (a note names each setting it ignores)."""
    config = replace(config, embedding="seeded", device="cpu", variant=AttentionConfig.variant)
    module = _built_module(_module_key(config))
    d_in, d_out, each = _probed_sizes(_module_key(config))
    heads, causal, _ = each[config.attention - 1] if config.attention <= len(each) else each[0]  # else: trace says
    notes = []
    decided = {"d_in": d_in, "d_out": d_out, "num_heads": heads}
    ignored = [f"{name} = {getattr(config, name)}" for name, value in decided.items() if value != getattr(config, name)]
    if ignored:
        notes.append(f"Ignored {', '.join(ignored)}: {type(module).__name__} decides them "
                     f"(inputs {d_in} wide, {heads} heads, output {d_out} wide).")
    return replace(config, d_in=d_in, d_out=d_out, num_heads=heads, causal=causal), notes


def prepare(config: AttentionConfig) -> None:
    """Build the module of ``config`` (settled or not), probe its sizes and build the seeded embedding table at its
    input width before its first run; a problem is left for that run to report (ConfigError here): the build or
    probe that failed here fails the next call for the same module at once, with the same error, instead of running
    the user's code a second time (a constructor that never returns would hold the first page for a second time
    limit)."""
    _preparing.active = True
    try:
        config = settle(config)[0]
    finally:
        _preparing.active = False
    book._embedding_layer(config.d_in, config.context_length, config.seed)  # what book._embed draws from


_preparing = threading.local()  # .active: this thread is in prepare()
_failed_in_prepare: dict[tuple[str, AttentionConfig], ConfigError] = {}  # (builder, key) -> what prepare() met
# key -> why the built module's probe run failed (its forward raised, ran past the time limit, computed no attention):
# the sidebar asks on every rerun of every page, and the same forward on the same seeded tokens fails the same way
_failed_probes: dict[AttentionConfig, str] = {}


def forget_failures(label: str) -> None:
    """Forget what :func:`prepare` met building the module ``label`` and every failed probe run of it (Try again: the
    next run builds and runs it)."""
    for builder, key in list(_failed_in_prepare):
        if key.module == label:
            _failed_in_prepare.pop((builder, key), None)
    for key in list(_failed_probes):
        if key.module == label:
            _failed_probes.pop(key, None)


def _reported_after_prepare(build):
    """``build(key)``, whose failure inside :func:`prepare` is the next call's failure for the same key without
    running it again; the call after that builds anew.  Under :func:`built_once`'s lock, so a run waiting on the
    build prepare() started finds the failure."""
    @functools.wraps(build)
    def reported(key: AttentionConfig):
        failed = _failed_in_prepare.pop((build.__name__, key), None)
        if failed is not None:
            raise failed
        try:
            return build(key)
        except ConfigError as error:
            if getattr(_preparing, "active", False):
                _failed_in_prepare[build.__name__, key] = error
            raise
    return reported


def attention_places(config: AttentionConfig) -> tuple[str, ...]:
    """Where each attention the module of ``config`` computes is, in the order its forward computes them, as the
    checker names them ("line 35": :func:`attnviz.tracing.each_attention`) — one place for a module whose attentions
    are one layer's heads —, read off the run that learns its sizes.  ConfigError when the module cannot run."""
    return tuple(place for _, _, place in _probed_sizes(_module_key(config))[2])


@built_once(maxsize=8)
@_reported_after_prepare
def _probed_sizes(key: AttentionConfig) -> tuple[int, int, tuple[tuple[int, bool, str], ...]]:
    """(input width, output width, (heads, causal, place) of each attention :func:`attnviz.tracing.each_attention`
    lists) of the built module, from a 4-token seeded run on the width it was built with (its constructor's width
    argument under any spelling: ``user_code.listed_sizes``), else on the width it says or its forward's first
    projection takes (``tracing.input_width``), else the sidebar's.  A run that failed is not run again for the same
    key: its ConfigError is raised at once, until :func:`forget_failures`."""
    module = _built_module(key)  # a constructor's failure is user_code's to remember (until the file is saved)
    failed = _failed_probes.get(key)
    if failed is not None:
        raise ConfigError(failed)
    try:
        return _probe(key, module)
    except ConfigError as error:
        _failed_probes[key] = str(error)
        while len(_failed_probes) > KEPT_FAILURES:
            _failed_probes.pop(next(iter(_failed_probes)))
        raise


def _probe(key: AttentionConfig, module: torch.nn.Module) -> tuple[int, int, tuple[tuple[int, bool, str], ...]]:
    """:func:`_probed_sizes` of the module built from ``key``."""
    from attnviz import user_code  # the modules listed on the command line

    d_in, width = user_code.listed_sizes(key.module, key).get("d_in"), None
    if d_in is None:
        width = tracing.input_width(module)
        d_in = key.d_in if width is None else width.width
    x = torch.randn(1, min(4, key.context_length), d_in, generator=torch.Generator().manual_seed(0))  # (1, 4, d_in)
    try:
        with tracing.saying_width(x, width, how=BUILT_WIDTH):
            recording = tracing.record(module, x, tried_first=True)
    except tracing.TraceError as error:
        raise ConfigError(f"{key.module}: {error}") from None
    attentions = tracing.each_attention(recording)
    places = tracing.attention_places(recording, attentions, tracing.class_file(module))
    each = tuple((int(attention.weights.shape[1]), tracing.infer_causal(recording, attention, module), place)
                 for attention, place in zip(attentions, places))
    return d_in, int(recording.output.shape[-1]), each


def _module_key(config: AttentionConfig) -> AttentionConfig:
    """What the built module depends on (not the text, the causal switch or the device)."""
    return AttentionConfig(variant=config.variant, d_in=config.d_in, d_out=config.d_out, num_heads=config.num_heads,
                           context_length=config.context_length, dropout=config.dropout, seed=config.seed,
                           module=config.module, train=config.train and config.dropout > 0)


@built_once(maxsize=4)
@_reported_after_prepare
def _built_module(key: AttentionConfig) -> torch.nn.Module:
    from attnviz import user_code  # the modules listed on the command line

    try:
        with seeded(key.seed):
            module = user_code.build_listed(key.module, key)
    except user_code.UserCodeError as error:
        raise ConfigError(str(error)) from None
    return module.train(key.train)


def module_for(config: AttentionConfig) -> torch.nn.Module:
    """The built module a settled ``config`` runs (shared: do not change its mode or weights)."""
    return _built_module(_module_key(config))


def trace(text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace:
    """The Trace of the listed module on these tokens."""
    module = _built_module(_module_key(config))
    inputs, embeddings = book._embed(token_ids, config, notes)  # (1, n, d_in)
    try:
        with seeded(config.seed) if module.training else contextlib.nullcontext():  # dropout draws: replayable
            trace = tracing.trace_inputs(module, inputs, text=text, token_ids=token_ids, embeddings=embeddings,
                                         notes=notes, label=config.module, seed=config.seed, config=config,
                                         attention=config.attention)
    except tracing.TraceError as error:
        raise ConfigError(f"{config.module}: {error}") from None
    _check_finite(trace)
    return trace


def _check_finite(trace: Trace) -> None:
    """NonFiniteWeightsError naming the rows of attention weights that hold NaN or ±∞: the pages draw, score and explain
    weights, and a row that is not a probability distribution has nothing to show."""
    weights = trace.steps["weights"]  # (b, h, n, n)
    bad = ~np.isfinite(weights).all(axis=-1)  # (b, h, n): rows with a NaN or ±∞
    if not bad.any():
        return
    raise NonFiniteWeightsError(
        f"{trace.config.module}: {int(bad.sum())} of {bad.size} rows of the attention weights hold NaN or ∞: "
        f"{_rows_text(bad.any(axis=0))}. A mask hides every key of these rows (a softmax over no key is 0/0), or the "
        "scores before the softmax hold NaN; the maps, head statistics and explanations read each row as a "
        "probability distribution, so they are not drawn.", trace)


def _rows_text(bad: np.ndarray) -> str:
    """Where the (heads, n) mask ``bad`` is True, in words: "query 5, in every head", "head 0: queries 3, 5"."""
    heads, n = bad.shape
    every_head = bad.any(axis=0)  # (n,): rows bad in some head
    if (bad == every_head).all():  # the same rows in every head
        return _queries_text(np.flatnonzero(every_head), n) + (", in every head" if heads > 1 else "")
    per_head = [f"head {head}: {_queries_text(np.flatnonzero(bad[head]), n)}" for head in range(heads)
                if bad[head].any()]
    return "; ".join(per_head[:4]) + ("; …" if len(per_head) > 4 else "")


def _queries_text(rows: np.ndarray, n: int) -> str:
    """"every query", "query 5", "queries 3, 5, …"."""
    if len(rows) == n:
        return "every query"
    shown = ", ".join(str(int(row)) for row in rows[:SHOWN_QUERIES]) + (", …" if len(rows) > SHOWN_QUERIES else "")
    return f"query {shown}" if len(rows) == 1 else f"queries {shown}"
