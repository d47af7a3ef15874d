"""AppTest of the settings in the URL: a changed setting is written to it, settings at their defaults stay out of it
(so a page's link without them is not rewritten), a link that names every setting is kept as it is, the Share link
names every setting that applies, and a default that the other settings imply otherwise is written and survives a
reload."""

from __future__ import annotations

import pytest
from helpers.apptest import follow_link, link_notices, no_exception, open_app, share_link
from streamlit.testing.v1 import AppTest

app = open_app


def test_settings_are_written_to_the_url():
    at = app()
    at.sidebar.selectbox(key="num_heads").set_value(3).run()
    assert at.query_params["num_heads"] == ["3"] or at.query_params["num_heads"] == "3"


def url(at: AppTest) -> list[tuple[str, str]]:
    """The URL's parameters in its order (each one's last value)."""
    return [(key, value[-1] if isinstance(value, list) else value) for key, value in at.query_params.items()]


def test_the_settings_at_their_defaults_stay_out_of_the_url_so_a_link_without_them_is_not_rewritten():
    """A page's link without settings (``/?head=2``) stays the URL (a rewrite would be a second entry of the browser's
    history); a changed setting is written, and leaves the URL when it is back at its default."""
    at = app(head="2")
    assert url(at) == [("head", "2")]
    at.sidebar.text_input(key="seed_box").input(str(7)).run()
    assert url(at) == [("seed", "7"), ("head", "2")]
    at.sidebar.text_input(key="seed_box").input(str(123)).run()
    assert url(at) == [("head", "2")]
    follow_link(at, "pages/tokens.py")  # the page's link names no settings either
    assert url(at) == []


def test_a_link_that_names_every_setting_is_not_rewritten_and_the_share_link_names_every_setting_that_applies():
    """The Share link names every setting that makes the view (the view stays the same if a later release changes a
    default) and none that does not apply to the variant, and a session opened with it, or with a link that names
    every setting, keeps that URL as it is."""
    from attnviz.urlstate import DEFAULTS, applying_settings, every_setting_query, share_query

    values = {**DEFAULTS, "num_heads": 4, "preset": "custom"}
    for shared in ({**share_query(values), "head": "3"}, {**every_setting_query(values), "head": "3"}):
        at = app(**shared)
        no_exception(at)
        assert url(at) == list(shared.items())
        link = share_link(at)
        assert [part.split("=")[0] for part in link.split("?", 1)[1].split("&")] == [*applying_settings(values),
                                                                                     "head"]


def test_a_default_that_the_other_settings_imply_otherwise_is_in_the_url():
    """The book preset masks only the variants the book masks: the mask turned on for one it does not is written,
    though it is the default, and a reload keeps it on."""
    at = app(variant="self_attention_v1")
    at.sidebar.selectbox(key="preset").set_value("book").run()
    assert at.sidebar.toggle(key="causal").value is False
    at.sidebar.toggle(key="causal").set_value(True).run()
    assert dict(url(at))["causal"] == "true"
    reloaded = app(**dict(url(at)))
    no_exception(reloaded)
    assert reloaded.sidebar.toggle(key="causal").value is True
    assert url(reloaded) == url(at)


def link_text(at: AppTest) -> str | None:
    """The text the sidebar's Share link holds (None: none)."""
    import urllib.parse

    link = share_link(at)
    return urllib.parse.parse_qs(link.split("?", 1)[1]).get("text", [None])[-1]


def test_a_long_paste_is_shared_as_the_part_shown_and_the_text_box_keeps_it_whole():
    """20,000 characters (4,445 tokens) are too long for a URL, but the part the pages show (the first 1,024
    tokens, ~5 kB) fits: the URL and the Share link hold that part, the sidebar says the link holds the part shown
    only, the session's text box keeps the whole paste through the runs that follow, and the link (a reload) opens
    the part shown.  A text whose part shown is still too long keeps the warning that the link leaves it out."""
    from helpers.texts import english_text

    from attnviz import urlstate

    text = english_text(4445)
    shown = urlstate.url_text(text)
    assert shown is not None and len(shown) < len(text)
    at = app()
    at.text_area(key="text").input(text).run()
    no_exception(at)
    assert at.text_area(key="text").value == text
    assert dict(url(at))["text"] == shown and link_text(at) == shown
    notes = [note.value for note in at.sidebar.info]
    assert any("holds only the part of your text the pages show" in note for note in notes), notes
    assert not any("not in this link" in warning.value for warning in at.sidebar.warning)
    at.sidebar.text_input(key="seed_box").input(str(7)).run()  # another run: the whole paste stays in the box
    no_exception(at)
    assert at.text_area(key="text").value == text and dict(url(at))["text"] == shown
    follow_link(at, "pages/tokens.py")
    assert at.sidebar.text_area(key="text").value == text and dict(url(at))["text"] == shown

    reloaded = app(**dict(url(at)))
    no_exception(reloaded)
    assert reloaded.text_area(key="text").value == shown
    assert any("· 1,024 tokens ·" in caption.value for caption in reloaded.caption)  # the view the paste showed

    over = "=" * (urlstate.MAX_URL_TEXT_BYTES // 3 + 1)  # 64 tokens, all shown, 12,003 bytes in a URL
    at.sidebar.text_area(key="text").input(over).run()
    no_exception(at)
    assert "text" not in dict(url(at)) and link_text(at) is None
    assert any("not in this link" in warning.value for warning in at.sidebar.warning)


def share_link_params(at: AppTest) -> dict[str, str]:
    """The Share link's parameters (each one's last value)."""
    import urllib.parse

    link = share_link(at)
    return dict(urllib.parse.parse_qsl(link.split("?", 1)[1], keep_blank_values=True))


def config_of(at: AppTest):
    """The AttentionConfig the session's settings run (the book's classes)."""
    from attnviz.urlstate import SETTING_KEYS, config_from_settings

    return config_from_settings({key: at.session_state[key] for key in SETTING_KEYS})


def test_a_single_head_class_picked_after_four_heads_leaves_them_out_of_the_url_where_the_page_runs_it_alone():
    """The Heads the single-head class sets aside leave the URL as they leave the Share link: the address bar says
    what runs.  The session keeps them (back on MHA they run again), and the Compare page, which runs the multi-head
    variants with them whatever the class picked, names them in its URL and its Share link."""
    at = app()
    at.sidebar.selectbox(key="num_heads").set_value(4).run()
    assert dict(url(at))["num_heads"] == "4"
    at.sidebar.selectbox(key="variant").set_value("self_attention_v1").run()
    no_exception(at)
    assert "num_heads" not in dict(url(at)) and "num_heads" not in share_link_params(at)
    reloaded = app(**dict(url(at)))
    no_exception(reloaded)
    assert config_of(reloaded) == config_of(at) and not reloaded.sidebar.warning and not link_notices(reloaded)

    follow_link(at, "pages/compare.py")
    no_exception(at)
    assert dict(url(at))["num_heads"] == "4" and share_link_params(at)["num_heads"] == "4"
    assert "4 heads of 192" in at.caption[0].value
    follow_link(at, "pages/heads.py")
    assert "num_heads" not in dict(url(at))
    at.sidebar.selectbox(key="variant").set_value("mha").run()
    assert dict(url(at))["num_heads"] == "4" and config_of(at).num_heads == 4


def test_a_book_size_link_with_the_seed_123_keeps_it_and_one_without_a_seed_opens_the_books_789():
    """A link to SelfAttention_v2 at the book size written before the size set each class's seed (no ``seed``) opens
    with 789, the book's; one that names ``seed=123`` still runs 123, and its URL and Share link keep it."""
    own = app(preset="book", variant="self_attention_v2", seed="123")
    no_exception(own)
    assert int(own.sidebar.text_input(key="seed_box").value) == 123 and config_of(own).seed == 123
    assert dict(url(own))["seed"] == "123" and share_link_params(own)["seed"] == "123"
    old = app(preset="book", variant="self_attention_v2")
    assert int(old.sidebar.text_input(key="seed_box").value) == 789 and "seed" not in dict(url(old))
    assert share_link_params(old)["seed"] == "789"


FOUR_HEADS_THEN_V1 = [("selectbox", "num_heads", 4), ("selectbox", "variant", "self_attention_v1")]
SESSIONS = {  # a session's changes, in order: (widget kind, key, value)
    "v1 after four heads": FOUR_HEADS_THEN_V1,
    "simplified after d_out 64": [("text_input", "d_out_box", "64"), ("selectbox", "num_heads", 4),
                                  ("selectbox", "variant", "simplified")],
    "v1 at d_out 64": [("text_input", "d_out_box", "64"), ("selectbox", "num_heads", 4),
                       ("selectbox", "variant", "self_attention_v1")],
    "book size, v2": [("selectbox", "preset", "book"), ("selectbox", "variant", "self_attention_v2")],
    "book size, v2 at 123": [("selectbox", "preset", "book"), ("selectbox", "variant", "self_attention_v2"),
                             ("text_input", "seed_box", "123")],
    "rotary gqa, mla, then mha learned": [("selectbox", "variant", "gqa"), ("selectbox", "num_kv_groups", 2),
                                          ("radio", "positions", "rotary"), ("selectbox", "rope_base", 500_000),
                                          ("selectbox", "variant", "mla"), ("text_input", "latent_dim_box", "40"),
                                          ("selectbox", "variant", "mha"), ("radio", "positions", "learned")],
}
# what Compare's cards say of the sizes a session set on another class (GQA's K/V groups, MLA's latent): they run them
COMPARE_CARDS = {"rotary gqa, mla, then mha learned": ("· 2 K/V heads, each shared by 6 query heads",
                                                       "· K/V latent dim 40")}


def cards(at: AppTest) -> list[str]:
    """The line under each of Compare's variant maps ("output (1, 6, 768) · 12 heads · …")."""
    return [c.value for c in at.caption if c.value.startswith("output (")]


@pytest.mark.parametrize("session", SESSIONS)
def test_the_url_and_the_share_link_the_app_writes_open_the_same_view_in_a_fresh_session(session):
    """Each link the app writes — the address bar and the Share link, on a page that runs the picked class alone and
    on Compare — opened in a fresh session runs the same config (and on Compare the same heads), with no notice.
    One session makes the changes, then its links are read on the Heads page and, after following its link, on
    Compare, whose cards run the K/V groups and latent set on GQA and MLA though MHA is picked now."""
    at = app()
    for kind, key, value in SESSIONS[session]:
        widget = getattr(at.sidebar, kind)(key=key)
        (widget.input(value) if kind == "text_input" else widget.set_value(value)).run()
        no_exception(at)
    for page in ("pages/heads.py", "pages/compare.py"):
        if page != "pages/heads.py":
            follow_link(at, page)
        for params in (dict(url(at)), share_link_params(at)):
            fresh = app(**params)
            if page != "pages/heads.py":
                fresh.switch_page(page).run()
            no_exception(fresh)
            assert not fresh.sidebar.warning, (page, [w.value for w in fresh.sidebar.warning])
            assert not link_notices(fresh), page
            assert config_of(fresh) == config_of(at), (page, params)
            if page == "pages/compare.py":  # every variant at the sidebar's sizes
                assert fresh.caption[0].value == at.caption[0].value and cards(fresh) == cards(at)
                assert (fresh.session_state["d_out"], fresh.session_state["num_heads"]) == (
                    at.session_state["d_out"], at.session_state["num_heads"])
    said = "\n".join(cards(at))
    assert all(size in said for size in COMPARE_CARDS.get(session, ())), said


def test_a_link_giving_a_size_the_book_preset_has_not_keeps_its_other_sizes_as_the_sidebar_does():
    """``/?variant=mha&preset=book&d_out=4``: d_in 3 and 2 heads from the book's preset, d_out 4 from the link,
    shown as Custom with no notice — what editing d_out to 4 in the sidebar at the book's preset shows — never
    GPT-2's d_in 768 and a notice about 12 heads."""
    sizes = ("preset", "d_in", "d_out", "num_heads")

    def shown(at: AppTest) -> dict:
        no_exception(at)
        assert not at.sidebar.warning and not at.main.warning, [w.value for w in (*at.sidebar.warning,
                                                                                  *at.main.warning)]
        return {key: at.sidebar.selectbox(key=key).value if key in ("preset", "num_heads")
                else int(at.sidebar.text_input(key=f"{key}_box").value) for key in sizes}

    linked = shown(app(variant="mha", preset="book", d_out="4"))
    assert linked == {"preset": "custom", "d_in": 3, "d_out": 4, "num_heads": 2}
    edited = app(variant="mha", preset="book")
    edited.sidebar.text_input(key="d_out_box").input(str(4)).run()
    assert shown(edited) == linked
    wrapper = shown(app(variant="mha_wrapper", preset="book", d_out="4"))  # the wrapper's listing: d_out 2 per head
    assert wrapper == {"preset": "book", "d_in": 3, "d_out": 4, "num_heads": 2}
