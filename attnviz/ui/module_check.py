"""The Check panel for a user's module: ``check_module``'s rules on this run's own tokens, with evidence."""

from __future__ import annotations

import copy

import pandas as pd
import streamlit as st
import torch

from attnviz import checks, tracing
from attnviz.config import AttentionConfig
from attnviz.producers import user_module
from attnviz.ui.cache import cached_trace
from attnviz.urlstate import markdown_escape

MAX_CHECK_TOKENS = 16  # the causal rule runs one forward per position: the first 16 tokens say it


@st.cache_data(max_entries=32, show_spinner=False)
def _checks(text: str, config: AttentionConfig) -> list[tuple[str, str, str]]:
    trace = cached_trace(text, config)
    module = copy.deepcopy(user_module.module_for(trace.config))  # the shared module is never switched
    x = torch.as_tensor(trace.embeddings["input"][:MAX_CHECK_TOKENS].copy())[None]  # (1, n, d_in)
    results = checks.check_module(module, x)
    return [(check.rule, check.status, check.evidence) for check in results]


def check_panel(ctx) -> None:
    """The rules as a table (rule, result, evidence) under the heads; nothing for the book's classes."""
    trace = ctx.trace
    if trace.module_run is None:
        return
    st.subheader(f"Check {trace.module_run.class_name}")
    st.caption(f"attnviz's rules on your code, run on this text's first {min(trace.n, MAX_CHECK_TOKENS)} tokens "
               "(in eval mode; dropout checked in both modes). The same table: "
               "`python -m attnviz check path/to/file.py:ClassName`.")
    try:
        with st.spinner("Checking your module…"):
            rows = _checks(*ctx.trace_key)
    except tracing.TraceError as error:
        st.warning(markdown_escape(str(error)), icon="✋")
        return
    table = pd.DataFrame(rows, columns=["rule", "result", "evidence"])
    failed = int((table["result"] == "fail").sum())
    if failed:
        st.error(f"{failed} of {len(table)} rules fail.", icon=":material/bug_report:")
    else:
        st.success(f"All {len(table)} rules pass or do not apply.", icon=":material/check_circle:")
    st.dataframe(table, key="module_checks", hide_index=True, width="stretch",
                 column_config={"evidence": st.column_config.TextColumn(width="large")})
