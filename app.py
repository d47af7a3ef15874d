"""attnviz — ``streamlit run app.py``: declares the pages, draws the sidebar they share, runs the chosen one.

Streamlit's own multipage model: every run goes through this script.  ``st.navigation`` picks the page from the URL
(the pages are the scripts in ``pages/``, listed in :mod:`attnviz.ui.navigation`; Heads at ``/``), and
``ui.app_frame`` draws the page config and the shared sidebar around ``page.run()``, so the sidebar's widgets keep
their values across page switches by themselves.  The page then reads its settings with ``ui.setup()``.
"""

import streamlit as st

from attnviz import ui


def start_warm_up() -> None:
    """Once per server process: build the default view's tokenizer, seeded embedding table and module in a thread,
    while this first run draws the sidebar (later calls do nothing; ``ui.warm_up`` says more)."""
    ui.warm_up(ui.config_from_settings(ui.DEFAULTS))


start_warm_up()
pages = ui.pages()
page = st.navigation(pages, position="hidden")  # the sidebar draws the page links itself, above the settings
with ui.app_frame(page, pages):
    page.run()
