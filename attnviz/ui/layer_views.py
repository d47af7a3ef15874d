"""A page's views of one layer as a fragment: the views, the sidebar's Layer selectbox (a user's module's Attention
selectbox) and its Share & export are drawn by one fragment, so that switching the layer (the attention) reruns them
and nothing else (not the sidebar's other settings, nor what the page draws outside it, such as a model's next-token
panel).  A new text reruns the whole page: the sidebar draws the Text area (``sidebar.text_area`` says why)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import streamlit as st

from attnviz.config import AttentionConfig, InputError
from attnviz.trace import Trace
from attnviz.ui.cache import cached_trace
from attnviz.ui.frame import Context, run_notes, run_settings
from attnviz.ui.share import share_and_export
from attnviz.ui.sidebar import current_settings, drawn, fill_links, fill_view_slots


def draw_layer_views(page_run: Context, draw: Callable[[Context], None]) -> None:
    """Draw ``draw(page_run)`` — the page's views of ``page_run.trace`` — in a fragment with what the sidebar left to it
    (``PageEntry.layer_views``: the Layer selectbox): a new layer reruns the fragment with that trace.  ``draw``
    fills the Share link's place (``page_run.link``, with ``share.share_link``) once it has bound the page's own URL
    parameters, in whichever fragment binds them last.

    A stale view (setup drew the sidebar's slots and the last valid view) is drawn as it is, outside a fragment.

    ``draw`` must be a module's function, not one a page script defines: Streamlit keeps a fragment's arguments for
    the session's lifetime, and a page's function holds the page's globals — its Context, and so its Trace."""
    if getattr(draw, "__module__", None) == "__main__":
        raise TypeError(f"ui.draw_layer_views needs a module's function, not the page script's {draw.__qualname__!r}: "
                        "it would keep the page's Trace for the session's lifetime.")
    if page_run.slots is None:
        draw(page_run)
        return
    _layer_fragment(dataclasses.replace(page_run, trace=None), page_run.trace_key, draw)


@st.fragment
def _layer_fragment(context: Context, key: tuple, draw: Callable[[Context], None]) -> None:
    """The fragment.  Streamlit keeps a fragment's arguments for the session's lifetime: it holds the context
    without its Trace (``context``) and the trace's key, and looks the Trace up in the cache on every run."""
    settings, config = context.settings, context.config
    fill_view_slots(context.slots, context.weights)
    if (config.checkpoint is not None and _moved("layer", config.layer)
            or config.module is not None and _moved("attention", config.attention)):
        settings, config, trace = _rerun(config)
    else:
        trace = cached_trace(*key)
    fill_links(context.slots, settings)  # the page links carry the layer this run draws
    link = share_and_export(trace, link=False)  # filled by draw once the page's URL parameters are bound
    run_notes(trace)  # in the fragment: its run's notes replace the last run's
    draw(dataclasses.replace(context, settings=settings, config=config, trace=trace, link=link))


def _moved(key: str, run_value) -> bool:
    """Whether the widget ``key`` (the Layer or Attention selectbox) holds another value than the page's whole run drew
    (``run_value``) or than this fragment last drew (the URL holds that): a new one, or back to the whole run's after
    another — either way its trace, the URL and the link must follow it."""
    return not (st.session_state[key] == run_value and drawn(key, run_value))


def _rerun(config: AttentionConfig) -> tuple[dict, AttentionConfig, Trace]:
    """The settings the widgets hold now and their run, for a fragment rerun that changed them; on invalid input the
    whole page reruns instead (setup says what went wrong and shows the last valid view)."""
    settings = current_settings()
    try:
        config, trace = run_settings(settings, config.checkpoint)
    except InputError:
        st.rerun()
    return settings, config, trace
