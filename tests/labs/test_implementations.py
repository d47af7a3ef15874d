"""The fast paths equal the book's MultiHeadAttention after copying weights; the timer and the page work."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.apptest import no_exception, open_app
from streamlit.testing.v1 import AppTest

from attnviz import attention
from attnviz.config import AttentionConfig
from attnviz.labs import implementations as impl

SIZES = [(8, 8, 2), (12, 12, 3), (16, 16, 1), (64, 64, 4)]
NAMES = (impl.BOOK_MHA, impl.WRAPPER, impl.FUSED, impl.TORCH_MHA, impl.SDPA)  # the Benchmark page's order


def outputs(modules: dict, x: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.inference_mode():
        return {name: module(x) for name, module in modules.items()}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("d_in, d_out, num_heads", SIZES)
@pytest.mark.parametrize("seed", [0, 123])
def test_every_implementation_agrees_with_the_book_mha(causal, d_in, d_out, num_heads, seed):
    modules = impl.build_all(d_in, d_out, num_heads, causal=causal, seed=seed, context_length=32)
    assert list(modules) == list(NAMES)
    x = torch.randn(2, 11, d_in, generator=torch.Generator().manual_seed(seed))  # (b, n, d_in)
    results = outputs(modules, x)
    reference = results[impl.BOOK_MHA]
    assert reference.shape == (2, 11, d_out)
    for name, result in results.items():
        assert torch.allclose(result, reference, atol=1e-5), (name, (result - reference).abs().max())


def test_the_reference_is_the_books_seeded_mha():
    torch.manual_seed(123)
    book = attention.MultiHeadAttention(8, 8, 32, 0.0, 2)
    ours = impl.book_mha(8, 8, 2, context_length=32, seed=123)
    for (name, expected), (_, actual) in zip(book.state_dict().items(), ours.state_dict().items()):
        assert torch.equal(expected, actual), name


def test_causal_paths_never_look_ahead():
    """Perturbing token j never changes any implementation's outputs before j."""
    modules = impl.build_all(16, 16, 4, causal=True, context_length=16)
    x = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(1))
    changed = x.clone()
    changed[0, 5] += 10.0
    before, after = outputs(modules, x), outputs(modules, changed)
    for name in modules:
        assert torch.allclose(before[name][0, :5], after[name][0, :5], atol=1e-6), name
        assert not torch.allclose(before[name][0, 5:], after[name][0, 5:], atol=1e-3), name


def test_with_qkv_bias_the_copies_still_agree():
    mha = impl.book_mha(12, 12, 3, context_length=16)
    mha_bias = attention.MultiHeadAttention(12, 12, 16, 0.0, 3, qkv_bias=True)
    mha_bias.load_state_dict(mha.state_dict(), strict=False)
    with torch.no_grad():
        for linear in (mha_bias.W_query, mha_bias.W_key, mha_bias.W_value):
            linear.bias.normal_()
    x = torch.randn(1, 7, 12)
    with torch.inference_mode():
        reference = mha_bias(x)
        for module in (impl.wrapper_from(mha_bias), impl.fused_from(mha_bias), impl.torch_mha_from(mha_bias),
                       impl.fused_from(mha_bias, use_sdpa=True)):
            assert torch.allclose(module.eval()(x), reference, atol=1e-5), type(module).__name__


def test_torch_mha_is_left_out_when_d_in_differs_from_d_out():
    modules = impl.build_all(12, 6, 3, context_length=16)
    assert impl.TORCH_MHA not in modules
    x = torch.randn(1, 5, 12)
    results = outputs(modules, x)
    for result in results.values():
        assert torch.allclose(result, results[impl.BOOK_MHA], atol=1e-5)
    with pytest.raises(ValueError, match="d_in == d_out"):
        impl.torch_mha_from(impl.book_mha(12, 6, 3, context_length=16))


def test_timing_returns_a_median_for_every_implementation():
    calls = []
    rows = impl.time_implementations(16, 16, 4, n=8, device="cpu", repeats=3, warmup=1,
                                     progress=lambda done, total, name: calls.append((done, total, name)))
    assert [row.name for row in rows] == list(NAMES)
    for row in rows:
        assert len(row.times_ms) == 3
        assert all(t > 0 for t in row.times_ms)
        assert row.median_ms == sorted(row.times_ms)[1]
    assert calls[-1][0] == calls[-1][1] == 4 * len(NAMES)
    assert [c[0] for c in calls] == list(range(1, len(calls) + 1))


def test_the_progress_line_says_the_time_left_at_the_pace_so_far():
    assert impl.progress_text(0, 30, "SDPA", 0.0) == "0/30: SDPA"
    assert impl.progress_text(10, 30, "SDPA", 5.0) == "10/30: SDPA · about 10 s left"  # 0.5 s a call
    assert impl.progress_text(5, 505, "fused QKV", 15.0) == "5/505: fused QKV · about 25 min left"
    assert impl.progress_text(30, 30, "SDPA", 15.0) == "30/30: SDPA"  # done: nothing left


def test_timing_rejects_nonsense():
    with pytest.raises(ValueError):
        impl.time_implementations(8, 8, 2, n=0)
    with pytest.raises(ValueError):
        impl.time_implementations(8, 8, 2, n=4, repeats=0)


# --------------------------------------------------------------------------- the page

def benchmark_page(**query) -> AppTest:
    at = open_app("pages/benchmark.py", **query)
    no_exception(at)
    return at


def test_benchmark_page_does_no_work_until_the_button_is_pressed(monkeypatch):
    calls = []
    monkeypatch.setattr(impl, "time_implementations", lambda *a, **k: calls.append(1) or [])
    at = benchmark_page(d_in="32", d_out="32", num_heads="4", text="a b c")
    assert not at.get("plotly_chart")
    assert calls == []
    assert at.button(key="benchmark_run")
    assert at.title[0].value == "Implementations benchmark"


def test_benchmark_page_runs_and_draws_five_bars():
    at = benchmark_page(d_in="32", d_out="32", num_heads="4", text="a b c", preset="custom")
    at.text_input(key="benchmark_n").input("8")
    at.text_input(key="benchmark_repeats").input("2")
    at.button(key="benchmark_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    bars = [trace for trace in json.loads(charts[0].proto.spec)["data"] if trace["type"] == "bar"]
    assert len(bars) == 1
    assert len(bars[0]["y"]) == 5
    assert set(bars[0]["y"]) == set(NAMES)
    assert at.dataframe[0].value.shape[0] == 5
    page_text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert "CPU only on this machine" in page_text
    # the results stay when something else on the page reruns it
    at.text_input(key="benchmark_repeats").input("3").run()
    assert len(at.get("plotly_chart")) == 1


STEADY = impl.Row(impl.SDPA, 47.7, (47.7, 45.0, 50.1))
# a wrapper row timed on a busy machine: its slowest call took 17.7 times its fastest
BUSY = impl.Row(impl.WRAPPER, 99.06, (99.06, 153.29, 1187.12, 76.34, 66.92))


def test_a_row_whose_calls_spread_widely_is_noisy_and_a_steady_one_is_not():
    assert impl.noisy_rows([STEADY, BUSY]) == [BUSY]
    edge = impl.Row(impl.FUSED, 2.0, (1.0, impl.NOISY_SPREAD))  # exactly the spread: not yet noise
    assert impl.noisy_rows([edge]) == []
    assert impl.noisy_rows([edge._replace(times_ms=(1.0, impl.NOISY_SPREAD * 1.01))]) != []
    assert impl.noisy_rows([impl.Row(impl.BOOK_MHA, 5.0, (5.0,))]) == []  # one call: no spread to judge


def test_the_noise_note_names_the_noisy_rows_and_says_the_ranking_may_not_hold():
    assert impl.noise_note([STEADY]) is None
    note = impl.noise_note([STEADY, BUSY])
    assert impl.WRAPPER in note and impl.SDPA not in note
    assert "66.9–1,187.1 ms" in note and "another program using the CPU?" in note
    assert "ranking may not hold" in note


def test_the_benchmark_page_warns_when_the_timings_are_noisy(monkeypatch):
    monkeypatch.setattr(impl, "time_implementations", lambda *args, **kwargs: [STEADY, BUSY])
    at = benchmark_page(d_in="32", d_out="32", num_heads="4", text="a b c")
    at.button(key="benchmark_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [w.value for w in at.warning] == [impl.noise_note([STEADY, BUSY])]
    monkeypatch.setattr(impl, "time_implementations", lambda *args, **kwargs: [STEADY])
    at.button(key="benchmark_run").click().run()
    assert not at.warning


def test_timing_in_one_thread_never_disturbs_seeded_runs_in_another():
    """The benchmark builds its modules (seeding torch's global RNG) while sessions build theirs: every
    seeded section holds pipeline's RNG lock, so the sessions' weights and dropout masks stay the seed's."""
    import threading

    import numpy as np

    from attnviz import pipeline, producers

    config = AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2, context_length=32,
                                      dropout=0.5, train=True, seed=7)
    text = "Your journey starts with one step, and then another one."

    def fresh_run():
        producers.book._seeded_module.cache_clear()  # build the module (and its seeded weights) again
        producers.book._embedding_layer.cache_clear()
        return pipeline.run(text, config)

    reference = fresh_run()
    stop = threading.Event()

    def benchmark():
        while not stop.is_set():
            impl.time_implementations(16, 16, 2, 8, repeats=1, warmup=0, seed=99)

    timer = threading.Thread(target=benchmark)
    timer.start()
    try:
        traces = [fresh_run() for _ in range(40)]
    finally:
        stop.set()
        timer.join()
    for trace in traces:
        for name, array in reference.steps.items():
            assert np.array_equal(trace.steps[name], array), name
        assert np.array_equal(trace.embeddings["input"], reference.embeddings["input"])
