"""Share & export: the link to this view, the figure download format, and downloads whose data is looked up
(or recomputed) from the trace's key when the user clicks — never held by the session — and what every download is
named (page, a checkpoint's layer, head, stage: :func:`file_name`).  Also every word said of a text too long for the
link: in "Share & export", and under the Text box (:func:`text_not_in_url`), which the sidebar draws on every page."""

from __future__ import annotations

import functools
import re
import urllib.parse

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from attnviz import weights as core_weights
from attnviz.config import MAX_CONTEXT_LENGTH, AttentionConfig
from attnviz.trace import Trace
from attnviz.ui import navigation
from attnviz.ui import weights as ui_weights
from attnviz.ui.cache import trace_key, trace_of
from attnviz.ui.state import page_bind, shown_page
from attnviz.urlstate import (
    MAX_URL_TEXT_BYTES,
    PAGE_PARAMS,
    SETTING_KEYS,
    share_query,
    url_value,
)
from attnviz.words import markdown_escape

# What one character of a text takes in a link, as a URL percent-encodes it (``urllib.parse.quote_plus``, which
# ``urlstate.url_text_fits`` measures): said wherever a text is too long for the link.
URL_CHARACTER_BYTES = ("a letter, digit, space or one of `. - _ ~` takes 1, other punctuation or a line break 3, a "
                       "non-ASCII character 6–12")


def share_and_export(trace: Trace | None, link: bool = True) -> DeltaGenerator:
    """The sidebar's "Share & export"; returns the place of its link.  ``link`` False leaves that place empty for
    the page to fill (:func:`share_link`) once it has bound its own URL parameters: the Heads page's focused head and
    window are bound in a fragment that reruns alone, after this is drawn."""
    with st.sidebar, st.expander("Share & export", icon=":material/share:"):
        place = st.container()
        if link:
            share_link(place)
        st.radio("Figure download format (camera icon on each chart)", ["png", "svg"], horizontal=True,
                 **page_bind("image_format", "png"))
        if trace is not None:
            from attnviz import trace_file

            st.download_button(
                "Download this trace (NPZ + JSON manifest)",
                functools.partial(_export, trace_file.trace_npz, trace_key(trace)),
                file_name=f"{trace_file_name(trace.config)}.npz", mime="application/octet-stream", on_click="ignore",
                icon=":material/download:", help="Every recorded step, the embeddings and output, "
                "with manifest.json (config, tokens, shapes). Large at 1024 tokens.",
            )
    return place


def share_link(place: DeltaGenerator | None) -> None:
    """The link to this view into ``place`` (:func:`share_and_export`'s): every setting that makes the view, named also
    at its default (the URL leaves those out), so that the link shows the same view whatever a later release's
    defaults are, and none that does not apply to the variant or weights shown nor runs on this page
    (``urlstate.share_query`` with the page's ``PageEntry.view_also``: Compare runs the sidebar's heads whatever the
    class, a page of the book's classes only keeps their settings with a checkpoint), and the page's own parameters
    as the URL holds them now.  None: the link is drawn already (``setup`` drew it: a page without parameters of its
    own, a stale view)."""
    if place is None:
        return
    values = {key: st.session_state[key] for key in SETTING_KEYS}
    base = (st.context.url or "").split("?", 1)[0]
    page_params = {key: st.query_params[key] for key in PAGE_PARAMS if key in st.query_params}  # the shown page's
    also = navigation.also_runs(shown_page())  # PageEntry.view_also: settings run whatever the class, BOOK_CLASSES
    link = base + "?" + urllib.parse.urlencode({**share_query(values, also), **page_params})
    in_link = url_value("text", values["text"])
    fits = in_link is not None
    with place:
        if not fits:
            st.warning(text_left_out(), icon=":material/link_off:")
        elif in_link != values["text"]:
            st.info(text_cut(len(in_link), len(values["text"])), icon=":material/content_cut:")
        if values["weights"] in {option.name for option in core_weights.session_options(ui_weights.session_id())}:
            st.warning(session_model_left_out(values["weights"]), icon=":material/link_off:")
        st.caption("Link to this view (copy with the icon on the right):" if fits else
                   "Link to this view with the default sentence in place of your text:")
        st.code(link, language=None, wrap_lines=True)


def own_link(place: DeltaGenerator, params: dict[str, str], note: str, warn: bool = False) -> None:
    """The link to this view into ``place`` (:func:`share_and_export`'s) for a page whose work the sidebar's settings
    do not touch (Train): the page's own parameters ``params``, named also at their defaults, and none of the
    settings; ``note`` says beside it what the link does not hold — a warning where that is something the session has
    (``warn``: a model trained here), as :func:`session_model_left_out` is."""
    base = (st.context.url or "").split("?", 1)[0]
    with place:
        if warn:
            st.warning(note, icon=":material/link_off:")
        else:
            st.caption(note)
        st.caption("Link to this view (copy with the icon on the right):")
        st.code(base + "?" + urllib.parse.urlencode(params), language=None, wrap_lines=True)


def text_not_in_url(text: str, lost: bool = False) -> None:
    """Under the Text box (``sidebar.text_area``, on every page): where ``text`` is too long for a URL, what a reload
    or a link opens (:func:`text_box_left_out`, :func:`text_box_cut`) and a download of the text; else, where the
    session's URL marked a text left out of it (``lost``: a reload, a link), that its text was too long to keep in
    the link (:func:`text_box_lost`).  Nothing for a text the URL holds."""
    in_url = url_value("text", text)
    if in_url == text:
        if lost:
            st.warning(text_box_lost(), icon=":material/link_off:")
        return
    if in_url is None:
        st.warning(text_box_left_out(), icon=":material/link_off:")
    else:
        st.caption(f":material/content_cut: {text_box_cut(len(in_url), len(text))}")
    st.download_button("Download your text (.txt)", functools.partial(str.encode, text, "utf-8"),
                       file_name="attnviz-text.txt", mime="text/plain", on_click="ignore",
                       icon=":material/download:", help="The whole text in this box, to paste into *Text* again.")


def text_box_left_out() -> str:
    """Under the Text box, for a text too long for a URL (:data:`MAX_URL_TEXT_BYTES`) whose part shown is too."""
    return ("**Your text is too long to keep in the link**: a reload, or this page's link opened anywhere, shows the "
            "default sentence instead. Keep this tab open, download your text below, or shorten it (a link holds "
            f"{MAX_URL_TEXT_BYTES:,} bytes: {URL_CHARACTER_BYTES}).")


def text_box_cut(shown: int, whole: int) -> str:
    """Under the Text box, for a text too long for a URL whose part shown fits (``shown`` of its ``whole``
    characters: ``urlstate.url_text``)."""
    return (f"Only the first {MAX_CONTEXT_LENGTH:,} tokens, the part the pages show ({shown:,} of {whole:,} "
            "characters), fit in this page's link: a reload or the link opens that part, and the rest stays in this "
            "tab only. Download your text to keep all of it.")


def text_box_lost() -> str:
    """Under the Text box, on a session opened by the URL of a text left out of it (``urlstate.TEXT_LEFT_OUT``)."""
    return ("**Your last text was too long to keep in the link**, so the page opened with the default sentence. "
            "Paste it into *Text* again; if someone sent you this link, ask them for the text.")


def text_left_out() -> str:
    """The warning where a link is copied whose text is too long for a URL."""
    return (f"**Your text is not in this link**: it takes more than {MAX_URL_TEXT_BYTES:,} bytes in a URL "
            f"({URL_CHARACTER_BYTES}). The link opens the default sentence and says that the text was too long to "
            "keep in it, and reloading this page loses the text too. Shorten the text to share it, or send the text "
            "with the link to paste into *Text*.")


def text_cut(shown: int, whole: int) -> str:
    """The note where a link is copied that holds only the part of a long text the pages show (``shown`` of its
    ``whole`` characters: ``urlstate.url_text``)."""
    return (f"**This link holds only the part of your text the pages show**: its first {MAX_CONTEXT_LENGTH:,} tokens "
            f"({shown:,} of its {whole:,} characters), which fit in a URL where the whole text does not. The link and "
            "a reload of this page open that part; your whole text stays in *Text* for this session. To share the "
            "rest, send the text with the link to paste into *Text*.")


def session_model_left_out(name: str) -> str:
    """The warning where a link is copied whose weights are a model trained in this session."""
    return (f"**The model in this link exists only in your session**: *{markdown_escape(name)}* was trained here, "
            "so the link opens the book's classes with random weights anywhere else (and here after the server "
            "restarts). To share it, download it from the Train page (*Download the trained model (zip)*), unzip it "
            "and start the app with `streamlit run app.py -- --checkpoint FOLDER`: its links name that checkpoint.")


def _export(write, key: tuple, *args) -> bytes:
    """A download button's deferred data: the Trace is looked up (or recomputed) when the user clicks."""
    return write(trace_of(key), *args)


_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


def file_name(*parts) -> str:
    """A download's file name (without extension) that says what it holds: each part (a page, layer, head, stage …)
    reduced to ASCII letters, digits and hyphens — any other run of characters one hyphen — empty parts and None left
    out, joined by hyphens: ``file_name("attnviz-steps", "head2", "masked", "before:")`` is
    ``"attnviz-steps-head2-masked-before"``."""
    words = (_UNSAFE.sub("-", str(part)).strip("-") for part in parts if part is not None)
    return "-".join(word for word in words if word) or "attnviz"


def layer_part(config: AttentionConfig) -> str | None:
    """A file name's layer: ``"layer1"`` for a checkpoint's layer, ``"attention2"`` for a user's module's attention
    after its first (counted from 1, as the sidebar picks it), None for the book's classes (one layer) and a module's
    first attention."""
    if config.checkpoint is not None:
        return f"layer{config.layer}"
    return f"attention{config.attention}" if config.module is not None and config.attention != 1 else None


def trace_file_name(config: AttentionConfig) -> str:
    """The trace download's name (without extension): its variant ("module" for a user's) and a checkpoint's layer
    (a module's attention), ``attnviz-trace-mha``, ``attnviz-trace-mha-layer1``, ``attnviz-trace-module-attention2``,
    so traces of two views do not share one name."""
    return file_name("attnviz-trace", "module" if config.module else config.variant, layer_part(config))


def download_head_csv(trace: Trace, head: int, stage: str, name: str) -> None:
    """The focused head's map as CSV, named ``name`` (the map's picture's name) + ``.csv``."""
    from attnviz.views import export

    st.download_button(
        f"Download head {head} {stage} (CSV)",
        functools.partial(_export, export.weights_csv, trace_key(trace), head, stage),
        file_name=f"{file_name(name)}.csv", mime="text/csv", on_click="ignore", icon=":material/download:",
    )
