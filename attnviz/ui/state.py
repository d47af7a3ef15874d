"""Widget state that survives page switches: sidebar values are copied to non-widget ``_keep_*`` keys by
the widgets' on_change callbacks and written back before the widgets are drawn (the ``pages/`` routing
drops widget state when the page changes); the first run of a session reads the URL."""

from __future__ import annotations

import streamlit as st

from attnviz import variants, weights
from attnviz.config import nearest_divisors
from attnviz.ui import weights as ui_weights
from attnviz.ui.urlstate import PRESET_DIMS, SETTING_KEYS, is_book, settings_from_query

ss = st.session_state


def init_session() -> None:
    """First run of a session: defaults, overlaid with valid URL parameters."""
    if "_keep_text" in ss:
        return
    names = [option.name for option in ui_weights.options()]
    values, notices = settings_from_query(dict(st.query_params), weights_names=names)
    for key, value in values.items():
        ss[f"_keep_{key}"] = value
    ss["_url_notices"] = notices


def restore_widgets() -> None:
    """Give every widget its kept value before it is drawn (Streamlit drops widget state on page
    switches; the ``_keep_*`` copies are updated by the widgets' on_change callbacks)."""
    for key in SETTING_KEYS:
        ss[key] = ss[f"_keep_{key}"]


def set_setting(key: str, value) -> None:
    ss[key] = ss[f"_keep_{key}"] = value


def _changed(key: str) -> None:
    """on_change of every sidebar widget: keep its value, and keep the sizes consistent."""
    set_setting(key, ss[key])
    if key == "weights" and ss["weights"] != weights.BOOK:
        set_setting("causal", True)  # how GPT-2 was trained (turning it off stays allowed)
    if key == "preset" and ss["preset"] in PRESET_DIMS:
        for name, value in zip(("d_in", "d_out", "num_heads"), PRESET_DIMS[ss["preset"]]):
            set_setting(name, value)
    elif key in ("d_in", "d_out", "num_heads") and PRESET_DIMS.get(ss["preset"]) != (
            ss["d_in"], ss["d_out"], ss["num_heads"]):
        set_setting("preset", "custom")
    if key in ("preset", "variant") and is_book(ss["preset"]) and ss["variant"] in variants.VARIANTS:
        # the book masks only causal attention, the wrapper and MHA (sections 3.5-3.6)
        set_setting("causal", variants.get(ss["variant"]).book_causal)
    if key == "d_out" and ss["d_out"] % ss["num_heads"]:
        new = nearest_divisors(ss["d_out"], ss["num_heads"], 1)[0]
        ss["_dims_notice"] = f"{ss['num_heads']} heads do not divide d_out {ss['d_out']}; using {new} heads."
        set_setting("num_heads", new)


def bind(key: str) -> dict:
    """Widget keyword arguments: its key, and the callback that keeps its value."""
    return {"key": key, "on_change": _changed, "args": (key,)}


def _keep_page_value(key: str) -> None:
    ss[f"_keep_{key}"] = ss[key]


def page_bind(key: str, default, valid=lambda value: True) -> dict:
    """Widget keyword arguments for a page-only widget whose value survives page switches."""
    kept = ss.get(f"_keep_{key}", default)
    ss[key] = kept if valid(kept) else default
    return {"key": key, "on_change": _keep_page_value, "args": (key,)}
