"""The app's pages, as ``app.py`` hands them to ``st.navigation``, and what a page script that runs without
``app.py`` does.

The page scripts live in ``pages/`` beside ``app.py``.  Streamlit routes by that folder (its first multipage
model: each request runs the requested script alone) until the first ``st.navigation`` call in the server
process; ``app.py`` makes that call, so from then on every run goes through ``app.py``.  A fresh server's first
request for a page's own path (a shared link such as ``/steps?text=…``) still runs the page script alone:
:func:`take_over_routing` is that run's ``st.navigation`` call.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from streamlit.navigation.page import StreamlitPage

from attnviz.urlstate import (
    BOOK_CLASSES,
    BUG,
    CELL,
    COL,
    DTYPE,
    HEAD,
    KNOCKOUT,
    MAP,
    MAP_LAYER,
    NEW_TOKENS,
    PAIR,
    RANDOM,
    REPEAT,
    ROW,
    SIZES,
    STAGE,
    STEP,
    TOKEN,
    TOKEN_SEED,
    TRAIN_SEED,
    TRAIN_STEPS,
)


@dataclass(frozen=True)
class PageEntry:
    """One page: its script in ``pages/``, its title and icon in the sidebar, where it is (``url_path``; the
    default page is at ``/``), whether the sidebar's attention settings apply to its work, whether it draws the run
    of the sidebar's text (``text_run``: a Trace; a page without one reads the settings alone, and an empty text
    does not stop it), whether its views of one layer fill the sidebar's Layer selectbox
    (:mod:`attnviz.ui.layer_views`), and its own URL parameters (``url_params``, of ``urlstate.PAGE_PARAMS``: the
    URL keeps them while the page is shown, ``state.keep_page_params``); ``focused_head``: its ``head`` is the focused
    head of the sidebar's layer (the Heads and Steps pages': the same layer, the same heads), which a link from one
    such page to another carries (``sidebar.page_links``) — not the Induction lab's or Generate's, a head of their own
    map's layer; ``also_runs``: the settings its work runs whatever the book's class picked, which that class may set
    aside (a single-head class's Heads: Compare runs the multi-head variants with them) — its URL and Share link name
    them (``urlstate.view_settings``); ``book_classes``: it runs the book's Chapter 3 classes only, so with a
    checkpoint under Weights it runs them with seeded random weights at the checkpoint's sizes and says so (naming
    :func:`checkpoint_pages`); ``draws_link``: it binds its own URL parameters after ``ui.setup()`` and then draws the
    Share link itself (``ui.share_link(page_run.link)``); ``checks_module``: it draws the Check panel of a user's module
    that no map can draw (NaN or ∞ weights), where other pages link to it."""

    script: str
    title: str
    icon: str
    url_path: str | None = None  # None: the script's name
    default: bool = False
    hidden: bool = False  # reachable by its URL, not listed
    settings_apply: bool = True
    text_run: bool = True
    layer_views: bool = False
    url_params: tuple[str, ...] = ()
    focused_head: bool = False  # its head is the focused head of the sidebar's layer: a link between two carries it
    also_runs: tuple[str, ...] = ()  # settings its work runs whatever the class picked (urlstate.applying_settings)
    book_classes: bool = False  # runs the book's Chapter 3 classes only: a checkpoint's sizes, never its weights
    draws_link: bool = False  # draws the Share link itself, once its own URL parameters are bound
    checks_module: bool = False  # draws the Check panel of a user's module whose run no map can draw

    @property
    def view_also(self) -> tuple[str, ...]:
        """The ``also`` ``urlstate`` reads the page's view with: :attr:`also_runs`, and ``urlstate.BOOK_CLASSES``
        where it runs the book's classes only (with a checkpoint, their settings make its view, not the model's)."""
        return (*self.also_runs, BOOK_CLASSES) if self.book_classes else self.also_runs


WITHIN_A_LAYER = (HEAD, STAGE, ROW, COL)  # the focused head, the stage, the window: the Heads and Steps pages'
HEADS_PARAMS = (*WITHIN_A_LAYER, CELL)  # and the Heads page's clicked cell of the focused map
PAGES = (
    PageEntry("pages/heads.py", "Heads", ":material/grid_view:", url_path="", default=True, layer_views=True,
              url_params=HEADS_PARAMS, focused_head=True, checks_module=True),
    PageEntry("pages/steps.py", "Steps", ":material/footprint:", url_params=(*WITHIN_A_LAYER, PAIR),
              focused_head=True, draws_link=True),  # after its head, stage, window and rotary pair are bound
    PageEntry("pages/shapes.py", "Shapes", ":material/account_tree:"),
    PageEntry("pages/tokens.py", "Tokens", ":material/text_fields:"),
    PageEntry("pages/compare.py", "Compare variants", ":material/compare:", url_params=(MAP,),
              # every variant at the sidebar's sizes, the modern ones at its K/V groups, latent width and window
              also_runs=("d_out", "num_heads", "num_kv_groups", "latent_dim", "sliding_window_size"),
              book_classes=True, draws_link=True),  # after Heatmap shows is bound
    PageEntry("pages/pitfalls.py", "Pitfall lab", ":material/bug_report:", url_params=(BUG, TOKEN),
              also_runs=("num_heads",),  # the book's MHA with the sidebar's heads, a single-head class picked
              book_classes=True, draws_link=True),  # after the bug and the perturbed token are bound
    PageEntry("pages/induction.py", "Induction lab", ":material/repeat:", text_run=False,  # random tokens
              url_params=(REPEAT, TOKEN_SEED, MAP_LAYER, HEAD, KNOCKOUT),
              draws_link=True),  # after T, the seed, the head and the knock-outs are bound
    PageEntry("pages/generate.py", "Generate", ":material/keyboard_double_arrow_right:",  # the text is its prompt
              text_run=False, url_params=(NEW_TOKENS, RANDOM, STEP, MAP_LAYER, HEAD, SIZES, DTYPE),
              draws_link=True),  # by its stepper, once New tokens, the step, layer and head are bound
    PageEntry("pages/train.py", "Train", ":material/model_training:", settings_apply=False, text_run=False,
              url_params=(TRAIN_STEPS, TRAIN_SEED)),
    PageEntry("pages/benchmark.py", "Benchmark", ":material/speed:", text_run=False,  # its own "Tokens n"
              also_runs=("d_out", "num_heads", "causal"),  # multi-head attention at the sidebar's sizes and mask
              book_classes=True),
    PageEntry("pages/heads.py", "Heads", ":material/grid_view:", url_path="heads", hidden=True,  # /heads too
              layer_views=True, url_params=HEADS_PARAMS, focused_head=True, checks_module=True),
)


# The browser tab's icon: an eye drawn as text in an SVG data URL, which the page uses as it is (what Streamlit's
# frontend makes of an emoji icon, without the check of the emoji against Streamlit's emoji catalogue, which the first
# run imports for it; an image file would cost it loading and encoding).  Percent-encoded: ASCII, so not an emoji.
FAVICON = ("data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 100 100'>"
           "<text y='.9em' font-size='90'>%F0%9F%91%81%EF%B8%8F</text></svg>")


def navigate(app_pages: list[StreamlitPage]) -> StreamlitPage:
    """``st.navigation`` over ``app_pages`` (the sidebar draws their links itself), the browser tab's icon set first:
    otherwise the browser fetches the chosen page's Material icon from fonts.gstatic.com."""
    st.set_page_config(page_icon=FAVICON)
    return st.navigation(app_pages, position="hidden")


def pages() -> list[StreamlitPage]:
    """The ``st.Page`` of every entry of :data:`PAGES`, in order (the sidebar lists the visible ones)."""
    return [st.Page(entry.script, title=entry.title, icon=entry.icon, url_path=entry.url_path, default=entry.default,
                    visibility="hidden" if entry.hidden else "visible") for entry in PAGES]


def entry(page: StreamlitPage) -> PageEntry:
    """The entry of the page ``st.navigation`` chose."""
    return next(entry for entry in PAGES if (entry.url_path if entry.url_path is not None
                                             else entry.script.rsplit("/", 1)[-1][:-3]) == page.url_path)


def checkpoint_pages() -> list[str]:
    """The titles of the listed pages that run a checkpoint under Weights: those the settings apply to whose work is
    not the book's classes only (``PageEntry.book_classes``)."""
    return [entry.title for entry in PAGES if entry.settings_apply and not entry.book_classes and not entry.hidden]


def also_runs(script: str | None) -> tuple[str, ...]:
    """The ``also`` ``urlstate`` reads the view of the page of ``script`` with (None: none shown yet: nothing): its
    ``PageEntry.view_also``, the settings its work runs whatever the class and, on a page that runs the book's classes
    only, the ``urlstate.BOOK_CLASSES`` marker."""
    return next((entry.view_also for entry in PAGES if entry.script == script), ())


def shares_focused_head(script: str | None) -> bool:
    """Whether the page of ``script`` (None: no page shown yet) shows the focused head of the sidebar's layer."""
    return any(entry.focused_head for entry in PAGES if entry.script == script)


def take_over_routing() -> StreamlitPage:
    """For a page script that runs without ``app.py``: ``st.navigation`` with ``app.py``'s pages, which returns the
    page this run is for (the same script).

    That happens once per server process at most: its first request is for a page's own path (``/steps?…``), and
    Streamlit's ``pages/``-folder routing runs the page script alone.  This call — the public one that switches that
    routing off for the process — makes the app's pages the ones the browser knows, and every later run goes
    through ``app.py``.  The caller then runs the page as ``app.py`` does (``attnviz.ui.frame``)."""
    return navigate(pages())
