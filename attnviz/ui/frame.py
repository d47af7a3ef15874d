"""The frame every page shares: ``setup()`` (page config, sidebar, the cached run, a plain message and the
last valid view on bad input) and the small view helpers every page uses (modebar config, the compact shape
diagram beside a view, the variant's label)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import streamlit as st

from attnviz.pipeline import AttentionConfig, InputError, Trace
from attnviz.ui.cache import cached_trace, trace_key, tune_memory
from attnviz.ui.share import share_and_export
from attnviz.ui.sidebar import sidebar
from attnviz.ui.state import ss
from attnviz.ui.urlstate import config_from_settings, markdown_escape


@dataclass(frozen=True)
class Context:
    settings: dict
    config: AttentionConfig
    trace: Trace
    stale: bool  # True when showing the last valid view because the current input is invalid

    @property
    def key(self) -> tuple:
        return trace_key(self.trace)


def _last_valid_trace() -> Trace | None:
    """The last valid view of this session (recomputed if the cache evicted it)."""
    last = ss.get("_last_valid")
    return None if last is None else cached_trace(*last)


def setup(page_title: str) -> Context | None:
    """Sidebar + cached run.  On invalid input: a plain message and the last valid view."""
    tune_memory()  # explicit, once per server: glibc's malloc hands freed tensor memory back (opt-out: env var)
    st.set_page_config(page_title=f"attnviz · {page_title}", page_icon=":material/visibility:", layout="wide")
    values = sidebar()
    try:
        config = config_from_settings(values).validate()
        with st.spinner("Running attention…"):
            trace = cached_trace(values["text"], dataclasses.astuple(config))
    except InputError as exc:
        st.warning(markdown_escape(str(exc)), icon="✋")
        last = _last_valid_trace()
        share_and_export(last)
        if last is None:
            return None
        st.caption("Showing the last valid view.")
        return Context(settings=values, config=last.config, trace=last, stale=True)
    ss["_last_valid"] = (values["text"], dataclasses.astuple(config))  # a key, not the arrays
    share_and_export(trace)
    for note in trace.notes:
        st.info(markdown_escape(note), icon="ℹ️")
    return Context(settings=values, config=config, trace=trace, stale=False)


def beside_shape_diagram(trace: Trace, highlight: str):
    """The compact live shape diagram (``highlight`` = the stage on view) in a narrow left column;
    returns the wide column to its right.  Plain HTML, not a Graphviz chart: the browser lays a
    Graphviz chart out again on every settings change (~0.35 s); the Shapes page has the full one."""
    from attnviz import diagram

    diagram_col, view_col = st.columns([1, 3])
    with diagram_col:
        st.html(diagram.shape_flow_html(trace.shapes, trace.config, highlight=highlight))
        st.caption(diagram.head_dim_equation(trace.config) + " · full diagram: the Shapes page")
    return view_col


def variant_label(config: AttentionConfig) -> str:
    heads = f", {config.heads} heads × {config.head_dim}" if config.heads > 1 else ""
    return f"{config.spec.label}{heads}"


def plotly_config(filename: str) -> dict:
    """Modebar whose camera button downloads PNG or SVG (the sidebar's choice) under ``filename``."""
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": ss.get("_keep_image_format", "png"), "filename": filename, "scale": 2},
    }
