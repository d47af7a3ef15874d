"""A page's views of one layer as a fragment: the Layer selectbox in the sidebar, the layer's trace, the views and
the sidebar's Share & export are drawn by one fragment, so that switching the layer reruns them and nothing else
(not the sidebar's other settings, nor what the page draws outside it, such as the model's next-token panel)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import streamlit as st

from attnviz.models import CheckpointError
from attnviz.pipeline import InputError
from attnviz.ui.cache import cached_trace
from attnviz.ui.frame import Context, run_settings
from attnviz.ui.share import share_and_export
from attnviz.ui.sidebar import current_settings, layer_selectbox


def by_layer(ctx: Context, draw: Callable[[Context], None]) -> None:
    """Draw ``draw(ctx)`` — the page's views of ``ctx.trace`` — in a fragment with the sidebar's Layer selectbox
    (``ui.setup(..., layer_views=True)`` left its slot): a new layer reruns the fragment with that layer's trace.

    A stale view (setup drew the Layer selectbox and the last valid view) is drawn as it is, outside a fragment.

    ``draw`` must be a module's function, not one a page script defines: Streamlit keeps a fragment's arguments for
    the session's lifetime, and a page's function holds the page's globals — its Context, and so its Trace."""
    if getattr(draw, "__module__", None) == "__main__":
        raise TypeError(f"ui.by_layer needs a module's function, not the page script's {draw.__qualname__!r}: "
                        "it would keep the page's Trace for the session's lifetime.")
    if ctx.layer_slot is None:
        draw(ctx)
        return
    _layer_fragment(dataclasses.replace(ctx, trace=None), ctx.key, draw)


@st.fragment
def _layer_fragment(shell: Context, key: tuple, draw: Callable[[Context], None]) -> None:
    """The fragment.  Streamlit keeps a fragment's arguments for the session's lifetime: it holds the context
    without its Trace (``shell``) and the trace's key, and looks the Trace up in the cache on every run."""
    with shell.layer_slot:
        layer = layer_selectbox(shell.weights)
    settings, config = shell.settings, shell.config
    if config.checkpoint is not None and layer != config.layer:  # a fragment rerun: the Layer selectbox changed
        settings = current_settings()
        try:
            config, trace = run_settings(settings, config.checkpoint)
        except (InputError, CheckpointError):
            st.rerun()  # the whole page: setup says what went wrong and shows the last valid view
    else:
        trace = cached_trace(*key)
    share_and_export(trace)
    draw(dataclasses.replace(shell, settings=settings, config=config, trace=trace))
