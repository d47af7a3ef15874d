"""Words for the reader: counts — a number and its noun, singular for one ("1 head", "12 heads", "1 K/V group",
"1 query", "2 queries"), and numbered items after their noun ("position 3", "positions 0, 1, 2") —, a value a
URL gave as a message quotes it back, cut short (:func:`clipped`), the keys a sliding window shows a query
(:func:`window_sees`: "only itself", "keys i − 1, i"), text escaped so that Markdown shows it as it is
(:func:`markdown_escape`), the words of a class's name (:func:`name_words`), which the rules read it by, and the line
a fresh server's first page shows while the server imports PyTorch (:data:`STARTING`)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def amount(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` of ``noun`` in words, singular for one: "1 head", "4 heads", "1 K/V group", "2 queries" (with
    ``nouns="queries"``); thousands grouped as every page writes numbers: "1,024 tokens"."""
    return f"{count:,} {plural(count, noun, nouns)}"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``noun`` for one; for any other count ``nouns``, or ``noun`` + "s" when ``nouns`` is not given ("query" takes
    ``nouns="queries"``)."""
    if count == 1:
        return noun
    return nouns if nouns is not None else f"{noun}s"


def listed(noun: str, numbers: Sequence[int], limit: int = 24) -> str:
    """``numbers`` after ``noun``, singular for one: "position 3", "positions 0, 1, 2"; past ``limit`` the first
    ``limit`` and the count: "positions 0, 1, …, 23, … (30 positions)"."""
    shown = ", ".join(str(number) for number in numbers[:limit])
    more = f", … ({amount(len(numbers), noun)})" if len(numbers) > limit else ""
    return f"{plural(len(numbers), noun)} {shown}{more}"


# what a fresh server's first page says while the server imports PyTorch: app.py's first run, and a page script that
# runs alone (a shared link as the server's first request), whose imports wait on it
STARTING = "Starting attnviz: importing PyTorch, once for this server…"

CLIPPED_LENGTH = 20  # the characters of a URL's value that a message quotes back


def clipped(value, limit: int = CLIPPED_LENGTH) -> str:
    """``value`` as text, as a message quotes back what a URL gave (a parameter's value or name): whole up to
    ``limit`` characters, else its first ``limit`` and "…" — a 400-digit ``layer`` is not printed digit by digit."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:])")


# "--" standing alone (a space or an end on each side, as in ``streamlit run app.py -- --module``), escaped: Streamlit's
# Markdown draws it as "—" even escaped, so a command shown would not run; a code span keeps it two hyphens
LONE_DASHES = re.compile(r"(?<!\S)\\-\\-(?!\S)")


def markdown_escape(text: str) -> str:
    """Backslash-escape Markdown so user-derived text (URL values, messages) shows literally — also a lone "--", which
    Streamlit would draw as a dash: in a code span."""
    return LONE_DASHES.sub("`--`", MARKDOWN_SPECIALS.sub(r"\\\1", text))


def window_sees(window: int) -> str:
    """The keys a sliding window of ``window`` shows query i, in words: "only itself", "keys i − 1, i", "keys i − 2 …
    i"."""
    if window == 1:
        return "only itself"
    return "keys i − 1, i" if window == 2 else f"keys i − {window - 1} … i"


# a class name's words: a run of capitals before a capitalised word, a digit, "_", a version's "v2" or the end (KV in
# KVCache, MHA in MHAv2), a capitalised or lowercase word, a number
NAME_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z]|v\d|\d|_|$)|[A-Z]?[a-z]+|\d+")


def name_words(name: str) -> list[str]:
    """A class name's words, lowercased, in order: ``MultiHeadAttentionWithSWA`` → multi, head, attention, with,
    swa; ``KVCache`` → kv, cache; ``Llama3Attention`` → llama, 3, attention; ``MHAv2`` → mha, v, 2.  "_" separates
    words and is no word."""
    return [word.lower() for word in NAME_WORDS.findall(name)]
