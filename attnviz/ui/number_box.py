"""Whole-number boxes: text boxes that send the server what they show, read as a whole number in a range, and the
page's warning under a box whose text is none.

Streamlit's ``st.number_input`` keeps a number typed past its bounds (or past 2**53) in view, red, and sends the
server nothing: the page goes on drawing the box's last number, which the box no longer shows, and says nothing (an
empty box or a text sends the box's ``min_value`` instead).  A text box sends its text, so the page reads what the
box shows: a whole number in range is used; anything else is kept in the box as typed, and the page says what it does
instead — a view draws its default (:func:`number_box`), a button that starts work (Train's Start, Benchmark's Run)
is disabled (:func:`bounded_box` says why), and a setting of the sidebar keeps its value (:func:`setting_box`).  A page
parameter in the URL is read by the same rule (:func:`link_text`), so a link reopens a box as it showed it; a setting's
by ``urlstate``'s, which reads a whole number as a box does (``urlstate.whole_digits``).
"""

from __future__ import annotations

import streamlit as st

from attnviz.ui.state import BOX_REFUSED, page_bind, setting_changed
from attnviz.urlstate import parse_number, whole_digits
from attnviz.words import clipped, markdown_escape

BOX_CHARS = 24  # the characters a number box holds


def box_number(text: str) -> int | None:
    """The whole number a box's text writes (``urlstate.whole_digits``: ``1,500``), or None."""
    digits = whole_digits(text)
    return None if digits is None else int(digits)


def span(bounds: tuple[int, int]) -> str:
    """A box's range in words: "10 … 6,000"."""
    return f"{bounds[0]:,} … {bounds[1]:,}"


def box_problem(label: str, text: str, bounds: tuple[int, int]) -> str | None:
    """Why the box ``label``'s ``text`` is not used ("Training steps 99,999 is outside 10 … 6,000"), or None for a
    whole number in ``bounds``."""
    number = box_number(text)
    if number is None:
        what = "is empty" if not text.strip() else f"{clipped(text)!r} is not a whole number"
        return f"{label} {what} ({span(bounds)})"
    if not bounds[0] <= number <= bounds[1]:
        return f"{label} {number:,} is outside {span(bounds)}"
    return None


def _box_text(value) -> bool:
    """A value a number box keeps: a text it holds."""
    return isinstance(value, str) and len(value) <= BOX_CHARS


def box_bind(key: str, default: int, url: str | None = None) -> dict:
    """A number box's keyword arguments: :func:`attnviz.ui.state.page_bind`'s, with ``default`` as its text and an
    ``on_change`` that first writes a whole number the way the URL and the link hold it (``1,500`` as ``1500``)."""
    bound = page_bind(key, str(default), _box_text, url=url)
    changed = bound.get("on_change")
    return {**bound, "on_change": _tidied, "args": (changed, *bound.get("args", (key,)))}


def _tidied(changed, key: str, *args) -> None:
    number = box_number(st.session_state[key])
    if number is not None:
        st.session_state[key] = str(number)
    if changed is not None:
        changed(key, *args)


def link_text(raw: str, bounds: tuple[int, int], what: str) -> str:
    """A link's value of a number box: any text a box holds (a whole number written as the URL holds one), as the box
    keeps one typed there, so a link the page wrote (its URL, its Share link) reopens the box as it showed it, with the
    page's warning where it is no number in ``bounds``; a longer one, or one with a character a box does not show (a
    line break), a ValueError in ``urlstate.parse_number``'s words, naming ``bounds``."""
    if len(raw) <= BOX_CHARS and raw.isprintable():
        number = box_number(raw)
        return raw if number is None else str(number)
    return str(parse_number(raw, *bounds, what=what))


def bounded_box(where, label: str, key: str, default: int, bounds: tuple[int, int], *, url: str | None = None,
                help: str | None = None, **layout) -> tuple[str, str | None]:
    """A page's number box in ``where`` (a column, a row, or ``st``), bound to ``key`` (:func:`box_bind`, ``default``
    its first text, ``url`` its URL parameter), with ``layout``'s further keyword arguments of ``text_input`` (its
    ``width``): the text it shows, and why that text is not used (:func:`box_problem`), or None."""
    text = where.text_input(label, max_chars=BOX_CHARS, placeholder=f"a whole number, {span(bounds)}", help=help,
                            **layout, **box_bind(key, default, url))
    return text, box_problem(label, text, bounds)


def number_box(where, label: str, key: str, default: int, bounds: tuple[int, int], instead: str, *,
               url: str | None = None, help: str | None = None) -> int:
    """A number box in ``where`` (a column, or ``st``) and the number the page uses: the box's whole number where it
    is one in ``bounds``; else ``default`` (in ``bounds``), and a warning under the box that names what it holds, the
    range and ``instead`` (what the page shows: "the lab uses T = 24").  The box keeps its text."""
    text, problem = bounded_box(where, label, key, default, bounds, url=url, help=help)
    if problem is None:
        return box_number(text)
    where.warning(markdown_escape(f"{problem}: {instead}."), icon=":material/block:")
    return default


def setting_box_key(key: str) -> str:
    """The widget key of the sidebar's number box of the setting ``key`` (the setting itself is a number the session
    holds under ``key``)."""
    return f"{key}_box"


def setting_box(where, label: str, key: str, bounds: tuple[int, int], *, disabled: bool = False,
                help: str | None = None) -> None:
    """The sidebar's number box of the setting ``key`` in ``where``: a text box that shows the setting's value, and
    sets it to a whole number in ``bounds`` typed there (through the sidebar's callback, ``state.setting_changed``: the
    sizes stay consistent).  Anything else stays in the box as typed while the setting keeps its value, and a warning
    under the box names it, the range and the value the pages use — until the setting changes (typed, or set by a
    preset, a checkpoint …), when the box shows the new value.  A range that moves with another setting (the latent
    width's, 1 … d_out) can come to hold a kept text: the text typed then becomes the setting, as it would have had it
    fitted when typed."""
    state, box = st.session_state, setting_box_key(key)
    refused = state.setdefault(BOX_REFUSED, {})
    kept = refused.get(key)
    if kept is None or kept[1] != state[key] or disabled:
        refused.pop(key, None)
        kept = None
    elif box_problem(label, kept[0], bounds) is None:  # it fits the range the box has now
        refused.pop(key, None)
        state[key], kept = box_number(kept[0]), None
        setting_changed(key)
    shown = str(state[key]) if kept is None else kept[0]  # the text typed, also after a run that did not draw the box
    if state.get(box) != shown:
        state[box] = shown
    where.text_input(label, key=box, max_chars=BOX_CHARS, placeholder=f"a whole number, {span(bounds)}",
                     disabled=disabled, help=help, on_change=_setting_typed, args=(key, label, bounds))
    if key in refused:
        where.warning(markdown_escape(f"{box_problem(label, refused[key][0], bounds)}: using {state[key]}."),
                      icon=":material/block:")


def _setting_typed(key: str, label: str, bounds: tuple[int, int]) -> None:
    """on_change of a setting's number box: a whole number in ``bounds`` becomes the setting; anything else is kept
    as the box's text, the setting keeping its value."""
    state = st.session_state
    text, refused = state[setting_box_key(key)], state.setdefault(BOX_REFUSED, {})
    number = box_number(text)
    if box_problem(label, text, bounds) is None:
        refused.pop(key, None)
        state[key] = number
        setting_changed(key)
    else:
        refused[key] = (text, state[key])
