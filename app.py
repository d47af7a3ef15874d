"""attnviz — ``streamlit run app.py``: the entry point; ``/`` shows the Heads page (``pages/heads.py``).

Before importing attnviz's UI (and torch), a server's first run has the browser start on Plotly's code
(:mod:`attnviz.first_run` says how and why); then it runs the Heads page.
"""

import contextlib
import runpy
from pathlib import Path

import numpy  # noqa: F401  (torch imports it anyway; whole before Plotly reads it: attnviz.first_run says why)
import streamlit as st

from attnviz import first_run  # imports nothing else

preload = None
if first_run.claim():
    preload = st.empty()  # one slot, so that the whole box goes at once
    with preload.container(height=1, border=False), contextlib.suppress(AttributeError):  # half-imported pandas
        st.plotly_chart({"data": [{"type": "heatmap", "z": [[0.0]]}], "layout": {"height": 10}}, key="_preload_chart")

import attnviz.ui  # noqa: E402, F401  (torch and the rest: the browser fetches and compiles meanwhile)

if preload is not None:  # the browser has the code, or is still fetching it (that goes on): the box goes now,
    preload.empty()  # before the page draws anything, so nothing moves and nothing is left if the page stops
runpy.run_path(str(Path(__file__).parent / "pages" / "heads.py"), run_name="__main__")
