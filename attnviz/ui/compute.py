"""Cached computations of the Compare page (every variant on the same tokens, the ÷√dₖ ablation) and the Pitfall
lab (one bug on the trace's tokens, the causality leak report), keyed by the trace's key so a session never holds
the arrays."""

from __future__ import annotations

import streamlit as st

from attnviz import ablation
from attnviz.config import AttentionConfig, InputError
from attnviz.labs import compare
from attnviz.labs.pitfalls import catalogue
from attnviz.ui.cache import trace_of


@st.cache_resource(max_entries=4, ttl=3600, show_spinner=False)
def comparison(key: tuple, base_values: tuple) -> compare.Comparison:
    """:func:`attnviz.labs.compare.compare_trace` of the Trace of ``key`` with the base config ``base_values``."""
    return compare.compare_trace(trace_of(key), AttentionConfig(*base_values))


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def scaling(key: tuple) -> tuple[dict, dict | None, str | None]:
    """(the random-Q/K ablation over dₖ, this run's head 0 at its dₖ, None) for the "Why ÷√dₖ?" figure; (the
    ablation, None, why) for a run that recorded no queries and keys (a user's module whose scores are not Q·Kᵀ)."""
    trace = trace_of(key)
    causal, seed = trace.config.causal, trace.config.seed
    try:
        queries, keys = ablation.trace_qk(trace, head=0, max_tokens=compare.MAX_TOKENS)
    except InputError as error:
        return random_scaling(min(trace.n, compare.MAX_TOKENS), seed, causal), None, str(error)
    return (random_scaling(len(queries), seed, causal), ablation.run_point(queries, keys, causal=causal, head=0),
            None)


@st.cache_resource(max_entries=8, ttl=3600, show_spinner=False)
def random_scaling(num_tokens: int, seed: int, causal: bool) -> dict:
    """:func:`attnviz.ablation.scaling_ablation`: random q and k, so the same for every text of as many tokens
    (every long text: :data:`attnviz.labs.compare.MAX_TOKENS`) with this seed and mask."""
    return ablation.scaling_ablation(num_tokens=num_tokens, seed=seed, causal=causal)


# The Pitfall lab's results are small; the Trace is passed unhashed (``_trace``): ``key`` names it.
@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def pitfall(key: tuple, wanted_heads: int, bug: str, _trace) -> catalogue.PitfallResult:
    """:func:`attnviz.labs.pitfalls.catalogue.run_on_trace`: the correct and the buggy module on the trace's tokens,
    the correct one shared by the bugs of its side (:func:`pitfall_correct`)."""
    correct = pitfall_correct(key, wanted_heads, catalogue.correct_side(bug), bug, _trace)
    return catalogue.run_on_trace(_trace, wanted_heads, bug, correct)


@st.cache_data(max_entries=32, ttl=3600, show_spinner=False)
def pitfall_correct(key: tuple, wanted_heads: int, side: str, _bug: str, _trace) -> catalogue.Version:
    """:func:`attnviz.labs.pitfalls.catalogue.correct_on_trace`, keyed by the bug's ``side``
    (:func:`~attnviz.labs.pitfalls.catalogue.correct_side`), not by the bug: the three KV-cache bugs run their correct
    cache (the checker's forwards) once a trace."""
    return catalogue.correct_on_trace(_trace, wanted_heads, _bug)


@st.cache_data(max_entries=64, ttl=3600, show_spinner=False)
def leak(key: tuple, wanted_heads: int, bug: str | None, j: int, _trace) -> dict:
    """:func:`attnviz.labs.pitfalls.catalogue.leak_on_trace`: perturb token ``j``, see which positions move."""
    return catalogue.leak_on_trace(_trace, wanted_heads, bug, j)
