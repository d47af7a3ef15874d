"""What a fresh server's first page and a new input need, built once: the warm-up, and builders that two
threads missing at once run once (benchmarks/README.md, "Fast first paint")."""

from __future__ import annotations

import threading

import pytest

from attnviz import embedding, pipeline, ui
from attnviz.config import AttentionConfig
from attnviz.producers import book
from attnviz.ui import cache


@pytest.fixture
def counted_builds(monkeypatch):
    """Count seeded embedding tables and modules built (the caches start empty and are emptied after)."""
    built = {"embedding": 0, "module": 0}
    real_embedding, real_build = embedding.InputEmbedding, book.build_module

    def slow_embedding(*args):
        built["embedding"] += 1
        threading.Event().wait(0.05)  # widen the window in which a second thread misses too
        return real_embedding(*args)

    def build_module(config):
        built["module"] += 1
        return real_build(config)

    monkeypatch.setattr(embedding, "InputEmbedding", slow_embedding)
    monkeypatch.setattr(book, "build_module", build_module)
    book._embedding_layer.cache_clear()
    book._seeded_module.cache_clear()
    yield built
    book._embedding_layer.cache_clear()
    book._seeded_module.cache_clear()


def test_threads_missing_at_once_build_the_embedding_and_module_once(counted_builds):
    config = AttentionConfig(d_in=64, d_out=64, num_heads=4, seed=5)
    barrier = threading.Barrier(4)
    layers = []

    def first_run():
        barrier.wait()
        layers.append(book._embedding_layer(config.d_in, config.context_length, config.seed))
        book._seeded_module(book._module_config(config), "cpu")

    threads = [threading.Thread(target=first_run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counted_builds == {"embedding": 1, "module": 1}
    assert all(layer is layers[0] for layer in layers)


def test_a_run_after_prepare_builds_nothing_and_gives_the_same_numbers(counted_builds):
    config = AttentionConfig(d_in=64, d_out=64, num_heads=4, seed=5)
    pipeline.prepare(config)
    assert counted_builds == {"embedding": 1, "module": 1}
    trace = pipeline.run("Your journey starts with one step", config)
    assert counted_builds == {"embedding": 1, "module": 1}
    book._embedding_layer.cache_clear()
    book._seeded_module.cache_clear()
    fresh = pipeline.run("Your journey starts with one step", config)  # built by the run itself
    assert (trace.steps["weights"] == fresh.steps["weights"]).all() and (trace.output == fresh.output).all()


def test_the_warm_up_runs_only_in_a_streamlit_runtime(monkeypatch):
    """Importing attnviz.ui outside a Streamlit runtime (tests, scripts) starts no thread."""
    from streamlit import runtime

    assert not runtime.exists()
    monkeypatch.setattr(cache, "_warm_up_started", threading.Event())
    started = []

    class Thread:
        def __init__(self, **kwargs):
            started.append(kwargs)

        def start(self):
            pass

    monkeypatch.setattr(cache.threading, "Thread", Thread)
    assert not cache.warm_up(ui.config_from_settings(ui.DEFAULTS))
    assert started == [] and not cache._warm_up_started.is_set()
    monkeypatch.setattr(runtime, "exists", lambda: True)  # as in a server: one thread, once
    assert cache.warm_up(ui.config_from_settings(ui.DEFAULTS))
    assert not cache.warm_up(ui.config_from_settings(ui.DEFAULTS))
    assert len(started) == 1 and started[0]["name"] == "attnviz-warm-up"


# --- app.py: a fresh server's first run asks the browser for the chart code before the page's work ---

PRELOAD_Z = [[0.0]]


@pytest.fixture
def fresh_process(monkeypatch):
    """This test process as a fresh server: torch still to import, nobody has claimed the first run."""
    from attnviz import first_run

    monkeypatch.setattr(first_run, "torch_to_import", lambda: True)
    monkeypatch.setattr(first_run, "_claimed", threading.Lock())
    return first_run


def test_one_thread_of_many_claims_a_fresh_process_first_run(fresh_process):
    start, claims = threading.Barrier(8), []

    def claim():
        start.wait()
        claims.append(fresh_process.claim())

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claims) == [False] * 7 + [True]
    assert not fresh_process.claim(), "and no later run"


def test_no_run_claims_once_torch_is_imported(monkeypatch):
    from attnviz import first_run

    monkeypatch.setattr(first_run, "_claimed", threading.Lock())
    assert not first_run.torch_to_import(), "this test process has imported torch"
    assert not first_run.claim()


def _preload_charts(at) -> list:
    import json

    return [chart for chart in at.get("plotly_chart") if json.loads(chart.proto.spec)["data"][0].get("z") == PRELOAD_Z]


def _page_charts(at) -> list:
    """The Heads page's own charts (the grid and the focused head)."""
    return [chart for chart in at.get("plotly_chart") if chart not in _preload_charts(at)]


def _app_test():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120)


def test_a_fresh_server_first_run_sends_a_chart_before_the_page_and_no_later_run_does(
        fresh_process, monkeypatch):
    import runpy

    import streamlit as st

    sent = []  # what app.py sends, in order, and when the page starts
    real_chart = st.plotly_chart

    def chart(figure, *args, **kwargs):
        shown = real_chart(figure, *args, **kwargs)
        sent.append(("chart", figure))  # only a chart Streamlit took (the preload swallows an AttributeError)
        return shown

    monkeypatch.setattr(st, "plotly_chart", chart)
    monkeypatch.setattr(runpy, "run_path", lambda *args, **kwargs: sent.append(("page", None)))
    at = _app_test().run()
    assert not at.exception
    assert [kind for kind, _ in sent] == ["chart", "page"], "the chart first, then the page"
    assert sent[0][1]["data"][0]["z"] == PRELOAD_Z
    assert not _preload_charts(at), "the box is emptied before the page runs"
    sent.clear()
    at.run()
    assert [kind for kind, _ in sent] == ["page"], "the session's later runs send neither"
    sent.clear()
    _app_test().run()
    assert [kind for kind, _ in sent] == ["page"], "nor does another session's first run"


def test_a_preload_that_meets_a_half_imported_pandas_is_skipped_and_the_page_is_drawn(fresh_process, monkeypatch):
    """Another session importing pandas while this run sends its preload chart: Plotly's check of the chart reads
    the half-initialised module from sys.modules and raises; the run goes on without the preload."""
    import sys
    import types

    import streamlit as st

    real_chart, raised = st.plotly_chart, []

    def chart(figure, *args, **kwargs):
        if kwargs.get("key") != "_preload_chart":
            return real_chart(figure, *args, **kwargs)
        pandas = sys.modules["pandas"]
        sys.modules["pandas"] = types.ModuleType("pandas")  # half-initialised: no attributes yet
        try:
            return real_chart(figure, *args, **kwargs)
        except AttributeError:
            raised.append(True)
            raise
        finally:
            sys.modules["pandas"] = pandas

    monkeypatch.setattr(st, "plotly_chart", chart)
    at = _app_test().run()
    assert raised, "Plotly did read the half-imported module"
    assert not at.exception
    assert not _preload_charts(at) and _page_charts(at) and at.dataframe, "the page, drawn, without the box"


def test_a_page_that_stops_early_leaves_no_preload_box(fresh_process, monkeypatch):
    import runpy

    import streamlit as st

    monkeypatch.setattr(runpy, "run_path", lambda *args, **kwargs: st.stop())  # as the page does on empty text
    at = _app_test().run()
    assert not at.exception
    assert not _preload_charts(at)


def test_the_drawn_first_page_has_no_preload_chart_left(fresh_process):
    at = _app_test().run()
    assert not at.exception
    assert not fresh_process.claim(), "this run was the process's first"
    assert not _preload_charts(at)
    assert _page_charts(at), "the page's own charts are there"
    assert at.dataframe, "and its tables"


# --- setup(): the objects the server imported are frozen once, out of the collection after every script run ---


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_importing_attnviz_ui_starts_the_warm_up_before_it_imports_pandas():
    """The seeded table is drawn (without the GIL) while pandas and the rest of attnviz.ui import: a fresh
    process, with Streamlit's runtime said to exist, records whether pandas was imported when the thread started."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import sys, threading
import streamlit.runtime
streamlit.runtime.exists = lambda: True  # as in a server: warm_up() starts its thread
pandas_when_started = []
real_start = threading.Thread.start

def start(self):
    if self.name == "attnviz-warm-up":
        pandas_when_started.append("pandas" in sys.modules)
    return real_start(self)

threading.Thread.start = start
import attnviz, attnviz.first_run
assert "pandas" not in sys.modules and "torch" not in sys.modules, "attnviz and first_run import nothing heavy"
import attnviz.ui
assert pandas_when_started == [False], pandas_when_started
assert "pandas" in sys.modules, "attnviz.ui imports pandas itself, before any figure is built"
for thread in threading.enumerate():
    if thread.name == "attnviz-warm-up":
        thread.join()  # before the interpreter exits under it
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_setup_freezes_the_imported_objects_once_and_later_runs_freeze_nothing():
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc
import threading
from streamlit.testing.v1 import AppTest
from attnviz.ui import cache
assert gc.get_freeze_count() == 0
at = AppTest.from_file("app.py", default_timeout=120).run()
assert not at.exception, at.exception
for thread in threading.enumerate():
    if thread.name == "attnviz-refreeze":
        thread.join(60)  # frozen again once the first run's thread ended
frozen = gc.get_freeze_count()
assert frozen > 100_000, frozen  # torch, pandas, Plotly, Streamlit, attnviz
at.run()
assert not cache.freeze_imports() and gc.get_freeze_count() <= frozen, "once per process: later runs freeze nothing"
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow  # trains a model in a fresh process
def test_a_servers_first_training_freezes_what_its_first_step_imported_and_no_later_one_does():
    """The optimiser's first step imports torch._dynamo, sympy and mpmath (~120,000 objects) after setup() froze
    the imports: the first training freezes them too, so the collection after each run does not walk them again."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc, sys
from streamlit.testing.v1 import AppTest
from attnviz.labs import live_train
from attnviz.ui import cache, train as train_ui
live_train.RECOMMENDED = {"steps": 10, "n_layers": 1, "n_heads": 2, "emb_dim": 16, "context_length": 64,
                          "seq_len": 24, "batch_size": 2, "negatives": 8, "min_repeat": 4, "max_repeat": 10}
at = AppTest.from_file("app.py", default_timeout=120).run()
at.switch_page("pages/train.py").run()
assert not at.exception, at.exception
assert "torch._dynamo" not in sys.modules and "sympy" not in sys.modules
gc.collect()
unfrozen = len(gc.get_objects())
at.button(key="train_start").click().run()
job = train_ui.job_board().get(at.session_state["_train_owner"])
assert job.join(120) and job.error is None, job.error
assert "torch._dynamo" in sys.modules and "sympy" in sys.modules  # what the optimiser's first step imported
gc.collect()
assert len(gc.get_objects()) < unfrozen + 20_000, (unfrozen, len(gc.get_objects()))  # not ~120,000 more
assert not cache.freeze_training_imports(), "once per process"
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_the_first_runs_trace_is_not_frozen_with_its_page():
    """The freeze happens inside a server's first run; that run's page globals (its Context, a cycle when the page
    defines functions, as the Steps page does) are collected before the freeze is taken again, so its Trace goes
    when the cache lets it go."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc, threading, weakref
from streamlit.testing.v1 import AppTest
from attnviz.ui import cache
from attnviz.config import AttentionConfig
from attnviz.producers.book import build_module
at = AppTest.from_file("app.py", default_timeout=120)
at.query_params["text"] = "The very first text this server runs."
at.switch_page("pages/steps.py").run()
assert not at.exception, at.exception
at.sidebar.text_area(key="text").set_value("A second text.").run()
for thread in threading.enumerate():
    if thread.name in ("attnviz-refreeze", "attnviz-warm-up"):
        thread.join(60)
traces = cache._trace_cache()._traces
first = [weakref.ref(trace) for trace, _ in traces.values() if trace.text.startswith("The very first")]
assert first
traces.clear()
gc.collect()
assert all(ref() is None for ref in first), "the first run's Trace is kept by its frozen page globals"
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
