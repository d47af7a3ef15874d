"""The Compare page's and the Pitfall lab's selectors, which follow the URL: Compare's *Heatmap shows* (``map``), the
Pitfall lab's bug (``bug``) and perturbed token (``token``).  Each page reads its own on a session's first visit
(``state.page_widgets_from_url``): a value the page does not offer — a bug name not in the catalogue, a token
position past the text, no number — is compared with the options, never used as a name, and refused with a notice
above its widget (until the user sets it), which shows its default.  Each widget writes its value to the URL on
every run (``state.page_bind``), so the Share link the page draws after them carries it."""

from __future__ import annotations

import functools

import streamlit as st

from attnviz.labs import compare
from attnviz.labs.pitfalls import catalogue
from attnviz.labs.pitfalls.catalogue import PITFALLS
from attnviz.ui.checkpoint import position_labels
from attnviz.ui.state import forget_page_params, page_bind, page_widgets_from_url, url_notices
from attnviz.urlstate import BUG, MAP, TOKEN, parse_number, parse_option

DEFAULT_MAP = "head 0"
NO_BUG = "none"


def heatmap_choice() -> str:
    """Compare's *Heatmap shows* (one of ``compare.MAP_CHOICES``): the link's ``map`` on a session's first visit."""
    page_widgets_from_url("compare", {
        "compare_map": (MAP, functools.partial(parse_option, options=compare.MAP_CHOICES, what="a map this page draws"),
                        f"showing {DEFAULT_MAP}"),
    })
    url_notices("compare_map")
    return st.segmented_control("Heatmap shows", compare.MAP_CHOICES,
                                **page_bind("compare_map", DEFAULT_MAP, url=MAP)) or DEFAULT_MAP


def pitfalls_from_url(n: int) -> None:
    """A session's first visit of the Pitfall lab: its bug and perturbed token take the link's ``bug`` (one of the
    catalogue's names, or ``none``) and ``token`` (a position of the lab's ``n`` tokens)."""
    options = (NO_BUG, *PITFALLS)
    page_widgets_from_url("pitfalls", {
        "pitfalls_bug": (BUG, functools.partial(parse_option, options=options, what="a bug this lab has"),
                         "showing the book's code, no bug"),
        "pitfalls_token": (TOKEN, functools.partial(parse_number, low=0, high=max(0, n - 1),
                                                    what=f"the token positions of this {n:,}-token text"),
                           f"perturbing token {n // 2}"),
    })


def bug_choice() -> str:
    """The Pitfall lab's *Switch on a bug*: a key of ``PITFALLS``, or ``none``."""
    url_notices("pitfalls_bug")
    return st.segmented_control(
        "Switch on a bug", [NO_BUG, *PITFALLS], format_func=catalogue.label,
        **page_bind("pitfalls_bug", NO_BUG, lambda key: key == NO_BUG or key in PITFALLS, url=BUG),
    ) or NO_BUG


def perturbed_token(tokens: list[str]) -> int | None:
    """The leak detector's *Perturbed token j* over the lab's ``tokens``; None for a single token, which has nothing
    before it (the URL then has no ``token``)."""
    url_notices("pitfalls_token")
    n = len(tokens)
    if n < 2:
        forget_page_params(TOKEN)
        return None
    labels = position_labels(tuple(tokens))  # a new text's: the slider reads its token at a position kept
    return st.select_slider("Perturbed token j", list(range(n)), format_func=labels.__getitem__,
                            **page_bind("pitfalls_token", n // 2, lambda p: isinstance(p, int) and 0 <= p < n,
                                        url=TOKEN, labels=labels))
