"""Download file names: every chart's camera saves a file whose name says what it holds (page, layer of a checkpoint,
head, stage, before/after) in safe characters, and no two charts of a page share one."""

from __future__ import annotations

import json
import re

import pytest
from helpers.apptest import no_exception, open_app, recorded_downloads

from attnviz.ui.frame import plotly_config
from attnviz.ui.share import file_name

SAFE = re.compile(r"^attnviz-[a-z0-9]+(-[A-Za-z0-9]+)*$")


def test_a_file_name_keeps_letters_digits_and_hyphens_only():
    assert file_name("attnviz-steps", "head2", "masked", "before:") == "attnviz-steps-head2-masked-before"
    assert file_name("attnviz-steps", None, "head2", "", "softmax(scores ÷ √dₖ)") == \
        "attnviz-steps-head2-softmax-scores-d"
    assert file_name("a/b\\c", "..", "x y\tz", "é") == "a-b-c-x-y-z"
    assert file_name(None, "") == "attnviz"
    assert plotly_config("attnviz-head2-softmax(scores")["toImageButtonOptions"]["filename"] == \
        "attnviz-head2-softmax-scores"


def download_names(page: str, **query) -> list[str]:
    at = open_app(page, timeout=180, **query)
    no_exception(at)
    return [json.loads(chart.proto.config)["toImageButtonOptions"]["filename"] for chart in at.get("plotly_chart")]


@pytest.mark.parametrize("stage", ["scaled", "masked", "weights", "dropped"])
def test_the_steps_pages_maps_are_named_by_head_stage_and_before_or_after(stage):
    names = download_names("pages/steps.py", head="2", stage=stage, num_heads="4", preset="custom")
    assert f"attnviz-steps-head2-{stage}-before" in names and f"attnviz-steps-head2-{stage}-after" in names, names
    assert len(set(names)) == len(names) and all(SAFE.match(name) for name in names), names
    if stage == "scaled":
        softmax = {"attnviz-steps-head2-scaled-softmax-scaled", "attnviz-steps-head2-scaled-softmax-unscaled"}
        assert softmax <= set(names), names


def test_the_heads_map_of_a_checkpoint_names_its_layer_and_generates_names_start_with_attnviz():
    names = download_names("app.py", weights="bundled model", layer="1", head="1")
    assert "attnviz-heads-layer1-head1-weights" in names, names
    assert all(SAFE.match(name) for name in names), names
    generated = download_names("pages/generate.py", weights="bundled model", new_tokens="4", step="2", head="1")
    assert "attnviz-generate-kv-cache-bytes" in generated, generated
    assert any(name.startswith("attnviz-generate-layer") and name.endswith("-head1-step2") for name in generated)
    assert all(SAFE.match(name) for name in generated), generated


@pytest.mark.parametrize(("query", "layer"), [({"head": "1", "cell": "2,0"}, ""),
                                              ({"weights": "bundled model", "layer": "1", "head": "1"}, "-layer1")])
def test_the_heads_pages_downloads_share_one_scheme_and_the_trace_names_its_variant_and_layer(monkeypatch, query,
                                                                                               layer):
    """Page, layer, head, stage: the focused head's CSV is named as its map's picture, the why-this-weight charts
    start as it does, and the sidebar's trace names its variant and layer, so two traces never share a name."""
    downloads = recorded_downloads(monkeypatch)
    names = download_names("app.py", **query)
    focused = f"attnviz-heads{layer}-head1-weights"
    assert focused in names and f"{focused}.csv" in downloads, (names, downloads)
    traces = [name for name in downloads if name.endswith(".npz")]
    assert traces and all(re.fullmatch(rf"attnviz-trace-[a-z0-9]+{layer}\.npz", name) for name in traces), traces
    if "cell" in query:
        why = [name for name in names if "-q2-k0" in name or "-row2" in name]
        assert len(why) == 2 and all(name.startswith("attnviz-heads-head1-") for name in why), names
    assert all(SAFE.match(name) for name in names), names
