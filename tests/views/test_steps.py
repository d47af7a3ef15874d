"""attnviz.views.steps: the Steps page's text and tables, tested without Streamlit."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from helpers.runs import small

from attnviz import variants
from attnviz.config import preset_config
from attnviz.pipeline import run
from attnviz.views import figures, margins, source, steps

TEXT = "Your journey starts with one step"
WHAT = {  # what the Steps page says each stage does
    "scores": "Each query is compared with every key: a dot product per (query, key) pair.",
    "scaled": "Divide by √dₖ so the scores' variance does not grow with the head size.",
    "masked": "Hide the future: scores above the diagonal become −∞, so softmax gives them weight 0.",
    "weights": "Softmax turns each query's row of scores into weights that sum to 1.",
    "dropped": "In training, dropout zeroes a random fraction p of the weights and scales the rest by 1/(1−p).",
    "context": "Each context vector is the weighted sum of the value vectors.",
}
SIMPLIFIED_WHAT = {  # section 3.3's class has no scaling and no dropout line
    "scaled": "The simplified version (section 3.3) does not scale: scaled = scores.",
    "dropped": "The simplified version (section 3.3) has no dropout: dropped = weights.",
}


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
@pytest.mark.parametrize("stage", list(steps.STEP_LABELS))
def test_step_text_quotes_the_running_source_line(variant, stage):
    step = steps.step_text(small(variant), stage)
    line = source.stage_code(variant, stage)
    if line is None:
        assert step["code"] == "# this variant has no such line"
    else:
        spec = variants.get(variant)
        added = stage == "masked" and not spec.book_causal and spec.not_applicable("causal") is None  # 3.3, 3.4
        said = f"# attnviz's addition: the book's {spec.section} listing has no mask\n" if added else ""
        assert step["code"] == said + line and line in source.variant_source(variant)
    assert step["what"] == (SIMPLIFIED_WHAT.get(stage, WHAT[stage]) if variant == "simplified" else WHAT[stage])


def test_a_window_says_what_it_hides_and_its_width():
    assert steps.step_text(small("swa", sliding_window_size=4), "masked")["what"] == (
        "Hide the future and the distant past: query i sees key j only when 0 ≤ i − j < W (W = 4); the rest become "
        "−∞, so softmax gives them weight 0.")


def test_step_text_says_the_mask_was_skipped():
    assert steps.step_text(small(causal=False), "masked")["code"].endswith("# skipped: causal mask off")
    assert "skipped" not in steps.step_text(small(causal=True), "masked")["code"]


def test_the_simplified_variant_says_it_does_not_scale():
    step = steps.step_text(preset_config("book", variant="simplified"), "scaled")
    assert step["what"].startswith("The simplified version (section 3.3) does not scale")


def test_dropout_off_reason_one_decision_three_wordings():
    no_dropout = small("self_attention_v2")
    eval_mode = small("mha", dropout=0.1, train=False)
    p_zero = small("mha", dropout=0.0, train=True)
    assert steps.dropout_off_reason(no_dropout) == "This variant has no dropout in the book: dropped = weights."
    assert steps.dropout_off_reason(no_dropout, short=True) == "no dropout in this class"
    assert steps.dropout_off_reason(eval_mode).startswith("Dropout is off (eval mode)")
    assert steps.dropout_off_reason(eval_mode, short=True) == "dropout off (eval)"
    assert steps.dropout_off_reason(p_zero) == "Dropout p is 0: dropped = weights."
    assert steps.dropout_off_reason(p_zero, short=True) == "dropout off (p = 0)"
    assert [steps.dropout_off_reason(config, title=True) for config in (no_dropout, eval_mode, p_zero)] == [
        "no dropout in this class", "eval mode", "p = 0"]  # a map's title: dropped = weights (…)


def test_qk_table_shows_the_focused_heads_slice():
    trace = run(TEXT, small("mha"))  # head_dim 4: head 1 is features 4 … 7
    table = steps.qk_table(trace, head=1)
    assert list(table["token"]) == ["Your", "·journey", "·starts", "·with", "·one", "·step"]
    assert table["query"][0] == "-1.954, 0.431, -0.867, -0.044"
    assert table["query"][5] == "-1.453, 0.725, -0.680, -2.102"
    assert table["key"][0] == "-1.540, 0.194, -0.107, -1.090"
    assert table["key"][1] == "0.754, -0.470, 0.111, -1.068"


def test_vector_table_prints_four_decimals_like_the_book():
    trace = run(TEXT, preset_config("book", variant="causal"))
    table = steps.vector_table(trace, trace.output[0], "output vector")
    assert len(table) == trace.n
    assert all(len(value.split(", ")) == 2 for value in table["output vector"])
    assert table["output vector"][0] == ", ".join(f"{v:.4f}" for v in trace.output[0, 0])


def test_context_table_per_head_and_shape_of():
    trace = run(TEXT, small("mha"))
    assert steps.shape_of(trace, "context") == (1, 2, trace.n, 4)
    table = steps.context_table(trace, head=1)
    assert table["context vector"][0] == ", ".join(f"{v:.4f}" for v in trace.steps["context"][0, 1, 0])


def test_softmax_without_scaling_is_sharper_and_keeps_the_mask():
    trace = run(TEXT, small("mha", d_in=64, d_out=64))
    scores, masked = trace.attention_map("scores", 0), trace.attention_map("masked", 0)
    with_scale, without_scale = steps.softmax_with_and_without_scaling(scores, masked)
    assert np.allclose(with_scale, trace.attention_map("weights", 0), atol=1e-6)
    upper = np.triu(np.ones_like(scores, dtype=bool), k=1)
    assert (without_scale[upper] == 0).all() and np.allclose(without_scale.sum(axis=-1), 1, atol=1e-6)
    assert without_scale.max(axis=-1).mean() >= with_scale.max(axis=-1).mean()


@pytest.mark.parametrize("config", [
    small("gqa", d_out=16, num_heads=4, num_kv_groups=2, positions="rotary"),
    small("mqa", d_out=16, num_heads=4, positions="rotary"),
    small("mla"), small("swa", positions="rotary"), small("gqa", d_out=16, num_heads=4, num_kv_groups=2), small(),
], ids=["gqa-rotary", "mqa-rotary", "mla", "swa-rotary", "gqa", "mha"])
def test_stage_labels_number_every_recorded_stage_once_in_pipeline_order(config):
    trace = run(TEXT, config)
    labels = steps.stage_labels(trace)
    numbers = [label.split(" · ")[0] for label in labels.values()]
    assert len(set(numbers)) == len(numbers), labels  # no two stages share a number
    assert numbers == sorted(numbers), labels  # "0" < "0a" < "0b" < "1" …: the order the buttons show
    recorded = [name for name, _ in trace.shapes]
    assert list(labels) == sorted(labels, key=recorded.index)  # the order the run recorded them


@pytest.mark.parametrize(("variant", "section"), [("simplified", "3.3"), ("self_attention_v1", "3.4.2"),
                                                  ("self_attention_v2", "3.4.2")])
def test_a_mask_the_books_listing_does_not_have_is_called_attnvizs_addition(variant, section):
    assert variants.added_mask_note(small(variant)) == (
        f"The book's {section} listing has no causal mask: attnviz adds it because Causal mask is on — turn it off "
        "to see the listing as printed.")
    assert variants.added_mask_note(small(variant, causal=False)) is None
    code, line = source.marked_source(variant, "masked", note=steps.ADDED_MASK_MARK)
    assert code.splitlines()[line - 1].endswith(source.MARK + steps.ADDED_MASK_MARK)


@pytest.mark.parametrize("variant", ["causal", "mha_wrapper", "mha", "gqa", "swa"])
def test_a_mask_the_books_listing_has_gets_no_note(variant):
    assert variants.added_mask_note(small(variant)) is None
    assert variants.added_mask_note(small(variant, causal=False)) is None


# runs whose Steps maps carry the book classes' longest titles: no ÷√dₖ, the mask off, dropout at p = 0 and in eval
# mode, the widest window the app allows
TITLE_RUNS = {"simplified": {}, "causal": {"causal": False}, "mha": {"train": True, "dropout": 0.0},
              "mla": {"dropout": 0.1}, "swa": {"sliding_window_size": 1024, "context_length": 1024}}


def _title_runs(every: bool = False):
    """Runs whose Steps maps have every kind of title: :data:`TITLE_RUNS`, or (``every``) each class with the mask
    on and off, dropout on, off and at p = 0, and the widest window the app allows; and user modules whose mask
    hides no later key or only some of them, and whose scale is the config's or their own."""
    from helpers import user_modules as um

    from attnviz import tracing
    from attnviz.config import MAX_CONTEXT_LENGTH

    if not every:
        for variant, setting in TITLE_RUNS.items():
            yield f"{variant} {setting}", run(TEXT, small(variant, **setting))
        return
    settings = ({}, {"causal": False}, {"train": True, "dropout": 0.1}, {"train": True, "dropout": 0.0},
                {"sliding_window_size": MAX_CONTEXT_LENGTH, "context_length": MAX_CONTEXT_LENGTH})
    for variant in variants.VARIANTS:
        for setting in settings:
            yield f"{variant} {setting}", run(TEXT, small(variant, **setting))
    gemma = type("Config", (), {"hidden_size": 32, "num_attention_heads": 2, "head_dim": 16,
                                "query_pre_attn_scalar": 1000})()  # divides by 31.62, not √16: the config's scale
    for name, make in {"mask filled with 0": um.ZeroFilledMask,
                       "one future key seen": lambda: um.MyMultiHeadAttention(bug="one-future-visible"),
                       "the config's scale": lambda: um.GemmaStyleAttention(gemma),
                       "its own scale": lambda: um.CustomScale(d_model=16, n_heads=4, temperature=32)}.items():
        torch.manual_seed(0)
        yield name, tracing.trace_module(make().eval(), TEXT)


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["longest", "every"])
def test_every_title_of_the_steps_maps_fits_its_map_at_the_narrowest(every):
    """A Plotly title does not wrap: one wider than its map is cut ("before: masked (−∞ above the diagonal or ≥ 2 b").
    Every title each stage's maps carry, broken into lines by fitted_titles, fits the narrowest the maps are drawn by
    margins' estimate of its width, and the room above the maps holds its lines; the entropy chart's title too.  The
    quick tier runs the book classes' longest titles; the slow one every class and setting, and user modules."""
    box = margins.title_px  # the width estimate the margins are made with
    for name, trace in _title_runs(every):
        for stage in steps.stage_labels(trace):
            titles = steps.map_titles(trace, stage)
            for place, title in titles.items():
                (fitted,), title_px = steps.fitted_titles(title)
                assert fitted.replace("<br>", " ") == title  # the same words
                assert box(fitted) <= steps.NARROWEST_MAP_PX - margins.TITLE_INSET_PX, (name, stage, place, fitted)
                assert title_px == margins.title_top(fitted.count("<br>") + 1)
                if place == "difference":  # a map of its own, drawn with one line's room
                    assert "<br>" not in fitted, (name, fitted)
    entropy = figures.entropy_bars(["a", "b"], np.ones(2), np.ones(2), width=steps.NARROWEST_MAP_PX)
    title = entropy.layout.title.text
    assert box(title, 13) <= steps.NARROWEST_MAP_PX - margins.TITLE_INSET_PX, title
    assert entropy.layout.margin.t == margins.title_top(title.count("<br>") + 1, 13)


def test_a_title_breaks_between_its_phrases_and_keeps_the_pair_as_tall():
    (before, after), title_px = steps.fitted_titles("before: masked (−∞ above the diagonal or ≥ 64 back)",
                                                    "before: weights")
    assert before == "before: masked<br>(−∞ above the diagonal or ≥ 64 back)" and after == "before: weights"
    assert title_px == margins.title_top(2) > figures.MAP_TITLE_PX  # both maps leave room for two lines


@pytest.mark.parametrize("variant, heads, kv_groups, said, head, sharing", [
    ("gqa", 12, 4, "4 K/V heads for 12 query heads: groups of 3.", 7, {6, 8}),
    ("mqa", 12, None, "1 K/V head for 12 query heads: all 12 share it.", 11, set(range(11))),
    ("gqa", 1, 1, "1 K/V head for 1 query head: each query head has its own, as in MHA.", 0, set()),
    ("gqa", 4, 4, "4 K/V heads for 4 query heads: each query head has its own, as in MHA.", 2, set()),
])
def test_the_kv_groups_stage_says_how_the_heads_share_their_kv_heads_in_words(variant, heads, kv_groups, said, head,
                                                                              sharing):
    """The Steps page's "K/V groups → heads" caption: one K/V head is "1 K/V head", not "1 K/V heads … groups of
    12"; a K/V head per query head is said to be MHA's.  Its head → group table shades the focused head's row, and
    lighter the rows of the heads that share its K/V group, as the caption under it says."""
    from attnviz.config import AttentionConfig

    settings = {"num_kv_groups": kv_groups} if kv_groups else {}
    config = AttentionConfig(variant=variant, d_in=8 * heads, d_out=8 * heads, num_heads=heads, **settings)
    assert steps.group_caption(config) == said
    styled = steps.group_table(config, head)
    assert styled.data.to_dict("list") == {"query head": list(range(heads)), "K/V group": list(config.head_groups)}
    rules = re.findall(r"((?:#T_\w+_row\d+_col\d+,?\s*)+)\{\s*([^}]*?);?\s*\}", styled.to_html())
    shading = {int(row): style.strip() for cells, style in rules for row in re.findall(r"_row(\d+)_col", cells)}
    assert shading == {head: steps.FOCUSED_ROW, **dict.fromkeys(sharing, steps.SHARING_ROW)}
    caption = steps.focus_caption(config, head)
    assert caption.startswith(f"Head {head} (shaded") and f"K/V group {config.kv_group(head)}" in caption
    assert ("shaded lighter" in caption) == bool(sharing), caption


@pytest.mark.parametrize("title", ["before: masked (−∞ above the diagonal)", "after: softmax — each row sums to 1",
                                   "after: scaled = scores (no division)", "softmax(scores ÷ √768) — had it divided"])
def test_a_title_chromium_draws_within_the_narrowest_map_stays_on_one_line(title):
    """These titles fit the narrowest map on one line as Chromium draws them (tests/browser/test_chart_titles.py
    measures every title's lines there): broken in two, they would take a line of the map's height for nothing."""
    (fitted,), title_px = steps.fitted_titles(title)
    assert fitted == title and title_px == margins.title_top(1)
