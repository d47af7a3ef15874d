"""Widget state: the sidebar's settings bound to the URL, and the page widgets kept across page switches.

The sidebar is drawn by ``app.py`` on every page, so Streamlit keeps its widgets' values itself.  A setting takes
the URL's value when its widget has none yet (a session's first run; one the URL leaves out, its default); the
sidebar writes the settings to the URL where it gives others (``attnviz.ui.sidebar.current_settings``), leaving out
those at their defaults, so the URL follows the settings.  The sizes are kept consistent by the widgets'
``on_change`` callbacks; a switch of Weights keeps the book's classes' sizes and each checkpoint's layer apart
(:func:`follow_weights`).

A page's own widgets (the focused head, a stage, a window) are drawn only on their page, and Streamlit drops the
value of a widget that a run does not draw unless the widget asks to keep it: every page widget
(:func:`page_bind`) has ``persist_state="session"``, so a page shows its widgets as the user left it, also when
the user left while a fragment of the page reran itself (Generate's Play).  Some follow the URL too, as the
settings do (:func:`page_bind`'s ``url``: the Heads and Steps pages' focused head, stage and window, Generate's new
tokens, random GPT, step, layer and head, Compare's map, the Pitfall lab's bug and token, the Induction lab's T,
seed, head and knock-outs, the Train page's steps and seed): the page reads them on a session's first visit and
from a URL it did not write (an entry of the browser's history: :func:`page_widgets_from_url`), and the URL holds
the parameters of the page shown only (:func:`keep_page_params`).

The settings are kept another way.  Some are drawn only for the variants that have them, and the Layer selectbox
is drawn by the Heads page's fragment on that page and by ``app.py``'s sidebar on the others:
two widgets to Streamlit (a widget's id includes the script that draws it), where ``persist_state`` would hand
the value over one run late, after the widget was drawn empty.  :func:`keep_widgets`, run by ``app.py`` before
anything is drawn, assigns each setting's value to itself, which makes it a value of the session under its key
(Streamlit's docs, "Working with widgets in multipage apps": interrupt the widget clean-up process).
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from attnviz import variants, weights
from attnviz.config import fitted_heads
from attnviz.ui import weights as ui_weights
from attnviz.ui.weights import WEIGHTS_REQUEST
from attnviz.urlstate import (
    BOOK_SIZES,
    CELL,
    MAP_OF,
    PAGE_PARAMS,
    SETTING_KEYS,
    TEXT_LEFT_OUT,
    PartlyUsedError,
    book_sizes_of_link,
    ignored,
    is_book,
    preset_dims,
    preset_holds,
    settings_from_query,
)
from attnviz.words import clipped, markdown_escape

KEPT = {"persist_state": "session"}  # a page widget's value stays for the session while no run draws it
URL_NOTICES = "_url_notices"  # what the URL of a session's first run had that could not be used
TEXT_LOST = "_url_text_lost"  # the URL of a session's first run marked a text left out of it (urlstate.TEXT_LEFT_OUT)
_URL_PAGE = "_url_page"  # the page whose parameters the URL holds (keep_page_params)
_PAGE_URLS = "_page_urls"  # page -> its own URL parameters as its runs left them (page_params_of)
_DEFAULTS = "_page_defaults"  # page widget -> the default its last run drew it with (page_bind)
_LABELS = "_page_labels"  # page widget -> the labels of its options as its last run drew them (page_bind)
_OUTSIDE = "_url_outside"  # the shown page's parameters whose URL value its runs did not write (keep_page_params)
_WEIGHTS_SHOWN = "_weights_shown"  # the weights the settings were last settled for (follow_weights)
_BOOK_SIZES = "_book_sizes"  # the book's classes' BOOK_SIZES as the user left them, while a checkpoint is shown
_LAYERS = "_weights_layers"  # a checkpoint left in this session -> the layer it showed (follow_weights)
# a setting -> (the text its number box holds that is no whole number in its range, the setting's value it was typed
# over): the box shows that text while the setting keeps that value (ui.number_box.setting_box)
BOX_REFUSED = "_setting_box_refused"

PAGE_WIDGETS = (  # every page widget's key (page_bind refuses others): kept while their page is not shown
    "heads_stage", "heads_focus", "heads_row0", "heads_col0", "heads_overview", "heads_knockout_position",
    "next_position", "tokens_next_position", "image_format",
    "steps_stage", "steps_focus", "steps_row0", "steps_col0", "steps_pair",
    "compare_map", "pitfalls_bug", "pitfalls_token",
    "induction_T", "induction_seed", "induction_layer", "induction_head", "induction_knockout",
    "generate_new", "generate_random", "generate_layer", "generate_head", "generate_sizes", "generate_dtype",
    "train_steps", "train_seed", "benchmark_n", "benchmark_repeats",
)
# the page widgets whose link's refused value a page reads (:func:`take_refused`: Generate's random GPT, set aside for a
# model under Weights); no other widget's is kept
READS_REFUSED = ("generate_random",)


def settings_from_url() -> None:
    """Every setting whose widget has no value yet takes the URL's (the default where the URL has none or a bad
    one); the notices of a session's first run are kept to show, and whether its URL marks a text left out of it
    (:data:`TEXT_LOST`: a reload or a link of a text too long for a URL, which opens the default sentence).  A
    weights option a page asked for on the last run (:func:`attnviz.ui.weights.select_weights`) is applied."""
    missing = [key for key in SETTING_KEYS if key not in st.session_state]
    if missing:
        names = [option.name for option in ui_weights.options()]
        query = {key: st.query_params.get_all(key) for key in st.query_params}  # every value of a repeated one
        values, notices = settings_from_query(query, weights_names=names)
        for key in missing:
            st.session_state[key] = values[key]
        st.session_state.setdefault(URL_NOTICES, notices)
        st.session_state.setdefault(TEXT_LOST, TEXT_LEFT_OUT in query and "text" not in query)
        if values["weights"] != weights.BOOK:  # the book's classes' sizes the session starts with: not the file's
            st.session_state.setdefault(_BOOK_SIZES, {**book_sizes_of_link(query), "variant": values["variant"]})
    if (name := st.session_state.pop(WEIGHTS_REQUEST, None)) is not None:
        st.session_state["weights"], st.session_state["causal"] = name, True
        follow_weights()
        st.session_state["layer"] = 0  # a page's choice opens at its first layer


def follow_weights() -> None:
    """Before the sidebar draws the settings: where the weights differ from those the settings were last settled
    for (the Weights selectbox, a page's request, a trained model gone), the weights left keep what they decided for
    the session, and the weights picked get theirs back.  The book's classes' sizes and what follows from them
    (``urlstate.BOOK_SIZES``), and the attention variant, are the user's own: a checkpoint's file sets the size
    widgets and the variant while it is shown (``sidebar._follow_checkpoint``), and the switch back restores the book's
    as the user left them (on a session
    opened on a checkpoint, the defaults: ``urlstate.book_sizes_of_link``).  A checkpoint's layer is kept, and a
    switch back to that checkpoint shows it again (a checkpoint not shown before opens at layer 0)."""
    state = st.session_state
    old, new = state.get(_WEIGHTS_SHOWN), state["weights"]
    state[_WEIGHTS_SHOWN] = new
    if old is None or old == new:
        return
    if old == weights.BOOK:
        state[_BOOK_SIZES] = {key: state[key] for key in (*BOOK_SIZES, "variant")}
    else:
        state.setdefault(_LAYERS, {})[old] = state["layer"]
    if new == weights.BOOK:
        for key, value in state.get(_BOOK_SIZES, {}).items():
            set_setting(key, value)
        set_setting("layer", 0)  # the book's classes are one layer
    else:
        set_setting("layer", state.get(_LAYERS, {}).get(new, 0))


def keep_widgets() -> None:
    """Before anything is drawn: every setting that has a value keeps it through this run, drawn or not, and a
    setting drawn by another script than last run's starts with it (the module's docstring says why)."""
    for key in SETTING_KEYS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def set_setting(key: str, value) -> None:
    """A setting's new value, before its widget is drawn (or in a callback): its number box shows it, where the box
    held a text it refused (``ui.number_box.setting_box``)."""
    st.session_state[key] = value
    st.session_state.get(BOX_REFUSED, {}).pop(key, None)


def _changed(key: str) -> None:
    """on_change of every sidebar widget: the new value becomes the session's own, and the sizes stay consistent.
    The notices about the URL a session opened with go: they said which of its values were not used (or that its
    text was left out), and a setting the user changes since replaces that answer.

    The session's own value: a Layer picked on the Heads page reruns only its fragment, so no :func:`keep_widgets`
    runs before the next page switch — whose run gets no widget state from the browser, and would start from the
    value the last whole run kept (the layer before)."""
    state = st.session_state  # read after each set_setting: the branches see the values the ones before set
    state.pop(URL_NOTICES, None)
    state.pop(TEXT_LOST, None)
    state[key] = state[key]  # the session's own value, as keep_widgets makes it: see _changed's docstring
    if key == "weights" and state["weights"] != weights.BOOK:
        set_setting("causal", True)  # how GPT-2 was trained (turning it off stays allowed)
    if key == "variant":
        set_setting("attention", 1)  # another module's attentions are others
    sizes = preset_dims(state["preset"], state["variant"])  # the wrapper's differ at the book size (its listing's)
    if sizes is not None and (key == "preset" or key == "variant" and is_book(state["preset"])):
        for name, value in zip(("d_in", "d_out", "num_heads"), sizes):
            set_setting(name, value)
    elif key in ("d_in", "d_out", "num_heads") and not preset_holds(
            state["preset"], state["variant"], (state["d_in"], state["d_out"], state["num_heads"])):
        set_setting("preset", "custom")
    if key in ("preset", "variant") and is_book(state["preset"]) and state["variant"] in variants.VARIANTS:
        # the book masks only causal attention, the wrapper and MHA (sections 3.5-3.6), and seeds each class as its
        # listing does (SelfAttention_v2: 789); a mask or seed the user sets after this stays theirs
        spec = variants.get(state["variant"])
        set_setting("causal", spec.book_causal)
        set_setting("seed", spec.book_seed)
    if key == "d_out" and (new := fitted_heads(state["d_out"], state["num_heads"])) != state["num_heads"]:
        state["_dims_notice"] = f"{state['num_heads']} heads do not divide d_out {state['d_out']}; using {new} heads."
        set_setting("num_heads", new)


def setting_changed(key: str) -> None:
    """A setting's new value set by a callback other than its widget's own (a number box's text read as a number): as
    the widget's ``on_change`` does, the sizes stay consistent and the link's notices go."""
    _changed(key)


def bind(key: str) -> dict:
    """A sidebar widget's keyword arguments: its key, and the callback that keeps the sizes consistent."""
    return {"key": key, "on_change": _changed, "args": (key,)}


def page_bind(key: str, default, valid=lambda value: True, url: str | None = None,
              labels: tuple[str, ...] | None = None) -> dict:
    """A page widget's keyword arguments: its key (one of :data:`PAGE_WIDGETS`), with the value ``default`` where it
    has none or one ``valid`` refuses (a head that the new settings no longer have), and where it was left at the
    default of the run before and that default has moved (the Induction lab's best head for a new T or seed, the
    Pitfall lab's middle token of a new text): the widget follows its default until the user picks another value.

    ``url``: the page's URL parameter (one of ``PAGE_PARAMS``) that follows the widget, as the settings' parameters
    follow theirs: written with the value this run draws, and by the widget's ``on_change`` before the run that
    shows a new value, so that the sidebar's Share link, drawn before the page, carries it too; a value equal to
    ``default`` leaves the URL without it (:func:`set_page_param`).  The page reads it on a session's first visit
    and from a URL it did not write (:func:`page_widgets_from_url`).

    ``labels``: a selectbox's or select slider's option labels where they say more than the value (a head's K/V
    group, a layer's best score, a position's token).  Streamlit's frontend keeps the label a widget holds while its
    value stays the same, even when a run gives the options new labels: a box would read the last value's old label,
    a slider its first option, whose label the options no longer have (a widget with a key keeps its identity, and
    Streamlit sends a value only when it changes).  Where the labels differ from those of the widget's last run, the
    value is set again through the Session State, which Streamlit sends to the browser with its label of this run."""
    if key not in PAGE_WIDGETS:
        raise KeyError(f"page widget {key!r} is not declared in attnviz.ui.state.PAGE_WIDGETS")
    shown_default = st.session_state.setdefault(_DEFAULTS, {})
    if key not in st.session_state or not valid(st.session_state[key]) or (
            key in shown_default and st.session_state[key] == shown_default[key] != default):
        st.session_state[key] = default  # none yet, refused, or left at a default that has moved: it follows
    shown_default[key] = default
    if labels is not None:
        drawn = st.session_state.setdefault(_LABELS, {})
        if drawn.get(key, labels) != labels:
            st.session_state[key] = st.session_state[key]  # the same value, sent with its new label
        drawn[key] = labels
    if url is None:
        return {"key": key, **KEPT}
    if url not in PAGE_PARAMS:
        raise KeyError(f"URL parameter {url!r} is not declared in attnviz.urlstate.PAGE_PARAMS")
    _page_param_to_url(key, url, default)
    return {"key": key, "on_change": _page_widget_changed, "args": (key, url, default), **KEPT}


def page_param_notice(key: str) -> str:
    """The session key of a page's notice about the URL parameter of its widget ``key`` (a value the link gave that
    the page could not use): shown by the page until the user sets that widget (:func:`page_bind`'s ``on_change``,
    :func:`set_page_widget`)."""
    return f"_url_notice_{key}"


def url_notices(*keys: str) -> None:
    """The page's notices about values its link gave these page widgets that it could not use: each until the user
    sets that widget (``state.page_param_notice``)."""
    for key in keys:
        notice = st.session_state.get(page_param_notice(key))
        if notice is not None:
            st.warning(markdown_escape(notice), icon=":material/back_hand:")


def page_widgets_from_url(page: str, widgets: dict[str, tuple[str, Callable[[str], object], str]]) -> None:
    """A session's first visit of ``page``, and a URL the page did not write (an entry of the browser's history, a
    link typed into the address bar: :func:`keep_page_params`): each page widget in ``widgets`` — its key -> (its URL
    parameter, the parser of that parameter's value, what the page shows instead of a refused one) — takes the URL's
    value, and one the URL leaves out the page's default.  A value the parser refuses (a ValueError, whose text says
    why in words) leaves the URL, the widget shows the page's default, and the page's notice
    (:func:`page_param_notice`) says so in the words of ``urlstate.ignored``: ``Ignored URL parameter head='9': it is
    out of range (this layer's 4 heads: 0 … 3); showing head 0.`` — also on an entry of the history reached from a
    view of another head, whose head the widget held.  A notice is about the URL read: a later entry's value, or its
    default, takes it away.  A value the parser takes in part (a ``urlstate.PartlyUsedError``: a list naming
    some heads the model lacks) is not ignored: it gives the widget the part it takes, and the notice names the rest:
    ``The link's knockout='L0H0,L9H9' names 'L9H9', which is not a head of this model (…): knocking out L0H0 only.``
    A parameter the link repeats gives its last value (the sidebar names the others)."""
    flag = f"_url_read_{page}"
    outside = st.session_state.get(_OUTSIDE, set())
    first = flag not in st.session_state
    if not first and not outside & {url for url, _, _ in widgets.values()}:
        return
    st.session_state[flag] = True
    for key, (url, parse, instead) in widgets.items():
        if not first and url not in outside:
            continue
        outside.discard(url)
        st.session_state.pop(page_param_notice(key), None)  # about another URL's value: not this view's
        if key in READS_REFUSED:
            st.session_state.pop(_refused_key(key), None)
        raw = st.query_params.get(url)
        if raw is None:
            if not first:  # the entry's page showed its default here: page_bind sets it again
                st.session_state.pop(key, None)
            continue
        try:
            st.session_state[key] = parse(str(raw))
        except PartlyUsedError as exc:  # some of the link's values: the widget takes those, the notice names the others
            st.session_state[key] = exc.kept
            st.session_state[page_param_notice(key)] = f"The link's {url}={clipped(raw)!r} {exc}: {exc.instead}."
        except ValueError as exc:
            st.session_state.pop(key, None)  # the page's default, which the notice names: page_bind sets it
            st.session_state[page_param_notice(key)] = ignored([(url, raw)], f"it {exc}; {instead}.")
            if key in READS_REFUSED:  # a page says more about it: kept for that page to take
                st.session_state[_refused_key(key)] = str(raw)
            del st.query_params[url]  # ignored, so not the URL's: a page that draws no widget for it leaves it too


def _refused_key(key: str) -> str:
    return f"_url_refused_{key}"


def take_refused(key: str) -> str | None:
    """The value the link gave page widget ``key`` that :func:`page_widgets_from_url` refused and took out of the URL,
    for a page that says more about it than the refusal (Generate's random GPT, set aside for a model under Weights);
    None once taken, or where none was refused.  Only the widgets of :data:`READS_REFUSED` keep one."""
    if key not in READS_REFUSED:
        raise KeyError(f"page widget {key!r} keeps no refused value: add it to attnviz.ui.state.READS_REFUSED")
    return st.session_state.pop(_refused_key(key), None)


def set_page_widget(key: str, value, url: str, default) -> None:
    """A page widget's new value set by a callback other than its own (a click on the heads grid): as the widget's
    ``on_change`` does, the URL follows it before the rerun, and the link's refused value is moot."""
    st.session_state[key] = value
    _page_widget_changed(key, url, default)


def keep_page_params(page: str, names: tuple[str, ...]) -> None:
    """The URL keeps the page parameters of the page shown (``page``, whose own are ``names``), and only those: any
    other page's go (a URL that outlives its page: AppTest's ``switch_page``).  A page link carries the page's own
    as its last run left them (:func:`page_params_of`); where the URL's differ from those — an entry of the
    browser's history, a link typed into the address bar — the page reads them as a link's
    (:func:`page_widgets_from_url`), so Back shows the view the entry was."""
    st.session_state[_URL_PAGE] = page
    for name in PAGE_PARAMS:
        if name not in names and name in st.query_params:
            del st.query_params[name]
    own = page_params_of(page)
    st.session_state[_OUTSIDE] = {name for name in names if st.query_params.get(name) != own.get(name)}


def shown_page() -> str | None:
    """The script of the page this run shows (:func:`keep_page_params`'s ``page``); None before it is known."""
    return st.session_state.get(_URL_PAGE)


def page_params_of(page: str) -> dict[str, str]:
    """The URL parameters of ``page`` (a script in ``pages/``) as its runs in this session left them, in the URL's
    order: the page's link carries them (``sidebar.page_links``), so that the first run after a switch back to the
    page writes none of them, and the switch is one entry of the browser's history (:func:`set_page_param`)."""
    return dict(st.session_state.get(_PAGE_URLS, {}).get(page, {}))


def page_link_params(page: str, carried: tuple[str, ...] = ()) -> dict[str, str]:
    """The URL parameters of a link to ``page``: its own as its runs left them (:func:`page_params_of`), with those
    named in ``carried`` as the URL of the page shown holds them now (left out where it has none: the default) — the
    Heads and Steps pages' focused head, which the link to the other page carries.  The page linked to reads a
    carried value that differs from its own as a link's (:func:`keep_page_params`), so the switch stays one entry of
    the browser's history."""
    own = page_params_of(page)
    if not carried or page == shown_page():
        return own
    shown = {name: st.query_params[name] for name in carried if name in st.query_params}
    if any(own.get(name) != shown.get(name) for name in carried if name in MAP_OF):
        own.pop(CELL, None)  # a cell of another map than the one the link opens
    return {**{name: text for name, text in own.items() if name not in carried}, **shown}


def _remember(url: str, text: str | None) -> None:
    """The shown page's parameter ``url`` is now ``text`` (None: gone), for :func:`page_params_of`."""
    page = st.session_state.get(_URL_PAGE)
    if page is not None:
        own = st.session_state.setdefault(_PAGE_URLS, {}).setdefault(page, {})
        if text is None:
            own.pop(url, None)
        else:
            own[url] = text


def forget_map_cell() -> None:
    """The settings changed: the cell clicked on the focused map (``urlstate.CELL``) is no page's to carry any more
    (the URL drops it where the settings are written: ``sidebar.current_settings``)."""
    for own in st.session_state.get(_PAGE_URLS, {}).values():
        own.pop(CELL, None)


def took_page_param(url: str) -> None:
    """The shown page took the URL's value of its parameter ``url`` as it is (a link's): its own now, for its link to
    carry (:func:`page_params_of`)."""
    _remember(url, st.query_params.get(url))


def took_outside(url: str) -> bool:
    """Whether the shown page's parameter ``url`` has a value in the URL that its runs did not write (a link, an
    entry of the browser's history: :func:`keep_page_params`), for the page to read; True once."""
    outside = st.session_state.get(_OUTSIDE, set())
    if url not in outside:
        return False
    outside.discard(url)
    return True


def forget_page_params(*urls: str) -> None:
    """Page parameters this run draws no widget for (a map drawn whole has no window to place) leave the URL."""
    for url in urls:
        _remember(url, None)
        if url in st.query_params:
            del st.query_params[url]


def _page_widget_changed(key: str, url: str, default) -> None:
    st.session_state.pop(page_param_notice(key), None)  # the user's own value: the link's refused one is moot
    _page_param_to_url(key, url, default)


def _page_param_to_url(key: str, url: str, default) -> None:
    """The URL holds the widget's value (a multiselect's comma-separated) unless it is the page's ``default``; a
    widget without one (a stage deselected: the page draws its default) none.  A URL that names the default itself
    (a link, ``/steps?stage=masked``) gives it too, and stays as it is: rewriting it would be one more entry of the
    browser's history."""
    value = st.session_state[key]
    if value == default and st.query_params.get(url) == _param_text(default):
        _remember(url, _param_text(default))
        return
    set_page_param(url, None if value == default else value)


def set_page_param(url: str, value) -> None:
    """The page parameter ``url`` says ``value`` (a list comma-separated; an empty list an empty value); None: the URL
    has no ``url``, and the page draws its default.

    A page leaves its defaults out of the URL, as Streamlit's own ``bind="query-params"`` does: the first run of a
    page switched to then writes nothing, and the switch is one entry of the browser's history (Streamlit's frontend
    pushes an entry for every change of the URL, and one a run sends before the page's path has changed is an entry
    at the old page's path: the Back button would have to be pressed once for each).

    The clicked cell (``urlstate.CELL``) belongs to the map it was clicked on: a new head, stage or window
    (``urlstate.MAP_OF``) drops it, in the same change of the URL (one entry of the history for the one action)."""
    text = None if value is None else _param_text(value)
    changes = {url: text, **({CELL: None} if url in MAP_OF and st.query_params.get(url) != text else {})}
    for name, new in changes.items():
        _remember(name, new)
    _write_params(changes)


def _write_params(changes: dict[str, str | None]) -> None:
    """The URL with ``changes`` (a parameter -> its text, None: gone), sent to the browser as one change if any."""
    changed = {name: text for name, text in changes.items() if st.query_params.get(name) != text}
    if len(changed) == 1:
        (name, text), = changed.items()
        if text is None:
            del st.query_params[name]
        else:
            st.query_params[name] = text
    elif changed:
        query = {name: st.query_params.get_all(name) for name in st.query_params}  # in the URL's order
        for name, text in changed.items():
            if text is None:
                query.pop(name, None)
            else:
                query[name] = text
        st.query_params.from_dict(query)


def _param_text(value) -> str:
    """A page parameter's URL text: a list comma-separated, anything else as ``str`` writes it."""
    return ",".join(str(item) for item in value) if isinstance(value, list | tuple) else str(value)
