"""attnviz — `streamlit run app.py`.  The Heads view is what `/` shows (same script as /heads).

A fresh server's first run here first sends an empty chart and an empty table in a one-pixel-high box, removed
once the server has imported attnviz: the browser fetches and compiles Plotly's and the data grid's JavaScript
(5 MB) while the server imports torch (~1.6 s), instead of after the page's first chart arrives.  This runs
before `import attnviz.ui` (which imports torch), so it cannot live there; `attnviz.first_run` lets one run per
process do it (see its docstring for why not every session).  A fresh server's first page went from 1.59× to
about 1.2× a one-chart Streamlit page (benchmarks/README.md).
"""

import runpy
from pathlib import Path

import streamlit as st

from attnviz import first_run  # imports pandas first, under the import lock, as attnviz/__init__.py explains

preload = None
if first_run.claim():
    preload = st.empty()  # one slot, so that the whole box goes at once
    with preload.container(height=1, border=False):
        st.plotly_chart({"data": [{"type": "heatmap", "z": [[0.0]]}], "layout": {"height": 10}}, key="_preload_chart")
        st.dataframe({"": []}, key="_preload_table")

import attnviz.ui  # noqa: E402, F401  (torch and the rest: the browser fetches and compiles meanwhile)

if preload is not None:  # the browser has the code, or is still fetching it (that goes on): the box goes now,
    preload.empty()  # before the page draws anything, so nothing moves and nothing is left if the page stops
runpy.run_path(str(Path(__file__).parent / "pages" / "heads.py"), run_name="__main__")
