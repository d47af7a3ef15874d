"""The app with the user's own module listed on the command line (ATTNVIZ_MODULES here): every page draws it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
import torch
from helpers.apptest import (
    check_panel_command,
    check_panel_results,
    link_notices,
    no_exception,
    open_app,
    recorded_downloads,
    recorded_spinners,
)
from helpers.apptest import plotly_figures as figures
from helpers.check_table import ALL_PASS, RULE_COUNT, printed_results, rules_fail
from streamlit.testing.v1 import AppTest

from attnviz import checks, time_limit, user_code

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "tests" / "helpers" / "user_modules.py"
LABEL = "Your module: CausalSelfAttention"
PAGES = ("pages/heads.py", "pages/steps.py", "pages/shapes.py", "pages/tokens.py", "pages/compare.py")
ALL_PAGES = (*PAGES, "pages/pitfalls.py", "pages/induction.py", "pages/generate.py", "pages/benchmark.py")
BAD_RUNS = {  # a module whose run cannot be drawn -> what every page says instead
    "SoftmaxOverFeatures": "attention weights must have shape (..., n, n)",
    "NaNScores": "rows of the attention weights hold NaN",
    "ReturnsTransposed": "an attention module returns one vector per token",
}
TIMEOUT = 120


@pytest.fixture(autouse=True)
def listed(monkeypatch):
    names = ("CausalSelfAttention", "Raises", "NoSoftmax", *BAD_RUNS, "DropsTheBatch", "HandRolledDropout",
             "SleepyAttention", "EndlessLoop")
    monkeypatch.setenv(user_code.ENV, ",".join(f"{MODULES}:{name}" for name in names))


def app(page: str | None = None, **query) -> AppTest:
    return open_app(page, timeout=TIMEOUT, **{"variant": LABEL, "d_in": "64", "d_out": "64", "num_heads": "4", **query})


def warnings(at: AppTest) -> list[str]:
    """The warnings' text as the user reads it (the app escapes Markdown in the user's messages)."""
    return [re.sub(r"\\(.)", r"\1", w.value) for w in at.warning]


def test_the_sidebar_lists_the_module_beside_the_books_variants():
    at = app()
    no_exception(at)
    options = at.sidebar.selectbox(key="variant").options
    assert LABEL in options and "Your module: Raises" in options and "Multi-head attention (3.6.2)" in options
    assert at.sidebar.selectbox(key="variant").value == LABEL


@pytest.mark.parametrize("page", PAGES)
def test_every_page_draws_the_module(page):
    at = app(page)
    no_exception(at)
    assert not at.warning, [w.value for w in at.warning]
    if page != "pages/tokens.py":  # the tokens page draws the embeddings, the same for any attention
        assert "CausalSelfAttention" in " ".join(c.value for c in at.caption) + " ".join(m.value for m in at.markdown)


def test_the_heads_grid_has_the_modules_heads_and_the_check_panel_its_rules():
    at = app()
    grid = next(fig for fig in figures(at) if any(t.get("name", "").startswith("select head") for t in fig["data"]))
    tiles = [note["text"] for note in grid["layout"]["annotations"] if re.fullmatch(r"(▶ )?head \d+", note["text"])]
    assert len(tiles) == 4
    table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
    assert list(table["rule"]) == ["rows-sum-to-one", "causal", "mask-convention", "scaling", "rotary-placement",
                                   "dropout-placement", "batch-independence", "matches-reference", "kv-cache"]
    assert dict(zip(table["rule"], table["result"])) == {**dict.fromkeys(table["rule"], "pass"), "kv-cache": "skip",
                                                         "rotary-placement": "skip"}


def test_the_check_panel_names_rotary_applied_to_the_values(monkeypatch):
    """Rotary on q, k and v is a correct attention computation: only rotary-placement fails it, in the panel too."""
    monkeypatch.setenv(user_code.ENV, f"{ROOT / 'tests' / 'helpers' / 'rotary_bugs.py'}:LlamaRotaryOnValues")
    at = app(variant="Your module: LlamaRotaryOnValues", d_in="32", d_out="32")
    no_exception(at)
    table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
    results, evidence = dict(zip(table["rule"], table["result"])), dict(zip(table["rule"], table["evidence"]))
    assert [rule for rule, result in results.items() if result == "fail"] == ["rotary-placement"], results
    assert evidence["rotary-placement"].startswith("values are rotated by position: rotary applied to V (RoPE rotates "
                                                   "queries and keys only)"), evidence["rotary-placement"]
    assert any(box.value == rules_fail(1) for box in at.error), [box.value for box in at.error]


def test_the_steps_source_panel_shows_the_users_code_with_the_stage_marked():
    at = app("pages/steps.py")
    code = "\n".join(c.value for c in at.code)
    assert "class CausalSelfAttention(nn.Module):" in code and "◀" in code


def test_every_stage_of_the_steps_page_draws_the_modules_own_queries_and_keys():
    """Each stage of Steps on a user's module, head 1: no exception; at QKᵀ the table holds that head's own q and k
    (the module records them per head, (b, h, n, hd))."""
    at = app("pages/steps.py")
    at.selectbox(key="steps_focus").set_value(1).run()
    for stage in ("scores", "scaled", "masked", "weights", "dropped", "context"):
        at.segmented_control(key="steps_stage").set_value(stage).run()
        no_exception(at)
    at.segmented_control(key="steps_stage").set_value("scores").run()
    from attnviz.ui.cache import cached_trace

    trace = cached_trace(*at.session_state["_last_valid"])
    table = next(frame.value for frame in at.dataframe if "query" in frame.value.columns)
    q, k = trace.steps["queries"][0, 1, 0], trace.steps["keys"][0, 1, 0]  # head 1, token 0: (hd,) each
    assert table["query"].iloc[0].startswith(", ".join(f"{v:.3f}" for v in q[:3]))
    assert table["key"].iloc[0].startswith(", ".join(f"{v:.3f}" for v in k[:3]))


def test_the_marked_line_has_its_number_in_the_users_file_as_the_op_path_gives_it():
    """The class starts well into its file: the panel's line number is the file's (what the op path and an editor
    say), and its code has no gutter counting from 1."""
    at = app("pages/steps.py")
    panel = next(c for c in at.code if "class CausalSelfAttention(nn.Module):" in c.value)
    marked = next(line for line in panel.value.splitlines() if "◀" in line).split("  # ◀")[0]
    number = MODULES.read_text().splitlines().index(marked) + 1
    assert number > len(panel.value.splitlines())  # not a place within the class
    assert any(f"Line {number} of {MODULES.name} (marked ◀)" in c.value for c in at.caption)
    assert f"line {number}" in " ".join(h.value for h in at.html if "attnviz-op" in h.value)  # the op path's
    assert not panel.proto.show_line_numbers


@pytest.mark.parametrize(("label", "words"), [("Your module: Raises", "the forward raised RuntimeError"),
                                              ("Your module: NoSoftmax", "no attention found")])
def test_a_module_that_cannot_run_says_why_and_keeps_the_text(label, words):
    """The page says why; a rerun says it again without running the module's forward again — it would fail the same
    way, and a forward that never returns would hold every click for the time limit."""
    at = app(variant=label, text="My own text stays")
    no_exception(at)
    assert any(words in w.value for w in at.warning)
    assert at.sidebar.text_area(key="text").value == "My own text stays"
    forwards = []
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: forwards.append(type(module).__name__))
    try:
        at.run()
        at.run()
    finally:
        hook.remove()
    assert label.removeprefix("Your module: ") not in forwards, forwards
    assert any(words in w.value for w in at.warning)


def test_a_module_whose_forward_never_returns_is_stopped_with_a_message(monkeypatch):
    """A learner's ``while`` loop that never ends would hold the tab (and a core) for ever: it is stopped after the
    limit, lowered here from a minute, and the page says so; the next module runs in the same session."""
    monkeypatch.setattr(time_limit, "SECONDS", 0.5)
    at = app(variant="Your module: EndlessLoop", text="My own text stays")
    no_exception(at)
    assert any("EndlessLoop.forward ran for 0.5 s without returning (an endless loop?)" in text
               for text in warnings(at)), warnings(at)
    assert at.sidebar.text_area(key="text").value == "My own text stays"
    monkeypatch.setattr(time_limit, "SECONDS", 60.0)
    at.sidebar.selectbox(key="variant").set_value(LABEL).run()
    no_exception(at)
    assert not at.warning, [w.value for w in at.warning]


def test_a_url_cannot_name_a_module_that_is_not_listed(tmp_path):
    at = app(variant=f"{tmp_path}/evil.py:Evil")
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value == "mha"
    assert "Ignored URL parameter variant" in link_notices(at)


def test_the_pitfall_labs_leak_detector_says_a_modules_mask_is_its_own(monkeypatch):
    """The module decides whether it masks the future (the sidebar's toggle is greyed out): with no bug the leak
    detector reruns the module itself, which leaks; with a bug, the lab's book code runs unmasked as the module does —
    and the captions say the module decides, not the sidebar."""
    monkeypatch.setenv(user_code.ENV, f"{MODULES}:Bidirectional")
    at = app("pages/pitfalls.py", variant="Your module: Bidirectional", causal="true")
    no_exception(at)
    toggle = at.sidebar.toggle(key="causal")
    assert toggle.value and toggle.disabled  # the URL's causal=true, shown greyed out
    no_bug = next(box.value for box in at.info if box.value.startswith("No bug switched on"))
    assert no_bug.startswith("No bug switched on: the leak detector below reruns Your module: Bidirectional itself")
    assert "this is the book's code" not in no_bug  # the book's code runs only once a bug is on
    caption = next(c.value for c in at.caption if c.value.startswith("Add seeded noise"))
    assert ("rerun Your module: Bidirectional as every page runs it (its own mask; the sidebar's causal toggle does "
            "not apply to it)") in caption
    assert "in the sidebar" not in caption
    verdict = next(box.value for box in at.error if box.value.startswith("**Verdict:**"))
    assert verdict.startswith("**Verdict:** leaks into positions 0")
    at.segmented_control(key="pitfalls_bug").set_value("masked_fill").run()  # a bug in the mask
    no_exception(at)
    note = next(c.value for c in at.caption if "The lab keeps the causal mask on" in c.value)
    assert "follows Your module: Bidirectional, which does not mask the future" in note
    assert "sidebar's causal toggle applies" not in note


NOT_NAMED = "these heads see the future** (your module does not mask the future;"


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/induction.py"])
def test_a_module_that_does_not_mask_gets_scores_but_no_head_types(monkeypatch, page):
    """Head types and the Induction lab assume heads that cannot see the future: an encoder's attention (no mask)
    is scored but no head is named, and the page says the module is why; nanoGPT's causal attention is named as
    usual (no such note)."""
    causal = app(page)
    no_exception(causal)
    assert not any(NOT_NAMED in box.value for box in causal.info)
    monkeypatch.setenv(user_code.ENV, f"{MODULES}:Bidirectional")
    at = app(page, variant="Your module: Bidirectional")
    no_exception(at)
    assert any(NOT_NAMED in box.value for box in at.info)
    if page == "pages/heads.py":
        table = next(t.value for t in at.dataframe if "type" in t.value.columns)
        assert set(table["type"]) == {"—"} and (table["weight on later tokens"] > 0.2).all()


@pytest.mark.parametrize("page", ALL_PAGES)
def test_every_page_says_why_a_softmax_that_is_not_attention_cannot_be_drawn(page):
    at = app(page, variant="Your module: SoftmaxOverFeatures", text="My own text stays")
    no_exception(at)
    assert any(BAD_RUNS["SoftmaxOverFeatures"] in text for text in warnings(at)), warnings(at)
    assert at.sidebar.text_area(key="text").value == "My own text stays"


@pytest.mark.parametrize(("name", "page"), [("NaNScores", "pages/induction.py"), ("NaNScores", "pages/heads.py"),
                                            ("ReturnsTransposed", "pages/heads.py"),
                                            ("ReturnsTransposed", "pages/steps.py")])
def test_weights_that_are_not_finite_and_an_output_that_is_not_per_token_are_a_message(name, page):
    at = app(page, variant=f"Your module: {name}", text="My own text stays")
    no_exception(at)
    assert any(BAD_RUNS[name] in text for text in warnings(at)), warnings(at)
    assert at.sidebar.text_area(key="text").value == "My own text stays"


def test_a_module_whose_weights_hold_nan_still_gets_the_checks_verdict_the_cli_gives(capsys, monkeypatch):
    """SDPA handed masked_fill's mask (``torch.triu(…, diagonal=1)``: True = hide) keeps only the future keys, and the
    last query keeps none: its weights are NaN.  The maps are not drawn (the message says which rows and why), but the
    Check panel runs under it and gives the CLI's verdicts: the mask is inverted, and what to pass SDPA instead."""
    from attnviz import cli

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:InvertedSDPAMask")
    at = app(variant="Your module: InvertedSDPAMask", text="Your journey starts with one step")  # 6 tokens
    no_exception(at)
    table = next((frame.value for frame in at.table if "rule" in frame.value.columns), None)
    assert table is not None, warnings(at)
    assert any("4 of 24 rows of the attention weights hold NaN or ∞: query 5, in every head" in text
               and "not drawn" in text for text in warnings(at)), warnings(at)
    app_results = dict(zip(table["rule"], table["result"]))
    assert app_results["causal"] == app_results["mask-convention"] == "fail"
    evidence = dict(zip(table["rule"], table["evidence"]))["mask-convention"]
    assert evidence.startswith("the mask is inverted") and "torch.tril(torch.ones(n, n, dtype=torch.bool))" in evidence
    assert any(re.fullmatch(rf"\d of {RULE_COUNT} rules fail\.", box.value) for box in at.error), \
        [box.value for box in at.error]
    assert at.sidebar.text_area(key="text").value == "Your journey starts with one step"

    cli.main(["check", *check_panel_command(at, MODULES.parent)])
    assert printed_results(capsys.readouterr().out) == app_results


def test_another_page_refusing_nan_weights_links_to_the_check_on_the_heads_page(monkeypatch):
    monkeypatch.setenv(user_code.ENV, f"{MODULES}:InvertedSDPAMask")
    at = app("pages/steps.py", variant="Your module: InvertedSDPAMask")
    no_exception(at)
    assert any("rows of the attention weights hold NaN" in text for text in warnings(at)), warnings(at)
    heads = next(link.proto for link in at.sidebar.get("page_link") if link.proto.label == "Heads")
    check = [link.proto for link in at.main.get("page_link") if "Check" in link.proto.label]
    assert [(link.page_script_hash, link.query_string) for link in check] == [(heads.page_script_hash,
                                                                             heads.query_string)]
    assert not [frame for frame in at.table if "rule" in frame.value.columns]  # the check runs on the Heads page


def test_the_check_panel_says_why_a_module_that_drops_the_batch_cannot_be_checked():
    at = app(variant="Your module: DropsTheBatch", d_in="32", d_out="16", num_heads="1")
    no_exception(at)
    assert any("returned shape (1, 6, 16) for an input of shape (2, 6, 32)" in text for text in warnings(at)), \
        warnings(at)
    assert not any("rules pass" in s.value for s in at.success)


def test_the_spinner_names_the_users_module_and_counts_the_seconds(monkeypatch):
    """A user's forward can be slow or never return: while it runs, the spinner says whose module runs and for how
    long (Streamlit's show_time), not an anonymous "Running attention…"."""
    spinners = recorded_spinners(monkeypatch)
    no_exception(app())
    assert ("Running your module, CausalSelfAttention…", True) in spinners
    assert not any(text == "Running attention…" for text, _ in spinners)
    spinners.clear()
    no_exception(app(variant="mha"))
    assert ("Running attention…", True) in spinners


# ---------------------------------------------------------------- a slow check: how far it is, and what stays

def stopping_check(monkeypatch, when) -> list[list[str]]:
    """check_module as the app calls it, but the first check stops its script run (``st.stop()``, what Streamlit
    does at the next element when the user presses Stop) at the first progress report ``when`` accepts; the rules each
    call was asked for."""
    real, calls = checks.check_module, []

    def check_module(module, x=None, *, rules=None, progress=None, **kwargs):
        calls.append(list(rules or checks.RULES))

        def report(progress_now):
            progress(progress_now)
            if len(calls) == 1 and when(progress_now):
                st.stop()

        return real(module, x, rules=rules, progress=report, **kwargs)

    monkeypatch.setattr(checks, "check_module", check_module)
    return calls


def rule_tables(at: AppTest) -> list:
    return [frame.value for frame in at.table if "rule" in frame.value.columns]


def test_a_check_stopped_half_way_keeps_its_rules_and_checks_the_others_when_asked(monkeypatch):
    calls = stopping_check(monkeypatch, lambda progress: progress.rules_done == 3)
    at = app(text="A check stopped after three rules", seed="11")
    no_exception(at)
    assert [list(table["rule"]) for table in rule_tables(at)] == [list(checks.RULES[:3])]  # the rows done, shown
    assert "Head statistics" in [header.value for header in at.subheader]  # the rest of the page is drawn first

    at.run()  # the next run (any click): the rows done and a button, not a new check
    no_exception(at)
    assert any(f"The check stopped after 3 of {RULE_COUNT} rules" in box.value for box in at.info)
    assert [list(table["rule"]) for table in rule_tables(at)] == [list(checks.RULES[:3])]
    assert len(calls) == 1

    at.button(key="module_check_resume").click().run()
    no_exception(at)
    assert calls[1] == list(checks.RULES[3:])  # only the rules left
    assert list(rule_tables(at)[0]["rule"]) == list(checks.RULES)
    assert any(ALL_PASS in box.value for box in at.success)
    assert not at.info


def test_a_slow_module_says_how_long_the_check_will_take_once_the_pace_is_known(monkeypatch):
    """The estimate comes from the pace of causal's first three forwards, not the traced one's, before causal's fourth
    (where this check is stopped)."""
    monkeypatch.setattr(checks, "SLOW_CHECK_SECONDS", 0.0)
    stopping_check(monkeypatch, lambda progress: progress.rule == "causal" and progress.forwards == 4)
    at = app(variant="Your module: SleepyAttention", text="Your journey starts with one step", seed="12")
    no_exception(at)
    forwards = 1 + 5 + 1 + 2  # 6 tokens: the trace, causal's n - 1, dropout-placement's 1, batch-independence's 2
    expected = (rf"One forward of SleepyAttention takes 0\.\d+ s after the traced one and the rules run up to "
                rf"{forwards} forwards: about \d+\.\d s in all\. Stop the check \(above\) keeps the rules done; so "
                r"does leaving the page\.")
    assert any(re.fullmatch(expected, box.value) for box in at.warning), [box.value for box in at.warning]
    stop = [link.proto for link in at.get("page_link") if link.proto.label == "Stop the check"]
    assert len(stop) == 1  # a link (a whole-app rerun stops the script; a button in the fragment would wait for it)
    heads = next(link.proto for link in at.sidebar.get("page_link") if link.proto.label == "Heads")
    assert (stop[0].page_script_hash, stop[0].query_string) == (heads.page_script_hash, heads.query_string)


def test_the_sidebars_dropout_active_is_not_blamed_on_the_users_code():
    """The sidebar's *Dropout active (training mode)* runs the maps in training mode; the check still hands the rules
    the module as the code leaves it, so dropout-placement passes as it does with the toggle off."""
    results = {}
    for train in ("false", "true"):
        at = app("pages/heads.py", dropout="0.1", train=train)
        no_exception(at)
        table = next(frame.value for frame in at.table if "rule" in frame.value.columns)
        results[train] = dict(zip(table["rule"], table["result"]))
    assert results["true"]["dropout-placement"] == results["false"]["dropout-placement"] == "pass"
    assert results["true"] == results["false"]


def test_a_finished_check_says_what_it_cost():
    at = app(text="Your journey starts with one step", seed="13")
    assert any(re.fullmatch(r"9 forwards of your module, \d+\.\d s\.", caption.value) for caption in at.caption)


def test_a_forward_that_raises_in_a_later_rule_keeps_the_rules_before_it():
    at = app(variant="Your module: HandRolledDropout")
    no_exception(at)
    done = checks.RULES.index("dropout-placement")  # the rules before the one whose forward raised
    raised = "the forward raised RuntimeError (user_modules.py, line "
    assert any(text.startswith(raised) and "(while checking dropout-placement)" in text
               and text.endswith(f"The rules done before it: {done} of {RULE_COUNT}.") for text in warnings(at)), \
        warnings(at)
    assert [list(table["rule"]) for table in rule_tables(at)] == [list(checks.RULES[:done])]


def test_the_check_panels_command_runs_the_same_rules_in_a_terminal_with_the_same_results(capsys):
    """The panel's command names the module's file and class and the sizes the app built it with (not a
    placeholder, nor the CLI's own default sizes); run from the file's folder, every rule has the app's result."""
    from attnviz import cli

    at = app(num_heads="2", dropout="0.1", seed="7")
    no_exception(at)
    caption = next(c.value for c in at.caption if "attnviz check" in c.value)
    command = re.search(r"`(python -m attnviz check [^`]+)`", caption).group(1)
    assert command.startswith("python -m attnviz check user_modules.py:CausalSelfAttention --d-in 64 --num-heads 2")
    assert "--dropout 0.1" in command and "/" not in command  # the file by its name: no folder of the server's
    assert command.endswith(" --seed 7")  # the weights the app drew
    assert "from the folder that holds `user_modules.py`" in caption  # where the command runs as printed
    assert "attnviz installed: `pip install -e .` in its folder" in caption  # what makes `python -m attnviz` work
    cli.main(["check", *check_panel_command(at, MODULES.parent)])
    assert printed_results(capsys.readouterr().out) == check_panel_results(at)


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/steps.py"])
def test_a_module_built_on_the_meta_device_is_named_as_such(page, monkeypatch):
    monkeypatch.setenv(user_code.ENV, f"{MODULES}:BuiltOnMeta")
    at = app(page, variant="Your module: BuiltOnMeta", d_in="32", d_out="32")
    no_exception(at)
    assert any("the module's weights are on the meta device (no values): materialise it (module.to_empty(device='cpu')"
               " and load weights) before tracing" in text for text in warnings(at)), warnings(at)


def test_the_check_panels_command_runs_for_a_module_that_does_not_say_its_width(capsys, monkeypatch):
    """A GPT-2 style module (Conv1D layers, no width attribute) is built at the app's d_in; the command the panel
    prints passes that --d-in, and the terminal checks on input that wide: the app's results, not a refusal."""
    from attnviz import cli

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:GPT2StyleAttention")
    at = app(variant="Your module: GPT2StyleAttention", d_in="48", d_out="48")
    no_exception(at)
    argv = check_panel_command(at, MODULES.parent)
    assert argv[argv.index("--d-in") + 1] == "48"
    assert cli.main(["check", *argv]) == 0
    assert printed_results(capsys.readouterr().out) == check_panel_results(at)


def test_the_check_panels_command_checks_a_class_without_a_constructor_at_the_apps_width(capsys, monkeypatch):
    """A weightless class that keeps nn.Module's own ``__init__`` is built with no arguments in both; the command
    gives the app's --d-in, so the terminal checks the width the panel checked, 768 (where the scaled softmax
    saturates), and gets its results."""
    from attnviz import cli

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:WeightlessScaled")
    at = app(variant="Your module: WeightlessScaled", d_in="768", d_out="768")
    no_exception(at)
    app_results = check_panel_results(at)
    argv = check_panel_command(at, MODULES.parent)
    assert "--d-in 768" in " ".join(argv), argv
    assert cli.main(["check", *argv]) == 0
    assert printed_results(capsys.readouterr().out) == app_results
    assert app_results["scaling"] == "pass"


@pytest.mark.parametrize(("name", "asked"), [("LearnerSWA", {"sliding_window_size": 3, "seed": 7}),
                                             ("Bidirectional", {"causal": False}),
                                             ("CountsTokensSeenWithPos", {"num_heads": 2})])
def test_the_check_panels_command_builds_and_checks_the_module_the_panel_checks(monkeypatch, name, asked):
    """The app builds a listed module from its sizes, dropout and seed alone: a window in the URL (the sidebar shows
    none for a module) or the causal toggle (disabled: the module decides) never reaches its constructor, and the
    panel leaves causal to the check to find.  The command builds that module (its weights and its window) and checks
    it with causal found the same way, so it gives no --window and no --causal/--no-causal.  A ``**kwargs``
    constructor gets none of the app's sizes: the command gives no size flag the CLI would pass to it by name."""
    from types import SimpleNamespace

    from attnviz import cli, urlstate
    from attnviz.producers import user_module
    from attnviz.ui import module_check

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:{name}")
    settings = {**urlstate.DEFAULTS, "variant": f"Your module: {name}", "d_in": 32, "d_out": 32, "num_heads": 4,
                "dropout": 0.0, **asked}
    config = urlstate.config_from_settings(settings)
    trace = SimpleNamespace(config=config, n=6, module_run=SimpleNamespace(class_name=name, filename=str(MODULES)))
    argv = module_check.cli_command(trace).split()[3:]
    assert argv[:2] == ["check", f"user_modules.py:{name}"]
    argv[1] = f"{MODULES.parent}/{argv[1]}"
    args = cli.parser().parse_args(argv)
    assert (args.sliding_window_size, args.num_kv_groups, args.latent_dim, args.causal) == (None, None, None, None)

    checked = {}
    check_module = checks.check_module

    def recorded(module, x, **kwargs):
        checked.update(module=module, **kwargs)
        return check_module(module, x, **kwargs)

    monkeypatch.setattr(checks, "check_module", recorded)
    assert cli.main(argv) in (0, 1)
    app_module = user_module.module_for(config)
    assert checked["causal"] is None  # the panel passes none: both find it
    assert getattr(checked["module"], "sliding_window_size", None) == getattr(app_module, "sliding_window_size", None)
    cli_weights, app_weights = checked["module"].state_dict(), app_module.state_dict()
    assert cli_weights.keys() == app_weights.keys()
    assert all(torch.equal(cli_weights[key], app_weights[key]) for key in app_weights)


def test_the_check_panels_command_gives_only_the_flags_the_module_takes(monkeypatch, capsys):
    """A module whose constructor takes no heads and no dropout (ReturnsTuple: d_in, d_out) is given neither flag by
    the panel's command: the CLI says of each flag a constructor does not take that it was not used, and the command
    the page prints must run without such lines."""
    from types import SimpleNamespace

    from attnviz import cli, urlstate
    from attnviz.ui import module_check

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:ReturnsTuple")
    settings = {**urlstate.DEFAULTS, "variant": "Your module: ReturnsTuple", "d_in": 32, "d_out": 16}
    config = urlstate.config_from_settings(settings)
    trace = SimpleNamespace(config=config, n=6, module_run=SimpleNamespace(class_name="ReturnsTuple",
                                                                           filename=str(MODULES)))
    argv = module_check.cli_command(trace).split()[3:]
    assert "--num-heads" not in argv and "--dropout" not in argv
    argv[1] = f"{MODULES.parent}/{argv[1]}"
    assert cli.main(argv) in (0, 1)
    assert "not used" not in capsys.readouterr().err


def test_a_module_that_raises_after_one_that_passed_shows_no_verdict_of_the_one_before():
    """The sidebar switches from a module that passes every rule to one whose forward raises: the page keeps the last
    valid view, but no Check panel under the error — its green verdict would read as the new module's."""
    at = app()
    no_exception(at)
    assert [s.value for s in at.subheader if s.value.startswith("Check ")] == ["Check CausalSelfAttention"]
    assert any("rules pass" in s.value for s in at.success)
    at.sidebar.selectbox(key="variant").set_value("Your module: Raises").run()
    no_exception(at)
    assert any("the forward raised RuntimeError" in text for text in warnings(at)), warnings(at)
    assert "Showing the last valid view." in [c.value for c in at.caption]
    assert not [s.value for s in at.subheader if s.value.startswith("Check ")]
    assert not at.success and not rule_tables(at)
    assert any("module, CausalSelfAttention, is not checked here" in c.value for c in at.caption)


def test_a_mask_filled_with_0_is_drawn_and_explained_as_the_module_ran_it(monkeypatch):
    """A module that asks for the causal mask and fills the future with 0 (not −∞) is drawn as it ran: the caption
    says the mask was asked and the weights reach the future, the stage button says no later key is hidden (no −∞),
    the focused map and every grid tile draw every cell — and its cell (0, 3) is explained from the 0 its softmax
    took."""
    from helpers.apptest import decode, figure
    from helpers.maps import cells_shown, images, pixels

    from attnviz.ui.cache import cached_trace

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:ZeroFilledMask")
    at = app(variant="Your module: ZeroFilledMask", cell="0,3")
    no_exception(at)
    trace = cached_trace(*at.session_state["_last_valid"])
    assert "causal mask asked; the module's weights reach the future" in " ".join(c.value for c in at.caption)
    assert "masked (no later key hidden)" in at.segmented_control(key="heads_stage").options
    assert not [o for o in at.segmented_control(key="heads_stage").options if "−∞" in o]
    focused = figure(at, "head 0: weights")
    np.testing.assert_allclose(cells_shown(focused), trace.steps["weights"][0, 0], atol=1e-6)  # none grey
    grid = next(fig for fig in figures(at) if any(t.get("name", "").startswith("select head") for t in fig["data"]))
    assert all((pixels(image)[..., 3] == 255).all() for image in images(grid))  # every tile cell drawn
    # why (0, 3) has its weight: from the 0 its softmax took, as the map's weight
    row = trace.steps["masked"][0, 0, 0].astype(np.float64)  # (n,) the softmax's input
    summary = next(m.value for m in at.markdown if m.value.startswith("score q·k"))
    weight = f"weight **{trace.steps['weights'][0, 0, 0, 3]:.4f}**"
    assert "the softmax takes **0.0000**" in summary and weight in summary, summary
    explained = next(fig for fig in figures(at) if {t.get("name") for t in fig["data"]} >= {"scaled", "weight"})
    title = explained["layout"]["title"]["text"].replace("<br>", " ")
    assert "exp(0.0000) ÷ Σ over the row's visible keys of exp(softmax input)" in title, title  # as the line beside it
    np.testing.assert_allclose(decode(next(t for t in explained["data"] if t["name"] == "scaled")["y"]), row,
                               atol=1e-6)


def test_the_steps_and_compare_pages_draw_a_mask_filled_with_0_as_it_ran(monkeypatch):
    from helpers.maps import cells_shown

    monkeypatch.setenv(user_code.ENV, f"{MODULES}:ZeroFilledMask")
    at = app("pages/steps.py", variant="Your module: ZeroFilledMask", stage="weights")
    no_exception(at)
    assert any(not np.isnan(cells_shown(fig)).any() for fig in figures(at) if "after: softmax" in
               fig["layout"]["title"]["text"])
    at.segmented_control(key="steps_stage").set_value("masked").run()
    leak = "Your module asks for a causal mask, but its mask hides no later key"
    assert any(w.startswith(leak) for w in warnings(at)), warnings(at)
    titles = [fig["layout"]["title"]["text"].replace("<br>", " ") for fig in figures(at)]  # its words, in lines
    assert "after: masked (no later key hidden)" in titles and not [t for t in titles if "−∞" in t], titles
    at = app("pages/compare.py", variant="Your module: ZeroFilledMask")
    no_exception(at)
    mine = next(fig for fig in figures(at) if fig["layout"]["title"]["text"].startswith("ZeroFilledMask (your code)"))
    assert not np.isnan(cells_shown(mine)).any()


def test_a_model_of_two_layers_picks_the_attention_every_page_draws_by_the_sidebar_and_the_url(monkeypatch):
    """A small GPT of two one-head layers: the sidebar's Attention picks a layer ("2 of 2 (line N)"), the URL keeps
    it, the note names the one drawn, a download names it; a link's attention the model has not is named and
    attention 1 drawn."""
    monkeypatch.setenv(user_code.ENV, f"{MODULES}:SmallGPT")
    downloads = recorded_downloads(monkeypatch)
    line = MODULES.read_text().splitlines().index(
        "        attn_weights = torch.softmax(attn_scores, dim=-2 if self.bug == \"softmax-dim\" else -1)") + 1
    at = app("pages/shapes.py", variant="Your module: SmallGPT", d_in="16", d_out="16", num_heads="1", attention="9")
    no_exception(at)
    assert link_notices(at) == ("Ignored URL parameter attention='9': it is out of range (this module's 2 attentions: "
                                "1 … 2); showing attention 1.")
    picker = at.sidebar.selectbox(key="attention")
    assert picker.label == "Attention" and picker.options == [f"1 of 2 (line {line})", f"2 of 2 (line {line})"]
    assert picker.value == 1
    assert [box.value.replace("\\", "") for box in at.info] == [
        f"The forward computed 2 attentions; this shows attention 1 of 2 on line {line}."]
    picker.set_value(2).run()
    no_exception(at)
    assert at.query_params["attention"] == "2"
    assert [box.value.replace("\\", "") for box in at.info] == [
        f"The forward computed 2 attentions; this shows attention 2 of 2 on line {line}."]
    assert "attnviz-trace-module.npz" in downloads and downloads[-1] == "attnviz-trace-module-attention2.npz", downloads


def test_the_steps_page_shows_the_line_of_the_picked_attention_from_its_blocks_class(monkeypatch):
    """A GPT of two blocks, a sliding window then the book's attention: Steps shows the stage's line from the class of
    the attention picked, named, and that class's source marked at the line's number in the file; attention 1 picked,
    the window's class's."""
    monkeypatch.setenv(user_code.ENV, f"{MODULES}:LocalGlobalGPT")
    lines = MODULES.read_text().splitlines()
    mask = "attn_scores.masked_fill_(mask_bool, -torch.inf)"
    start = lines.index("class MyMultiHeadAttention(nn.Module):")
    line = next(at for at in range(start, len(lines)) if lines[at].strip() == mask) + 1
    at = app("pages/steps.py", variant="Your module: LocalGlobalGPT", d_in="16", d_out="16", num_heads="2",
             attention="2", stage="masked")
    no_exception(at)
    codes = [c.value for c in at.code]
    assert f"# MyMultiHeadAttention.forward, line {line} of user_modules.py\n{mask}" in codes, codes
    panel = next(code for code in codes if code.startswith("class MyMultiHeadAttention(nn.Module):"))
    assert f"{mask}  # ◀ this stage" in [row.strip() for row in panel.splitlines()]
    assert f"Line {line} of user_modules.py (marked ◀), in MyMultiHeadAttention.forward, computes this stage." in [
        c.value for c in at.caption]
    at.sidebar.selectbox(key="attention").set_value(1).run()
    no_exception(at)
    codes = [c.value for c in at.code]
    assert any(code.startswith("# LearnerSWA.forward, line ") for code in codes), codes
    assert any(code.startswith("class LearnerSWA(nn.Module):") and "◀" in code for code in codes)
