"""The app started with ``streamlit run app.py -- --module path.py:Class`` (the README's command) opens on that
module; a link's ``variant=`` still wins.  A URL without ``variant`` means what the app opens on, so the URL leaves
the module out, as it leaves out every default, and names the book's MHA when that is picked; the Share link names
every setting, the module too."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.apptest import no_exception, open_app, share_link
from streamlit.testing.v1 import AppTest

from attnviz import user_code, variants

ROOT = Path(__file__).resolve().parents[2]
SPEC = f"{ROOT / 'docs' / 'examples' / 'my_attention.py'}:MultiHeadAttention"  # the README's example


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    """``streamlit run app.py -- --module SPEC``: the script's sys.argv; no module listed in the environment."""
    monkeypatch.setattr("sys.argv", ["app.py", "--module", SPEC])
    monkeypatch.delenv(user_code.ENV, raising=False)


def label() -> str:
    """The module's label in the variant list ("Your module: MultiHeadAttention")."""
    return next(name for name, spec in user_code.listed().items() if spec == SPEC)


def url(at: AppTest) -> dict[str, str]:
    return {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}


def drawn_text(at: AppTest) -> str:
    return " ".join([*(c.value for c in at.caption), *(m.value for m in at.markdown)])


def test_the_app_opens_on_the_module_named_on_the_command_line_and_leaves_it_out_of_the_url():
    at = open_app()
    no_exception(at)
    assert label().startswith("Your module: MultiHeadAttention")
    assert at.sidebar.selectbox(key="variant").value == label()
    assert "MultiHeadAttention" in drawn_text(at) and "your code, traced" in drawn_text(at)
    assert "variant" not in url(at)  # what the app opens on: a URL without it means it
    share = share_link(at)
    assert "variant=Your+module%3A+MultiHeadAttention" in share  # the Share link names every setting


def test_a_links_variant_wins_and_the_url_names_the_books_mha_once_it_is_not_what_the_app_opens_on():
    at = open_app(variant=variants.MHA)
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value == variants.MHA
    assert url(at)["variant"] == variants.MHA
    at.sidebar.selectbox(key="variant").set_value(label()).run()
    no_exception(at)
    assert "variant" not in url(at)
    at.sidebar.selectbox(key="variant").set_value(variants.MHA).run()
    assert url(at)["variant"] == variants.MHA
    reloaded = open_app(**url(at))  # a reload or a shared page link shows the same variant
    no_exception(reloaded)
    assert reloaded.sidebar.selectbox(key="variant").value == variants.MHA
    assert url(reloaded) == url(at)


def test_the_first_module_that_loads_is_opened_on_and_one_that_does_not_is_named_with_the_reason(monkeypatch):
    monkeypatch.setattr("sys.argv", ["app.py", "--", "--module", "no_such_file.py:X", "--module", SPEC])
    at = open_app()
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value == label()
    captions = [c.value.replace("\\", "") for c in at.sidebar.caption]  # as the user reads them: unescaped
    assert any("no_such_file.py:X is not listed: " in caption for caption in captions), captions


def test_without_a_module_on_the_command_line_the_app_opens_on_the_books_mha(monkeypatch):
    monkeypatch.setattr("sys.argv", ["app.py"])
    monkeypatch.setenv(user_code.ENV, SPEC)  # listed, not named on the command line: the app opens on the book's
    at = open_app()
    no_exception(at)
    assert at.sidebar.selectbox(key="variant").value == variants.DEFAULT
    assert label() in at.sidebar.selectbox(key="variant").options
    assert "variant" not in url(at)
