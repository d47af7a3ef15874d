"""The app started with ``-- --module`` on a module that keeps a copy of its attention weights for plotting
(``self.last_attn_weights = attn_weights.detach()``): the Heads page draws its maps, its op path marks the product
with V, and its check panel passes every rule, as for the same module without the copy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.apptest import no_exception, open_app
from helpers.apptest import plotly_figures as figures

from attnviz import user_code

ROOT = Path(__file__).resolve().parents[2]
SPEC = f"{ROOT / 'tests' / 'helpers' / 'user_modules.py'}:KeepsItsWeights"


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    """``streamlit run app.py -- --module SPEC``; no module listed in the environment."""
    monkeypatch.setattr("sys.argv", ["app.py", "--module", SPEC])
    monkeypatch.delenv(user_code.ENV, raising=False)


def test_the_heads_page_draws_the_maps_and_passes_the_checks_of_a_module_that_keeps_its_weights():
    at = open_app(timeout=120, d_in="32", d_out="32", num_heads="4")
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value.startswith("Your module: KeepsItsWeights")
    assert not at.warning, [w.value for w in at.warning]
    grid = next(fig for fig in figures(at) if any(t.get("name", "").startswith("select head") for t in fig["data"]))
    tiles = [note["text"] for note in grid["layout"]["annotations"] if re.fullmatch(r"(▶ )?head \d+", note["text"])]
    assert len(tiles) == 4
    assert any(fig["layout"].get("title", {}).get("text", "").startswith("head 0: weights") for fig in figures(at))
    flow = next(h.proto.body for h in at.html if "attnviz-flow" in h.proto.body)  # the op path
    assert 'data-stage="context"' in flow and 'data-stage="dropped"' in flow
    table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
    results, evidence = dict(zip(table["rule"], table["result"])), dict(zip(table["rule"], table["evidence"]))
    assert results == {**dict.fromkeys(results, "pass"), "kv-cache": "skip", "rotary-placement": "skip"}, evidence
    assert evidence["rotary-placement"].startswith("not rotary: on one token repeated")  # Q, K and V were found
