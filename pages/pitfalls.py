"""Pitfall lab: one classic attention bug at a time next to the book's code, and a causality leak detector."""

import pandas as pd
import streamlit as st

from attnviz import ui
from attnviz.labs.pitfalls import catalogue, detectors, workbench
from attnviz.labs.pitfalls import figures as pitfall_figures
from attnviz.labs.pitfalls.catalogue import PITFALLS
from attnviz.tokens import counted
from attnviz.ui import compute, lab_selectors

ctx = ui.setup(book_classes=True, draws_link=True)  # after the bug and the perturbed token are bound
if ctx is None:
    st.stop()
trace, config = ctx.trace, ctx.config
wanted_heads = int(ctx.settings["num_heads"])  # the sidebar's Heads, used when the variant is single-head


def verdict_box(version: detectors.Version, buggy: bool) -> None:
    if version.fired:
        st.error(f"**Detected:** {version.verdict}", icon=":material/bug_report:")
    elif buggy:
        st.warning(f"**Not visible here:** {version.verdict}", icon=":material/visibility_off:")
    else:
        st.success(f"**Check passed:** {version.verdict}", icon=":material/check_circle:")


def both_versions(pitfall, bug: str) -> None:
    """The correct code and the buggy one side by side: each one's verdict and map, then the bug's own figure."""
    with st.spinner("Running both versions…"):
        result = compute.pitfall(ctx.trace_key, wanted_heads, bug, trace)
    stage = pitfall.stage
    correct_name = "the book's code" if pitfall.correct is workbench.build_correct else "the correct code"
    head = min(pitfall.head, setup.num_heads - 1)
    for column, version, name in zip(st.columns(2), (result.correct, result.buggy), (correct_name, "with the bug")):
        with column:
            st.markdown(f"**{name.capitalize()}**")
            verdict_box(version, buggy=version is result.buggy)
            if version.observation.error is None and pitfall.draws_weights:
                st.caption(f"head {head} of {setup.num_heads}: {stage}, {name}"
                           + (", call 1" if stage == "dropped" else ""))
                fig = pitfall_figures.weights_figure(version.observation, tokens, head=head, stage=stage,
                                                     dropout=setup.dropout)
                st.plotly_chart(fig, config=ui.plotly_config(f"attnviz-pitfall-{bug}-{name.split()[-1]}"))
    if (extra := pitfall_figures.extra_figure(result, tokens)) is not None:
        st.plotly_chart(extra, config=ui.plotly_config(f"attnviz-pitfall-{bug}"))


tokens = workbench.lab_tokens(trace.tokens)
n = len(tokens)

st.title("Pitfall lab")
about = st.container()  # the class the chosen bug runs, filled in once the bug is known

lab_selectors.pitfalls_from_url(n)  # a session's first visit: the link's bug and token
bug = lab_selectors.bug_choice()
setup = catalogue.setup_for(config, trace.n, wanted_heads, bug)
with about:
    st.caption(f"{catalogue.describe(setup, bug)} · {counted(n)} · eval mode unless a bug says otherwise")
    for note in setup.notes:
        st.caption(f":material/info: {note}")

if bug == "none":
    st.info("No bug switched on: this is the book's code. Switch one on to see it next to the correct version, "
            "with the one line that differs and a verdict computed from the tensors.", icon=":material/science:")
    st.dataframe(pd.DataFrame(catalogue.table()), hide_index=True)
else:
    pitfall = PITFALLS[bug]
    why_not = pitfall.unavailable(setup)
    if not config.causal and pitfall.in_mask:
        st.caption(":material/info: The lab keeps the causal mask on (this bug lives in it); "
                   f"the leak detector below follows {catalogue.causal_source(config)}.")
    st.subheader(pitfall.title)
    st.code(catalogue.diff_text(bug), language="diff")
    st.markdown(pitfall.explanation)
    if why_not is not None:
        st.info(why_not, icon=":material/info:")
    else:
        both_versions(pitfall, bug)

st.header("Causality leak detector")
leak_bug = None if bug == "none" else bug
st.caption(f"Add seeded noise to one token's input embedding, rerun {catalogue.leak_subject(config, setup, leak_bug)} "
           "and measure how far every output moves. With a causal mask, every position before the perturbed token must "
           "stay *exactly* the same (Δ == 0).")
j = lab_selectors.perturbed_token(tokens)
ui.share_link(ctx.link)  # now that the URL holds the bug and the token this run draws
if j is None:
    st.info("One token: nothing comes before it, so there is nothing to leak into. Type more text.",
            icon=":material/info:")
else:
    with st.spinner("Perturbing…"):
        report = compute.leak(ctx.trace_key, wanted_heads, leak_bug, j, trace)
    if "error" in report:
        st.warning(f"**Verdict:** {report['verdict']} — the buggy code raises before producing outputs, so "
                   "there is nothing to compare.", icon=":material/error:")
    else:
        box = st.error if report["leaked"] else st.success
        icon = ":material/water_drop:" if report["leaked"] else ":material/check_circle:"
        box(f"**Verdict:** {report['verdict']}", icon=icon)
        st.plotly_chart(pitfall_figures.leak_figure(report, tokens), config=ui.plotly_config("attnviz-leak-detector"))
