"""attnviz — `streamlit run app.py`.  The Heads view is what `/` shows (same script as /heads).

A fresh server's first run here first sends an empty chart in a one-pixel-high box, removed once the server has
imported attnviz: the browser fetches and compiles Plotly's JavaScript (4.7 MB) while the server imports torch
(~1 s), instead of after the page's first chart arrives.  This runs before `import attnviz.ui` (which imports
torch), so it cannot live there; `attnviz.first_run` lets one run per process do it (see its docstring for why not
every session).

Plotly checks even this chart against numpy and pandas as it finds them in sys.modules, where a module that another
session is still importing sits half-initialised (attnviz/ui/__init__.py tells the race).  So numpy is imported
first here (an `import` waits for another thread's), and if pandas is half-imported the chart raises and the page
goes on without the preload.  pandas itself is imported later, by attnviz.ui, while the warm-up draws its table.
A fresh server's first page went from 1.62× to 1.08× a one-chart Streamlit page (benchmarks/README.md).
"""

import contextlib
import runpy
from pathlib import Path

import numpy  # noqa: F401  (torch imports it anyway; whole before Plotly reads it, as the docstring says)
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
