"""Share & export: the link to this view, the figure download format, and downloads whose data is looked up
(or recomputed) from the trace's key when the user clicks — never held by the session."""

from __future__ import annotations

import functools
import urllib.parse

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attnviz.trace import Trace
from attnviz.ui.cache import trace_key, trace_of
from attnviz.ui.state import page_bind
from attnviz.urlstate import MAX_URL_TEXT, PAGE_PARAMS, SETTING_KEYS, share_query


def share_and_export(trace: Trace | None, link: bool = True) -> DeltaGenerator:
    """The sidebar's "Share & export"; returns the place of its link.  ``link`` False leaves that place empty for
    the page to fill (:func:`share_link`) once it has bound its own URL parameters: the Heads page's focused head and
    window are bound in a fragment that reruns alone, after this is drawn."""
    with st.sidebar, st.expander("Share & export", icon=":material/share:"):
        place = st.container()
        if link:
            share_link(place)
        st.radio("Figure download format (camera icon on each chart)", ["png", "svg"], horizontal=True,
                 **page_bind("image_format", "png"))
        if trace is not None:
            from attnviz.views import export

            st.download_button(
                "Download this trace (NPZ + JSON manifest)",
                functools.partial(_export, export.trace_npz, trace_key(trace)),
                file_name="attnviz-trace.npz", mime="application/octet-stream", on_click="ignore",
                icon=":material/download:", help="Every recorded step, the embeddings and output, "
                "with manifest.json (config, tokens, shapes). Large at 1024 tokens.",
            )
    return place


def share_link(place: DeltaGenerator | None) -> None:
    """The link to this view into ``place`` (:func:`share_and_export`'s): every setting, named also at its default (the
    URL leaves those out), so that the link shows the same view whatever a later release's defaults are, and the
    page's own parameters as the URL holds them now.  None: the link is drawn already (``setup`` drew it: a page
    without parameters of its own, a stale view)."""
    if place is None:
        return
    values = {key: st.session_state[key] for key in SETTING_KEYS}
    base = (st.context.url or "").split("?", 1)[0]
    page_params = {key: st.query_params[key] for key in PAGE_PARAMS if key in st.query_params}  # the shown page's
    link = base + "?" + urllib.parse.urlencode({**share_query(values), **page_params})
    with place:
        st.caption("Link to this view (copy with the icon on the right):")
        st.code(link, language=None, wrap_lines=True)
        if len(values["text"]) > MAX_URL_TEXT:
            st.caption(f"The text is longer than {MAX_URL_TEXT:,} characters and is not in the link.")


def _export(write, key: tuple, *args) -> bytes:
    """A download button's deferred data: the Trace is looked up (or recomputed) when the user clicks."""
    return write(trace_of(key), *args)


def download_head_csv(trace: Trace, head: int, stage: str) -> None:
    from attnviz.views import export

    st.download_button(
        f"Download head {head} {stage} (CSV)",
        functools.partial(_export, export.weights_csv, trace_key(trace), head, stage),
        file_name=f"attnviz-head{head}-{stage}.csv", mime="text/csv", on_click="ignore", icon=":material/download:",
    )
