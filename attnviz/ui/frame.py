"""The frame every page shares: :func:`app_frame` (``app.py`` around the page: page config, the shared sidebar),
``setup()`` (a page's settings and their cached run, a plain message and the last valid view on bad input) and the
small view helpers every page uses (modebar config, the compact shape diagram beside a view, the variant's label).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.navigation.page import StreamlitPage

from attnviz import embedding as core_embedding
from attnviz import user_code, variants
from attnviz import weights as core_weights
from attnviz.config import AttentionConfig, InputError
from attnviz.models import CheckpointError
from attnviz.producers import user_module
from attnviz.trace import Trace
from attnviz.ui import module_check
from attnviz.ui import weights as ui_weights
from attnviz.ui.cache import cached_trace, trace_key
from attnviz.ui.memory import freeze_imports, tune_memory
from attnviz.ui.navigation import PageEntry, checkpoint_pages, entry, pages, take_over_routing
from attnviz.ui.share import file_name, share_and_export
from attnviz.ui.sidebar import (
    ViewSlots,
    fill_links,
    fill_view_slots,
    module_message,
    sidebar,
    try_again_button,
    url_settings,
)
from attnviz.ui.state import keep_page_params, keep_widgets
from attnviz.urlstate import SETTING_KEYS, config_from_settings, url_query, url_value, view_settings
from attnviz.words import amount, markdown_escape


@dataclass(frozen=True)
class Context:
    """What :func:`setup` hands a page (``page_run``): the sidebar's settings and their run, ready to draw.

    ``config`` is the run's :class:`AttentionConfig`, already validated (``setup`` calls ``config.validate()`` and
    shows a plain message instead when it raises); ``trace`` is its cached run (None on a page that draws no run of
    the text); ``stale`` is True when that run is the last valid one because the current input is invalid;
    ``settings`` are the sidebar's raw values, ``weights`` the sidebar's choice of weights, ``slots`` and ``link``
    the sidebar's places a page with layer views or its own Share link fills.  ``checkpoint`` and ``trace_key`` are
    derived from them.
    """

    settings: dict
    config: AttentionConfig
    trace: Trace | None  # None on a page that draws no run of the text (PageEntry.text_run): it reads the config
    stale: bool  # True when showing the last valid view because the current input is invalid
    weights: ui_weights.Choice | None = None  # the sidebar's weights (the book's classes or a checkpoint)
    slots: ViewSlots | None = None  # a page with layer views (PageEntry.layer_views): what they draw in the sidebar
    link: DeltaGenerator | None = None  # the Share link's place, for the page to fill (share.share_link); see setup

    @property
    def checkpoint(self) -> bool:
        """True when this view draws a checkpoint's layer (``trace.model`` is set)."""
        if self.trace is None:
            return self.config.checkpoint is not None
        return self.trace.model is not None

    @property
    def trace_key(self) -> tuple:
        """``(text, config)``: what the trace and the views computed from it are cached by."""
        return trace_key(self.trace)


@dataclass(frozen=True)
class Frame:
    """What ``app.py`` drew before the page runs: the settings, the sidebar's places the page fills, and the page's
    entry (:class:`attnviz.ui.navigation.PageEntry`: whether it draws the run of the text, runs the book's classes
    only, draws its own Share link, checks a user's module)."""

    settings: dict
    slots: ViewSlots | None
    page: PageEntry


_this_run = threading.local()  # .frame: set while app.py runs the page (a session's script runs on one thread)


@contextlib.contextmanager
def app_frame(page: StreamlitPage, pages: list[StreamlitPage]) -> Iterator[Frame]:
    """``app.py`` around ``page.run()``: the page config and the shared sidebar (a link to each of ``pages``), drawn
    before the page runs; the page's ``setup()`` reads them."""
    _this_run.frame = _draw_frame(page, pages)
    try:
        yield _this_run.frame
    finally:
        _this_run.frame = None


def _draw_frame(page: StreamlitPage, pages: list[StreamlitPage]) -> Frame:
    """The page config and the shared sidebar of ``page``: the settings are folded away on a page whose work ignores
    them, and left to the page's layer views where it has them (:class:`attnviz.ui.navigation.PageEntry`)."""
    tune_memory()  # explicit, once per server: glibc's malloc hands freed tensor memory back (opt-out: env var)
    freeze_imports()  # once per server: the collection Streamlit runs after each script skips the imported modules
    st.set_page_config(page_title=f"attnviz · {page.title}", layout="wide")  # the icon: navigation.navigate
    keep_widgets()
    shown = entry(page)
    keep_page_params(shown.script, shown.url_params)  # before the sidebar writes the URL: the shown page's only
    if shown.settings_apply and shown.text_run:
        _new_text_ahead(shown.view_also)
    return Frame(*sidebar(pages, shown.settings_apply, shown.layer_views), page=shown)


def _frame() -> Frame:
    """This run's frame, drawn by ``app.py``.  A page script that runs without ``app.py`` (a fresh server's first
    request for the page's path) is run here as ``app.py`` runs it — the app's pages handed to ``st.navigation``
    (:func:`attnviz.ui.navigation.take_over_routing`), the frame, the page — and this run stops when it is done.
    One run, with the widget events it came with, and the same widgets as every later run draws."""
    frame = getattr(_this_run, "frame", None)
    if frame is None:
        page = take_over_routing()
        with app_frame(page, pages()):
            page.run()
        st.stop()
    return frame


def page_setup() -> dict:
    """A page the sidebar's attention settings do not apply to (Train): the settings, kept for the other pages."""
    return _frame().settings


def _last_valid_trace() -> Trace | None:
    """The last valid view of this session (recomputed if the cache evicted it)."""
    last = st.session_state.get("_last_valid")
    return None if last is None else cached_trace(*last)


def run_settings(values: dict, checkpoint: str | None) -> tuple[AttentionConfig, Trace]:
    """The run of these settings (``checkpoint``: a weights ref, or None for the book's classes), from the cache
    or computed under a spinner, kept as this session's last valid view.  Raises InputError (a CheckpointError is one).

    The spinner counts the seconds and names the user's own module when it runs one: a forward that is slow, or
    never returns, shows whose it is and for how long it has run."""
    variant = values.get("variant")
    own = variant not in variants.VARIANTS and variant in user_code.listed()  # the book's classes: one dict lookup
    running = f"Running your module, {markdown_escape(variant.split(': ', 1)[-1])}…" if own else "Running attention…"
    with st.spinner(running, show_time=True):
        config, trace = _trace_of(values, checkpoint)
    st.session_state["_last_valid"] = (values["text"], config)  # a key, not the arrays
    return config, trace


def _trace_of(values: dict, checkpoint: str | None) -> tuple[AttentionConfig, Trace]:
    """The validated config of these settings and its trace, from the cache or computed; a checkpoint that cannot
    be loaded now (changed on disk since the sidebar loaded it) is a CheckpointError in words with its listed name."""
    config = config_from_settings(values, checkpoint).validate()
    try:
        return config, cached_trace(values["text"], config)
    except CheckpointError as exc:
        if checkpoint is None:
            raise
        raise CheckpointError(ui_weights.unreadable(exc, checkpoint)) from None


def _new_text_ahead(also: tuple[str, ...]) -> None:
    """A new text with every other setting that makes the view (``urlstate.view_settings``, of a page whose work also
    runs ``also``) as the last run drew it (the URL): compute its trace before the sidebar's elements are sent, so
    that the forward pass runs while the browser is idle rather than busy drawing them on the same cores; the page's
    run then finds the trace in the cache.  Only then: any other change is settled by the sidebar (a checkpoint's
    sizes, a variant's heads), and a run ahead of it could compute a trace nobody draws.  Silent: a problem is for the
    page's run to report."""
    if any(key not in st.session_state for key in SETTING_KEYS) or st.session_state["weights"] != core_weights.BOOK:
        return  # a session's first run (its settings come from the URL), or a model's sizes to settle
    values = {key: st.session_state[key] for key in SETTING_KEYS}
    given = url_settings()  # what the last run drew
    if given["text"] == url_value("text", values["text"]) or any(
            given[key] != url_value(key, values[key]) for key in view_settings(values, also) if key != "text"):
        return
    try:
        _trace_of(values, None)
    except Exception:  # noqa: BLE001  (Streamlit's rerun and stop are BaseExceptions: they pass)
        return


def setup() -> Context | None:
    """The settings of the sidebar ``app.py`` drew, and their cached run, as the shown page's entry
    (:class:`attnviz.ui.navigation.PageEntry`) asks.  On invalid input or an unreadable checkpoint: a plain message and
    the last valid view (None if there is none yet).

    A user's module whose attention weights hold NaN or ∞ is such a message too (no map can draw those rows), but
    the code can still be checked: a page with ``PageEntry.checks_module`` (the Heads page, whose Check panel runs the
    rules) draws the panel under the message, on the refused run; another page links to it.

    ``PageEntry.book_classes``: the page runs the book's Chapter 3 classes only; with a checkpoint chosen it says so
    and runs them with seeded random weights at the checkpoint's sizes.

    A page that draws no run of the text (``PageEntry.text_run`` False: Benchmark, the Induction lab, Generate) gets
    the validated config and no trace: the text is not run, so an empty one stops nothing there (it stays in the
    sidebar, for the pages that run it; Generate reads it as its prompt and says itself when it is empty).

    A page with layer views (``PageEntry.layer_views``) draws them with :func:`attnviz.ui.layer_views.draw_layer_views`,
    which also draws the sidebar's Layer selectbox and Share & export (the context's ``slots``), so that a layer
    switch reruns only them.  With a stale view (invalid input) they are drawn here and a change reruns the page.

    ``PageEntry.draws_link``: the page binds its own URL parameters after this and draws the Share link itself once
    they are bound (``ui.share_link(page_run.link)``), so that the link carries what the run draws — also on the first
    run after the page comes back, when the page link that brought it carried the settings only.  On a stale view
    ``page_run.link`` is None: the link is drawn here."""
    frame = _frame()
    values, slots, page = frame.settings, frame.slots, frame.page
    draws_link = page.draws_link
    choice = ui_weights.current()
    if not page.text_run:
        return _settings_only(values, choice, page.book_classes, draws_link)
    try:
        config, trace = run_settings(values, _checkpoint(choice, page.book_classes))
    except InputError as exc:
        own = values.get("variant") in user_code.listed()  # a user's module: its message may name the server's files
        st.warning(markdown_escape(module_message(str(exc)) if own else str(exc)), icon=":material/back_hand:")
        if values.get("variant") in user_code.failures():  # a constructor attnviz remembers failing
            try_again_button(values["variant"])
        if isinstance(exc, user_module.NonFiniteWeightsError):
            _refused_module_check(exc.trace, values, here=page.checks_module)
        if slots is not None:
            fill_view_slots(slots, choice)
            fill_links(slots, values)
        last = _last_valid_trace()
        share_and_export(last)
        if last is None:
            return None
        st.caption("Showing the last valid view.")
        return Context(settings=values, config=last.config, trace=last, stale=True, weights=choice)
    link = None
    if slots is None:  # else the page's layer views draw them, for the trace they draw
        link = share_and_export(trace, link=not draws_link)
        run_notes(trace)
    return Context(settings=values, config=config, trace=trace, stale=False, weights=choice, slots=slots,
                   link=link if draws_link else None)


def _refused_module_check(trace: Trace, values: dict, here: bool) -> None:
    """The Check panel of a user's module whose run no page draws (``here``), or a link to the page that has it."""
    if here:
        module_check.check_panel(trace, st.container())
    else:
        st.page_link(module_check.PAGE, label=f"Check {trace.module_run.class_name} on the Heads page: attnviz's rules "
                     "on your code", icon=":material/bug_report:", query_params=url_query(values))


def _checkpoint(choice: ui_weights.Choice, book_classes: bool) -> str | None:
    """The weights ref this page runs (None: the book's classes); says so when a book-classes page sets a chosen
    checkpoint aside.  Raises CheckpointError for one that could not be loaded."""
    if choice.error is not None:
        raise CheckpointError(choice.error)  # in words, with its listed name (ui.weights.unreadable)
    if choice.checkpoint and not book_classes:
        return choice.option.ref
    if choice.checkpoint:
        titles = checkpoint_pages()
        st.info(f"This page runs the book's Chapter 3 classes with seeded random weights (at the sizes of "
                f"{_model_words(choice.option)}), not the checkpoint's weights: those are on the "
                f"{', '.join(titles[:-1])} and {titles[-1]} pages.", icon=":material/info:")
    return None


def _model_words(option: core_weights.Option) -> str:
    """A checkpoint option as a sentence names it (Markdown): "the bundled model", "the model trained in this
    session (400 steps, seed 0)", or a file's or folder's own name."""
    if option.source == "bundled":
        return "the bundled model"
    if option.source == "session":
        return f"the model trained in this session ({markdown_escape(option.name)})"
    return markdown_escape(option.name)


def _settings_only(values: dict, choice: ui_weights.Choice, book_classes: bool,
                   draws_link: bool = False) -> Context | None:
    """:func:`setup` for a page that draws no run of the text: the validated config, no trace.  On invalid settings
    or an unreadable checkpoint: a plain message and the config of the last valid view (None if there is none), with
    the Share link drawn here; a user's module that cannot be built is said as :func:`setup` says it (no folder of the
    server's; Try again).  ``draws_link``: the page's ``PageEntry.draws_link``, as in :func:`setup`."""
    try:
        config = config_from_settings(values, _checkpoint(choice, book_classes)).validate()
    except InputError as exc:
        share_and_export(None)
        own = values.get("variant") in user_code.listed()  # a user's module: its message may name the server's files
        st.warning(markdown_escape(module_message(str(exc)) if own else str(exc)), icon=":material/back_hand:")
        if values.get("variant") in user_code.failures():  # a constructor attnviz remembers failing
            try_again_button(values["variant"])
        last = st.session_state.get("_last_valid")
        if last is None or (choice.error is not None and last[1].checkpoint == choice.option.ref):
            return None  # the last valid settings run the checkpoint that cannot be loaded now: nothing to show
        st.caption("Showing the last valid settings.")
        return Context(settings=values, config=last[1], trace=None, stale=True, weights=choice)
    link = share_and_export(None, link=not draws_link)
    return Context(settings=values, config=config, trace=None, stale=False, weights=choice,
                   link=link if draws_link else None)


def run_notes(trace: Trace) -> None:
    """What the run of this trace says about it (a text cut at the context length, a device it fell back from); not
    the note, in Python's words, on a mask the book's listing lacks (``variants.is_added_mask_note``): the pages say
    that in the sidebar's words (:func:`book_listing_note`)."""
    for note in trace.notes:
        if not variants.is_added_mask_note(note):
            st.info(markdown_escape(note), icon=":material/info:")


def book_listing_note(config: AttentionConfig) -> None:
    """On a book class whose listing has no causal mask (3.3, 3.4) drawn with the sidebar's Causal mask on: the note
    that the mask is attnviz's addition (``variants.added_mask_note``), as the Compare page says it."""
    if (note := variants.added_mask_note(config)) is not None:
        st.info(note, icon=":material/info:")


def beside_shape_diagram(trace: Trace, highlight: str):
    """The compact live shape diagram (``highlight`` = the stage on view) in a narrow left column;
    returns the wide column to its right.  Plain HTML, not a Graphviz chart: the browser lays a
    Graphviz chart out again on every settings change (benchmarks/README.md, "Repaint after a settings change");
    the Shapes page has the full one."""
    from attnviz.views import diagram

    diagram_col, view_col = st.columns([1, 3])
    with diagram_col:
        if trace.module_run is not None:  # the user's module: every op it ran, in order
            st.html(diagram.op_flow_html(trace, highlight=highlight))
            st.caption(f"{trace.module_run.class_name}'s own ops, read from this run · full diagram: the Shapes page")
        else:
            st.html(diagram.shape_flow_html(trace.shapes, trace.config, highlight=highlight, window=trace.window,
                                            hides_future=trace.hides_future,
                                            layer=trace.model_layer))
            st.caption(diagram.head_dim_equation(trace.config) + " · full diagram: the Shapes page")
    return view_col


def variant_label(config: AttentionConfig) -> str:
    heads = f", {config.heads} heads × {config.head_dim}" if config.heads > 1 else ""
    return f"{config.module or config.spec.label}{heads}"


def weights_caption(page_run: Context) -> str:
    """Which weights drew this view: the checkpoint's name and layer, or the book's classes — seeded random weights,
    or for the class without weights (3.3) what its queries, keys and values are: seeded random embeddings, or the
    book's inputs (the book size on the book's sentence)."""
    trace = page_run.trace
    if trace.module_run is not None:
        return f"{variant_label(trace.config)} · your code, traced · seeded random weights"
    if trace.model is None:
        book_inputs = (trace.config.embedding == "book"
                       and tuple(trace.token_ids) == core_embedding.JOURNEY_TOKEN_IDS)  # else seeded, with a note
        if trace.config.spec.weights is None:
            inputs = "the book's inputs" if book_inputs else "seeded random embeddings"
            return f"{variant_label(trace.config)} · queries = keys = values = {inputs}"  # its name says no weights
        inputs = " · the book's inputs" if book_inputs else ""
        return f"{variant_label(trace.config)} · seeded random weights{inputs}"
    name = next((o.name for o in ui_weights.options() if o.ref == trace.config.checkpoint), "checkpoint")
    mask = ("" if trace.config.causal else " · causal mask off ignored (its sliding-window attention always masks)"
            if trace.hides_future else " · causal mask OFF (the model was trained with it)")
    return (f"{name} · layer {trace.model.layer} of {trace.model.n_layers} (0…{trace.model.n_layers - 1}) · "
            f"{amount(trace.config.heads, 'head')} × {trace.config.head_dim}{attention_words(trace.config)}{mask}")


def attention_words(config: AttentionConfig) -> str:
    """`` · grouped-query attention: 2 K/V heads, each shared by 2 query heads`` (multi-query: one K/V head) or
    `` · latent attention: K and V from a 48-wide latent`` for a checkpoint whose blocks hold one; else ""."""
    if config.latent_width is not None:
        return f" · latent attention: K and V from a {config.latent_width}-wide latent per token"
    if config.spec.grouped:
        kind = "multi-query" if config.kv_groups == 1 else "grouped-query"
        return f" · {kind} attention: {core_weights.kv_sharing(config.heads, config.kv_groups)}"
    return ""


def plotly_config(filename: str) -> dict:
    """Modebar whose camera button downloads PNG or SVG (the sidebar's choice) under ``filename`` (made safe by
    :func:`~attnviz.ui.share.file_name`)."""
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": st.session_state.get("image_format", "png"), "filename": file_name(filename),
                                 "scale": 2},
    }


