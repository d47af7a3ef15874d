"""attnviz — ``streamlit run app.py``: declares the pages, draws the sidebar they share, runs the chosen one.

Streamlit's own multipage model: every run goes through this script.  ``st.navigation`` picks the page from the URL
(the pages are the scripts in ``pages/``, listed in :mod:`attnviz.ui.navigation`; Heads at ``/``), and
``ui.app_frame`` draws the page config and the shared sidebar around ``page.run()``, so the sidebar's widgets keep
their values across page switches by themselves.  The page then reads its settings with ``ui.setup()``.

A fresh server's first run warms up twice, explicitly, below: the browser starts on Plotly's code while the server
imports torch (:func:`warm_up_browser`), and the view the first page shows is built in a thread while the rest of the
app is imported (:func:`start_warm_up`).
"""

import contextlib
import sys
import threading

import streamlit as st

from attnviz import words  # light: the words the first run shows before torch is imported

STARTING = f":material/hourglass_top: {words.STARTING}"


@st.cache_resource(show_spinner=False)
def _browser_warm_up_claim() -> threading.Lock:
    """One lock per server process (Streamlit keeps a cached resource for the process): acquired once, never
    released, so exactly one run warms the browser up."""
    return threading.Lock()


def warm_up_browser():
    """A server process's first run, before it imports torch: a line saying the app is starting, and an empty Plotly
    chart in a one-pixel box, so the browser fetches and compiles Plotly's JavaScript (several MB) while the server
    imports torch; the caller empties the box before the page draws anything.  Returns the box, or None on any later
    run (torch is imported, or another run claimed the warm-up: several first sessions compiling that code at once
    beside the server would slow them all).  benchmarks/README.md ("The house on Streamlit's multipage model") has
    what it saves."""
    if "torch" in sys.modules or not _browser_warm_up_claim().acquire(blocking=False):
        return None
    import numpy  # noqa: F401  (whole before Plotly looks it up; an import waits for another thread's)

    box = st.empty()
    with box.container():
        st.caption(STARTING)
        with st.container(height=1, border=False), contextlib.suppress(AttributeError):  # pandas half-imported
            st.plotly_chart({"data": [{"type": "heatmap", "z": [[0.0]]}], "layout": {"height": 10}},
                            key="_warm_up_chart")
    return box


warm_up_box = warm_up_browser()


def start_warm_up() -> None:
    """Once per server process, before the rest of the app is imported: build what the first page runs — the book's
    MHA, or the module ``--module`` names, which the app opens on (``urlstate.opening_config``) — in a thread while
    this first run imports pandas and Streamlit's glue and draws the sidebar (later calls do nothing;
    ``pipeline.prepare_in_background`` says more).  The modules the command line names are loaded here, in the
    script's thread, as the sidebar would load them, under a spinner while they are not read yet (importing a file
    runs its code; a session that arrives meanwhile waits for the whole list, ``user_code.listed``); the thread builds
    and runs one under the time limit every call of a user's code has."""
    from attnviz import pipeline, time_limit, urlstate, user_code  # torch: the browser fetches Plotly's code meanwhile

    reading = contextlib.nullcontext() if user_code.listed_already() else st.spinner(
        f"Reading your modules… (importing a file runs its code; one still running after {time_limit.SECONDS:g} s is "
        "stopped)", show_time=True)
    with reading:
        config = urlstate.opening_config()
    pipeline.prepare_in_background(config)


start_warm_up()

from attnviz import ui  # noqa: E402  (pandas and the rest, while the warm-up builds the default view)

if warm_up_box is not None:
    warm_up_box.empty()

pages = ui.pages()
page = ui.navigate(pages)  # st.navigation; the sidebar draws the page links itself, above the settings
with ui.app_frame(page, pages):
    page.run()
