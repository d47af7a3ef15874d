"""Sliders whose option labels are the text's tokens ("3: ·with"): after a new text, each reads its value's label of
the new text — the Pitfall lab's perturbed token and a model's "After position" — never a label of the old text or
the slider's first option (:class:`helpers.apptest.ShownLabels` says what the browser shows)."""

from __future__ import annotations

import pytest
from helpers.apptest import ShownLabels, no_exception, open_app

from attnviz import weights

OLD, NEW = "Your journey starts with one step", "one two three four five six"  # six tokens each


def test_the_perturbed_token_slider_reads_the_new_texts_token_at_its_position():
    """The middle token (3) of the old text, then a text as long: token 3 is still perturbed, and the slider reads
    "3: ·four", the new text's token 3, not its first option; a token the learner picked too."""
    at = open_app("pages/pitfalls.py", text=OLD)
    shown = ShownLabels(at)
    assert shown.of(at, "pitfalls_token") == "3: ·with"
    at.sidebar.text_area(key="text").set_value(NEW).run()
    shown.read(at)
    no_exception(at)
    assert at.select_slider(key="pitfalls_token").value == 3
    assert shown.of(at, "pitfalls_token") == "3: ·four"
    shown.pick(at, "pitfalls_token", 2)
    at.sidebar.text_area(key="text").set_value(OLD).run()
    shown.read(at)
    assert at.select_slider(key="pitfalls_token").value == 2
    assert shown.of(at, "pitfalls_token") == "2: ·starts"
    shown.read(at.run())  # a rerun that changes no label keeps the pick
    assert at.select_slider(key="pitfalls_token").value == 2 and shown.agree(at, "pitfalls_token")


@pytest.mark.parametrize(("page", "key"), [(None, "next_position"), ("pages/tokens.py", "tokens_next_position")])
def test_the_after_position_slider_reads_the_new_texts_token_at_its_position(page, key):
    """A model's next-token panel (the Heads and Tokens pages): the last position of the old text, then a text as
    long: the slider reads "5: ·six", the token whose predictions the table shows, not its first option."""
    at = open_app(page, weights=weights.BUNDLED_NAME, text=OLD)
    no_exception(at)
    shown = ShownLabels(at)
    assert shown.of(at, key) == "5: ·step"
    at.sidebar.text_area(key="text").set_value(NEW).run()
    shown.read(at)
    no_exception(at)
    assert at.select_slider(key=key).value == 5
    assert any("after “·six” (position 5)" in caption.value for caption in at.caption)
    assert shown.of(at, key) == "5: ·six"
    shown.pick(at, key, 1)
    at.sidebar.text_area(key="text").set_value(OLD).run()
    shown.read(at)
    assert at.select_slider(key=key).value == 1 and shown.of(at, key) == "1: ·journey"
