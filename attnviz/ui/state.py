"""Widget state: the sidebar's settings bound to the URL, and the page widgets kept across page switches.

The sidebar is drawn by ``app.py`` on every page, so Streamlit keeps its widgets' values itself.  A setting takes
the URL's value when its widget has none yet (a session's first run); the sidebar writes every setting back to
the URL on every run (``attnviz.ui.sidebar.current_settings``), so the URL follows the settings.  The sizes are
kept consistent by the widgets' ``on_change`` callbacks.

A page's own widgets (the focused head, a stage, a window) are drawn only on their page, and Streamlit drops the
value of a widget that a run does not draw unless the widget asks to keep it: every page widget
(:func:`page_bind`) has ``persist_state="session"``, so a page shows its widgets as the user left it, also when
the user left while a fragment of the page reran itself (Generate's Play).

The settings are kept another way.  Some are drawn only for the variants that have them, and the Text area and
the Layer selectbox are drawn by the Heads page's fragment on that page and by ``app.py``'s sidebar on the others:
two widgets to Streamlit (a widget's id includes the script that draws it), where ``persist_state`` would hand
the value over one run late, after the widget was drawn empty.  :func:`keep_widgets`, run by ``app.py`` before
anything is drawn, assigns each setting's value to itself, which makes it a value of the session under its key
(Streamlit's docs, "Working with widgets in multipage apps": interrupt the widget clean-up process).
"""

from __future__ import annotations

import streamlit as st

from attnviz import variants, weights
from attnviz.config import nearest_divisors
from attnviz.ui import weights as ui_weights
from attnviz.ui.weights import WEIGHTS_REQUEST
from attnviz.urlstate import PAGE_PARAMS, PRESET_DIMS, SETTING_KEYS, is_book, settings_from_query

KEPT = {"persist_state": "session"}  # a page widget's value stays for the session while no run draws it
URL_NOTICES = "_url_notices"  # what the URL of a session's first run had that could not be used

PAGE_WIDGETS = (  # every page widget's key (page_bind refuses others): kept while their page is not shown
    "heads_stage", "heads_focus", "heads_row0", "heads_col0", "heads_overview", "heads_knockout_position",
    "next_position", "tokens_next_position", "image_format",
    "steps_stage", "steps_focus", "steps_row0", "steps_col0",
    "compare_map", "pitfalls_bug", "pitfalls_token",
    "induction_T", "induction_seed", "induction_head", "induction_knockout",
    "generate_new", "generate_random", "generate_layer", "generate_head", "generate_sizes", "generate_dtype",
    "train_steps", "train_seed", "benchmark_n", "benchmark_repeats",
)


def settings_from_url() -> None:
    """Every setting whose widget has no value yet takes the URL's (the default where the URL has none or a bad
    one); the notices of a session's first run are kept to show.  A weights option a page asked for on the last
    run (:func:`attnviz.ui.weights.select_weights`) is applied."""
    missing = [key for key in SETTING_KEYS if key not in st.session_state]
    if missing:
        names = [option.name for option in ui_weights.options()]
        query = {key: st.query_params.get_all(key) for key in st.query_params}  # every value of a repeated one
        values, notices = settings_from_query(query, weights_names=names)
        for key in missing:
            st.session_state[key] = values[key]
        st.session_state.setdefault(URL_NOTICES, notices)
    if (name := st.session_state.pop(WEIGHTS_REQUEST, None)) is not None:
        st.session_state["weights"], st.session_state["layer"], st.session_state["causal"] = name, 0, True


def keep_widgets() -> None:
    """Before anything is drawn: every setting that has a value keeps it through this run, drawn or not, and a
    setting drawn by another script than last run's starts with it (the module's docstring says why)."""
    for key in SETTING_KEYS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def set_setting(key: str, value) -> None:
    """A setting's new value, before its widget is drawn (or in a callback)."""
    st.session_state[key] = value


def _changed(key: str) -> None:
    """on_change of every sidebar widget: keep the sizes consistent.  The notices about the URL a session opened with
    go: they said which of its values were not used, and a setting the user changes since replaces that answer."""
    state = st.session_state  # read after each set_setting: the branches see the values the ones before set
    state.pop(URL_NOTICES, None)
    if key == "weights" and state["weights"] != weights.BOOK:
        set_setting("causal", True)  # how GPT-2 was trained (turning it off stays allowed)
    if key == "preset" and state["preset"] in PRESET_DIMS:
        for name, value in zip(("d_in", "d_out", "num_heads"), PRESET_DIMS[state["preset"]]):
            set_setting(name, value)
    elif key in ("d_in", "d_out", "num_heads") and PRESET_DIMS.get(state["preset"]) != (
            state["d_in"], state["d_out"], state["num_heads"]):
        set_setting("preset", "custom")
    if key in ("preset", "variant") and is_book(state["preset"]) and state["variant"] in variants.VARIANTS:
        # the book masks only causal attention, the wrapper and MHA (sections 3.5-3.6)
        set_setting("causal", variants.get(state["variant"]).book_causal)
    if key == "d_out" and state["d_out"] % state["num_heads"]:
        new = nearest_divisors(state["d_out"], state["num_heads"], 1)[0]
        state["_dims_notice"] = f"{state['num_heads']} heads do not divide d_out {state['d_out']}; using {new} heads."
        set_setting("num_heads", new)


def bind(key: str) -> dict:
    """A sidebar widget's keyword arguments: its key, and the callback that keeps the sizes consistent."""
    return {"key": key, "on_change": _changed, "args": (key,)}


def page_bind(key: str, default, valid=lambda value: True, url: str | None = None) -> dict:
    """A page widget's keyword arguments: its key (one of :data:`PAGE_WIDGETS`), with the value ``default`` where it
    has none or one ``valid`` refuses (a head that the new settings no longer have).

    ``url``: the page's URL parameter (one of ``PAGE_PARAMS``) that follows the widget, as the settings' parameters
    follow theirs: written with the value this run draws, and by the widget's ``on_change`` before the run that
    shows a new value, so that the sidebar's Share link, drawn before the page, carries it too.  The page reads it
    on a session's first visit."""
    if key not in PAGE_WIDGETS:
        raise KeyError(f"page widget {key!r} is not declared in attnviz.ui.state.PAGE_WIDGETS")
    if key not in st.session_state or not valid(st.session_state[key]):
        st.session_state[key] = default
    if url is None:
        return {"key": key, **KEPT}
    if url not in PAGE_PARAMS:
        raise KeyError(f"URL parameter {url!r} is not declared in attnviz.urlstate.PAGE_PARAMS")
    _page_param_to_url(key, url)
    return {"key": key, "on_change": _page_widget_changed, "args": (key, url), **KEPT}


def page_param_notice(url: str) -> str:
    """The session key of a page's notice about its URL parameter ``url`` (a value the link gave that the page could
    not use): shown by the page until the user sets that widget (:func:`page_bind`'s ``on_change``)."""
    return f"_url_notice_{url}"


def _page_widget_changed(key: str, url: str) -> None:
    st.session_state.pop(page_param_notice(url), None)  # the user's own value: the link's refused one is moot
    _page_param_to_url(key, url)


def _page_param_to_url(key: str, url: str) -> None:
    value = str(st.session_state[key])
    if st.query_params.get(url) != value:
        st.query_params[url] = value
