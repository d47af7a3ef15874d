"""The Check panel for a user's module: ``check_module``'s rules on this run's own tokens, each rule's row shown as
soon as it is done.

A slow module's check is long (one forward per token for ``causal``, more for ``kv-cache``), so the panel shows it
running with Streamlit's own ``st.status`` and ``st.progress``: the rule running, its forward of how many, the time
left, and — when the pace of the rules' first forwards (``checks.Progress.pace``: not the traced forward, which
records every tensor) shows the whole check takes ``checks.SLOW_CHECK_SECONDS`` or more — how long.  Each finished
rule's row is kept in the session's state as it is done: a run that stops half-way keeps the rows done, and the panel
shows them with a button that checks the other rules, rather than starting again by itself.  A forward that raises
inside a rule keeps the rows before it too, with the reason.

Stopping uses Streamlit's own rule: a whole-app rerun stops the running script at its next element (here: the next
forward's progress report).  The panel runs inside the Heads page's layer fragment, whose widgets rerun only the
fragment — a rerun that waits for the running script instead of stopping it — so *Stop the check* is a
``st.page_link`` to this page with the current settings (what the sidebar's Heads link does), not a button.

A run whose weights hold NaN or ∞ draws no layer views; the page's setup draws the panel under its message, on that
run (its ``PageEntry.checks_module``).
"""

from __future__ import annotations

import copy
import os

import pandas as pd
import streamlit as st
import torch

from attnviz import checks, tracing, user_code
from attnviz.config import AttentionConfig
from attnviz.producers import user_module
from attnviz.ui.cache import trace_key
from attnviz.ui.sidebar import current_settings, module_message
from attnviz.urlstate import url_query
from attnviz.words import markdown_escape

PAGE = "pages/heads.py"  # the page the panel is on
MAX_CHECK_TOKENS = 16  # the causal rule runs one forward per position: the first 16 tokens say it
STATE = "module_check_runs"  # session_state: trace key -> the check's rows so far, its error, its forwards and time
# (a finished check is shared by every session: _finished)
TENTHS_BELOW = 10  # the panel's durations show tenths of a second below this many seconds ("4.2 s")
KEPT_CHECKS = 8  # the checks a session keeps (the last texts and settings looked at)


def check_panel(trace, where) -> None:
    """The rules on the user's module of ``trace`` as a table (rule, result, evidence), in ``where``.  ``trace`` may
    be a run no page draws (:class:`attnviz.producers.user_module.NonFiniteWeightsError`): the rules run the module
    again on its tokens."""
    key = trace_key(trace)
    with where:
        st.subheader(f"Check {trace.module_run.class_name}")
        st.caption(f"attnviz's rules on your code, run on this text's first {min(trace.n, MAX_CHECK_TOKENS)} tokens "
                   "(in eval mode; dropout checked in both modes). The same rules in a terminal (attnviz installed: "
                   "`pip install -e .` in its folder), from the folder "
                   f"that holds `{_file_name(trace)}`, on a seeded random input of these sizes (so "
                   f"other numbers): `{cli_command(trace)}`.")
        finished = _finished(*key)
        if finished:  # this run's check, done in this session or another
            _results(finished)
            return
        record = _record(key)
        left = [rule for rule in checks.RULES if rule not in {row[0] for row in record["rows"]}]
        if record["started"] and left and record["error"] is None:  # a run stopped half-way: go on only when asked
            notice = st.empty()
            with notice.container():
                st.info(f"The check stopped after {len(record['rows'])} of {len(checks.RULES)} rules (stopped, a "
                        "setting changed or another page opened); the rules done are below.",
                        icon=":material/pause:")
                others = f"the other {len(left)} rules" if len(left) > 1 else f"the last rule, {left[0]}"
                resume = st.button(f"Check {others}", key="module_check_resume", icon=":material/play_arrow:")
            if not resume:
                _table(record["rows"])
                return
            notice.empty()
        if left and record["error"] is None:
            _run(trace, record, left)
        finished.update(copy.deepcopy(record))  # done: every rule, or a forward that raised
        _results(record)


def cli_command(trace) -> str:
    """``attnviz check`` of this run's module built as the app built it, checked as the panel checks it (the file by
    its name only: the page shows no folder of the server's).

    The app builds a listed module from its sizes, dropout and seed alone (``user_module.module_for``): no K/V groups,
    latent width or window reaches its constructor, which the CLI fills the same way without ``--num-kv-groups``,
    ``--latent-dim`` and ``--window``; and the panel gives ``check_module`` no ``causal``, so both find it (no
    ``--causal``/``--no-causal``).  A size the constructor takes under none of its spellings (``num_heads``,
    ``dropout``, ``d_out``) is left out: the CLI would say it was not used.  So is every size a ``**kwargs``
    constructor would get by attnviz's name from the CLI (``user_code.kwargs_settings``) and gets none of from the app
    (the module decides it): the input's width and the context then come from the module, as in the app."""
    config, run = trace.config, trace.module_run
    file = _file_name(trace)
    cls = type(user_module.module_for(config))
    left_out = {*user_code.settings_not_taken(cls, ("d_out", "num_heads", "dropout")),
                *user_code.kwargs_settings(cls, ("d_in", "d_out", "num_heads", "context_length", "dropout"))}
    flags = {"d_in": f"--d-in {config.d_in}", "d_out": f"--d-out {config.d_out}",
             "num_heads": f"--num-heads {config.num_heads}",
             "context_length": f"--context-length {config.context_length}", "dropout": f"--dropout {config.dropout:g}"}
    if config.d_out == config.d_in:
        del flags["d_out"]  # the CLI's default --d-out is --d-in
    sizes = [flag for setting, flag in flags.items() if setting not in left_out]
    sizes.append(f"--tokens {min(trace.n, MAX_CHECK_TOKENS)}")
    if config.seed != AttentionConfig.seed:  # the CLI's default seed is the app's
        sizes.append(f"--seed {config.seed}")
    return f"python -m attnviz check {file}:{run.class_name} " + " ".join(sizes)


def _file_name(trace) -> str:
    """The module's file by its name only (the page shows no folder of the server's)."""
    return os.path.basename(trace.module_run.filename) if trace.module_run.filename else "your_file.py"


@st.cache_resource(max_entries=32, show_spinner=False)
def _finished(text: str, config: AttentionConfig) -> dict:
    """The finished check of the run (text, config), shared by every session: empty until one finishes it.

    A cached resource used as a store the panel writes into: Streamlit keeps one object per key for the server
    (bounded by ``max_entries``), which is what a check shared between tabs needs."""
    return {}


def _record(key: tuple) -> dict:
    """This session's check of the run ``key``: its rows so far (rule, result, evidence), its error, whether it
    started, its forwards and seconds (the oldest of more than ``KEPT_CHECKS`` is dropped)."""
    records = st.session_state.setdefault(STATE, {})
    if key not in records:
        records[key] = {"rows": [], "error": None, "started": False, "forwards": 0, "seconds": 0.0}
        for old in list(records)[:-KEPT_CHECKS]:
            del records[old]
    return records[key]


def _run(trace, record: dict, rules: list[str]) -> None:
    """Check ``rules`` with a status box that follows the check; each rule's row goes into ``record`` when done."""
    record["started"] = True
    forwards, seconds = record["forwards"], record["seconds"]  # a check that goes on adds to what it ran before
    class_name = trace.module_run.class_name
    module, x = _module_and_input(trace)
    slot = st.empty()
    with slot.container(), st.status(f"Checking {class_name}…", expanded=True) as status:
        bar = st.progress(0.0, text="Running your module once, traced: every rule reads this run")
        st.page_link(PAGE, label="Stop the check", icon=":material/stop_circle:",
                     query_params=url_query(current_settings()),
                     help="Stops this page's run after the current forward: the rules done stay.")
        estimate = st.empty()
        rows = st.empty()
        _table(record["rows"], rows)
        estimated = False

        def report(progress: checks.Progress) -> None:
            nonlocal estimated
            if progress.check is not None:
                check = progress.check
                record["rows"].append((check.rule, check.status, check.evidence))
                _table(record["rows"], rows)
            record["forwards"], record["seconds"] = forwards + progress.forwards, seconds + progress.seconds
            left = progress.seconds_left
            if left is not None and not estimated:  # the pace known (checks.PACED_FORWARDS): the first estimate
                estimated = True
                notice = progress.slow_notice(f"One forward of {class_name}", tenths_below=TENTHS_BELOW)
                if notice is not None:
                    estimate.warning(f"{notice}. Stop the check (above) keeps the rules done; so does leaving the "
                                     "page.", icon=":material/hourglass_top:")
            if progress.rule is None:
                doing = "Running your module once, traced: every rule reads this run"
            elif progress.check is None:
                doing = f"{progress.rule}: rule {progress.rules_done + 1} of {progress.rules_total}"
            else:
                doing = f"{progress.rule} done: {progress.rules_done} of {progress.rules_total} rules"
            when = f", about {_duration(left)} left" if left is not None else ""
            bar.progress(min(1.0, progress.forwards / progress.forwards_planned),
                         text=f"{doing} · {progress.forwards} of {progress.forwards_planned} forwards done{when}")

        try:
            checks.check_module(module, x, rules=rules, progress=report, sizes=module_sizes(trace))
        except tracing.TraceError as error:
            record["error"] = str(error)
        status.update(state="complete")
    slot.empty()


def module_sizes(trace) -> dict[str, int]:
    """The sizes the run's module was built with, by attnviz setting (``user_code.listed_sizes``): the ``sizes``
    ``attnviz check`` gives ``check_module`` for the same module and flags, so the kv-cache rule reads a module's
    sizes kept under names of its own (nanochat's ``n_kv_head``) in the panel as in the terminal."""
    return user_code.listed_sizes(trace.config.module, trace.config)


def _module_and_input(trace) -> tuple[torch.nn.Module, torch.Tensor]:
    """A copy of the run's module (the shared one is never switched) in eval mode, as a user's code hands it over
    (the sidebar's *Dropout active* is the app's mode, not a fault of the code: the rules check both modes), and
    the text's first tokens, (1, n, d_in)."""
    module = copy.deepcopy(user_module.module_for(trace.config)).eval()
    x = torch.as_tensor(trace.embeddings["input"][:MAX_CHECK_TOKENS].copy())[None]  # (1, n, d_in)
    return module, x


def _results(record: dict) -> None:
    """The check's verdict, its rows and what it cost; the rows done and the reason when a forward raised."""
    rows = record["rows"]
    if record["error"] is not None:
        done = f" The rules done before it: {len(rows)} of {len(checks.RULES)}." if rows else ""
        # module_message: no folder of the server's
        st.warning(markdown_escape(module_message(record["error"])) + done, icon=":material/back_hand:")
        if rows:
            _table(rows)
        return
    failed = sum(status == "fail" for _, status, _ in rows)
    if failed:
        st.error(f"{failed} of {len(rows)} rules fail.", icon=":material/bug_report:")
    else:
        st.success(f"All {len(rows)} rules pass or do not apply.", icon=":material/check_circle:")
    _table(rows)
    if record["forwards"]:
        st.caption(f"{record['forwards']} forwards of your module, {_duration(record['seconds'])}.")


def _table(rows: list[tuple[str, str, str]], where=None) -> None:
    """The rules done as a static table: its evidence wraps, so a failing rule's numbers are read whole (a data
    grid's cell shows one line of them)."""
    (where or st).table(pd.DataFrame(rows, columns=["rule", "result", "evidence"]), hide_index=True)


def _duration(seconds: float) -> str:
    return checks.duration(seconds, tenths_below=TENTHS_BELOW)
