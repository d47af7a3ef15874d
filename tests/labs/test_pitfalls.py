"""Pitfall lab and causality leak detector: every detector fires on its bug and not on the book's code,
the error texts are PyTorch's own, and the leak detector finds exactly the leaked positions."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import inspect
import json
import math
import re
import threading

import numpy as np
import pytest
import torch
from helpers.apptest import no_exception, open_app, plotly_figures
from helpers.maps import cells_shown, images
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from attnviz import modern_attention, pipeline
from attnviz.attention import MultiHeadAttention, Recorder
from attnviz.config import MAX_CHARS, AttentionConfig
from attnviz.labs.pitfalls import bugs, catalogue, detectors, leak, modern, workbench
from attnviz.labs.pitfalls import figures as pitfall_figures
from attnviz.labs.pitfalls.catalogue import PITFALLS
from attnviz.rng import seeded
from attnviz.views import figures, margins

TIMEOUT = 120
TEXT = "Your journey starts with one step and then another one"


def small_config(**overrides) -> AttentionConfig:
    values = {"d_in": 32, "d_out": 32, "num_heads": 4, "context_length": 64, "dropout": 0.1, "seed": 123}
    return AttentionConfig(**{**values, **overrides})


def lab_for(config: AttentionConfig, text: str = TEXT) -> tuple[workbench.LabSetup, torch.Tensor]:
    trace = pipeline.run(text, config)
    return workbench.lab_setup(config, trace.n, config.num_heads), workbench.lab_inputs(trace.embeddings["input"])


@pytest.fixture(scope="module")
def lab() -> tuple[workbench.LabSetup, torch.Tensor]:
    return lab_for(small_config())


def mha(causal: bool = True, seed: int = 123, d: int = 32, heads: int = 4, ctx: int = 64) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(d, d, ctx, 0.0, heads, causal=causal).eval()


def inputs(n: int, d: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, n, d, generator=torch.Generator().manual_seed(seed))  # (1, n, d)


# ============================== the lab's module is the book's module ==============================


DIAGONAL_LINE = 'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))'
SOFTMAX_LINE = "attn_weights = torch.softmax(attn_scores, dim=-1)"


class Rebuilt(MultiHeadAttention):
    """The bugs' machinery with a no-op change: the book's methods compiled again from their source."""

    __init__ = bugs.one_line_changed(MultiHeadAttention.__init__, DIAGONAL_LINE, DIAGONAL_LINE)
    forward = bugs.one_line_changed(MultiHeadAttention.forward, SOFTMAX_LINE, SOFTMAX_LINE)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", [0, 123, 2024])
def test_methods_rebuilt_from_the_books_source_are_bitwise_the_books(causal, seed):
    book = mha(causal, seed)
    torch.manual_seed(seed)
    rebuilt = Rebuilt(32, 32, 64, 0.0, 4, causal=causal).eval()  # super() in the rebuilt __init__ still works
    for (name, value), (rebuilt_name, rebuilt_value) in zip(book.state_dict().items(), rebuilt.state_dict().items()):
        assert name == rebuilt_name and torch.equal(value, rebuilt_value), name  # same draws, same order
    x = inputs(9, seed=seed)
    book_trace, rebuilt_trace = Recorder(), Recorder()
    with torch.no_grad():
        assert torch.equal(book(x, book_trace), rebuilt(x, rebuilt_trace))
    for stage in ("queries", "keys", "values", "scores", "scaled", "masked", "weights", "dropped", "context", "output"):
        assert torch.equal(book_trace.steps[stage], rebuilt_trace.steps[stage]), stage
    assert book_trace.shapes == rebuilt_trace.shapes


def test_a_bug_must_replace_a_line_the_book_has_exactly_once():
    with pytest.raises(ValueError, match="has 0 lines"):
        bugs.one_line_changed(MultiHeadAttention.forward, "attn_scores = attn_scores / 8", "attn_scores = attn_scores")


def test_correct_lab_module_reproduces_the_apps_trace():
    config = small_config()
    trace = pipeline.run(TEXT, config)
    setup = workbench.lab_setup(config, trace.n)
    with torch.no_grad():
        output = workbench.build_correct(setup)(workbench.lab_inputs(trace.embeddings["input"]))  # (1, n, d_out)
    assert torch.equal(output, torch.from_numpy(trace.output.copy()))


@pytest.mark.parametrize("key", list(PITFALLS))
def test_buggy_version_has_the_correct_versions_weights(lab, key):
    setup, _ = lab
    correct = PITFALLS[key].correct(setup)
    buggy = PITFALLS[key].build(correct, setup)
    assert isinstance(buggy, type(correct))
    for name, value in correct.named_parameters():
        assert torch.equal(value, dict(buggy.named_parameters())[name]), name
    assert buggy.training is (key == "forgot_eval")


@pytest.mark.parametrize("key", list(PITFALLS))
def test_each_pitfall_is_a_one_line_difference(key):
    pitfall = PITFALLS[key]
    assert pitfall.correct_line != pitfall.buggy_line
    assert "\n" not in pitfall.correct_line and "\n" not in pitfall.buggy_line
    assert catalogue.diff_text(key) == f"- {pitfall.correct_line}\n+ {pitfall.buggy_line}"


def changed_lines(book_method, bug_method) -> list[str]:
    """The lines of ``diff(getsource(book), getsource(bug))``: "- …" removed, "+ …" added."""
    book, bug = (inspect.getsource(method).splitlines() for method in (book_method, bug_method))
    return [line for line in difflib.ndiff(book, bug) if line.startswith(("- ", "+ "))]


@pytest.mark.parametrize("key", [key for key in PITFALLS if key != "forgot_eval"])
def test_each_bug_class_is_the_books_source_with_the_shown_line_changed(lab, key):
    """Checked against the code that runs (inspect.getsource of the bug's method), not restated."""
    setup, _ = lab
    pitfall = PITFALLS[key]
    correct = pitfall.correct(setup)
    cls = type(pitfall.build(correct, setup))
    assert cls.__bases__ == (type(correct),)
    methods = [name for name, value in vars(cls).items() if callable(value)]
    assert len(methods) == 1  # forward, __init__ or reset_cache; everything else is the correct class
    removed, added = changed_lines(getattr(type(correct), methods[0]), getattr(cls, methods[0]))
    assert removed.startswith("- ") and added.startswith("+ ")
    assert bugs.code_of(removed[2:]) == bugs.code_of(pitfall.correct_line)  # the page's lines, as code
    assert bugs.code_of(added[2:]) == bugs.code_of(pitfall.buggy_line)


def test_forgotten_eval_is_the_books_class_in_training_mode(lab):
    setup, _ = lab
    correct = workbench.build_correct(setup)
    buggy = PITFALLS["forgot_eval"].build(correct, setup)
    assert type(buggy) is MultiHeadAttention and type(correct) is MultiHeadAttention  # the same source
    assert (correct.training, buggy.training) == (False, True)  # the one difference: .eval() was not called
    assert bugs.code_of(PITFALLS["forgot_eval"].correct_line) == "model.eval()"
    assert bugs.code_of(PITFALLS["forgot_eval"].buggy_line) == ""  # the line is missing (a comment only)


# ============================== detectors ==============================


@pytest.mark.parametrize("key", list(PITFALLS))
def test_detector_fires_on_the_bug_and_not_on_the_books_code(lab, key):
    setup, x = lab
    result = catalogue.run_pitfall(key, setup, x)
    assert result.correct.fired is False, result.correct.verdict
    assert result.buggy.fired is True, result.buggy.verdict
    assert result.correct.verdict != result.buggy.verdict


@pytest.mark.parametrize(("key", "expected"), [
    ("masked_fill", "the future leaks: perturbing the last token (position 9) moves the outputs at positions "
                    "0, 1, 2, 3, 4, 5, 6, 7, 8"),
    ("softmax_dim", "rows do not sum to 1"),
    ("scale_d_out", "= 1/√32, but head_dim is 8"),
    ("mask_diagonal", "NaN in the weights of query row 0 (every key of the row masked"),
    ("forgot_eval", "module.training is True"),
])
def test_bug_verdicts_say_what_was_measured(lab, key, expected):
    setup, x = lab
    assert x.shape[1] == 10
    assert expected in catalogue.run_pitfall(key, setup, x).buggy.verdict


def test_the_nan_verdict_says_row_and_position_for_one(lab):
    """The diagonal bug empties one query row (row 0 has no earlier key): singular words for the one row."""
    setup, x = lab
    buggy = catalogue.run_pitfall("mask_diagonal", setup, x).buggy
    assert buggy.details["nan_rows"] == [0] and buggy.details["nan_outputs"] == [0]
    assert buggy.verdict == ("NaN in the weights of query row 0 (every key of the row masked: softmax of all −∞ is "
                             "0/0) and in the output at position 0")


def test_the_nan_verdict_says_rows_and_positions_for_several():
    """A mask that hides the diagonal and one key behind it empties query rows 0 and 1."""
    setup, x = lab_for(small_config())
    module = workbench.copy_weights(mha(), bugs.MaskIncludesDiagonal(32, 32, 64, 0.0, 4)).eval()
    module.mask = torch.triu(torch.ones(64, 64), diagonal=-1)  # (ctx, ctx): row i hides keys i − 1 on
    version = detectors.detect_nan(module, x, setup)
    assert version.verdict == ("NaN in the weights of query rows 0, 1 (every key of those rows masked: softmax of "
                               "all −∞ is 0/0) and in the outputs at positions 0, 1")


@pytest.mark.parametrize(("n", "moved", "unchanged"), [
    (2, "moves the output at position 0", "leaves position 0 exactly unchanged"),
    (3, "moves the outputs at positions 0, 1", "leaves positions 0, 1 exactly unchanged"),  # two: listed
    (4, "moves the outputs at positions 0, 1, 2", "leaves positions 0 … 2 exactly unchanged"),
])
def test_the_leak_verdict_says_position_for_one_and_positions_for_several(n, moved, unchanged):
    setup, _ = lab_for(small_config())
    buggy = workbench.copy_weights(mha(), bugs.MaskedFillWithoutUnderscore(32, 32, 64, 0.0, 4)).eval()
    assert detectors.detect_leak(buggy, inputs(n), setup).verdict.endswith(moved)
    assert detectors.detect_leak(mha(), inputs(n), setup).verdict.endswith(unchanged)
    assert leak.leak_report(mha(causal=False), inputs(n), 1)["verdict"] == "leaks into position 0"


def test_softmax_over_dim_minus_2_makes_columns_sum_to_1(lab):
    setup, x = lab
    buggy = catalogue.run_pitfall("softmax_dim", setup, x).buggy
    weights = buggy.observation.maps["weights"].astype(np.float64)  # (h, n, n)
    assert np.allclose(weights.sum(axis=-2), 1.0, atol=1e-5)
    assert not np.allclose(weights.sum(axis=-1), 1.0, atol=1e-2)
    assert "columns that sum to 1" in buggy.verdict


def test_the_row_sum_detector_counts_a_nan_row_as_not_summing_to_1(lab):
    """The detector applies the check's rule (checks.sums_to_one): a NaN row sum is not 1."""
    setup, x = lab
    pitfall = PITFALLS["mask_diagonal"]  # query row 0 has no key left: its weights are NaN
    version = detectors.detect_row_sums(pitfall.build(pitfall.correct(setup), setup), x, setup)
    assert version.fired is True
    assert version.verdict.startswith("rows do not sum to 1: row sums range 1.000 … 1.000, and some are NaN")


def test_scale_bug_changes_the_ratio_and_the_entropy(lab):
    setup, x = lab
    result = catalogue.run_pitfall("scale_d_out", setup, x)
    assert result.correct.details["ratio"] == pytest.approx(1 / np.sqrt(setup.head_dim), rel=1e-5)
    assert result.buggy.details["ratio"] == pytest.approx(1 / np.sqrt(setup.d_out), rel=1e-5)
    assert result.buggy.details["entropy"].mean() > result.correct.details["entropy"].mean()  # flatter softmax


def test_mask_with_diagonal_0_gives_nan_in_row_0_only(lab):
    setup, x = lab
    buggy = catalogue.run_pitfall("mask_diagonal", setup, x).buggy
    assert buggy.details == {"nan_rows": [0], "nan_outputs": [0]}
    assert np.isnan(buggy.observation.maps["weights"][:, 0]).all()
    assert np.isfinite(buggy.observation.output[1:]).all()


@pytest.mark.parametrize(("key", "message"), [
    ("view_contiguous", "view size is not compatible with input tensor's size and stride"),
    ("mask_not_sliced", "The size of tensor a (10) must match the size of tensor b (64) at non-singleton dimension 3"),
])
def test_error_texts_are_pytorchs_own(lab, key, message):
    setup, x = lab
    buggy = catalogue.run_pitfall(key, setup, x).buggy
    assert message in buggy.observation.error
    assert buggy.verdict == f"RuntimeError: {buggy.observation.error}"
    with pytest.raises(RuntimeError) as raised:  # the same text PyTorch raises when the buggy module is called
        PITFALLS[key].build(workbench.build_correct(setup), setup)(x)
    assert str(raised.value) == buggy.observation.error


def test_view_bug_is_latent_with_one_head():
    """With one head the transposed tensor happens to be viewable: the bug survives small tests."""
    setup, x = lab_for(small_config(num_heads=1))
    result = catalogue.run_pitfall("view_contiguous", setup, x)
    assert result.buggy.fired is False and result.buggy.verdict.startswith("runs")


def test_unsliced_mask_is_latent_when_the_text_fills_the_context():
    setup, x = lab_for(small_config(context_length=10))
    assert x.shape[1] == 10
    assert catalogue.run_pitfall("mask_not_sliced", setup, x).buggy.fired is False


def test_scale_bug_has_no_effect_with_one_head():
    setup, x = lab_for(small_config(num_heads=1))
    buggy = catalogue.run_pitfall("scale_d_out", setup, x).buggy
    assert buggy.fired is False and "no effect here" in buggy.verdict


# ============================== today's attention and the KV cache ==============================


@pytest.mark.parametrize(("key", "expected"), [
    ("gqa_repeat", "query head 1 attends with K/V group 1, not 0 (head // group_size): heads → groups 0→0, 1→1, 2→0, "
                   "3→1"),
    ("window_off_by_one", "a window of 4, but sliding_window_size is 3"),
    ("rope_queries_only", "the keys are not rotated"),
    ("rope_values", "the values carry a position"),
    ("cache_position", "sequence 1, token 5: the cached output differs"),
    ("cache_reset", "sequence 2, tokens 0 … 4 (the prefill)"),
    ("cache_too_little", "the cache keeps too little: cache_k holds 4 tokens after 5"),
])
def test_todays_bug_verdicts_say_what_was_measured(lab, key, expected):
    setup, x = lab
    result = catalogue.run_pitfall(key, setup, x)
    assert expected in result.buggy.verdict
    assert result.correct.fired is False
    if key == "gqa_repeat":  # the map shows head 1, the first the tiling moves to another group
        assert PITFALLS[key].shown_head(setup) == 1
        assert PITFALLS[key].explained(setup).endswith("The map shows head 1, the first head the pairing changes.")
    if PITFALLS[key].figure == "cache":  # the verdict names its sequence as the chart beside it labels it
        named = re.match(r"sequence (\S+), ", result.buggy.verdict).group(1)
        first_wrong = next(label for label, value in result.buggy.details["steps"] if not value <= 1e-3)  # or NaN
        assert first_wrong.startswith(f"{named}: "), (result.buggy.verdict, result.buggy.details["steps"])
    if key == "cache_too_little":  # the 5-token prefill already shows it, and the words say so
        assert result.buggy.details["steps"][0][0] == "1: 0…4" and result.buggy.details["steps"][0][1] > 1e-3
        assert "a prefill longer than 4 tokens" in PITFALLS[key].explained(setup)


def test_the_reset_bug_on_a_text_as_long_as_the_context_says_what_happens_in_words(lab):
    """6 tokens in a context of 6: the second sequence's prefill would take mask rows past the context."""
    setup, x = lab
    x = x[:, :6]  # (1, 6, d_in)
    setup = dataclasses.replace(setup, context_length=6)
    pitfall = PITFALLS["cache_reset"]
    buggy = pitfall.detect(pitfall.build(pitfall.correct(setup), setup), x, setup)
    assert buggy.fired is True
    assert buggy.verdict.startswith(
        "sequence 2, its prefill (tokens 0 … 2): after reset_cache() ptr_current_pos is still 6, not 0 — this "
        "prefill takes the causal mask's rows 6 … 8"), buggy.verdict
    assert "the mask has 6 rows (the context length), no rows 6 … 8, so the forward cannot run" in buggy.verdict
    assert [label for label, value in buggy.details["steps"] if math.isnan(value)] == ["2: 0…2"]  # the chart's bar
    assert "RuntimeError" not in buggy.verdict and "size of tensor" not in buggy.verdict


def test_the_correct_gqa_pairs_head_h_with_group_h_over_group_size(lab):
    """Written independently: per-head K/V weights expanded from the groups, then the book's MHA formula."""
    setup, x = lab
    module = PITFALLS["gqa_repeat"].correct(setup)
    h, hd, g = setup.num_heads, setup.head_dim, setup.num_kv_groups
    with torch.no_grad():
        q = module.W_query(x).view(1, -1, h, hd).transpose(1, 2)  # (1, h, n, hd)
        groups = torch.arange(h) // (h // g)  # head -> its group
        k = module.W_key(x).view(1, -1, g, hd).transpose(1, 2)[:, groups]  # (1, h, n, hd)
        v = module.W_value(x).view(1, -1, g, hd).transpose(1, 2)[:, groups]  # (1, h, n, hd)
        n = x.shape[1]
        scores = (q @ k.transpose(2, 3) / hd**0.5).masked_fill(torch.ones(n, n).triu(1).bool(), -torch.inf)
        context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(1, n, -1)  # (1, n, d_out)
        assert torch.allclose(module(x), module.out_proj(context), atol=1e-6)
        buggy = PITFALLS["gqa_repeat"].build(module, setup)
        assert not torch.allclose(buggy(x), module(x), atol=1e-3)


def test_the_correct_window_keeps_exactly_w_keys_per_row(lab):
    setup, x = lab
    weights = catalogue.run_pitfall("window_off_by_one", setup, x).correct.observation.maps["weights"]  # (h, n, n)
    n, window = weights.shape[-1], setup.sliding_window_size
    diff = np.arange(n)[:, None] - np.arange(n)[None, :]
    assert ((weights > 0) == ((diff >= 0) & (diff < window))).all()  # > 0 exactly inside the band


@pytest.mark.parametrize(("n", "window"), [(6, 5), (7, 6), (2, 1), (6, 4), (6, 1), (10, 3)])
def test_the_window_bug_is_detected_whenever_the_correct_window_hides_a_key(lab, n, window):
    """W ≤ n − 1 (W = n − 1 included): the correct window hides key i − W of the last query, the bug shows it."""
    setup, x = lab
    setup = dataclasses.replace(setup, sliding_window_size=window)
    result = catalogue.run_pitfall("window_off_by_one", setup, x[:, :n])
    correct, buggy = (version.observation.maps["weights"] for version in (result.correct, result.buggy))  # (h, n, n)
    assert (correct[:, n - 1, n - 1 - window] == 0).all() and (buggy[:, n - 1, n - 1 - window] > 0).all()
    assert result.correct.fired is False and f"a window of exactly {window}" in result.correct.verdict
    sees = {1: "only itself", 2: "keys i − 1, i"}.get(window, f"keys i − {window - 1} … i")
    assert result.correct.verdict.startswith(f"query i sees {sees}: "), result.correct.verdict
    if window < n - 1:  # the bug's window of W + 1 shows as a band (at W = n − 1 it hides only the future)
        said = {1: "keys i − 1, i"}.get(window, f"keys i − {window} … i")
        assert result.buggy.verdict.startswith(f"query i sees {said}: a window of {window + 1}"), result.buggy.verdict
    assert result.buggy.fired is True, result.buggy.verdict
    assert f"sliding_window_size is {window}" in result.buggy.verdict
    assert "diff >= W, not diff > W" in result.buggy.verdict and "hides nothing" not in result.buggy.verdict


@pytest.mark.parametrize(("n", "window"), [(6, 6), (6, 7), (2, 2), (7, 40)])
def test_a_window_as_long_as_the_text_hides_nothing_in_either_version_and_says_so(lab, n, window):
    setup, x = lab
    setup = dataclasses.replace(setup, sliding_window_size=window)
    result = catalogue.run_pitfall("window_off_by_one", setup, x[:, :n])
    said = f"{n} tokens: no key is {window} or more behind a query, so a window of {window} hides nothing here"
    for version in (result.correct, result.buggy):
        assert version.fired is False and version.verdict == said
        assert (version.observation.maps["weights"][:, np.tril_indices(n)[0], np.tril_indices(n)[1]] > 0).all()


def test_the_lab_gets_a_kv_grouping_and_a_window_from_the_settings():
    assert [workbench.lab_kv_groups(h, None) for h in (1, 2, 4, 12)] == [1, 1, 2, 6]
    assert workbench.lab_kv_groups(12, 3) == 3 and workbench.lab_kv_groups(12, 5) == 6
    assert workbench.lab_setup(small_config(), 6).sliding_window_size == workbench.DEFAULT_WINDOW


@pytest.mark.parametrize(("heads", "text"), [(2, TEXT), (1, "Hi")])  # 1 head on 1 token: a (1, 1) score matrix
def test_repeat_is_harmless_with_one_kv_group(heads, text):
    setup, x = lab_for(small_config(num_heads=heads), text)
    result = catalogue.run_pitfall("gqa_repeat", setup, x)
    assert result.buggy.fired is False and "no effect here" in result.buggy.verdict
    assert result.correct.details["groups"] == result.buggy.details["groups"] == [0] * heads
    pitfall = PITFALLS["gqa_repeat"]  # the words name the head the page draws, and say no head's pairing changes
    assert pitfall.shown_head(setup) == heads - 1
    assert f"The map shows head {heads - 1}: with 1 K/V group" in pitfall.explained(setup)
    assert "the first head the pairing changes" not in pitfall.explained(setup)


@pytest.mark.parametrize("key", ["gqa_repeat", "window_off_by_one", "rope_queries_only", "rope_values",
                                 "cache_position", "cache_reset", "cache_too_little"])
def test_check_module_passes_the_labs_correct_code_and_names_the_bug(lab, key):
    from attnviz import checks

    setup, _ = lab
    pitfall = PITFALLS[key]
    correct = pitfall.correct(setup)
    assert [c.rule for c in checks.check_module(correct) if c.status == "fail"] == []
    failed = {c.rule for c in checks.check_module(pitfall.build(correct, setup)) if c.status == "fail"}
    expected = {"window_off_by_one": {"mask-convention"}, "rope_queries_only": {"rotary-placement"},
                "rope_values": {"rotary-placement"}, "cache_position": {"kv-cache"}, "cache_reset": {"kv-cache"},
                "cache_too_little": {"kv-cache"}}
    assert failed == expected.get(key, set())  # a tiled pairing is still attention, and no rule names it


def test_the_cache_figure_has_a_bar_per_cached_forward(lab):
    setup, x = lab
    result = catalogue.run_pitfall("cache_reset", setup, x)
    fig = pitfall_figures.extra_figure(result, [f"t{i}" for i in range(10)])
    correct, buggy = fig.data
    assert list(correct.x) == ["1: 0…4", "1: 5", "1: 6", "1: 7", "1: 8…9", "2: 0…4", "2: 5", "2: 6", "2: 7",
                               "2: 8…9"]  # the last two in one forward: a chunk after the cache
    assert max(correct.y) <= 1e-5 and max(buggy.y[:5]) <= 1e-5 and buggy.y[5] > 1e-3  # only sequence 2's prefill
    # bars too small to see say their size (round-off); a visible one needs no label
    assert all(text == "0" or float(text) == pytest.approx(y, rel=0.5) for text, y in zip(correct.text, correct.y))
    assert buggy.text[5] == ""  # sequence 2's prefill, visible
    # two neighbours' size labels stand along their bars, not side by side in each other's way ("7e-077e-07")
    assert correct.textangle == buggy.textangle == -90
    # the title's lines fit a chart as narrow as a version's column (the page beside the sidebar at 900 px is wider)
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > 1 and " ".join(lines).endswith("(sequence 1, then sequence 2 after the reset)")
    assert all(margins.title_px(line, 13) + margins.TITLE_INSET_PX <= figures.PAIR_MAP_PX for line in lines)


@pytest.mark.parametrize("key", ["rope_queries_only", "rope_values"])
def test_a_rotary_series_too_small_to_see_says_its_size_in_the_legend(lab, key):
    setup, x = lab
    result = catalogue.run_pitfall(key, setup, x)
    fig = pitfall_figures.extra_figure(result, [f"t{i}" for i in range(10)])
    for trace in fig.data:
        largest = float(np.max(np.abs(trace.y)))
        if 0 < largest < pitfall_figures.TOO_SMALL_TO_SEE:  # round-off: no bar to see, so the entry says its size
            assert trace.name.endswith(f" (≤ {largest:.0e})"), trace.name
        else:
            assert "≤" not in trace.name, trace.name
    correct = fig.data[0]  # the correct rotary's score depends on i − j only: round-off, not a bar
    assert correct.name.startswith("correct: score off its diagonal (≤ ")
    assert "≤" not in fig.data[1 if key == "rope_queries_only" else 2].name  # the bug's own series is a bar


ROTARY = ["rope_queries_only", "rope_values"]


@pytest.mark.parametrize(("d_out", "heads"), [(36, 12), (3, 1)])
def test_rotary_pitfalls_at_an_odd_head_dim_say_why_instead_of_raising(d_out, heads):
    setup, x = lab_for(small_config(d_in=36, d_out=d_out, num_heads=heads))
    assert setup.head_dim == 3
    for key in ROTARY:
        why = PITFALLS[key].unavailable(setup)
        assert why is not None and why.startswith("Rotary positions need an even head_dim (it is 3: "), key
        with pytest.raises(catalogue.PitfallUnavailableError) as raised:
            catalogue.run_pitfall(key, setup, x)
        assert str(raised.value) == why  # the message, not PyTorch's shape error from both versions
    for key in PITFALLS.keys() - set(ROTARY):  # every other pitfall runs at these sizes
        assert PITFALLS[key].unavailable(setup) is None, key
    assert catalogue.run_pitfall("masked_fill", setup, x).buggy.fired


def test_the_labs_rotary_class_rotates_as_the_apps_rotary_attention_does():
    """The lab's RotaryAttention gives the app's rotary MultiHeadAttention's outputs on the same weights, and at an
    odd head_dim it is refused when built, naming the cause, as the app's rotary code is: its own copy of the angles
    built a table one dimension too wide, and its forward raised PyTorch's shape error."""
    with seeded(0):
        lab = modern.RotaryAttention(32, 32, 16, 0.0, 4).eval()
        app = MultiHeadAttention(32, 32, 16, 0.0, 4, rope_base=10_000).eval()
    for name in ("W_query", "W_key", "W_value", "out_proj"):
        getattr(app, name).load_state_dict(getattr(lab, name).state_dict())
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))  # (b, n, d_in)
    with torch.no_grad():
        torch.testing.assert_close(lab(x), app(x))  # (b, n, d_out) each
    with pytest.raises(ValueError, match=r"^Rotary positions rotate pairs of dimensions: head_dim must be even, got 3"):
        modern.RotaryAttention(36, 36, 64, 0.0, 12)


BOOKS_CLASSES = [  # the lab's class built as the book builds its bonus class, and the app's book-style class
    (lambda: modern.GroupedQueryAttention(32, 32, 0.1, 4, 2),
     lambda: modern_attention.GroupedQueryAttention(32, 32, 0.1, 4, 2)),
    (lambda: modern.GroupedQueryAttention(d_in=32, d_out=32, dropout=0.0, num_heads=4, num_kv_groups=1,
                                          dtype=torch.float64, qkv_bias=True),
     lambda: modern_attention.GroupedQueryAttention(32, 32, 0.0, 4, 1, torch.float64, True)),
    (lambda: modern.MultiHeadAttentionWithSWA(32, 32, 0.1, 4, False, 3),
     lambda: modern_attention.MultiHeadAttentionWithSWA(32, 32, 0.1, 4, False, 3)),
    (lambda: modern.MultiHeadAttentionWithSWA(32, 32, 0.0, 4),  # no window: every earlier key
     lambda: MultiHeadAttention(32, 32, 16, 0.0, 4)),
    (lambda: modern.CachedMultiHeadAttention(32, 32, 16, 0.1, 4, qkv_bias=True),
     lambda: MultiHeadAttention(32, 32, 16, 0.1, 4, qkv_bias=True)),
]


@pytest.mark.parametrize("built", BOOKS_CLASSES, ids=["gqa", "gqa-keywords-dtype-bias", "swa", "swa-no-window",
                                                      "kv-cache"])
def test_the_labs_bonus_classes_take_the_books_arguments_and_seeded_give_the_books_weights(built):
    """A learner copies the lab's GroupedQueryAttention or MultiHeadAttentionWithSWA into the book's bonus notebook
    (ch04/04_gqa, ch04/06_swa) or the cache class into ch04/03_kv-cache: the book's call builds it — its arguments
    in its order, dtype and qkv_bias where the book has them — and after ``torch.manual_seed`` it holds the weights
    the book's class draws (the parameters created in the book's order, GQA's out_proj without a bias), as the app's
    book-style classes do, and gives their outputs."""
    (lab_class, book_class) = built
    with seeded(123):
        lab = lab_class().eval()
    with seeded(123):
        book = book_class().eval()
    lab_weights = dict(lab.named_parameters())
    assert list(lab_weights) == [name for name, _ in book.named_parameters()]  # the book's order
    for name, tensor in book.named_parameters():
        torch.testing.assert_close(lab_weights[name], tensor, rtol=0, atol=0)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1)).to(lab.W_query.weight.dtype)  # (b, n, d_in)
    with torch.no_grad():
        torch.testing.assert_close(lab(x), book(x))  # (b, n, d_out) each


def test_rotary_pitfalls_run_at_an_even_head_dim(lab):
    setup, x = lab
    assert setup.head_dim == 8
    for key in ROTARY:
        assert PITFALLS[key].unavailable(setup) is None
        result = catalogue.run_pitfall(key, setup, x)
        assert result.buggy.fired and not result.correct.fired


def test_one_of_a_kind_is_said_in_the_singular(lab):
    """"1 token", "1 head", "1 K/V group" — not "1 tokens" — in the verdicts the lab computes."""
    setup, x = lab
    result = catalogue.run_pitfall("window_off_by_one", setup, x[:, :1])
    assert result.buggy.verdict.startswith("1 token: no key is 3 or more behind a query")
    result = catalogue.run_pitfall("cache_position", setup, x[:, :2])
    assert "a prefill of 1 token, then 1 token one by one" in result.correct.verdict
    result = catalogue.run_pitfall("cache_position", setup, x[:, :5])
    assert "a prefill of 2 tokens, then 1 token one by one and the last 2 in one forward" in result.correct.verdict
    one_head = dataclasses.replace(setup, num_heads=1, num_kv_groups=1)
    result = catalogue.run_pitfall("gqa_repeat", one_head, x)
    assert "with 1 K/V group for 1 head," in result.buggy.verdict
    result = catalogue.run_pitfall("gqa_repeat", dataclasses.replace(setup, num_kv_groups=4), x)
    assert "with 4 K/V groups for 4 heads," in result.buggy.verdict


# ============================== the causality leak detector ==============================


@pytest.mark.parametrize("seed", [0, 1, 123])
@pytest.mark.parametrize("j", [1, 4, 7, 11])
def test_correct_causal_mha_never_leaks(seed, j):
    module = mha(seed=seed)
    report = leak.leak_report(module, inputs(12, seed=seed), j, seed=seed)
    assert report["leaked"] == [] and report["verdict"] == "no leak"
    assert (report["delta"][:j] == 0).all()  # exactly 0, not approximately
    assert report["delta"][j] > 0  # the perturbed token itself moves


@pytest.mark.parametrize("j", [1, 5, 11])
def test_masked_fill_without_underscore_leaks_into_every_earlier_position(j):
    correct = mha()
    buggy = workbench.copy_weights(correct, bugs.MaskedFillWithoutUnderscore(32, 32, 64, 0.0, 4)).eval()
    report = leak.leak_report(buggy, inputs(12), j)
    assert report["leaked"] == list(range(j))
    assert report["verdict"] == ("leaks into position 0" if j == 1 else
                                 "leaks into positions " + ", ".join(str(p) for p in range(j)))


def test_no_causal_mask_leaks():
    report = leak.leak_report(mha(causal=False), inputs(8), 3)
    assert report["leaked"] == [0, 1, 2]
    assert report["verdict"] == "leaks into positions 0, 1, 2"


def test_softmax_over_the_wrong_dim_also_leaks():
    """Column sums run over later queries, so a later token changes earlier weights."""
    buggy = workbench.copy_weights(mha(), bugs.SoftmaxOverWrongDim(32, 32, 64, 0.0, 4)).eval()
    assert leak.leak_report(buggy, inputs(8), 5)["leaked"] == [0, 1, 2, 3, 4]


def test_leak_report_accepts_a_factory_and_2d_inputs():
    report = leak.leak_report(lambda: mha(causal=False), inputs(6)[0].numpy(), 2)
    assert report["leaked"] == [0, 1] and report["delta"].shape == (6,)


def test_leak_report_at_position_0_and_bad_positions():
    assert leak.leak_report(mha(), inputs(5), 0)["verdict"].startswith("no leak")
    with pytest.raises(ValueError, match="j must be a position"):
        leak.leak_report(mha(), inputs(5), 5)


def test_active_dropout_does_not_look_like_a_leak():
    """Both runs draw the same dropout masks, so only the perturbation differs."""
    torch.manual_seed(123)
    module = MultiHeadAttention(32, 32, 64, 0.5, 4).train()
    assert leak.leak_report(module, inputs(10), 6)["leaked"] == []


def test_nan_outputs_are_reported_not_counted_as_leaks():
    buggy = workbench.copy_weights(mha(), bugs.MaskIncludesDiagonal(32, 32, 64, 0.0, 4)).eval()
    report = leak.leak_report(buggy, inputs(8), 4)
    assert report["leaked"] == [] and report["nan_positions"] == [0]
    assert report["verdict"].startswith("no leak among the positions that can be compared")
    assert report["verdict"].endswith("; the output is NaN at position 0, which cannot be compared")


def test_leak_check_on_a_bug_that_raises_gives_the_error(lab):
    setup, x = lab
    report = catalogue.leak_check(setup, x, 3, causal=True, bug="view_contiguous")
    assert "view size is not compatible" in report["error"]
    assert catalogue.leak_check(setup, x, 3, causal=True)["verdict"] == "no leak"
    assert catalogue.leak_check(setup, x, 3, causal=False)["leaked"] == [0, 1, 2]



def test_leak_check_on_a_bug_that_cannot_run_at_these_sizes_runs_the_books_code():
    setup, x = lab_for(small_config(d_in=36, d_out=36, num_heads=12))  # head_dim 3: no rotary
    for causal in (True, False):
        book = catalogue.leak_check(setup, x, 3, causal=causal)
        for key in ROTARY:
            report = catalogue.leak_check(setup, x, 3, causal=causal, bug=key)
            assert "error" not in report and report["bug"] is None
            assert report["verdict"] == book["verdict"] and np.array_equal(report["delta"], book["delta"])
    assert catalogue.leak_check(setup, x, 3, causal=True, bug="masked_fill")["bug"] == "masked_fill"


@settings(max_examples=25, deadline=None)
@given(heads=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([1, 3, 8]), n=st.integers(2, 20),
       data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_property_causal_mha_never_leaks(heads, head_dim, n, data, seed):
    j = data.draw(st.integers(0, n - 1))
    torch.manual_seed(seed)
    module = MultiHeadAttention(5, heads * head_dim, 32, 0.0, heads).eval()
    x = torch.randn(1, n, 5, generator=torch.Generator().manual_seed(seed))  # (1, n, 5)
    report = leak.leak_report(module, x, j, seed=seed)
    assert report["leaked"] == []
    assert (report["delta"][:j] == 0).all()


def test_seeded_results_are_the_same_while_other_threads_draw_from_torchs_rng(lab):
    """Module creation and dropout forwards hold seeded(): another thread drawing from the global RNG
    (inside its own seeded section, as the app's code does) cannot change the lab's weights or masks."""
    setup, x = lab
    alone = catalogue.run_pitfall("forgot_eval", setup, x)
    stop = threading.Event()

    def draw() -> None:
        while not stop.is_set():
            with seeded(7):
                torch.rand(4096)

    drawer = threading.Thread(target=draw)
    drawer.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            results = list(pool.map(lambda _: catalogue.run_pitfall("forgot_eval", setup, x), range(6)))
    finally:
        stop.set()
        drawer.join()
    for result in results:
        assert np.array_equal(result.buggy.details["call_delta"], alone.buggy.details["call_delta"])
        assert np.array_equal(result.buggy.observation.output, alone.buggy.observation.output)
        assert np.array_equal(result.correct.observation.output, alone.correct.observation.output)


def test_eval_mode_forwards_do_not_wait_for_torchs_rng(lab):
    """An eval-mode forward draws nothing: the lab runs it while another session holds seeded()."""
    setup, x = lab
    correct = workbench.build_correct(setup)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with seeded():
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        observation = pool.submit(detectors.observe, correct, x).result(timeout=10)
        report = pool.submit(leak.leak_report, correct, x, 4).result(timeout=10)
    finally:
        release.set()
        holder.join()
        pool.shutdown()
    assert observation.error is None and report["verdict"] == "no leak"


# ============================== set-up: caps and single-head variants ==============================


def test_long_texts_are_capped_at_64_tokens_and_it_is_said():
    config = small_config(context_length=256)
    trace = pipeline.run("word " * 100, config)
    setup = workbench.lab_setup(config, trace.n)
    assert workbench.lab_inputs(trace.embeddings["input"]).shape == (1, 64, 32)
    assert any("first 64" in note for note in setup.notes)
    assert not workbench.lab_setup(config, 10).notes


@pytest.mark.parametrize(("d_out", "wanted", "expected"), [(768, 12, 12), (768, 1, 2), (2, 1, 2), (1, 1, 1),
                                                           (7, 4, 7), (768, 5, 4)])
def test_lab_heads_picks_a_valid_head_count(d_out, wanted, expected):
    assert workbench.lab_heads(d_out, wanted) == expected


def test_single_head_variant_uses_mha_with_a_valid_head_count_and_says_so():
    setup = workbench.lab_setup(small_config(variant="causal", num_heads=1), 6, wanted_heads=8)
    assert (setup.d_out, setup.num_heads, setup.head_dim) == (32, 8, 4)
    assert any("single head" in note and "8 heads" in note for note in setup.notes)


def test_wrapper_keeps_its_heads_and_says_the_lab_uses_mha():
    setup = workbench.lab_setup(small_config(variant="mha_wrapper", num_heads=2), 6, wanted_heads=8)
    assert (setup.d_out, setup.num_heads) == (32, 2)  # the wrapper's own heads, not the single-head fallback
    assert any(note.startswith("The lab runs MultiHeadAttention (3.6.2) with the d_out (32)") and "2 heads" in note
               for note in setup.notes)
    assert not [note for note in workbench.lab_setup(small_config(), 6).notes if "The lab runs" in note]  # MHA itself


def sized(**overrides) -> AttentionConfig:
    """36 wide: 1, 2, 3, 4, 6, 9 and 12 heads all divide it."""
    return small_config(**{"d_in": 36, "d_out": 36, **overrides})


@pytest.mark.parametrize(("overrides", "groups", "said"), [
    ({"variant": "gqa", "num_heads": 12, "num_kv_groups": 4}, 4, None),  # the sidebar's value shows the bug
    ({"variant": "gqa", "num_heads": 12}, 4, None),  # GQA's default: 4 groups of 3, as the sidebar says
    ({"variant": "gqa", "num_heads": 12, "num_kv_groups": 12},
     6, "The grouped-query bug needs K/V groups shared by more than one head: the sidebar's 12 K/V groups give each "
        "of the 12 heads its own, so repeat and repeat_interleave pair them alike. The lab uses 6 groups of 2."),
    ({"variant": "gqa", "num_heads": 12, "num_kv_groups": 1},
     6, "The grouped-query bug needs more than one K/V group: with the sidebar's 1 every head shares it, so repeat "
        "and repeat_interleave pair them alike. The lab uses 6 groups of 2."),
    ({"variant": "mqa", "num_heads": 12},
     6, "Multi-query attention (bonus: one K/V head) shares 1 K/V head among all 12 heads; the grouped-query bug "
        "needs more than one K/V group (with one, repeat and repeat_interleave pair the heads alike). The lab uses 6 "
        "groups of 2."),
    ({"variant": "mha", "num_heads": 12, "num_kv_groups": 4},
     6, "Multi-head attention (3.6.2) gives each head its own K/V head; the grouped-query bug needs K/V groups "
        "shared by more than one head. The lab uses 6 groups of 2."),
    ({"variant": "gqa", "num_heads": 9, "num_kv_groups": 9}, 3, "The lab uses 3 groups of 3."),
    ({"variant": "gqa", "num_heads": 3, "num_kv_groups": 3},
     1, "The grouped-query bug needs K/V groups shared by more than one head, and more than one group: 3 heads "
        "cannot be split so. The lab uses 1 K/V group, where the bug has no effect; choose a head count such as 4, "
        "6 or 8 to see it."),
])
def test_the_gqa_bug_uses_the_sidebars_kv_groups_or_says_which_it_uses(overrides, groups, said):
    config = sized(**overrides)
    setup = catalogue.setup_for(config, 6, config.num_heads, "gqa_repeat")
    assert setup.num_kv_groups == groups
    notes = [note for note in setup.notes if "K/V" in note and "grouped-query bug" in note]
    assert notes == [] if said is None else len(notes) == 1 and said in notes[0], notes
    assert not [note for note in catalogue.setup_for(config, 6, config.num_heads, "masked_fill").notes
                if "grouped-query bug" in note]  # said only where it matters
    result = catalogue.run_pitfall("gqa_repeat", setup, inputs(6, d=36))
    assert result.buggy.fired is (groups > 1)


@pytest.mark.parametrize(("bug", "expected"), [
    ("none", "MultiHeadAttention(d_in=36, d_out=36, context_length=64, dropout=0.1, num_heads=12) · head_dim 3"),
    ("masked_fill", "MultiHeadAttention(d_in=36, d_out=36, context_length=64, dropout=0.1, num_heads=12) · "),
    ("gqa_repeat", "GroupedQueryAttention(d_in=36, d_out=36, dropout=0.1, num_heads=12, num_kv_groups=4) · "
                   "head_dim 3"),  # the book's bonus classes take no context_length
    ("window_off_by_one", "MultiHeadAttentionWithSWA(d_in=36, d_out=36, dropout=0.1, num_heads=12, "
                          "sliding_window_size=3) · head_dim 3"),
    ("rope_values", "RotaryAttention(d_in=36, d_out=36, context_length=64, dropout=0.1, num_heads=12) · "),
    ("cache_reset", "CachedMultiHeadAttention(d_in=36, d_out=36, context_length=64, dropout=0.1, num_heads=12) · "),
])
def test_the_caption_names_the_class_the_chosen_bug_runs(bug, expected):
    config = sized(variant="gqa", num_heads=12, num_kv_groups=4)
    setup = catalogue.setup_for(config, 6, 12, bug)
    assert catalogue.describe(setup, bug).startswith(expected)
    if bug in PITFALLS and PITFALLS[bug].unavailable(setup) is None:  # the rotary bugs cannot run at head_dim 3
        assert type(PITFALLS[bug].correct(setup)).__name__ == expected.split("(")[0]  # the class that runs
    shown = [note for note in setup.notes if "heads of Grouped-query attention" in note]
    assert len(shown) == 1 and shown[0].startswith(f"The lab runs {expected.split('(')[0]} ")


def test_dropout_p_0_is_replaced_and_said():
    setup = workbench.lab_setup(small_config(dropout=0.0), 6)
    assert setup.dropout == workbench.DEFAULT_DROPOUT
    assert any("Dropout p" in note for note in setup.notes)


# ============================== figures ==============================


def test_weights_figure_draws_what_the_code_masked(lab):
    setup, x = lab
    result = catalogue.run_pitfall("masked_fill", setup, x)
    tokens = [f"t{i}" for i in range(10)]
    upper = np.triu_indices(10, k=1)
    correct = cells_shown(pitfall_figures.weights_figure(result.correct.observation, tokens))
    buggy = cells_shown(pitfall_figures.weights_figure(result.buggy.observation, tokens))
    assert np.isnan(correct[upper]).all()  # masked: grey
    assert np.isfinite(buggy[upper]).all() and (buggy[upper] > 0).all()  # the mask did nothing


def test_weights_figure_writes_nan_on_computed_nan_cells(lab):
    setup, x = lab
    buggy = catalogue.run_pitfall("mask_diagonal", setup, x).buggy
    fig = pitfall_figures.weights_figure(buggy.observation, [f"t{i}" for i in range(10)])
    nan_text = [trace for trace in fig.data if trace.name == "NaN"]
    assert len(nan_text) == 1 and set(nan_text[0].y) == {0} and sorted(nan_text[0].x) == list(range(10))


def test_weights_figure_labels_only_the_key_tokens_its_column_holds():
    """The lab's map is drawn in a column figures.PAIR_MAP_PX wide (the page puts the two versions one above the other
    where two do not fit): its turned key-token labels are as many as that column's plot holds side by side, so they
    never overlap."""
    text = " ".join(f"w{i}" for i in range(30))
    setup, x = lab_for(small_config(), text)
    buggy = catalogue.run_pitfall("softmax_dim", setup, x).buggy
    tokens = [f"t{i}" for i in range(x.shape[1])]
    fig = pitfall_figures.weights_figure(buggy.observation, tokens)
    plot_width = figures.PAIR_MAP_PX - fig.layout.margin.l - fig.layout.margin.r
    shown = len(fig.layout.xaxis.ticktext)
    assert x.shape[1] >= 30 and 2 <= shown < x.shape[1]
    assert shown * figures.COLUMN_LABEL_PX <= plot_width


def test_leak_figure_colours_leaks_and_labels_exact_zeros():
    report = leak.leak_report(mha(causal=False), inputs(6), 3)
    fig = pitfall_figures.leak_figure(report, ["a", "b", "a", "c", "d", "e"])
    bar = fig.data[0]
    assert len(set(bar.x)) == 6  # repeated tokens keep their own bar
    assert list(bar.marker.color[:4]) == [pitfall_figures.LEAK_COLOR] * 3 + [pitfall_figures.PERTURBED_COLOR]
    correct = pitfall_figures.leak_figure(leak.leak_report(mha(), inputs(6), 3), list("abcdef"))
    assert list(correct.data[0].text[:3]) == ["0", "0", "0"]


@pytest.mark.parametrize(("causal", "j"), [(False, 3), (True, 3), (True, 0), (True, 5)])
def test_leak_figure_legend_says_what_every_colour_drawn_means(causal, j):
    """A student reads every bar's colour off the legend: the blue bars after the perturbed token too, and no entry
    for a colour the chart does not draw (no red where nothing leaked); the margin under the bars holds its rows."""
    report = leak.leak_report(mha(causal=causal), inputs(6), j)
    fig = pitfall_figures.leak_figure(report, list("abcdef"))
    bars = [trace for trace in fig.data if trace.type == "bar"]
    legend = {trace.marker.color: trace.name for trace in fig.data if trace.showlegend is not False}
    assert len(bars) == 1 and bars[0].showlegend is False
    assert set(legend) == set(bars[0].marker.color)
    assert all(legend.values())
    if j < 5:
        assert "after" in legend[pitfall_figures.AFTER_COLOR]
    assert (pitfall_figures.LEAK_COLOR in legend) == bool(report["leaked"])
    # one entry a row at any page width, in a margin under the turned labels that holds every row
    layout = fig.layout
    assert (layout.legend.entrywidth, layout.legend.entrywidthmode) == (1, "fraction")
    assert layout.margin.b >= (margins.labels_under(layout.xaxis.ticktext, angle=60) + len(legend)
                               * margins.LEGEND_ENTRY_PX + margins.LEGEND_PAD_PX)


@pytest.mark.parametrize(("key", "builder"), [("softmax_dim", pitfall_figures.row_sums_figure),
                                              ("scale_d_out", pitfall_figures.entropy_figure),
                                              ("forgot_eval", pitfall_figures.call_difference_figure)])
def test_extra_figures_have_one_bar_per_token(lab, key, builder):
    setup, x = lab
    fig = builder(catalogue.run_pitfall(key, setup, x), [f"t{i}" for i in range(10)])
    assert all(len(trace.y) == 10 for trace in fig.data)


def test_extra_figure_is_the_pitfalls_own_chart_or_none(lab):
    setup, x = lab
    tokens = [f"t{i}" for i in range(10)]
    kinds = {key: pitfall_figures.extra_figure(catalogue.run_pitfall(key, setup, x), tokens) for key in PITFALLS}
    assert {key for key, fig in kinds.items() if fig is not None} == {
        "softmax_dim", "scale_d_out", "forgot_eval", "rope_queries_only", "rope_values", "cache_position",
        "cache_reset", "cache_too_little"}
    assert kinds["scale_d_out"].data[0].name == "÷√head_dim = ÷√8"
    # a bar chart a token (not the cache's steps): its legend one series a row at any page width, in a margin under
    # the turned token labels that holds every row (three series side by side wrap onto three rows at 800 px)
    for key in ("softmax_dim", "scale_d_out", "forgot_eval", "rope_queries_only", "rope_values"):
        layout, series = kinds[key].layout, [trace for trace in kinds[key].data if trace.type == "bar"]
        assert (layout.legend.entrywidth, layout.legend.entrywidthmode) == (1, "fraction"), key
        assert layout.margin.b >= (margins.labels_under(layout.xaxis.ticktext, angle=60) + len(series)
                                   * margins.LEGEND_ENTRY_PX + margins.LEGEND_PAD_PX), key


# ============================== on the app's Trace ==============================


def test_run_on_trace_is_run_pitfall_on_the_traces_first_64_tokens():
    config = small_config(context_length=256)
    trace = pipeline.run("word " * 100, config)
    result = catalogue.run_on_trace(trace, 4, "scale_d_out")
    expected = catalogue.run_pitfall("scale_d_out", workbench.lab_setup(config, trace.n, 4),
                                     workbench.lab_inputs(trace.embeddings["input"]))
    assert result.n == 64 and result.setup == expected.setup
    assert result.buggy.verdict == expected.buggy.verdict
    assert np.array_equal(result.buggy.details["entropy"], expected.buggy.details["entropy"])
    assert workbench.lab_tokens(trace.tokens) == trace.tokens[:64]


def test_leak_on_trace_follows_the_traces_causal_setting():
    causal, not_causal = (pipeline.run(TEXT, small_config(causal=c)) for c in (True, False))
    assert catalogue.leak_on_trace(causal, 4, None, 3)["verdict"] == "no leak"
    assert catalogue.leak_on_trace(not_causal, 4, None, 3)["leaked"] == [0, 1, 2]
    assert catalogue.leak_on_trace(causal, 4, "masked_fill", 3)["leaked"] == [0, 1, 2]


def test_the_leak_detector_says_what_it_reruns_and_who_sets_its_mask():
    config = small_config(causal=False)
    setup, _ = lab_for(config)
    assert catalogue.leak_subject(config, setup, None) == (
        "the book's code (causal mask off, set by the sidebar's causal toggle)")
    assert catalogue.leak_subject(config, setup, "masked_fill") == (
        f"the code with bug {PITFALLS['masked_fill'].title} (causal mask off, set by the sidebar's causal toggle)")
    # the lab's own classes ignore the toggle: the leak check runs them masked
    assert catalogue.leak_subject(config, setup, "gqa_repeat").endswith(
        "(causal mask on: the lab's own class always masks the future)")
    x = workbench.lab_inputs(pipeline.run(TEXT, config).embeddings["input"])
    assert catalogue.leak_check(setup, x, 3, causal=False, bug="gqa_repeat")["leaked"] == []
    # a variant that decides its mask: the sidebar's toggle is greyed out
    window = small_config(variant="swa", causal=True)
    assert catalogue.leak_subject(window, setup, None) == (
        "the book's code (causal mask on, set by the variant: Sliding-window attention always hides the future; its "
        "window also hides keys W or more behind)")


@pytest.mark.parametrize("causal", [True, False])
def test_a_users_module_sets_the_leak_detectors_mask_not_the_sidebar(causal):
    """A user's module decides whether it masks the future (config.causal is what attnviz found in it): with no bug
    the detector reruns the module itself, with a bug the lab's book code follows its setting, and the caption says
    so, not "in the sidebar" (the sidebar's toggle is greyed out)."""
    config = small_config(module="Your module: Bidirectional", causal=causal)
    setup, _ = lab_for(small_config())
    assert catalogue.leak_subject(config, setup, None) == (
        "Your module: Bidirectional as every page runs it (its own mask; the sidebar's causal toggle does not apply "
        "to it)")
    subject = catalogue.leak_subject(config, setup, "softmax_dim")
    does = "asks for a causal mask" if causal else "does not mask the future"
    assert subject == (f"the code with bug {PITFALLS['softmax_dim'].title} (causal mask {'on' if causal else 'off'}, "
                       f"set by Your module: Bidirectional, which {does}; the sidebar's toggle does not apply to it)")
    assert "in the sidebar" not in subject


def test_the_leak_detector_says_a_bug_that_cannot_run_here_is_replaced_by_the_books_code():
    config = small_config(d_in=36, d_out=36, num_heads=12)
    setup, _ = lab_for(config)
    assert catalogue.leak_subject(config, setup, "rope_values") == (
        "the book's code (bug rotary on values cannot run at these sizes; causal mask on, set by the sidebar's "
        "causal toggle)")



def test_the_overview_table_lists_every_bug_with_both_lines():
    table = catalogue.table()
    assert [len(column) for column in table.values()] == [len(PITFALLS)] * 3
    assert table["the buggy line"][0] == PITFALLS["masked_fill"].buggy_line
    assert {key for key, p in PITFALLS.items() if p.in_mask} == {"masked_fill", "mask_diagonal", "mask_not_sliced",
                                                                  "window_off_by_one"}


# ============================== the page (AppTest) ==============================


# px: a table's width on a page 800 px wide with the sidebar open (measured in Chromium: 500 px of page, a 466 px
# data grid, 464 px inside its border)
TABLE_PX_AT_800 = 464


def page(**query) -> AppTest:
    return open_app(timeout=TIMEOUT, **query).switch_page("pages/pitfalls.py").run()


def leak_verdict(at: AppTest) -> str:
    return next(box.value for box in [*at.success, *at.error, *at.warning] if box.value.startswith("**Verdict:**"))


def lab_verdicts(at: AppTest) -> list[str]:
    return [box.value for box in [*at.success, *at.error, *at.warning] if not box.value.startswith("**Verdict:**")]


def test_page_runs_and_the_books_code_does_not_leak():
    at = page()
    no_exception(at)
    assert at.title[0].value == "Pitfall lab"
    assert leak_verdict(at) == "**Verdict:** no leak"
    assert at.select_slider(key="pitfalls_token").value == 3  # the middle of 6 tokens
    assert len(at.dataframe[0].value) == len(PITFALLS) == 14  # every bug, listed
    # and each line read whole from 800 px: the columns fit the 464 px a table has there beside the open sidebar (a
    # wider page shares out the rest, so no width scrolls the table sideways), and a row is taller than 4 rem
    # (64 px), the height from which Streamlit's data grid wraps a cell's text instead of cutting it
    table = at.dataframe[0].proto
    columns = json.loads(table.columns or "{}")
    widths = [columns.get(name, {}).get("width") for name in catalogue.table()]
    assert all(widths) and sum(widths) <= TABLE_PX_AT_800, widths
    assert table.row_height > 64
    assert {columns[name]["type_config"]["type"] for name in catalogue.table()} == {"text"}


def test_choosing_each_pitfall_changes_the_verdict():
    at = page()
    seen = {}
    for key in PITFALLS:
        at.segmented_control(key="pitfalls_bug").set_value(key).run()
        no_exception(at)
        verdicts = lab_verdicts(at)
        assert any(v.startswith("**Check passed:**") for v in verdicts), key
        assert any(v.startswith("**Detected:**") for v in verdicts), key
        assert any(block.value == catalogue.diff_text(key) for block in at.code), key
        seen[key] = tuple(verdicts)
    assert len(set(seen.values())) == len(PITFALLS)
    assert "view size is not compatible" in " ".join(seen["view_contiguous"])
    assert "must match the size" in " ".join(seen["mask_not_sliced"])


def test_masked_fill_bug_shows_unmasked_weights_and_turns_the_leak_verdict():
    at = page()
    at.segmented_control(key="pitfalls_bug").set_value("masked_fill").run()
    no_exception(at)
    maps = [fig for fig in plotly_figures(at) if images(fig)]
    assert len(maps) == 2
    correct, buggy = (cells_shown(fig) for fig in maps)
    upper = np.triu_indices(6, k=1)
    assert np.isnan(correct[upper]).all() and np.isfinite(buggy[upper]).all()
    assert leak_verdict(at) == "**Verdict:** leaks into positions 0, 1, 2"


def test_causal_toggle_off_turns_the_leak_verdict():
    at = page()
    assert leak_verdict(at) == "**Verdict:** no leak"
    at.sidebar.toggle(key="causal").set_value(False).run()
    no_exception(at)
    assert leak_verdict(at) == "**Verdict:** leaks into positions 0, 1, 2"
    at.select_slider(key="pitfalls_token").set_value(5).run()
    assert leak_verdict(at) == "**Verdict:** leaks into positions 0, 1, 2, 3, 4"
    bars = next(fig for fig in plotly_figures(at) if fig["data"][0]["type"] == "bar")
    assert bars["data"][0]["marker"]["color"][:5] == [pitfall_figures.LEAK_COLOR] * 5


def test_a_long_paste_is_computed_once_while_the_lab_is_used(monkeypatch):
    """Beyond MAX_CHARS the trace's text is the bounded text; the lab must not look the trace up again."""
    runs = []
    real_run = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *args, **kwargs: runs.append(1) or real_run(*args, **kwargs))
    at = page(preset="book", variant="mha")
    runs.clear()
    at.sidebar.text_area(key="text").set_value("step " * (MAX_CHARS // 4)).run()  # > MAX_CHARS characters
    no_exception(at)
    assert len(runs) == 1  # the paste, computed once (the counter sees the pipeline)
    runs.clear()  # from here every lab view reuses it
    for bug in ("masked_fill", "scale_d_out", "none"):
        at.segmented_control(key="pitfalls_bug").set_value(bug).run()
        no_exception(at)
    at.select_slider(key="pitfalls_token").set_value(5).run()
    no_exception(at)
    assert runs == []
    assert leak_verdict(at) == "**Verdict:** no leak"


def test_single_head_variant_says_which_heads_the_lab_uses():
    at = page(variant="causal")
    no_exception(at)
    captions = " ".join(caption.value for caption in at.caption)
    assert "has a single head; the lab uses MultiHeadAttention (3.6.2) with d_out 768 and 12 heads" in captions
    at.segmented_control(key="pitfalls_bug").set_value("scale_d_out").run()
    no_exception(at)
    assert any("1/√768, but head_dim is 64" in v for v in lab_verdicts(at))


@pytest.mark.parametrize("query", [{"text": "x y", "d_in": "36", "d_out": "36", "num_heads": "12"},
                                   {"d_out": "3", "num_heads": "1"}])
def test_rotary_pitfalls_at_an_odd_head_dim_say_why_and_the_rest_of_the_page_works(query):
    at = page(**query)
    no_exception(at)
    for key in ROTARY:
        at.segmented_control(key="pitfalls_bug").set_value(key).run()
        no_exception(at)
        notes = [box.value for box in at.info]
        assert any(note.startswith("Rotary positions need an even head_dim (it is 3: ") for note in notes), notes
        assert lab_verdicts(at) == []  # no verdict from a shape error in both versions
        assert any(block.value == catalogue.diff_text(key) for block in at.code)
        assert leak_verdict(at) == "**Verdict:** no leak"  # the leak detector runs the book's code, and says so
        assert any("rerun the book's code (bug " in caption.value for caption in at.caption)
        assert [fig["data"][0]["type"] for fig in plotly_figures(at)] == ["bar"]  # the leak chart
    at.segmented_control(key="pitfalls_bug").set_value("masked_fill").run()
    no_exception(at)
    assert any(v.startswith("**Detected:**") for v in lab_verdicts(at))
    if "text" in query:  # two tokens: position 0 is the only one before the perturbed token
        assert leak_verdict(at) == "**Verdict:** leaks into position 0"
    else:
        assert leak_verdict(at).startswith("**Verdict:** leaks into positions 0, 1")


def link(**query) -> AppTest:
    """A new session opened with a link to the Pitfall lab with these URL parameters."""
    return open_app("pages/pitfalls.py", timeout=TIMEOUT, **query)


def captions(at: AppTest) -> str:
    return "\n".join(caption.value for caption in at.caption)


def test_a_gqa_link_runs_the_sidebars_groups_and_the_caption_names_grouped_query_attention():
    at = link(bug="gqa_repeat", variant="gqa", num_kv_groups="4")
    no_exception(at)
    said = captions(at)
    assert ("GroupedQueryAttention(d_in=768, d_out=768, dropout=0.1, num_heads=12, num_kv_groups=4) · head_dim 64"
            in said), said
    assert "MultiHeadAttention(" not in said and "shown in MultiHeadAttention" not in said
    assert "The lab runs GroupedQueryAttention (the lab's own class) with the d_out (768)" in said
    verdicts = lab_verdicts(at)  # 4 groups of 3: head h uses group h // 3, tiled h % 4
    assert any(v.startswith("**Check passed:** heads → groups 0→0, 1→0, 2→0, 3→1, 4→1") for v in verdicts), verdicts
    assert any(v.startswith("**Detected:** query head 1 attends with K/V group 1, not 0 (head // group_size): heads → "
                            "groups 0→0, 1→1, 2→2, 3→3, 4→0") for v in verdicts), verdicts


@pytest.mark.parametrize(("query", "said"), [
    ({"variant": "gqa", "num_kv_groups": "12"}, "the sidebar's 12 K/V groups give each of the 12 heads its own"),
    ({"variant": "mqa"}, "shares 1 K/V head among all 12 heads"),
    ({"variant": "mha", "num_kv_groups": "4"}, "Multi-head attention (3.6.2) gives each head its own K/V head"),
])
def test_a_gqa_link_whose_groups_hide_the_bug_says_which_groups_the_lab_uses(query, said):
    at = link(bug="gqa_repeat", **query)
    no_exception(at)
    shown = captions(at)
    assert said in shown and "The lab uses 6 groups of 2." in shown and "num_kv_groups=6)" in shown, shown
    assert any(v.startswith("**Detected:**") for v in lab_verdicts(at))


def test_a_window_link_at_w_n_minus_1_detects_the_bug_and_names_sliding_window_attention():
    at = link(bug="window_off_by_one", variant="swa", sliding_window_size="5")  # the default text: 6 tokens
    no_exception(at)
    assert "MultiHeadAttentionWithSWA(d_in=768, d_out=768, dropout=0.1, num_heads=12, sliding_window_size=5)" \
           in captions(at)
    verdicts = lab_verdicts(at)
    assert "**Check passed:** query i sees keys i − 4 … i: a window of exactly 5" in verdicts, verdicts
    assert any(v.startswith("**Detected:** only the future is hidden: query 5 sees key 0") for v in verdicts), verdicts


@pytest.mark.parametrize("bug, variant", [("gqa_repeat", "gqa"), ("window_off_by_one", "swa")])
def test_the_labs_own_class_has_the_name_of_the_books_class_the_app_runs(bug, variant):
    """The lab's short version of a bonus class takes the name of the book's class the app runs
    (MultiHeadAttentionWithSWA, the book's bonus ch04/06_swa; GroupedQueryAttention), and the page says it is the
    lab's own version of it."""
    from attnviz import variants
    from attnviz.labs.pitfalls import catalogue

    assert catalogue.runs(bug).__name__ == variants.get(variant).cls.__name__
    assert catalogue.shown_in(bug).startswith(f"{variants.get(variant).cls.__name__} (")


def _users_run(monkeypatch, name: str, text: str = TEXT):
    """The app's run of ``name``, a class of tests/helpers/user_modules.py listed as the user's module."""
    from pathlib import Path

    from attnviz import user_code

    monkeypatch.setenv(user_code.ENV, f"{Path(__file__).resolve().parents[1] / 'helpers' / 'user_modules.py'}:{name}")
    return pipeline.run(text, small_config(module=f"Your module: {name}", d_in=16, d_out=16))


def test_the_leak_detector_reruns_a_users_module_itself_and_finds_its_leak(monkeypatch):
    """A module that means to mask the future (a triangular mask buffer, so its config says causal) and does not:
    with no bug the leak detector perturbs the module itself, as every page runs it, not the book's code with its
    causal setting, which would say "no leak"."""
    trace = _users_run(monkeypatch, "MaskedFillCopy")
    assert trace.config.causal and not trace.hides_future  # meant to mask, and does not
    report = catalogue.leak_on_trace(trace, 4, None, 3)
    assert report["leaked"] == [0, 1, 2] and report["verdict"] == "leaks into positions 0, 1, 2"
    setup = workbench.lab_setup(trace.config, trace.n, 4)
    assert catalogue.leak_subject(trace.config, setup, None).startswith("Your module: MaskedFillCopy as every page")
    assert not catalogue.leak_on_trace(trace, 4, "scale_d_out", 3)["leaked"]  # a bug: the book's code, masked


def test_the_leak_detector_with_a_bug_says_a_module_asks_for_the_mask_not_that_it_masks(monkeypatch):
    """With a bug switched on the book's code runs, masked as the module means to be; a module whose code asks for a
    causal mask may still leak (MaskedFillCopy does), so the caption does not say it masks the future."""
    config = _users_run(monkeypatch, "MaskedFillCopy", "Hi there").config
    assert catalogue.causal_source(config) == ("Your module: MaskedFillCopy, which asks for a causal mask; the "
                                               "sidebar's toggle does not apply to it")


@pytest.mark.parametrize("name", ["ReturnsTuple", "ReturnsDict", "TorchMHA"])
def test_the_leak_detector_calls_a_users_module_as_every_page_does(monkeypatch, name):
    """A causal module that returns (output, weights) or a dict, or wraps nn.MultiheadAttention: the detector reruns it
    as the pages run it (its output read from what it returns), and finds no leak — not a TypeError of its tuple.  It
    needs only the outputs: it runs the module without recording its every op."""
    from attnviz import tracing

    trace = _users_run(monkeypatch, name)

    def recorded(*args, **kwargs):
        raise AssertionError("the leak detector recorded the module's ops")

    monkeypatch.setattr(tracing, "record", recorded)
    report = catalogue.leak_on_trace(trace, 4, None, 3)
    assert "error" not in report and report["verdict"] == "no leak"
