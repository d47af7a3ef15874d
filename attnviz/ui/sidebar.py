"""The shared sidebar, the same on every page: page links, text, variant, sizes, mask, dropout, seed, device.
Settings that don't apply to the chosen variant are disabled with the registry's reason as their help."""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAPIException

from attnviz import pipeline, variants
from attnviz.ui.state import bind, init_session, restore_widgets, set_setting, ss
from attnviz.ui.urlstate import PRESETS, SETTING_KEYS, markdown_escape, share_query

PAGES = (
    ("app.py", "Heads", ":material/grid_view:"),
    ("pages/steps.py", "Steps", ":material/footprint:"),
    ("pages/shapes.py", "Shapes", ":material/account_tree:"),
    ("pages/tokens.py", "Tokens", ":material/text_fields:"),
    ("pages/compare.py", "Compare variants", ":material/compare:"),
    ("pages/pitfalls.py", "Pitfall lab", ":material/bug_report:"),
    ("pages/benchmark.py", "Benchmark", ":material/speed:"),
)


def sidebar() -> dict:
    """Draw the shared sidebar; returns the current settings."""
    init_session()
    restore_widgets()
    spec = variants.get(ss["variant"])
    with st.sidebar:
        st.markdown("### attnviz")
        for path, label, icon in PAGES:
            try:
                st.page_link(path, label=label, icon=icon)
            except StreamlitAPIException:  # a page script run on its own (no app.py): no links
                break
        st.text_area("Text", help="Any text; GPT-2 tokens beyond 1024 are truncated.", height=110, **bind("text"))
        st.selectbox("Attention variant", list(variants.LABELS), format_func=variants.LABELS.get, **bind("variant"))
        reason = spec.not_applicable("preset")
        st.selectbox("Model size", list(PRESETS), format_func=PRESETS.get, disabled=reason is not None, help=reason,
                     **bind("preset"))
        col_in, col_out = st.columns(2)
        reason = spec.not_applicable("d_in")
        col_in.number_input("d_in", min_value=1, max_value=pipeline.MAX_DIM, step=1, disabled=reason is not None,
                            help=reason, **bind("d_in"))
        col_out.number_input(
            "d_out", min_value=1, max_value=pipeline.MAX_DIM, step=1, disabled=spec.not_applicable("d_out") is not None,
            help=spec.not_applicable("d_out"), **bind("d_out"),
        )
        head_options = [h for h in pipeline.divisors(int(ss["d_out"])) if h <= pipeline.MAX_HEADS]
        if ss["num_heads"] not in head_options:
            set_setting("num_heads", pipeline.nearest_divisors(int(ss["d_out"]), int(ss["num_heads"]), 1)[0])
        st.selectbox(
            "Heads", head_options, disabled=spec.not_applicable("num_heads") is not None,
            help=spec.not_applicable("num_heads") or "Only divisors of d_out are offered (head_dim = d_out / heads).",
            **bind("num_heads"),
        )
        dims_notice = ss.pop("_dims_notice", None)
        if dims_notice:
            st.caption(f"ℹ️ {dims_notice}")
        reason = spec.not_applicable("causal")
        st.toggle("Causal mask", disabled=reason is not None,
                  help=reason or "Hide future tokens (−∞ above the diagonal before softmax).", **bind("causal"))
        reason = spec.not_applicable("dropout")
        st.slider("Dropout p", 0.0, 0.9, step=0.05, disabled=reason is not None, help=reason, **bind("dropout"))
        reason = spec.not_applicable("train")
        st.toggle("Dropout active (training mode)", disabled=reason is not None, help=reason, **bind("train"))
        st.number_input("Seed", min_value=0, max_value=pipeline.MAX_SEED, step=1, **bind("seed"))
        devices = pipeline.available_devices()
        if ss["device"] not in devices:
            set_setting("device", "auto")
        st.selectbox("Device", devices, help="auto = CUDA, then MPS, then CPU.", **bind("device"))
        for notice in ss.get("_url_notices", []):
            st.warning(markdown_escape(notice), icon="🔗")
    values = {key: ss[key] for key in SETTING_KEYS}
    st.query_params.from_dict(share_query(values))
    return values
