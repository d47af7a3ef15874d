"""What a fresh server's first page and a new input need, built once: the warm-up, and builders that two
threads missing at once run once (benchmarks/README.md, "Fast first paint")."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from attnviz import embedding, pipeline, producers, ui, urlstate, user_code
from attnviz.config import AttentionConfig, ConfigError
from attnviz.producers import book, user_module
from attnviz.ui import memory


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


@pytest.mark.parametrize("config", [AttentionConfig(seed=9), AttentionConfig(module="Your module: Mine"),
                                    AttentionConfig(checkpoint="bundled")], ids=["book", "module", "checkpoint"])
def test_prepare_builds_what_the_configs_producer_prepares(monkeypatch, config):
    """The kind of run is told apart in one place, producers.for_config: the warm-up asks the producer it picks, so a
    new kind of run is prepared without a second copy of that choice."""
    prepared = []

    class Producer:  # a new kind of run: settle, trace and prepare
        prepare = staticmethod(prepared.append)

    monkeypatch.setattr(producers, "for_config", lambda asked: Producer if asked is config else None)
    pipeline.prepare(config)
    assert prepared == [config]


def test_the_warm_up_starts_one_thread_once_per_process(monkeypatch):
    monkeypatch.setattr(pipeline, "_warm_up_claim", threading.Lock())
    started = []

    class Thread:
        def __init__(self, **kwargs):
            started.append(kwargs)

        def start(self):
            pass

    monkeypatch.setattr(pipeline.threading, "Thread", Thread)
    config = urlstate.config_from_settings(urlstate.DEFAULTS)
    assert pipeline.prepare_in_background(config)
    assert not pipeline.prepare_in_background(config)
    assert len(started) == 1 and started[0]["name"] == "attnviz-warm-up" and started[0]["args"] == (config,)


def test_a_failing_warm_up_says_nothing(monkeypatch, capsys, caplog):
    """It only saves time: a problem is the page's own run's to report."""
    failed = []
    monkeypatch.setattr(pipeline, "prepare", lambda config: failed.append(config) or 1 / 0)
    caplog.set_level("DEBUG")
    pipeline._prepare_quietly(AttentionConfig())
    assert len(failed) == 1  # it ran, and raised
    assert capsys.readouterr() == ("", "")
    assert caplog.records == []


# --- app.py starts the warm-up, before it imports attnviz.ui; importing attnviz.ui starts nothing ---


MY_ATTENTION = f"{Path(__file__).resolve().parents[1] / 'docs' / 'examples' / 'my_attention.py'}:MultiHeadAttention"


@pytest.mark.parametrize("script_args", [[], ["--", "--module", MY_ATTENTION]], ids=["book", "module"])
def test_app_warms_up_what_its_first_page_runs_once_and_importing_the_ui_does_not(monkeypatch, script_args):
    """``streamlit run app.py [-- --module path.py:Class]``: the warm-up prepares the first page's run — the book's
    MHA, or the module the command line names, which the app opens on."""
    import importlib

    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr("sys.argv", ["app.py", *script_args])
    monkeypatch.delenv(user_code.ENV, raising=False)
    monkeypatch.setattr(pipeline, "_warm_up_claim", threading.Lock())
    prepared = []
    monkeypatch.setattr(pipeline, "_prepare_quietly", lambda config: prepared.append(
        (threading.current_thread().name, config)))
    importlib.reload(ui)  # an import of the package starts nothing
    assert not pipeline._warm_up_claim.locked()
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120).run()
    assert not at.exception, at.exception
    at.run()
    for thread in threading.enumerate():
        if thread.name in ("attnviz-warm-up", "attnviz-refreeze"):  # the latter: none calls a later test's patches
            thread.join(10)
    assert [name for name, _ in prepared] == ["attnviz-warm-up"], "once per process"
    first_page_ran = at.session_state["_last_valid"][1]
    assert pipeline.settle(prepared[0][1])[0] == first_page_ran


def test_a_run_of_a_users_module_after_prepare_builds_nothing(monkeypatch, counted_builds):
    """What the warm-up prepares for a module named on the command line: the module (built and probed, each call of
    the user's code under its time limit) and the seeded embedding table at its input width."""
    monkeypatch.setattr("sys.argv", ["app.py", "--", "--module", MY_ATTENTION])
    monkeypatch.delenv(user_code.ENV, raising=False)
    label = user_code.opening()
    built = []
    real_build = user_code.build_listed
    monkeypatch.setattr(user_code, "build_listed", lambda *args: built.append(args) or real_build(*args))
    user_module._built_module.cache_clear()
    user_module._probed_sizes.cache_clear()
    config = AttentionConfig(module=label, d_in=48, d_out=48, num_heads=4, seed=7)
    pipeline.prepare(config)
    assert len(built) == 1 and counted_builds["embedding"] == 1
    pipeline.run("Your journey starts with one step", pipeline.settle(config)[0])
    assert len(built) == 1 and counted_builds["embedding"] == 1


def test_a_users_module_that_never_returns_stops_the_warm_up_at_the_time_limit(monkeypatch, tmp_path):
    """The warm-up's thread runs the user's constructor under the time limit every call of the user's code has."""
    import time

    from attnviz import time_limit

    path = tmp_path / "endless.py"
    path.write_text("from torch import nn\n\n\nclass Endless(nn.Module):\n    def __init__(self, d_in, d_out):\n"
                    "        super().__init__()\n        while True:\n            pass\n")
    monkeypatch.setattr("sys.argv", ["app.py", "--", "--module", f"{path}:Endless"])
    monkeypatch.delenv(user_code.ENV, raising=False)
    monkeypatch.setattr(time_limit, "SECONDS", 0.5)
    monkeypatch.setattr(pipeline, "_warm_up_claim", threading.Lock())
    label = user_code.opening()
    built, done = [], threading.Event()
    real_build, real_prepare = user_code.build_listed, pipeline._prepare_quietly
    monkeypatch.setattr(user_code, "build_listed", lambda *args: built.append(args) or real_build(*args))
    monkeypatch.setattr(pipeline, "_prepare_quietly", lambda config: (real_prepare(config), done.set()))
    started = time.monotonic()
    assert pipeline.prepare_in_background(AttentionConfig(module=label, d_in=16, d_out=16, num_heads=2))
    assert done.wait(10) and time.monotonic() - started < 5
    assert len(built) == 1  # the constructor ran in the warm-up, and was stopped
    config = AttentionConfig(module=label, d_in=16, d_out=16, num_heads=2)
    with pytest.raises(ConfigError, match="without returning") as first:
        pipeline.settle(config)  # the first page's run: the warm-up's failure, not a second time limit
    assert len(built) == 1, "the page's run waited for the constructor a second time"
    with pytest.raises(ConfigError) as again:
        pipeline.settle(config)  # a later run builds anew (the file may have been mended)
    assert len(built) == 2 and str(again.value) == str(first.value)


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_a_fresh_servers_first_run_starts_the_warm_up_before_it_imports_pandas_and_the_ui():
    """So the default view is built while that run imports them (benchmarks/README.md has what it saves)."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import sys
from streamlit.testing.v1 import AppTest
from attnviz import pipeline
started, real = [], pipeline.prepare_in_background
def prepare_in_background(config):
    started.append(("attnviz.ui" in sys.modules, "pandas" in sys.modules))
    return real(config)
pipeline.prepare_in_background = prepare_in_background
at = AppTest.from_file("app.py", default_timeout=120).run()
assert not at.exception, at.exception
assert started == [(False, False)], started
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


# --- setup(): the objects the server imported are frozen once, out of the collection after every script run ---


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_setup_freezes_the_imported_objects_once_and_later_runs_freeze_nothing():
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc
import threading
from streamlit.testing.v1 import AppTest
from attnviz.ui import memory
assert gc.get_freeze_count() == 0
at = AppTest.from_file("app.py", default_timeout=120).run()
assert not at.exception, at.exception
for thread in threading.enumerate():
    if thread.name == "attnviz-refreeze":
        thread.join(60)  # frozen again once the first run's thread ended
frozen = gc.get_freeze_count()
assert frozen > 100_000, frozen  # torch, pandas, Plotly, Streamlit, attnviz
at.run()
assert not memory.freeze_imports() and gc.get_freeze_count() <= frozen, "once per process: later runs freeze nothing"
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_first_runs_objects_are_collected_once_the_browser_has_had_time_to_draw_its_page(monkeypatch):
    """The collection that follows a server's first run holds the GIL, so the server sends nothing while it runs: it
    waits ``BROWSER_DRAWS_S`` after that run's thread has ended, and the first page's messages go out first."""
    import time

    from attnviz import background

    monkeypatch.setattr(background, "BROWSER_DRAWS_S", 0.3)
    collected = []
    monkeypatch.setattr(memory, "_refreeze", lambda: collected.append(time.monotonic()))
    first_run = threading.Thread(target=lambda: None)
    first_run.start()
    first_run.join()
    ended = time.monotonic()
    memory._refreeze_after(first_run)
    assert len(collected) == 1 and collected[0] - ended >= 0.3


@pytest.mark.slow  # trains a model in a fresh process
def test_a_servers_first_training_freezes_what_its_first_step_imported_and_no_later_one_does():
    """The optimiser's first step imports torch._dynamo, sympy and mpmath (their object count: benchmarks/README.md,
    "Numbers moved out of the code") after setup() froze the imports: the first training freezes them too, so the
    collection after each run does not walk them again."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import gc, sys
from streamlit.testing.v1 import AppTest
from attnviz.labs import live_train
from attnviz.ui import memory, train as train_ui
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
assert not memory.freeze_training_imports(), "once per process"
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
from attnviz.config import AttentionConfig, ConfigError
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
