"""The Steps and Compare pages for a user's module whose trace lacks stages: a soft-capped score (a tanh between
Q @ Kᵀ and the softmax: no QKᵀ, ÷√dₖ, queries or keys) and a renormalised one (a tensor between the softmax and V: no
context).  Each page draws what the trace recorded and says in one line why the rest is not there: no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.apptest import no_exception, open_app
from streamlit.testing.v1 import AppTest

from attnviz import user_code

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "tests" / "helpers" / "user_modules.py"
TIMEOUT = 120


@pytest.fixture(autouse=True)
def listed(monkeypatch):
    names = ("SoftCappedScores", "RenormalisedWeights", "TransformerLensAttention", "WhereMasked")
    monkeypatch.setenv(user_code.ENV, ",".join(f"{MODULES}:{name}" for name in names))


def app(name: str, page: str, **query) -> AppTest:
    return open_app(page, timeout=TIMEOUT,
                    **{"variant": f"Your module: {name}", "d_in": "16", "d_out": "16", "num_heads": "1", **query})


def words(at: AppTest) -> str:
    """Every caption, info and warning of the run, as the user reads it."""
    texts = [element.value for element in (*at.caption, *at.info, *at.warning)]
    return re.sub(r"\\(.)", r"\1", " ".join(texts))


def test_steps_offers_only_the_recorded_stages_and_says_why_qk_is_missing():
    at = app("SoftCappedScores", "pages/steps.py")
    no_exception(at)
    stages = at.segmented_control(key="steps_stage").options
    assert "1 · QKᵀ" not in stages and "2 · ÷√dₖ" not in stages
    assert {"3 · causal mask", "4 · softmax", "5 · dropout", "6 · ·V"} <= set(stages)
    said = words(at)
    assert "1 · QKᵀ and 2 · ÷√dₖ are not shown" in said and "the tanh on line" in said
    for stage in ("masked", "weights", "dropped", "context"):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)


def test_steps_says_why_the_context_is_missing():
    at = app("RenormalisedWeights", "pages/steps.py")
    no_exception(at)
    assert "6 · ·V" not in at.segmented_control(key="steps_stage").options
    said = words(at)
    assert "6 · ·V is not shown" in said and "the / on line" in said
    for stage in ("scores", "scaled", "masked", "weights", "dropped"):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)


@pytest.mark.parametrize(("name", "stage"), [("SoftCappedScores", "scores"), ("RenormalisedWeights", "context")])
def test_a_link_to_a_stage_the_run_lacks_opens_the_page_without_a_traceback(name, stage):
    at = app(name, "pages/steps.py", stage=stage)
    no_exception(at)
    assert at.segmented_control(key="steps_stage").value == "masked"


def test_compare_draws_the_module_and_says_why_the_scaling_stars_are_missing():
    at = app("SoftCappedScores", "pages/compare.py")
    no_exception(at)
    said = words(at)
    assert "No ★ for this run. This run recorded no queries or keys" in said and "the tanh on line" in said
    assert any("SoftCappedScores" in s.value for s in at.subheader)


@pytest.mark.parametrize("name", ["TransformerLensAttention", "WhereMasked"])
def test_a_where_masked_module_draws_every_stage_and_compare(name):
    """TransformerLens' ``torch.where`` mask: the trace records every stage, so Steps offers all six and Compare
    draws its ★ (its queries and keys are found)."""
    at = app(name, "pages/steps.py", d_in="32", d_out="32", num_heads="4")
    no_exception(at)
    assert at.segmented_control(key="steps_stage").options == [
        "1 · QKᵀ", "2 · ÷√dₖ", "3 · causal mask", "4 · softmax", "5 · dropout", "6 · ·V"]
    assert "not shown" not in words(at)
    for stage in ("scores", "scaled", "weights", "dropped", "context"):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)
    at = app(name, "pages/compare.py", d_in="32", d_out="32", num_heads="4")
    no_exception(at)
    assert "No ★" not in words(at)
