"""The Pitfall lab: the bug picked, its diff against the book's code, the correct and the buggy version side by side
with each one's verdict and map, and the causality leak detector.  ``pages/pitfalls.py`` calls :func:`draw`.

The lab is a fragment, and its leak detector a fragment within it: picking a bug reruns the lab alone (not the
sidebar), moving the perturbed token the leak detector alone (not the bug's maps).  Each fragment takes the trace's
key, not the Trace — Streamlit keeps a fragment's arguments for the session's lifetime — and draws the sidebar's
Share link (``page_run.link``) once it has bound its URL parameter, so the link carries the bug and token it draws."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from attnviz.config import AttentionConfig
from attnviz.labs.pitfalls import catalogue, detectors, workbench
from attnviz.labs.pitfalls import figures as pitfall_figures
from attnviz.labs.pitfalls.catalogue import PITFALLS, Pitfall
from attnviz.labs.pitfalls.workbench import LabSetup
from attnviz.tokens import counted
from attnviz.ui import compute, lab_selectors
from attnviz.ui.cache import trace_of
from attnviz.ui.frame import Context, plotly_config
from attnviz.ui.share import share_link
from attnviz.views import figures


def draw(page_run: Context) -> None:
    """The page below its title: what the lab runs, the bug picked (or the table of bugs), the leak detector."""
    _lab(dataclasses.replace(page_run, trace=None), page_run.trace_key)


@st.fragment
def _lab(context: Context, key: tuple) -> None:
    """The lab, a fragment: ``context`` without its Trace, which ``key`` looks up on every run."""
    page_run = dataclasses.replace(context, trace=trace_of(key))
    trace, config = page_run.trace, page_run.config
    tokens = workbench.lab_tokens(trace.tokens)
    n = len(tokens)
    about = st.container()  # the class the chosen bug runs, filled in once the bug is known

    lab_selectors.pitfalls_from_url(n)  # a session's first visit: the link's bug and token
    bug = lab_selectors.bug_choice()
    setup = catalogue.setup_for(config, trace.n, wanted_heads(page_run), bug)
    with about:
        st.caption(f"{catalogue.describe(setup, bug)} · {counted(n)} · eval mode unless a bug says otherwise")
        for note in setup.notes:
            st.caption(f":material/info: {note}")

    if bug == "none":
        st.info(no_bug_words(config), icon=":material/science:")
        bug_table()
    else:
        pitfall = PITFALLS[bug]
        why_not = pitfall.unavailable(setup)
        if not config.causal and pitfall.in_mask:
            st.caption(":material/info: The lab keeps the causal mask on (this bug lives in it); "
                       f"the leak detector below follows {catalogue.causal_source(config)}.")
        st.subheader(pitfall.title)
        st.code(catalogue.diff_text(bug), language="diff")
        st.markdown(pitfall.explained(setup))
        if why_not is not None:
            st.info(why_not, icon=":material/info:")
        else:
            both_versions(page_run, setup, tokens, pitfall, bug)

    link = None
    if page_run.link is not None:  # None: setup drew the link (a stale view)
        with page_run.link:
            link = st.container()  # made by this fragment, so that the leak detector's own runs can fill it
    leak_detector(dataclasses.replace(context, link=link), key, setup, tokens, None if bug == "none" else bug)


# px: the bug table's columns, which fit beside the sidebar at 800 px (a wider page shares out the rest evenly), and
# its rows: five lines, where the grid wraps a cell's text (it does in rows taller than 4 rem), so the longest line of
# code is read whole at 800 px, and no page width scrolls the table sideways
BUG_COLUMN_PX, LINE_COLUMN_PX, BUG_ROW_PX = 130, 167, 116


def bug_table() -> None:
    """The bugs with the book's line and the buggy line; from 800 px every row and every line whole, no scrolling."""
    st.dataframe(pd.DataFrame(catalogue.table()), hide_index=True, row_height=BUG_ROW_PX, height="content",
                 column_config={
                     "bug": st.column_config.TextColumn(width=BUG_COLUMN_PX, help="Pick it under *Switch on a bug*."),
                     "the book's line": st.column_config.TextColumn(
                         width=LINE_COLUMN_PX, help="The line as the book's code (or the lab's own class) writes it."),
                     "the buggy line": st.column_config.TextColumn(
                         width=LINE_COLUMN_PX, help="The one line the bug changes; the rest of the code is the same."),
                 })


def no_bug_words(config: AttentionConfig) -> str:
    """What the lab runs with no bug switched on: the book's code, or — with a user's module — nothing of the book's
    but the leak detector below, which reruns that module itself."""
    switch = ("Switch one on to see it next to the correct version, with the one line that differs and a verdict "
              "computed from the tensors.")
    if config.module is None:
        return f"No bug switched on: this is the book's code. {switch}"
    return (f"No bug switched on: the leak detector below reruns {config.module} itself, as every page runs it. "
            f"The bugs live in the lab's code, not in yours: {switch[0].lower()}{switch[1:]}")


def wanted_heads(page_run: Context) -> int:
    """The sidebar's Heads, used when the variant is single-head."""
    return int(page_run.settings["num_heads"])


def verdict_box(version: detectors.Version, buggy: bool) -> None:
    if version.fired:
        st.error(f"**Detected:** {version.verdict}", icon=":material/bug_report:")
    elif buggy:
        st.warning(f"**Not visible here:** {version.verdict}", icon=":material/visibility_off:")
    else:
        st.success(f"**Check passed:** {version.verdict}", icon=":material/check_circle:")


def both_versions(page_run: Context, setup: LabSetup, tokens: tuple[str, ...], pitfall: Pitfall, bug: str) -> None:
    """The correct code and the buggy one side by side: each one's verdict and map, then the bug's own figure."""
    with st.spinner("Running both versions…"):
        result = compute.pitfall(page_run.trace_key, wanted_heads(page_run), bug, page_run.trace)
    stage = pitfall.stage
    correct_name = "the book's code" if pitfall.correct is workbench.build_correct else "the correct code"
    head = pitfall.shown_head(setup)
    row = st.container(horizontal=True, gap="medium")  # side by side where two fit, else one above the other
    columns = [row.container(width=figures.PAIR_MAP_PX) for _ in range(2)]
    for column, version, name in zip(columns, (result.correct, result.buggy), (correct_name, "with the bug")):
        with column:
            st.markdown(f"**{name.capitalize()}**")
            verdict_box(version, buggy=version is result.buggy)
            if version.observation.error is None and pitfall.draws_weights:
                st.caption(f"head {head} of {setup.num_heads}: {stage}, {name}"
                           + (", call 1" if stage == "dropped" else ""))
                fig = pitfall_figures.weights_figure(version.observation, tokens, head=head, stage=stage,
                                                     dropout=setup.dropout)
                st.plotly_chart(fig, config=plotly_config(f"attnviz-pitfall-{bug}-{name.split()[-1]}"))
    if (extra := pitfall_figures.extra_figure(result, tokens)) is not None:
        st.plotly_chart(extra, config=plotly_config(f"attnviz-pitfall-{bug}"))


@st.fragment
def leak_detector(page_run: Context, key: tuple, setup: LabSetup, tokens: tuple[str, ...], bug: str | None) -> None:
    """Perturb the picked token's input and show which outputs move: any before it is a leak (``bug``: None, the
    book's code).  A fragment: ``page_run`` has no Trace; ``key`` is the trace's."""
    st.header("Causality leak detector")
    subject = catalogue.leak_subject(page_run.config, setup, bug)
    st.caption(f"Add seeded noise to one token's input embedding, rerun {subject} and measure how far every output "
               "moves. With a causal mask, every position before the perturbed token must stay *exactly* the same "
               "(Δ == 0).")
    j = lab_selectors.perturbed_token(tokens)
    share_link(page_run.link)  # the URL holds the bug and the token this run draws
    if j is None:
        st.info("One token: nothing comes before it, so there is nothing to leak into. Type more text.",
                icon=":material/info:")
        return
    with st.spinner("Perturbing…"):
        report = compute.leak(key, wanted_heads(page_run), bug, j, trace_of(key))
    if "error" in report:
        st.warning(f"**Verdict:** {report['verdict']} — the {'buggy ' if bug else ''}code raises before producing "
                   "outputs, so there is nothing to compare.", icon=":material/error:")
    else:
        box = st.error if report["leaked"] else st.success
        icon = ":material/water_drop:" if report["leaked"] else ":material/check_circle:"
        box(f"**Verdict:** {report['verdict']}", icon=icon)
        st.plotly_chart(pitfall_figures.leak_figure(report, tokens), config=plotly_config("attnviz-leak-detector"))
