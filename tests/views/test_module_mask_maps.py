"""A user module's maps grey only what its own mask hid: a mask filled with 0, not −∞, hides nothing, so its maps
show the weights the module gave the future, their titles say the mask was asked for and not applied, and "Why this
weight?" adds up from the numbers its softmax took."""

from __future__ import annotations

import numpy as np
import torch
from helpers import user_modules as um
from helpers.apptest import decode
from helpers.maps import cells_shown, images, pixels

from attnviz import tracing
from attnviz.explain import explain_weight
from attnviz.labs import compare
from attnviz.views import explain_figures, figures, notebook, steps

TEXT = "Your journey starts with one step"


def traced(make):
    torch.manual_seed(0)
    return tracing.trace_module(make().eval(), TEXT)


def test_a_mask_filled_with_0_is_drawn_with_the_weights_the_module_gave_the_future():
    trace = traced(um.ZeroFilledMask)
    parts = notebook.figures_of(trace, head=1)
    np.testing.assert_allclose(cells_shown(parts["head"]), trace.steps["weights"][0, 1], atol=1e-6)  # no cell grey
    assert not any(t.get("name") == "masked" for t in parts["head"].to_plotly_json()["data"])  # no "masked" legend
    for image in images(parts["grid"]):  # every tile's every cell is drawn: none left to the grey under it
        assert (pixels(image)[..., 3] == 255).all()
    masked = notebook.figures_of(trace, "masked")
    for part in ("grid", "head"):
        title = masked[part].layout.title.text
        assert "no later key hidden" in title and "−∞" not in title, title
    assert compare.module_heatmap(trace).to_plotly_json()["layout"]["title"]["text"].startswith("ZeroFilledMask")
    module_map = compare.module_heatmap(trace)
    assert not np.isnan(cells_shown(module_map)).any()  # the Compare page's map too
    layout = module_map.layout  # its cells square across its column, as the book's MHA's beside it
    assert layout.yaxis.scaleanchor == "x" and layout.height - layout.margin.t - layout.margin.b == (
        figures.PAIR_MAP_PX - layout.margin.l - layout.margin.r)
    assert not trace.hides_future and trace.leaks_future and trace.hidden_cells() is None


def test_a_mask_that_shows_one_future_key_greys_only_the_keys_it_hid():
    trace = traced(lambda: um.MyMultiHeadAttention(bug="one-future-visible"))
    shown = cells_shown(notebook.figures_of(trace, head=2)["head"])  # (n, n)
    np.testing.assert_array_equal(np.isnan(shown), np.triu(np.ones((trace.n, trace.n), dtype=bool), 2))
    assert steps.stage_title(trace, "masked") == "masked (some later keys not hidden)"
    assert trace.leaks_future


def test_a_module_that_masks_the_future_is_drawn_as_before():
    trace = traced(um.MyMultiHeadAttention)
    shown = cells_shown(notebook.figures_of(trace, head=0)["head"])  # (n, n)
    np.testing.assert_array_equal(np.isnan(shown), np.triu(np.ones((trace.n, trace.n), dtype=bool), 1))
    assert steps.stage_title(trace, "masked") == "masked (−∞ above the diagonal)"
    assert trace.hides_future and not trace.leaks_future and trace.hidden_cells() is None
    assert steps.leak_note(trace) is None


def test_why_this_weight_adds_up_from_what_the_softmax_took():
    """Query 0 → key 3, whose score the module's mask set to 0: the weight is explained as exp(0) ÷ Σ exp(softmax
    input), from the numbers the softmax took (not the scaled scores it never saw), the cell is not called masked,
    and a note names the mask that sets the future to 0, not −∞."""
    trace = traced(um.ZeroFilledMask)
    why = explain_weight(trace, 0, 0, 3)
    row = trace.steps["masked"][0, 0, 0].astype(np.float64)  # (n,) what the softmax took
    assert not why.masked and why.weight == float(trace.steps["weights"][0, 0, 0, 3])
    np.testing.assert_allclose(why.weight, np.exp(row[3]) / np.exp(row).sum(), rtol=1e-5)
    figure = explain_figures.row_softmax_figure(why, trace.tokens).to_plotly_json()
    title = figure["layout"]["title"]["text"].replace("<br>", " ")
    assert "exp(0.0000) ÷ Σ over the row's visible keys of exp(softmax input)" in title, title  # as the line beside it
    bars = next(t for t in figure["data"] if t.get("name") == "scaled")
    np.testing.assert_allclose(decode(bars["y"]), row, atol=1e-6)  # the upper panel draws what the softmax took
    assert "the softmax takes\u00a00" in explain_figures.products_figure(why).layout.title.text.replace("<br>", " ")
    assert any("sets the scores of the keys after query 0 to 0, not −∞" in note for note in why.notes), why.notes
    assert not any("soft-cap" in note for note in why.notes)  # no other cause named
    assert why.input_changed and why.masked_score == 0.0 and why.scaled != 0.0
