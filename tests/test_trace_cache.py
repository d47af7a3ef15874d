"""``pipeline.TraceCache``: bounded by bytes, keyed by the cleaned text, making room before a run, prefetching
only what it may evict, counting shared storage once, running a key missed by two sessions once, and never
caching a failure."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from helpers.runs import TEXT, small

from attnviz import pipeline
from attnviz.config import MAX_CHARS, AttentionConfig
from attnviz.pipeline import run


def test_trace_cache_is_bounded_by_bytes_and_reuses_traces():
    from attnviz.pipeline import TraceCache
    from attnviz.trace import trace_nbytes

    config = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=256)
    long_text = "word " * 300  # 256 tokens after truncation
    one = trace_nbytes(run(long_text, config))
    cache = TraceCache(max_bytes=int(2.5 * one))
    first = cache.get(long_text, config)
    assert cache.get(long_text, config) is first  # a hit returns the same (read-only) object
    for seed in (1, 2, 3):
        cache.get(long_text, replace(config, seed=seed))
    assert len(cache) == 2 and cache.nbytes <= 2.5 * one  # the oldest were evicted
    assert cache.get(long_text, replace(config, seed=3)).config.seed == 3
    assert not first.steps["weights"].flags.writeable


def test_trace_cache_makes_room_before_a_run_so_cache_plus_new_trace_stay_in_bounds(monkeypatch):
    from attnviz import pipeline
    from attnviz.pipeline import TraceCache, estimate_nbytes
    from attnviz.trace import trace_nbytes

    config = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=256)
    long_text = "word " * 300  # 256 tokens after truncation
    trace = run(long_text, config)
    maps = sum(trace.steps[stage].nbytes for stage in ("scores", "scaled", "masked", "weights", "dropped"))
    assert estimate_nbytes(long_text, config) == maps  # eval mode: dropped aliases weights, so an upper bound
    assert trace_nbytes(trace) <= estimate_nbytes(long_text, config) * 1.2
    assert estimate_nbytes("", config) == 0  # invalid text: run() raises, nothing to reserve

    one = trace_nbytes(trace)
    cache = TraceCache(max_bytes=int(2.5 * one))
    held_during_runs = []
    real_run = pipeline.run

    def watched_run(text, cfg):
        held_during_runs.append(cache.nbytes)
        return real_run(text, cfg)

    monkeypatch.setattr(pipeline, "run", watched_run)
    for seed in range(5):
        cache.get(long_text, replace(config, seed=seed))
    reserve = estimate_nbytes(long_text, config)
    assert held_during_runs[0] == 0 and all(held + reserve <= 2.5 * one for held in held_during_runs)
    assert len(cache) == 2  # after the run the cache fills up to its bound again


def test_trace_cache_prefetch_only_evicts_what_it_is_allowed_to():
    """A prefetch runs only if its trace fits after evicting the traces ``evictable`` allows, oldest first; a plan
    that cannot make room evicts nothing; after the run the real size must fit the same way, or it is not cached."""
    from attnviz.pipeline import TraceCache
    from attnviz.trace import trace_nbytes

    config = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=256)
    long_text = "word " * 300  # 256 tokens after truncation
    one = trace_nbytes(run(long_text, config))
    cache = TraceCache(max_bytes=int(2.5 * one))
    mine = lambda text, cfg: cfg.seed in (0, 1, 2)  # noqa: E731 — "this session's": seeds 0-2 stand for its layers
    seeds = lambda: [key[1].seed for key in cache._traces]  # noqa: E731 — oldest first
    other = cache.get(long_text, replace(config, seed=9))  # another session's input
    cache.get(long_text, replace(config, seed=0))
    first = cache.prefetch(long_text, replace(config, seed=1), one, mine)  # fits after evicting seed 0
    assert first.config.seed == 1 and seeds() == [9, 1] and cache.get(long_text, replace(config, seed=9)) is other
    misses = cache.misses
    assert cache.prefetch(long_text, replace(config, seed=1), one, mine) is first and cache.misses == misses
    assert cache.prefetch(long_text, replace(config, seed=5), one, lambda text, cfg: False) is None  # no room
    assert cache.misses == misses and seeds() == [1, 9]  # … and no run, nothing evicted (9 was read above)
    assert cache.prefetch(long_text, replace(config, seed=2), 1, lambda text, cfg: False) is None  # under-estimated:
    assert seeds() == [1, 9] and cache.misses == misses  # it ran, did not fit, was not cached; nothing evicted
    assert cache.prefetch(long_text, replace(config, seed=2), one, mine).config.seed == 2  # evicts 1, never 9
    assert seeds() == [9, 2]


def test_prefetching_a_layer_keeps_the_one_on_screen_and_every_other_inputs_trace(monkeypatch):
    """The Heads page's rule (``ui.cache.prefetch_trace``): to make room for the next layer only other layers of the
    same text and checkpoint are evicted — never the layer on screen nor another text's trace."""
    from attnviz import models
    from attnviz.pipeline import TraceCache
    from attnviz.trace import trace_nbytes
    from attnviz.ui import cache as ui_cache

    text, other_text = "The cat sat on the mat. " * 8, "A dog ran in the park. " * 8
    from attnviz.pipeline import settle

    layer = [settle(AttentionConfig(checkpoint=str(models.BUNDLED), layer=k))[0] for k in (0, 1)]  # as the page asks
    one = trace_nbytes(run(text, layer[0]))
    cache = TraceCache(max_bytes=int(2.5 * one))
    monkeypatch.setattr(ui_cache, "_trace_cache", lambda: cache)
    theirs = cache.get(other_text, layer[1])
    shown = cache.get(text, layer[0])
    held = lambda: [trace for trace, _ in cache._traces.values()]  # noqa: E731 — oldest first
    assert ui_cache.prefetch_trace(text, layer[1], shown) is None  # room only by evicting shown or theirs
    assert held() == [theirs, shown]
    cache.max_bytes = int(3.5 * one)
    unmasked = cache.get(text, replace(layer[1], causal=False))  # this text and model, another view: not evictable
    assert ui_cache.prefetch_trace(text, layer[1], shown) is None
    assert held() == [theirs, shown, unmasked]
    cache.max_bytes = int(4.5 * one)
    prefetched = ui_cache.prefetch_trace(text, layer[1], shown)
    assert prefetched.config.layer == 1 and held() == [theirs, shown, unmasked, prefetched]


def test_trace_nbytes_counts_shared_storage_once():
    """In eval mode ``dropped`` is ``weights`` (the same tensor): its bytes count once."""
    from attnviz.trace import trace_nbytes

    trace = run(TEXT, small("mha"))
    arrays = [*trace.steps.values(), *trace.embeddings.values(), trace.output]
    assert np.shares_memory(trace.steps["dropped"], trace.steps["weights"])
    assert np.shares_memory(trace.output, trace.steps["output"])  # Trace.output is the recorded output
    shared = trace.steps["dropped"].nbytes + trace.output.nbytes
    assert trace_nbytes(trace) == sum(array.nbytes for array in arrays) - shared


def test_trace_nbytes_counts_separate_storage_fully():
    from attnviz.trace import trace_nbytes

    trace = run(TEXT, small("mha", dropout=0.5, train=True))  # dropout ran: dropped is a new tensor
    arrays = [*trace.steps.values(), *trace.embeddings.values(), trace.output]
    assert not np.shares_memory(trace.steps["dropped"], trace.steps["weights"])
    assert trace_nbytes(trace) == sum(array.nbytes for array in arrays) - trace.output.nbytes


def test_two_sessions_missing_the_same_key_compute_once(monkeypatch):
    import threading
    import time

    from attnviz.pipeline import TraceCache

    calls, real_run = [], pipeline.run

    def slow_run(text, config):
        calls.append(text)
        time.sleep(0.3)  # both sessions miss while the first one is still computing
        return real_run(text, config)

    monkeypatch.setattr(pipeline, "run", slow_run)
    cache, results = TraceCache(max_bytes=2**30), []
    threads = [threading.Thread(target=lambda: results.append(cache.get(TEXT, small()))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(results) == 4 and all(result is results[0] for result in results)
    assert cache.misses == 1


def test_a_failed_run_is_not_cached_and_every_waiter_sees_the_error(monkeypatch):
    import threading
    import time

    from attnviz.pipeline import TraceCache

    calls = []

    def failing_run(text, config):
        calls.append(text)
        time.sleep(0.2)
        raise torch.cuda.OutOfMemoryError("boom")

    monkeypatch.setattr(pipeline, "run", failing_run)
    cache, errors = TraceCache(max_bytes=2**30), []

    def get():
        try:
            cache.get(TEXT, small())
        except torch.cuda.OutOfMemoryError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=get) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(errors) == 3 and len(cache) == 0
    monkeypatch.setattr(pipeline, "run", run)
    assert cache.get(TEXT, small()).n > 0  # the next request runs again


def test_cache_key_is_the_prepared_text():
    """A paste longer than MAX_CHARS is stored under the text that was tokenized, so looking the Trace up
    again by its own text (what fragments and downloads keep) hits."""
    from attnviz.pipeline import TraceCache

    long_text = "word " * (MAX_CHARS // 5 + 2000)
    cache = TraceCache(max_bytes=2**30)
    trace = cache.get(long_text, small(context_length=64))
    assert len(trace.text) == MAX_CHARS
    assert cache.get(trace.text, small(context_length=64)) is trace
    assert cache.misses == 1
