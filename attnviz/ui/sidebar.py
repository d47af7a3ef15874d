"""The shared sidebar, drawn once by ``app.py`` on every page: page links, text, weights, layer (a user's module's
attention), variant, sizes, mask, dropout, seed, device (folded away on a page whose work ignores them); and, at the
top of the page's main area, the notices about the link's values and about a weights option that went away, drawn
before the page runs.
Settings that don't apply to the chosen variant are disabled with the registry's reason as their help; the
settings only some variants have (K/V groups, latent width, window, positions) are drawn only where they apply."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.navigation.page import StreamlitPage

from attnviz import config as configs
from attnviz import user_code, variants, weights
from attnviz.config import (
    MAX_CONTEXT_LENGTH,
    MAX_DIM,
    MAX_HEADS,
    MAX_SEED,
    available_devices,
    divisors,
    fitted_heads,
)
from attnviz.rope import ROPE_BASES
from attnviz.ui import navigation, share
from attnviz.ui import weights as ui_weights
from attnviz.ui.number_box import setting_box
from attnviz.ui.state import (
    TEXT_LOST,
    URL_NOTICES,
    bind,
    follow_weights,
    forget_map_cell,
    page_link_params,
    set_setting,
    settings_from_url,
    shown_page,
)
from attnviz.urlstate import (
    BOOK_CLASSES,
    CELL,
    HEAD,
    PAGE_PARAMS,
    PRESET_DIMS,
    PRESETS,
    SETTING_KEYS,
    TEXT_LEFT_OUT,
    defaults,
    fit_modern,
    ignored,
    link_gives,
    link_settings,
    module_attentions,
    settings_given,
    url_query,
    url_text_fits,
    url_value,
)
from attnviz.words import amount, clipped, markdown_escape

_SETTLED_TEXT = "_settled_text"  # the text the last run settled the settings with (current_settings)
_WEIGHTS_GONE = "_weights_gone"  # the notice that the session's weights went from the list, and its icon (_notices)


@dataclass(frozen=True)
class ViewSlots:
    """Places in the sidebar that a page's layer views fill (:mod:`attnviz.ui.layer_views`, a fragment): the Layer
    selectbox's — so that a new layer reruns only the fragment — and the page links', which carry the text and the
    layer.  The Text area is never one of them: the sidebar draws it on every page (:func:`text_area` says why)."""

    layer: DeltaGenerator
    links: DeltaGenerator  # the page links, which carry the settings: the layer views draw them on each of their runs
    pages: tuple[StreamlitPage, ...]


def sidebar(pages: list[StreamlitPage], settings_apply: bool = True,
            layer_views: bool = False) -> tuple[dict, ViewSlots | None]:
    """Draw the shared sidebar (``app.py``, on every page): a link to each of ``pages`` and the settings, and above the
    page in the main area the link's notices (:func:`_notices`); returns the current settings and, with
    ``layer_views``, the empty places the page's layer views fill (:class:`ViewSlots`), else everything is drawn
    here.  ``settings_apply`` False: the page's work ignores the settings; they are drawn
    folded away in an expander (so that they keep their values)."""
    settings_from_url()
    listed = ui_weights.options()
    if st.session_state["weights"] not in [option.name for option in listed]:  # a model forgotten, a file deleted
        gone = clipped(st.session_state["weights"])
        st.session_state[_WEIGHTS_GONE] = (f"The weights {gone!r} are no longer listed; showing the book's classes.",
                                           _gone_icon(st.session_state["weights"]))
        set_setting("weights", weights.BOOK)
    follow_weights()
    with st.sidebar:
        st.markdown("### attnviz")
        links = st.container()  # filled last, with the settings as they end up (the links carry them)
        if not settings_apply:
            st.caption("The attention settings do not apply to this page: they are kept, folded away, for the "
                       "other pages.")
        with st.container() if settings_apply else st.expander("Attention settings", expanded=False):
            text_area()
            choice = _weights(listed)
            _attention_in_range()
            layer_slot = st.container()
            slots = ViewSlots(layer=layer_slot, links=links, pages=tuple(pages)) if layer_views else None
            if slots is None:
                with layer_slot:
                    layer_selectbox(choice)
            spec = _variant(choice)
            _sizes(spec)
            _modern(spec, navigation.also_runs(shown_page()))
            _mask_dropout_seed_device(spec, choice)
    _notices()  # the main area's top, above the page: where a user opening a link looks first
    values = current_settings()
    if slots is None:  # else the page's layer views draw them, with the text and layer they run
        with links:
            page_links(pages, values)
    return values, slots


def text_area() -> None:
    """The Text area, drawn by the sidebar on every page, outside any fragment.

    The Text area commits on blur, and a click on a page link blurs it: Streamlit's frontend sends the page switch
    at the click, with the values of the widgets ``app.py`` drew, and the commit's rerun of the page it still shows
    from a timer the blur sets — after the page switch where the click comes first (a tap, a quick click), and the
    server then runs the page left (docs/design.md has the sequence).  Drawn by ``app.py``, the Text area is one of
    those widgets, so the page switch carries the typed text, and the commit's rerun is a whole run of the page left,
    which holds the text too (the click is lost at worst).
    Drawn by a page's fragment it would be neither: the page switch would drop it with the page's elements, and the
    commit's rerun would be a rerun of that fragment on the page switched to, which has none — a blank page, the
    text gone.

    Under it, where the text is too long for a URL (``urlstate.url_text``), a note says what a reload or a link opens
    — the part the pages show, or the default sentence — and offers the text as a download
    (:func:`attnviz.ui.share.text_not_in_url`); and on a session opened by the URL of a text left out of it (a reload,
    its link), that the text was too long to keep in the link, until a setting changes (``state.TEXT_LOST``).  The
    note changes only when the committed text crosses the limit: the Text area commits on blur, not per keystroke."""
    st.text_area("Text", help="Any text; GPT-2 tokens beyond 1024 are truncated.", height=110, **bind("text"))
    share.text_not_in_url(st.session_state["text"], lost=st.session_state.get(TEXT_LOST, False))


def fill_view_slots(slots: ViewSlots, choice: ui_weights.Choice) -> None:
    """Draw what the sidebar left to the page's layer views (the Layer selectbox) into its slot; the page links are
    drawn once the settings are settled (:func:`fill_links`)."""
    with slots.layer:
        layer_selectbox(choice)


def fill_links(slots: ViewSlots, values: dict) -> None:
    """The page links into the place the sidebar left for them, carrying ``values``: drawn by the layer views on
    every run, whole or of their fragment alone (Streamlit keeps a fragment's element outside it only where its
    whole run drew it too), so that a layer picked there reaches the next page."""
    with slots.links:
        page_links(list(slots.pages), values)


def current_settings() -> dict:
    """The settings the widgets hold now, also given by the URL (a shared link, a reload): the URL says what the
    last run drew (:func:`drawn`).  Where it gives other settings, it is written anew with those that differ from
    what a link without them gives (``urlstate.url_query``: the defaults are left out, as a page leaves out its own);
    a URL that gives these settings stays as it is, whether it names them all (the Share link) or none (a link to a
    page, ``/?head=2``).  The page's own parameters stay (the URL holds the shown page's only:
    ``state.keep_page_params``) — but the cell clicked on the focused map, where the settings differ from the URL's
    (another text, layer, variant …: another map; a text too long for the URL is compared with the last run's:
    :func:`_same_map`) — and anything else goes."""
    values = {key: st.session_state[key] for key in SETTING_KEYS}
    text_before = st.session_state.get(_SETTLED_TEXT)
    st.session_state[_SETTLED_TEXT] = values["text"]
    also = navigation.also_runs(shown_page())  # PageEntry.view_also: settings run whatever the class, BOOK_CLASSES
    if _url_gives(values, also):
        return values
    kept = {key: st.query_params[key] for key in st.query_params if key in PAGE_PARAMS}  # in the URL's order
    if not _same_map(values, text_before, also):
        kept.pop(CELL, None)  # a cell of the map the settings drew before: dropped in this one change of the URL
        forget_map_cell()
    query = {**url_query(values, also), **kept}
    if [(key, st.query_params.get_all(key)) for key in st.query_params] != [(key, [v]) for key, v in query.items()]:
        st.query_params.from_dict(query)  # only a change: each one the browser is sent is an entry of its history
    return values


def _same_map(values: dict, text_before: str | None, also: tuple[str, ...] = ()) -> bool:
    """Whether the settings ``values`` draw the map the URL's settings drew (its clicked cell is still one of it) on a
    page whose work also runs ``also``.  A text too long for the URL is not in it: the session holds it, and it is the
    same where the last run that settled the settings had it too (``text_before``); the other settings that make the
    view are the URL's to compare."""
    params = {key: st.query_params[key] for key in st.query_params if key in SETTING_KEYS}
    if url_text_fits(values["text"]):
        return settings_given(params, values, also=also)
    return values["text"] == text_before and settings_given(params, values, without=("text",), also=also)


def _url_gives(values: dict, also: tuple[str, ...]) -> bool:
    """Whether the URL gives exactly the settings ``values`` that make the view of a page whose work also runs
    ``also`` (``urlstate.link_gives``) and holds nothing else but page parameters, each parameter once — and the mark
    of a text left out (``urlstate.TEXT_LEFT_OUT``) where the URL has no text: a reload of such a URL keeps it, and
    the page says the text was too long (:func:`text_area`), one entry of the browser's history."""
    marked = TEXT_LEFT_OUT in st.query_params and "text" not in st.query_params
    if any(key not in SETTING_KEYS and key not in PAGE_PARAMS and not (key == TEXT_LEFT_OUT and marked)
           or len(st.query_params.get_all(key)) != 1 for key in st.query_params):
        return False
    return link_gives({key: st.query_params[key] for key in st.query_params if key in SETTING_KEYS}, values, also)


def url_settings() -> dict[str, str]:
    """Every setting's URL value as the URL gives it: its parameter's value, or where the URL has none, what a link
    without it gives (the URL leaves those out: :func:`current_settings`)."""
    params = {key: st.query_params[key] for key in st.query_params if key in SETTING_KEYS}  # the last, if repeated
    given = link_settings(params)
    return {key: params[key] if key in params else url_value(key, given[key]) for key in SETTING_KEYS}


def drawn(key: str, value) -> bool:
    """Whether the last run that drew the settings drew ``value`` for the setting ``key``: the URL gives it
    (:func:`url_settings`; a text too long for the URL counts as not drawn)."""
    if key in st.query_params:
        return st.query_params[key] == url_value(key, value)
    return url_settings()[key] == url_value(key, value)


def _named(key: str, value) -> bool:
    """Whether the URL names ``value`` for the setting ``key`` itself (a link that leaves it out does not)."""
    return st.query_params.get(key) == url_value(key, value)


def _weights(listed) -> ui_weights.Choice:
    """The Weights option (the book's classes or a checkpoint); for a checkpoint, the layer kept within its layers."""
    labels = {option.name: option.label for option in listed}
    st.selectbox("Weights", list(labels), format_func=labels.get, **bind("weights"),
                 help="The book's classes with seeded random weights, or a GPT-2 checkpoint found on this "
                 "machine (ATTNVIZ_CHECKPOINTS, the Hugging Face cache, --checkpoint).")
    for note in weights.discovered().notes:  # a path given on the command line or in ATTNVIZ_CHECKPOINTS
        st.caption(f":material/info: {markdown_escape(note)}")
    choice = ui_weights.choose(listed, st.session_state["weights"])
    st.session_state["_weights_choice"] = choice
    caption = weights.attention_caption(choice.sizes) if choice.sizes is not None else None
    if caption:
        st.caption(f":material/info: {markdown_escape(caption)}")
    if choice.sizes is not None:
        _follow_checkpoint(choice.sizes, choice.option.name)
    n_layers = choice.sizes.n_layers if choice.sizes is not None else 1
    if not 0 <= st.session_state["layer"] < n_layers:
        # a layer the link asked for is refused with a notice; after the learner picked other weights in the
        # sidebar, the layer simply starts again at 0 (the notice's link icon would blame a link nobody followed)
        if choice.sizes is not None and drawn("weights", st.session_state["weights"]):
            st.session_state["_weights_notice"] = ignored(
                [("layer", st.session_state["layer"])],
                f"it is out of range (this checkpoint's {n_layers} layers: 0 … {n_layers - 1}); showing layer 0.")
        set_setting("layer", 0)
    return choice


def layer_selectbox(choice: ui_weights.Choice) -> None:
    """The Layer selectbox: the checkpoint's layers, disabled for the book's classes (one layer); for a module of the
    user's that computes several attentions that are not one layer's heads, the Attention selectbox in its place."""
    places = _module_attentions()
    if len(places) > 1:
        attention_selectbox(places)
        return
    n_layers = choice.sizes.n_layers if choice.sizes is not None else 1
    st.selectbox("Layer", list(range(n_layers)), disabled=choice.sizes is None, **bind("layer"),
                        help="Which transformer block's attention to show (0 = the first)." if choice.sizes
                        is not None else "The book's classes are one attention layer; pick a checkpoint under "
                        "Weights for layers.")


def attention_selectbox(places: tuple[str, ...]) -> None:
    """The Attention selectbox: which of the module's attentions the pages draw, "1 of 2 (line 35)", counted from 1
    as the checker names them (``places``: where each is, in the order the forward computes them).  The session's
    attention is among them: :func:`_attention_in_range` keeps it so on every whole run, and a run of the layer views'
    fragment alone changes neither the module nor its sizes, which decide ``places``."""
    total = len(places)
    st.selectbox("Attention", list(range(1, total + 1)), **bind("attention"),
                 format_func=lambda number: f"{number} of {total}" + (f" ({places[number - 1]})"
                                                                      if places[number - 1] else ""),
                 help=f"Your module's forward computes {total} attentions that are not the heads of one layer (a "
                 "model's layers, or attentions of different shapes): pick the one the pages draw, counted in the "
                 "order the forward computes them, as the checker names them (attention 2 of 2 on line …).")


def _module_attentions() -> tuple[str, ...]:
    """Where each attention of the user's module the sidebar picks is (``urlstate.module_attentions``; () for the
    book's classes and a checkpoint), under the spinner a run of the module has, naming it: the first call builds the
    module and runs it on 4 tokens, which a slow constructor or forward makes a wait (the spinner shows after half a
    second: a module already built shows none)."""
    values = {key: st.session_state[key] for key in SETTING_KEYS}
    if values["variant"] not in user_code.listed():
        return ()
    with st.spinner(f"Running your module, {markdown_escape(values['variant'].split(': ', 1)[-1])}…", show_time=True):
        return module_attentions(values)


def _attention_in_range() -> None:
    """The attention the session holds, kept within the attentions of the user's module it picks (1 when the variant
    is none): a link's attention the module has not is refused with a notice; after the learner picked another
    module, it simply starts again at 1."""
    if st.session_state["attention"] == 1:
        return
    places = _module_attentions()
    if st.session_state["attention"] <= len(places):
        return
    if places and drawn("variant", st.session_state["variant"]):
        total = len(places)
        span = "1" if total == 1 else f"1 … {total}"
        st.session_state["_weights_notice"] = ignored(
            [("attention", st.session_state["attention"])],
            f"it is out of range (this module's {amount(total, 'attention')}: {span}); showing attention 1.")
    set_setting("attention", 1)


def _variant(choice) -> variants.Variant:
    """The attention variant: the registry's (the book's six and the bonus GQA, MQA, MLA, SWA), and the user's own
    modules listed on the command line (by label).
    Returns the record whose ``not_applicable`` decides which settings below apply."""
    modules = user_code.listed()
    if st.session_state["variant"] not in variants.VARIANTS and st.session_state["variant"] not in modules:
        set_setting("variant", defaults()["variant"])
    spec = variants.CHECKPOINT if choice.checkpoint else (
        variants.USER_MODULE if st.session_state["variant"] in modules else variants.get(st.session_state["variant"]))
    reason = spec.not_applicable("variant")
    own = None
    if modules:
        own = "Your own modules are the ones named with --module on the command line or in ATTNVIZ_MODULES." + (
            " The app opens on the first --module." if user_code.opening() is not None else "")
    st.selectbox("Attention variant", [*variants.LABELS, *modules], format_func=lambda v: variants.LABELS.get(v, v),
                 disabled=reason is not None, help=reason or own, **bind("variant"))
    for spec_text, reason_text in user_code.errors().items():
        st.caption(f":material/warning: {markdown_escape(module_message(spec_text))} is not listed: "
                   f"{markdown_escape(module_message(reason_text))}")
    for number, (label, reason_text) in enumerate(user_code.failures().items()):
        st.caption(f":material/warning: {markdown_escape(label)} cannot be built: "
                   f"{markdown_escape(module_message(reason_text))}")
        try_again_button(label, f"{TRY_AGAIN}_{number}")
    return spec


def module_message(message: str) -> str:
    """``message`` about a user's module as a browser is told it: each file or folder the server was asked to list
    (``--module``, ``ATTNVIZ_MODULES``) by its own name (``mine.py``: as the operator wrote it, relative or absolute,
    and as Python names it), and any other absolute path — one the user's code named — cut to its last part
    (``ui.weights.without_paths``).  The operator's folders stay on the server."""
    names = {}
    for spec in user_code.requested():
        path_text = spec.rpartition(":")[0] or spec  # a spec names its class after the last colon, or only a file
        path = Path(path_text).expanduser()
        for written in (path_text, str(path), os.path.abspath(path), os.path.realpath(path)):
            if path.name and written != path.name:
                names[written] = path.name
    for written in sorted(names, key=len, reverse=True):  # a folder after the files in it
        message = message.replace(written, names[written])
    return ui_weights.without_paths(message)


TRY_AGAIN = "_module_try_again"  # the key of the page's Try again button; the sidebar's add the module's number


def try_again_button(label: str, key: str = TRY_AGAIN) -> None:
    """Try again for the listed module ``label`` whose constructor failed (``user_code.failures``): the next run
    builds it anew — from its file as it is now."""
    st.button("Try again", key=key, icon=":material/refresh:", on_click=_try_again, args=(label,),
              help=f"Run the constructor of {label.split(': ', 1)[-1]} again (a file saved since it was imported is "
              "imported anew). It may again take up to the time limit of a call of your code.")


def _try_again(label: str) -> None:
    from attnviz.producers import user_module  # what a server's warm-up met building it: forgotten too

    user_code.try_again(label)
    user_module.forget_failures(label)


def _sizes(spec) -> None:
    """Model size preset, d_in, d_out and the heads (only divisors of d_out)."""
    reason = spec.not_applicable("preset")
    st.selectbox("Model size", list(PRESETS), format_func=PRESETS.get, disabled=reason is not None, help=reason,
                 **bind("preset"))
    col_in, col_out = st.columns(2)
    reason = spec.not_applicable("d_in")
    setting_box(col_in, "d_in", "d_in", (1, MAX_DIM), disabled=reason is not None, help=reason or f"1 … {MAX_DIM:,}.")
    setting_box(col_out, "d_out", "d_out", (1, MAX_DIM), disabled=spec.not_applicable("d_out") is not None,
                help=spec.not_applicable("d_out") or spec.d_out_help(st.session_state["num_heads"]))
    head_options = [h for h in divisors(int(st.session_state["d_out"])) if h <= MAX_HEADS]
    if st.session_state["num_heads"] not in head_options:
        set_setting("num_heads", fitted_heads(int(st.session_state["d_out"]), int(st.session_state["num_heads"])))
    st.selectbox(
        "Heads", head_options, disabled=spec.not_applicable("num_heads") is not None,
        help=spec.not_applicable("num_heads") or "Only divisors of d_out are offered (head_dim = d_out / heads).",
        **bind("num_heads"),
    )
    dims_notice = st.session_state.pop("_dims_notice", None)
    if dims_notice:
        st.caption(f":material/info: {dims_notice}")


def _modern(spec, also: tuple[str, ...] = ()) -> None:
    """K/V groups (divisors of the heads), latent width (at most d_out), window, positions and rope_base: each only
    when the variant has it, or when the page runs it whatever the class (``also``, the page's
    ``navigation.PageEntry.view_also``: Compare's grouped-query, latent and sliding-window cards), then with a caption
    saying so; a kept value that no longer fits the sizes is replaced, with a notice when the variant has that setting
    (a checkpoint's or MHA's run does not use K/V groups: replacing them there says nothing)."""
    fitted, notices = fit_modern({key: st.session_state[key] for key in SETTING_KEYS})
    for key in ("num_kv_groups", "latent_dim", "positions"):
        if fitted[key] != st.session_state[key]:
            set_setting(key, fitted[key])
    applies = [key for key in variants.MODERN_SETTINGS if spec.not_applicable(key) is None]
    page_runs = [key for key in variants.MODERN_SETTINGS if key in also and key not in applies]
    shown = [key for key in variants.MODERN_SETTINGS if key in applies or key in page_runs]
    if "num_kv_groups" in shown:
        num_heads = int(st.session_state["num_heads"])
        st.selectbox("K/V groups (num_kv_groups)", configs.divisors(num_heads),
                     help=f"How many key/value heads the {num_heads} query heads share (divisors of the heads): "
                     f"{num_heads} = multi-head attention, 1 = multi-query.", **bind("num_kv_groups"))
    if "latent_dim" in shown:
        d_out = int(st.session_state["d_out"])
        setting_box(st, "Latent width (latent_dim)", "latent_dim", (1, d_out),
                    help=f"1 … d_out ({d_out:,}). Keys and values are up-projected from one latent vector per token "
                         f"this wide (the book's default: max(16, d_out // 8) = {configs.default_latent_dim(d_out)}).")
    if "sliding_window_size" in shown:
        setting_box(st, "Window W (sliding_window_size)", "sliding_window_size", (1, MAX_CONTEXT_LENGTH),
                    help=f"1 … {MAX_CONTEXT_LENGTH:,}. Query i sees keys i−W+1 … i (W = 1: only itself).")
    if page_runs:
        st.caption(f":material/info: {page_runs_caption(page_runs)}")
    if "positions" in applies:
        st.radio("Positions", list(configs.POSITIONS), horizontal=True,
                 help="learned: the chapter 2 positional embedding added to the input; rotary: queries and keys "
                 "rotated by position (RoPE).", **bind("positions"))
        if st.session_state["positions"] == "rotary":
            st.selectbox("RoPE base (rope_base)", list(ROPE_BASES), format_func=lambda base: f"{base:,}",
                         help="θ base of the rotation: 10,000 (Llama 2) or 500,000 (Llama 3).", **bind("rope_base"))
    for key in applies:
        if key in notices:
            st.caption(f":material/info: {markdown_escape(notices[key])}")


# a setting a page runs whatever the class: its label in the sidebar and the variant that runs it
_RUN_BY = {"num_kv_groups": ("K/V groups", "grouped-query"), "latent_dim": ("Latent width", "latent"),
           "sliding_window_size": ("Window W", "sliding-window")}


def page_runs_caption(keys: list[str]) -> str:
    """What the sidebar says under the modern settings a page runs though the picked class takes none of them
    (``keys``, in :data:`variants.MODERN_SETTINGS`' order): "This page runs its grouped-query variant with K/V groups
    and its sliding-window variant with Window W; the picked class does not take either."."""
    parts = [f"its {_RUN_BY[key][1]} variant with {_RUN_BY[key][0]}" for key in keys]
    runs = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    takes = {1: "it", 2: "either"}.get(len(keys), "any of them")
    return f"This page runs {runs}; the picked class does not take {takes}."


def _mask_dropout_seed_device(spec, choice) -> None:
    reason = spec.not_applicable("causal")
    causal_help = "Hide future tokens (−∞ above the diagonal before softmax)."
    if choice.checkpoint:
        causal_help += (" GPT-2 was trained with it: turned off, every layer sees the future, which shows what "
                        "the heads do then, not what the model does.")
    st.toggle("Causal mask", disabled=reason is not None, help=reason or causal_help, **bind("causal"))
    reason = spec.not_applicable("dropout")
    st.slider("Dropout p", 0.0, 0.9, step=0.05, disabled=reason is not None, help=reason, **bind("dropout"))
    reason = spec.not_applicable("train")
    st.toggle("Dropout active (training mode)", disabled=reason is not None, help=reason, **bind("train"))
    reason = spec.not_applicable("seed")
    setting_box(st, "Seed", "seed", (0, MAX_SEED), disabled=reason is not None, help=reason or f"0 … {MAX_SEED:,}.")
    devices = available_devices()
    if st.session_state["device"] not in devices:
        set_setting("device", "auto")
    reason = spec.not_applicable("device")
    st.selectbox("Device", devices, disabled=reason is not None, help=reason or "auto = CUDA, then MPS, then CPU.",
                 **bind("device"))


def _notices() -> None:
    """At the top of the page's main area (drawn before the page), where a user who opened a link looks — not below
    the settings: the session's weights gone from the list (one box, on this run only, with the icon of what went:
    :func:`_gone_icon`), a link's layer the checkpoint has not (the same), and the URL parameters that were ignored
    or changed (one box, a line each, on every page until a setting changes); the link's notices have a link's
    icon."""
    if gone := st.session_state.pop(_WEIGHTS_GONE, None):
        st.warning(markdown_escape(gone[0]), icon=gone[1])
    if weights_notice := st.session_state.pop("_weights_notice", None):
        st.warning(markdown_escape(weights_notice), icon=":material/link:")
    if url_notices := st.session_state.get(URL_NOTICES, []):
        lines = [markdown_escape(notice) for notice in url_notices]
        st.warning(lines[0] if len(lines) == 1 else "\n".join(f"- {line}" for line in lines), icon=":material/link:")


def _gone_icon(name: str) -> str:
    """The icon of the notice that the weights ``name`` are no longer listed, as what went: a model trained in the
    session (the server keeps ``weights.MAX_SESSION_MODELS``), or a checkpoint gone from the disk."""
    return ":material/model_training:" if name.startswith(weights.TRAINED) else ":material/folder_off:"


def page_links(pages: list[StreamlitPage], values: dict) -> None:
    """A link to every listed page, carrying the settings as that page's URL does (``urlstate.url_query``, with the
    settings it runs whatever the class: ``navigation.PageEntry.view_also``; a page opened in a new tab shows the same
    view) and the page's own parameters as its last run in this session left them (``state.page_params_of``) — but
    the focused head, which a link between the Heads and Steps pages carries as the page shown has it
    (``navigation.PageEntry.focused_head``)."""
    queries = {}  # also_runs -> the settings' parameters
    carries = navigation.shares_focused_head(shown_page())
    for page in pages:
        if page.visibility == "visible":
            target = navigation.entry(page)
            query = queries.setdefault(target.view_also, url_query(values, target.view_also))
            carried = (HEAD,) if carries and target.focused_head else ()
            st.page_link(page, query_params={**query, **page_link_params(target.script, carried)})


# what a checkpoint's run decides itself instead of a setting a link gives, in the words of the notice naming it
_CHECKPOINT_DECIDES = {
    **dict.fromkeys(("d_in", "d_out", "num_heads", "preset"), "sizes"),
    **dict.fromkeys(("variant", "num_kv_groups", "latent_dim", "sliding_window_size", "positions", "rope_base"),
                    "the attention its file holds"),
    **dict.fromkeys(("dropout", "train"), "eval mode (no dropout)"),
    "seed": "no seed (the weights are the file's)",
    "device": "the CPU",
}


def _follow_checkpoint(sizes, weights_name: str) -> None:
    """The size widgets show the checkpoint's sizes (disabled): its width, heads and matching preset, and the variant
    its blocks hold (multi-head, grouped-query, multi-query or latent).  Sizes a link gave with these weights (the URL
    has both) are set aside, and so is every other setting the link gives that a checkpoint's run does not take (K/V
    groups, a window, positions, a seed …): one notice names them all and what the checkpoint runs with instead."""
    dims = (sizes.emb_dim, sizes.emb_dim, sizes.num_heads)
    preset = next((name for name, preset_dims in PRESET_DIMS.items() if preset_dims == dims), "custom")
    own = {"d_in": dims[0], "d_out": dims[1], "num_heads": dims[2], "preset": preset,
           "variant": variants.checkpoint_variant(sizes.n_kv_heads, sizes.latent_dim)}  # what its blocks hold
    from_link = _named("weights", st.session_state["weights"])
    set_aside = []
    for name, value in own.items():
        if st.session_state[name] != value:
            if from_link and _named(name, st.session_state[name]):
                set_aside.append(name)
            set_setting(name, value)
    # the link's settings no checkpoint runs, on a page that runs the checkpoint (a page of the book's classes only —
    # Compare, the Pitfall lab, Benchmark — runs them at the checkpoint's sizes): the sidebar keeps them for the book's
    if from_link and BOOK_CLASSES not in navigation.also_runs(shown_page()):
        set_aside += [name for name in _CHECKPOINT_DECIDES if name not in own and _named(name, st.session_state[name])]
    if set_aside:
        decides = list(dict.fromkeys(_CHECKPOINT_DECIDES[name] for name in set_aside))  # in the table's order
        decides = [f"its own sizes (d_in {dims[0]}, d_out {dims[1]}, {dims[2]} heads)" if what == "sizes" else what
                   for what in decides]
        notice = ignored([(name, st.query_params.get(name)) for name in set_aside], f"{weights_name} runs with "
                         + (", ".join(decides[:-1]) + " and " + decides[-1] if len(decides) > 1 else decides[0]) + ".")
        notices = st.session_state.get(URL_NOTICES, [])
        if notice not in notices:  # a rerun before the URL is rewritten finds the same link
            st.session_state[URL_NOTICES] = [*notices, notice]
