"""The server's one byte-bounded TraceCache (shared, read-only Traces), looked up by keys that sessions keep instead of
Traces; each new run's freed memory goes back to the OS (:mod:`attnviz.ui.memory`)."""

from __future__ import annotations

import dataclasses
import os

import streamlit as st

from attnviz import pipeline
from attnviz.config import AttentionConfig
from attnviz.text import clean_text
from attnviz.trace import Trace, trace_nbytes
from attnviz.ui import memory

TRACE_CACHE_MB = int(os.environ.get("ATTNVIZ_TRACE_CACHE_MB", "512"))


@st.cache_resource(show_spinner=False)
def _trace_cache() -> pipeline.TraceCache:
    """One byte-bounded cache of Traces per server, shared (read-only) by every session."""
    return pipeline.TraceCache(TRACE_CACHE_MB * 2**20)


def cached_trace(text: str, config: AttentionConfig) -> Trace:
    """The Trace of ``text`` and ``config``, from the server's one cache or computed into it.  Traces are shared,
    not copied: a 1024-token GPT-2-small Trace holds hundreds of MB of maps (benchmarks/README.md, "Numbers moved
    out of the code"), and ``st.cache_data`` would unpickle a copy on every rerun.  The cache is bounded by bytes
    (``ATTNVIZ_TRACE_CACHE_MB``, default 512), not by entries."""
    cache = _trace_cache()
    misses = cache.misses
    trace = cache.get(text, config)
    if cache.misses != misses:
        memory.trim()  # a new run (and maybe an eviction) freed hundreds of MB
    return trace


def prefetch_trace(text: str, config: AttentionConfig, shown: Trace) -> Trace | None:
    """``cached_trace(text, config)`` ahead of need, if it fits in the cache by evicting only other layers of
    the input ``shown`` is of — never ``shown`` itself nor another input's trace (``TraceCache.prefetch``; its size
    is taken to be ``shown``'s: another layer has the same shapes).  None when it does not fit."""
    cleaned = clean_text(text)[0]

    def other_layer_of_this_input(other_text: str, other: AttentionConfig) -> bool:
        return (other_text == cleaned and other.layer not in (shown.config.layer, config.layer)
                and dataclasses.replace(other, layer=0) == dataclasses.replace(config, layer=0))

    cache = _trace_cache()
    trace = cache.prefetch(text, config, trace_nbytes(shown), other_layer_of_this_input)
    if trace is not None:
        memory.trim()
    return trace


def trace_key(trace: Trace) -> tuple[str, AttentionConfig]:
    """What a view that outlives its script run keeps instead of the Trace, and what the caches of views are keyed
    by: (text, config) — Streamlit hashes the frozen ``AttentionConfig`` by its fields."""
    return (trace.text, trace.config)


def trace_of(key: tuple) -> Trace:
    """The Trace of ``trace_key``: shared from the cache, recomputed if it was evicted.

    Fragments and download callbacks outlive their script run, and Streamlit keeps a closed tab's
    session for two minutes: if they held the Trace itself, every session would pin a 1024-token GPT-2-small
    input's hundreds of MB past the cache's byte bound.  They hold this key instead."""
    return cached_trace(*key)
