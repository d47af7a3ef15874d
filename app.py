"""attnviz — `streamlit run app.py`.  The Heads view is what `/` shows (same script as /heads).

A session's first run here first sends an empty chart and an empty table in a one-pixel-high box, removed once
the server has imported attnviz: the browser fetches and compiles Plotly's and the data grid's JavaScript (5 MB)
while the server imports torch (~1.6 s), instead of after the page's first chart arrives.  This runs before
`import attnviz` (which imports torch), so it cannot live in `attnviz.ui`.  A fresh server's first page went from
1.59× to about 1.2× a one-chart Streamlit page (benchmarks/README.md).
"""

import runpy
from pathlib import Path

import pandas  # noqa: F401  (imported first, under the import lock, as attnviz/__init__.py explains)
import streamlit as st

preload = None
if not st.session_state.get("_code_preloaded"):
    st.session_state["_code_preloaded"] = True
    preload = st.empty()  # one slot, so that the whole box goes at once
    with preload.container(height=1, border=False):
        st.plotly_chart({"data": [{"type": "heatmap", "z": [[0.0]]}], "layout": {"height": 10}}, key="_preload_chart")
        st.dataframe({"": []}, key="_preload_table")

import attnviz.ui  # noqa: E402, F401  (torch and the rest: the browser fetches and compiles meanwhile)

if preload is not None:  # the browser has the code, or is still fetching it (that goes on): the box goes now,
    preload.empty()  # before the page draws anything, so nothing moves and nothing is left if the page stops
runpy.run_path(str(Path(__file__).parent / "pages" / "heads.py"), run_name="__main__")
