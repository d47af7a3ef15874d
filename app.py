"""attnviz — `streamlit run app.py`.  The Heads view is what `/` shows (same script as /heads).

A session's first run here first sends an empty chart and an empty table in a one-pixel-high box, removed when the
page is drawn: the browser then fetches and compiles Plotly's and the data grid's JavaScript (5 MB) while the
server imports torch and runs attention, instead of after.  This runs before `import attnviz` (which imports
torch), so it cannot live in `attnviz.ui`.  A fresh server's first page went from 1.59× to about 1.2× a one-chart
Streamlit page (benchmarks/README.md).
"""

import runpy
from pathlib import Path

import pandas  # noqa: F401  (imported first, under the import lock, as attnviz/__init__.py explains)
import streamlit as st

preload = None
if not st.session_state.get("_code_preloaded"):
    st.session_state["_code_preloaded"] = True
    preload = st.empty()  # one slot, so that the whole container goes when the page is drawn
    with preload.container(height=1, border=False):
        st.plotly_chart({"data": [{"type": "heatmap", "z": [[0.0]]}], "layout": {"height": 10}}, key="_preload_chart")
        st.dataframe({"": []}, key="_preload_table")

runpy.run_path(str(Path(__file__).parent / "pages" / "heads.py"), run_name="__main__")

if preload is not None:  # the page is drawn: the box goes (after st.stop(), e.g. on empty text, it stays till the next run)
    preload.empty()
