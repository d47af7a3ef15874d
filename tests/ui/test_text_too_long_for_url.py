"""AppTest of a text too long for the URL: the sidebar says so under the Text box, on every page, what a reload or a
link will open and what to do (download the text); and a session opened by the URL of such a text (a reload, a
link) says that its text was too long to keep in the link."""

from __future__ import annotations

import re
import string
import urllib.parse

import pytest
from helpers.apptest import follow_link, link_notices, no_exception, open_app, share_link
from helpers.texts import english_text

from attnviz import urlstate
from attnviz.ui import share

LEFT_OUT = "=" * (urlstate.MAX_URL_TEXT_BYTES // 3 + 1)  # 64 tokens, all shown, 12,003 bytes in a URL: left out
SAID = ("warning", "caption", "info", "download_button")  # what the sidebar can say under the Text box


ONE_BYTE = string.ascii_letters + string.digits + " .-_~"
# The characters each part of the words on a character's bytes in a link names (share.URL_CHARACTER_BYTES): every
# ASCII character a text holds, and non-ASCII ones of 2, 3 and 4 bytes in UTF-8
NAMED = {
    "a letter, digit, space or one of `. - _ ~`": ONE_BYTE,
    "other punctuation or a line break": "".join(c for c in string.punctuation if c not in ONE_BYTE) + "\n\r\t",
    "a non-ASCII character": "éß€日😀",
}


def by_text_box(at) -> list:
    """What the sidebar draws right under the Text box, before the next setting (Weights), in page order."""
    elements = list(at.sidebar)  # depth first, in page order
    start = next(i for i, element in enumerate(elements) if getattr(element, "key", None) == "text")
    end = next(i for i, element in enumerate(elements) if i > start and getattr(element, "key", None) == "weights")
    return [element for element in elements[start + 1:end] if getattr(element, "type", None) in SAID]


def said(at) -> str:
    """The words under the Text box as the user reads them (Markdown escapes taken out)."""
    return " ".join(str(element.value) for element in by_text_box(at) if element.type != "download_button").replace(
        "\\", "")


def download_labels(at) -> list[str]:
    return [element.proto.label for element in by_text_box(at) if element.type == "download_button"]


def url(at) -> dict[str, str]:
    return {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}


def test_a_text_too_long_for_the_url_is_warned_about_under_the_text_box_on_every_page():
    """The default sentence: nothing under the Text box.  A text too long for a URL: a warning right under the box
    that a reload or a link opens the default sentence, with a download of the text — on the Heads page, on
    Tokens, and on Train, where the settings are folded away; a short text again: nothing."""
    at = open_app()
    assert by_text_box(at) == []
    at.sidebar.text_area(key="text").input(LEFT_OUT).run()
    no_exception(at)
    warnings = [element for element in by_text_box(at) if element.type == "warning"]
    assert len(warnings) == 1, said(at)
    words = said(at)
    assert "too long to keep in the link" in words and "reload" in words and "default sentence" in words, words
    assert download_labels(at) == ["Download your text (.txt)"]
    for script in ("pages/tokens.py", "pages/train.py"):
        follow_link(at, script)
        no_exception(at)
        assert at.sidebar.text_area(key="text").value == LEFT_OUT
        assert "too long to keep in the link" in said(at), script
        assert download_labels(at) == ["Download your text (.txt)"], script
    follow_link(at, "pages/heads.py")
    at.sidebar.text_area(key="text").input("Every cat loves warm milk").run()
    no_exception(at)
    assert by_text_box(at) == []


def test_a_long_paste_whose_part_shown_fits_says_under_the_text_box_that_a_reload_keeps_that_part_only():
    """20,000 characters: the URL holds the first 1,024 tokens (the part the pages show).  Under the Text box a note
    says so — a reload or a link opens that part, the rest stays in this tab — with a download of the whole text;
    no warning that the text is gone."""
    at = open_app()
    at.sidebar.text_area(key="text").input(english_text(4445)).run()
    no_exception(at)
    words = said(at)
    assert "first 1,024 tokens" in words and "reload" in words and "rest" in words, words
    assert not [element for element in by_text_box(at) if element.type == "warning"]
    assert download_labels(at) == ["Download your text (.txt)"]


def test_a_reload_of_a_text_left_out_of_the_url_says_the_text_was_too_long_to_keep_in_the_link():
    """A text left out of the URL leaves a mark there (``text_left_out``), in the Share link too.  A session opened on
    that URL (a reload, the link) opens the default sentence and says under the Text box that the last text was too
    long to keep in the link, without calling the mark an unknown parameter and without rewriting the URL (one entry
    of the browser's history); a session opened without the mark says nothing.  A new text takes both away."""
    at = open_app(head="2")
    at.sidebar.text_area(key="text").input(LEFT_OUT).run()
    no_exception(at)
    assert "text" not in url(at) and url(at)[urlstate.TEXT_LEFT_OUT] == "1"
    assert f"{urlstate.TEXT_LEFT_OUT}=1" in share_link(at)

    reloaded = open_app(**url(at))
    no_exception(reloaded)
    assert reloaded.sidebar.text_area(key="text").value == urlstate.DEFAULT_TEXT
    assert "Your last text was too long to keep in the link" in said(reloaded), said(reloaded)
    assert "unknown" not in link_notices(reloaded).lower()
    assert url(reloaded) == url(at)  # not rewritten
    reloaded.sidebar.text_input(key="seed_box").input(str(7)).run()  # a run after another change: the mark stays out
    assert urlstate.TEXT_LEFT_OUT not in url(reloaded)
    assert "too long" not in said(reloaded)

    assert "too long" not in said(open_app(head="2"))

    reloaded = open_app(**url(at))
    reloaded.sidebar.text_area(key="text").input("Every cat loves warm milk").run()
    no_exception(reloaded)
    assert by_text_box(reloaded) == [] and urlstate.TEXT_LEFT_OUT not in url(reloaded)


@pytest.mark.parametrize("message", [share.text_box_left_out, share.text_left_out])
def test_the_bytes_the_words_say_a_character_takes_in_a_link_are_those_the_url_encoding_takes(message):
    """Under the Text box and in Share & export: each kind of character the words name takes the bytes they say
    (one number, or the least–the most) in the URL's percent-encoding (``quote_plus``, which the length limit
    measures), and the kinds named cover every ASCII character a text holds."""
    words = message()
    for kind, characters in NAMED.items():
        stated = re.search(re.escape(kind) + r" (?:takes )?(\d+)(?:–(\d+))?", words)
        assert stated, f"the words no longer name {kind!r}: {words}"
        low, high = int(stated[1]), int(stated[2] or stated[1])
        taken = {character: len(urllib.parse.quote_plus(character)) for character in characters}
        assert (min(taken.values()), max(taken.values())) == (low, high), (kind, taken)
    assert set(string.printable) - set("\x0b\x0c") <= set("".join(NAMED.values()))
