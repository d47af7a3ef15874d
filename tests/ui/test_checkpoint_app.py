"""AppTest: the ``weights`` and ``layer`` settings with checkpoints listed from ATTNVIZ_CHECKPOINTS.

The checkpoints are small GPT-2s written here with helpers.checkpoints (``save_pretrained``; a truncated file; a
pickle that would run code).  What the user sees is read back from the app: the sidebar's options and disabled widgets,
the captions, the Plotly JSON of the heads.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.apptest import decode, link_notices, no_exception, share_link, sidebar_notices
from helpers.apptest import open_app as app
from helpers.apptest import plotly_figures as figures
from helpers.checkpoints import own_session_models, write_checkpoints
from helpers.maps import cells_shown
from streamlit.testing.v1 import AppTest

from attnviz import background, models, tokens, weights
from attnviz.head_types import repeated_random_tokens
from attnviz.urlstate import DEFAULTS, link_settings

transformers = pytest.importorskip("transformers")

TIMEOUT = 120
NAME = "tiny-gpt2"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    config = transformers.GPT2Config(n_layer=3, n_head=4, n_embd=64, n_positions=96, attn_implementation="eager")
    torch.manual_seed(5)
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                param.normal_(0.0, 0.3)
    return write_checkpoints(tmp_path_factory.mktemp("checkpoints"), NAME, hf, broken=True)


pytestmark = pytest.mark.usefixtures("checkpoint_environment")  # the app lists ``checkpoints`` (tests/conftest.py)


def grid(at: AppTest) -> dict:
    return next(fig for fig in figures(at) if any(t.get("name", "").startswith("select head") for t in fig["data"]))


def focused(at: AppTest) -> dict:
    return next(fig for fig in figures(at) if fig["layout"]["title"]["text"].startswith("head "))


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def test_weights_lists_the_books_classes_first_then_the_checkpoints(checkpoints):
    at = app()
    no_exception(at)
    box = at.sidebar.selectbox(key="weights")
    assert box.value == weights.BOOK
    assert box.options[0] == weights.BOOK_LABEL
    assert {NAME, "truncated.safetensors", "evil.pth"} <= set(box.options)
    assert at.sidebar.selectbox(key="layer").disabled  # the book's classes: one layer
    assert "seeded random weights" in captions(at)


def test_choosing_a_checkpoint_draws_its_layer_with_its_sizes(checkpoints):
    at = app()
    at.sidebar.selectbox(key="weights").set_value(NAME).run()
    no_exception(at)
    assert f"{NAME} · layer 0 of 3" in at.caption[0].value
    assert "4 heads × 16" in at.caption[0].value
    for key in ("d_in", "d_out"):
        box = at.sidebar.text_input(key=f"{key}_box")
        assert box.disabled and box.value == "64"
    for key in ("variant", "preset", "num_heads"):
        assert at.sidebar.selectbox(key=key).disabled
    assert at.sidebar.slider(key="dropout").disabled and at.sidebar.toggle(key="train").disabled
    assert at.sidebar.text_input(key="seed_box").disabled
    assert "sizes are read from the file" in at.sidebar.text_input(key="d_in_box").help
    causal = at.sidebar.toggle(key="causal")
    assert causal.value is True and not causal.disabled and "trained with it" in causal.help
    assert [str(o) for o in at.sidebar.selectbox(key="layer").options] == ["0", "1", "2"]
    assert len([a for a in grid(at)["layout"]["annotations"] if "head" in a["text"]]) == 4
    assert at.query_params["weights"] in ([NAME], NAME)
    # the next-token panel: top 5 after the last position
    tables = [frame.value for frame in at.dataframe if "next token" in frame.value.columns]
    assert len(tables) == 1 and list(tables[0].columns) == ["rank", "next token", "id", "probability"]
    assert len(tables[0]) == 5


def test_every_positions_next_token_table_is_computed_only_when_opened(checkpoints, monkeypatch):
    """Collapsed, the expander's table (a row per token) is neither computed nor sent: a layer switch or a new
    text pays nothing for it; opened, it lists every position's most likely next token."""
    from attnviz.views import checkpoint_view

    calls = []
    real = checkpoint_view.predictions
    monkeypatch.setattr(checkpoint_view, "predictions", lambda trace: calls.append(trace.n) or real(trace))
    at = app()
    at.sidebar.selectbox(key="weights").set_value(NAME).run()
    at.sidebar.text_area(key="text").set_value("one two three four five six seven eight nine").run()
    no_exception(at)
    every = lambda: [f.value for f in at.dataframe if "position" in f.value.columns and len(f.value) > 5]  # noqa: E731
    assert not every() and not calls
    at.sidebar.selectbox(key="layer").set_value(1).run()
    assert not every() and not calls  # a layer switch: still nothing
    at.session_state["next_position_every"] = True  # the learner opens it
    at.run()
    no_exception(at)
    (table,) = every()
    assert len(table) == calls[-1] == 9


def test_layer_switch_shows_that_layers_maps(checkpoints):
    at = app()
    at.sidebar.selectbox(key="weights").set_value(NAME).run()
    at.sidebar.selectbox(key="layer").set_value(2).run()
    no_exception(at)
    assert f"{NAME} · layer 2 of 3" in at.caption[0].value
    z = cells_shown(focused(at))
    ids = models.load_checkpoint(checkpoints / NAME)
    expected = models.layer_maps(ids, tokens.encode(at.sidebar.text_area(key="text").value), 2)[0]
    lower = np.tril_indices(z.shape[0])
    assert np.allclose(z[lower], expected[lower], atol=1e-5)
    assert np.isnan(z[np.triu_indices(z.shape[0], 1)]).all()


def test_causal_off_is_allowed_and_said(checkpoints):
    at = app()
    at.sidebar.selectbox(key="weights").set_value(NAME).run()
    at.sidebar.toggle(key="causal").set_value(False).run()
    no_exception(at)
    assert "causal mask OFF (the model was trained with it)" in at.caption[0].value
    z = cells_shown(focused(at))
    assert not np.isnan(z).any()


def test_deep_link_with_a_listed_name_and_layer(checkpoints):
    at = app("pages/steps.py", weights=NAME, layer="1", text="Hello world hello")
    no_exception(at)
    assert at.sidebar.selectbox(key="weights").value == NAME
    assert at.sidebar.selectbox(key="layer").value == 1
    assert f"{NAME} · layer 1 of 3" in captions(at)


def test_deep_link_with_a_layer_the_model_lacks(checkpoints):
    at = app(weights=NAME, layer="7")
    no_exception(at)
    assert at.sidebar.selectbox(key="layer").value == 0
    assert "Ignored URL parameter layer='7': it is out of range (this checkpoint's 3 layers: 0 … 2)" in link_notices(at)


def test_a_link_turning_the_biases_off_says_the_checkpoint_runs_with_its_own(checkpoints):
    """The app has no bias setting: a hand-written ``qkv_bias=false`` is said to change nothing, in words — the
    checkpoint's layer runs with the biases it was trained with."""
    at = app(weights=NAME, qkv_bias="false")
    no_exception(at)
    said = link_notices(at)
    assert "Ignored URL parameter qkv_bias" in said and "unknown" not in said
    assert "a checkpoint runs with its own, as it was trained" in said
    assert at.sidebar.selectbox(key="weights").value == NAME



def test_every_setting_a_link_gives_that_a_checkpoint_does_not_run_is_named(checkpoints):
    """The link's variant, K/V groups, positions and window: a checkpoint runs the attention its file holds, and
    one notice names all four, and all four leave the URL.  A GQA class picked in the sidebar next, then the
    checkpoint again, names nothing: no link gave them.  Compare, which runs the book's classes, ignores none."""
    at = app("pages/steps.py", weights=NAME, layer="1", variant="gqa", positions="rotary", num_kv_groups="2",
             sliding_window_size="2")
    no_exception(at)
    assert link_notices(at) == ("Ignored URL parameters variant='gqa', num_kv_groups='2', "
                                f"sliding_window_size='2', positions='rotary': {NAME} runs with the attention its "
                                "file holds.")
    assert dict(at.query_params) == {"weights": NAME, "layer": "1"}
    pick_weights(at, weights.BOOK)
    at.sidebar.selectbox(key="variant").set_value("gqa").run()
    pick_weights(at, NAME)
    assert link_notices(at) == ""
    # Compare runs the book's classes at the checkpoint's sizes, with the link's K/V groups and seed: none is ignored
    at = app("pages/compare.py", weights=NAME, num_kv_groups="2", seed="5")
    no_exception(at)
    assert "num_kv_groups" not in link_notices(at) and "seed" not in link_notices(at), link_notices(at)
    assert (at.query_params.get("num_kv_groups"), at.query_params.get("seed")) == ("2", "5"), dict(at.query_params)


def test_weights_with_fewer_layers_picked_in_the_sidebar_start_at_layer_0_without_a_link_notice(checkpoints):
    """Layer 2 of a 3-layer checkpoint, then the 2-layer bundled model picked in the sidebar: layer 0 of the bundled
    model, and no "Ignored URL parameter layer='2' …", a notice about a link the learner never followed."""
    at = app(weights=NAME, layer="2", text="Hello world")
    no_exception(at)
    at.sidebar.selectbox(key="weights").set_value(weights.BUNDLED_NAME).run()
    no_exception(at)
    assert at.sidebar.selectbox(key="layer").value == 0
    assert "Ignored URL parameter layer" not in link_notices(at)
    assert "bundled model · layer 0 of 2" in captions(at)

BOOK_SIZES = ("preset", "d_in", "d_out", "num_heads", "num_kv_groups", "latent_dim", "positions")


def book_sizes(at: AppTest) -> dict:
    """The book's classes' sizes and what follows from them, as the sidebar holds them."""
    return {key: at.session_state[key] for key in BOOK_SIZES}


def pick_weights(at: AppTest, name: str) -> AppTest:
    at.sidebar.selectbox(key="weights").set_value(name).run()
    no_exception(at)
    return at


def test_weights_switched_away_and_back_restore_the_books_sizes_and_each_checkpoints_layer(checkpoints):
    """The book's classes' sizes (and K/V groups, latent width) are the user's own: a checkpoint's sizes, shown
    while it is picked, never reach them or their URL, and a switch back to the book's classes gives the URL they
    had.  Each checkpoint keeps its layer and the page its head through switches away and back."""
    at = app(d_in="96", d_out="96", num_heads="6", variant="gqa", num_kv_groups="3", latent_dim="40", head="1",
             text="Hello world, hello world")
    no_exception(at)
    mine = book_sizes(at)
    assert mine == {"preset": "custom", "d_in": 96, "d_out": 96, "num_heads": 6, "num_kv_groups": 3,
                    "latent_dim": 40, "positions": "learned"}
    pick_weights(at, NAME)  # 64 wide, 4 heads: K/V groups and latent width fitted to it while it is shown
    assert int(at.sidebar.text_input(key="d_in_box").value) == 64 and at.sidebar.selectbox(key="num_heads").value == 4
    at.sidebar.selectbox(key="layer").set_value(2).run()
    pick_weights(at, weights.BUNDLED_NAME)  # 128 wide, 2 heads, 2 layers
    assert at.sidebar.selectbox(key="layer").value == 0  # not shown before in this session
    at.sidebar.selectbox(key="layer").set_value(1).run()
    pick_weights(at, NAME)
    assert at.sidebar.selectbox(key="layer").value == 2  # the layer it showed when the user left it
    assert f"{NAME} · layer 2 of 3" in captions(at)
    pick_weights(at, weights.BOOK)
    assert book_sizes(at) == mine
    url = dict(at.query_params)
    assert "weights" not in url and "layer" not in url and url["head"] == "1"
    runs = {key: value for key, value in mine.items() if key != "latent_dim"}  # GQA has no latent: the URL leaves it
    assert {key: link_settings(url)[key] for key in runs} == runs  # out; it gives the sizes the user had that run
    assert int(at.sidebar.text_input(key="d_in_box").value) == 96 and at.sidebar.selectbox(key="num_heads").value == 6
    assert at.sidebar.selectbox(key="num_kv_groups").value == 3
    pick_weights(at, weights.BUNDLED_NAME)
    assert at.sidebar.selectbox(key="layer").value == 1
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "1"
    assert focused(at)["layout"]["title"]["text"].startswith("head 1")


def test_a_session_opened_on_a_checkpoint_gives_the_book_classes_the_default_sizes(checkpoints):
    """Opened on a checkpoint (the link's sizes set aside), the book's classes picked next have the default sizes,
    GPT-2 small's, not the checkpoint's, and their URL none of its sizes; back on the checkpoint, its layer."""
    at = app(weights=weights.BUNDLED_NAME, layer="1", head="1", d_in="32")
    no_exception(at)
    pick_weights(at, weights.BOOK)
    assert book_sizes(at) == {key: DEFAULTS[key] for key in BOOK_SIZES}
    assert at.sidebar.selectbox(key="preset").value == "gpt2-small"
    assert dict(at.query_params) == {"head": "1"}
    pick_weights(at, weights.BUNDLED_NAME)
    assert dict(at.query_params) == {"weights": weights.BUNDLED_NAME, "layer": "1", "head": "1"}
    assert at.sidebar.selectbox(key="layer").value == 1


def test_a_checkpoints_url_holds_no_setting_its_run_does_not_take(checkpoints):
    """A model's run takes its text, layer and mask: its URL names those only. The K/V groups fitted to the bundled
    model's 2 heads (1) stay out of a 4-head checkpoint's URL picked next, so a fresh tab of that URL gives the book's
    GQA its default 4 groups."""
    at = app(weights=weights.BUNDLED_NAME, seed="7")
    assert at.session_state["num_kv_groups"] == 1  # fitted to the bundled model's 2 heads
    pick_weights(at, NAME)
    url = dict(at.query_params)
    assert url == {"weights": NAME}, url  # no K/V groups, nor the seed a checkpoint does not use
    fresh = app(**url)
    no_exception(fresh)
    pick_weights(fresh, weights.BOOK)
    fresh.sidebar.selectbox(key="variant").set_value("gqa").run()
    no_exception(fresh)
    assert fresh.sidebar.selectbox(key="num_kv_groups").value == DEFAULTS["num_kv_groups"] == 4
    assert dict(fresh.query_params) == {"variant": "gqa"}


@pytest.mark.parametrize(("name", "n_layers", "layer", "said"), [
    (weights.BUNDLED_NAME, 2, "-1", "-1"),
    (NAME, 3, "9" * 400, "9" * 20 + "…"),  # its first 20 digits, not all 400
])
def test_a_layer_the_checkpoint_has_not_in_the_url_names_the_models_own_layers(checkpoints, name, n_layers, layer,
                                                                                 said):
    at = app(weights=name, layer=layer)
    no_exception(at)
    assert at.sidebar.selectbox(key="layer").value == 0
    notices = link_notices(at)
    assert (f"Ignored URL parameter layer='{said}': it is out of range (this checkpoint's {n_layers} layers: 0 … "
            f"{n_layers - 1}); showing layer 0.") in notices
    assert "9" * 21 not in notices
    assert "127" not in notices  # not attnviz's own bound on layers


@pytest.mark.parametrize("tampered", ["/etc/passwd", "../tiny-gpt2", "tiny-gpt2/model.safetensors", "book2",
                                      "C:\\Windows\\win.ini", "session:" + "0" * 32,
                                      "trained: 1000 steps, seed 0"])
def test_tampered_weights_name_is_ignored_and_never_reaches_the_file_system(checkpoints, tampered, monkeypatch):
    opened = []
    real_load = models.load_checkpoint
    monkeypatch.setattr(models, "load_checkpoint", lambda path: opened.append(str(path)) or real_load(path))
    at = app(weights=tampered, text="Hello world")
    no_exception(at)
    assert at.sidebar.selectbox(key="weights").value == weights.BOOK
    notices = link_notices(at)
    assert "Ignored URL parameter weights" in notices
    if tampered.startswith("trained: "):  # a model someone trained on their Train page: what happened, what to do
        assert ("a model trained on the Train page stays in the browser session, on the server, that trained it, so "
                "the book's classes open instead. To see it here, train it on the Train page (1,000 steps, seed 0: "
                "the same seed gives the same run)") in notices
    assert opened == []
    assert at.sidebar.text_area(key="text").value == "Hello world"


def test_a_url_naming_a_home_path_is_refused_though_python_reads_it(checkpoints, monkeypatch):
    """``~`` is the home folder for a path given in Python (``load_checkpoint``, ``AttentionConfig.checkpoint``); a
    link's weights are still only compared with the listed names, so ``~/tiny-gpt2`` from a URL loads nothing."""
    monkeypatch.setenv("HOME", str(checkpoints))
    assert models.load_checkpoint(f"~/{NAME}").trf_blocks[0].att.num_heads == 4  # the path exists
    opened = []
    real_load = models.load_checkpoint
    monkeypatch.setattr(models, "load_checkpoint", lambda path: opened.append(str(path)) or real_load(path))
    monkeypatch.setattr(weights, "load", lambda ref: opened.append(ref) or pytest.fail(f"loaded {ref!r}"))
    at = app(weights=f"~/{NAME}", text="Hello world")
    no_exception(at)
    assert at.sidebar.selectbox(key="weights").value == weights.BOOK
    assert f"Ignored URL parameter weights='~/{NAME}'" in link_notices(at)
    assert opened == []
    assert at.sidebar.text_area(key="text").value == "Hello world"


@pytest.mark.parametrize("name, message", [("truncated.safetensors", "truncated"), ("evil.pth", "Refused to load")])
def test_bad_checkpoint_shows_the_loaders_message_and_keeps_the_text(checkpoints, name, message, capsys):
    at = app(text="My own words here")
    at.sidebar.selectbox(key="weights").set_value(name).run()
    no_exception(at)
    warnings = " ".join(w.value for w in at.warning)
    assert "could not be loaded" in warnings and message in warnings.replace("\\", "")
    assert at.sidebar.text_area(key="text").value == "My own words here"
    assert "this pickle ran code" not in capsys.readouterr().out
    at.switch_page("pages/steps.py").run()
    no_exception(at)


@pytest.mark.parametrize("page", ["pages/benchmark.py", "pages/pitfalls.py"])
def test_a_book_classes_page_names_the_bundled_model_with_its_article(page):
    """The note read "(at the sizes of bundled model)"."""
    at = app(page, weights=weights.BUNDLED_NAME)
    no_exception(at)
    (info,) = [i.value for i in at.info if "seeded random weights" in i.value]
    assert "(at the sizes of the bundled model)" in info


def test_a_book_classes_page_names_every_page_that_runs_the_checkpoint():
    """The note sent the user to "the Heads, Steps, Shapes and Tokens pages": the Induction lab and Generate run the
    checkpoint too (the pages below draw it: test_every_page_works_with_a_checkpoint, and their own tests)."""
    at = app("pages/compare.py", weights=weights.BUNDLED_NAME)
    no_exception(at)
    (info,) = [i.value for i in at.info if "seeded random weights" in i.value]
    assert info.endswith("not the checkpoint's weights: those are on the Heads, Steps, Shapes, Tokens, Induction lab "
                         "and Generate pages.")


@pytest.mark.parametrize("page, title", [
    ("pages/steps.py", "Attention step by step"),
    ("pages/shapes.py", "Tensor shapes through the pipeline"),
    ("pages/tokens.py", "Tokens and embeddings"),
    ("pages/compare.py", "Compare variants"),
    ("pages/pitfalls.py", "Pitfall lab"),
    ("pages/benchmark.py", "Implementations benchmark"),
])
def test_every_page_works_with_a_checkpoint(checkpoints, page, title):
    at = app(page, weights=NAME, layer="2")
    no_exception(at)
    assert at.title[0].value == title
    infos = " ".join(i.value for i in at.info)
    if page in ("pages/compare.py", "pages/pitfalls.py", "pages/benchmark.py"):
        assert "runs the book's Chapter 3 classes with seeded random weights" in infos
    else:
        assert f"{NAME} · layer 2 of 3" in captions(at)
    if page == "pages/shapes.py":
        assert len(at.get("graphviz_chart")) == 2  # the whole model and the layer's attention
        # block 2's attention reads norm1 of the residual stream entering block 2, not the input embeddings
        attention = at.get("graphviz_chart")[1].proto.spec
        assert "x = norm1(the residual stream entering block 2)" in attention and "input embeddings" not in attention
        stages = list(at.dataframe[0].value["stage"])
        assert stages[0] == "tokens" and stages[-1] == "logits" and "block 1" in stages
    if page == "pages/tokens.py":  # the checkpoint's own context length, not GPT-2's
        assert at.metric[0].value.endswith("/ 96") and "at most 96 tokens fit" in at.metric[0].help
        token_fig = next(f for f in figures(at) if f["layout"]["title"]["text"].startswith("token embedding"))
        wte = models.load_checkpoint(checkpoints / NAME).tok_emb.weight.detach().numpy()
        ids = tokens.encode(at.sidebar.text_area(key="text").value)
        shown = decode(token_fig["data"][0]["z"])
        assert np.allclose(shown.reshape(len(ids), -1) if shown.shape[0] == len(ids) else shown.T, wte[ids],
                           atol=1e-6)


def test_layers_by_heads_overview(checkpoints):
    at = app(weights=NAME)
    at.toggle(key="heads_overview").set_value(True).run()
    no_exception(at)
    overview = next(f for f in figures(at) if f["layout"]["title"]["text"].startswith("Every layer × head"))
    assert overview["layout"]["yaxis"]["ticktext"] == ["L0", "L1", "L2"]
    assert overview["layout"]["xaxis"]["ticktext"] == ["H0", "H1", "H2", "H3"]


def test_a_session_trained_model_is_an_option_for_that_session_only(checkpoints, monkeypatch):
    """A model trained in a session is listed for it only; once the server forgets it, the session's next run says
    so, with the icon of a training — no link caused it — and shows the book's classes."""
    from attnviz.ui import weights as ui_weights

    model = models.load_checkpoint(checkpoints / NAME)
    own_session_models(monkeypatch)
    option = weights.register_session_model("session-one", "mine", model)
    monkeypatch.setattr(ui_weights, "session_id", lambda: "session-one")
    at = app(weights=option.name)
    no_exception(at)
    assert at.sidebar.selectbox(key="weights").value == option.name
    assert f"{option.name} · layer 0 of 3" in at.caption[0].value
    shared = sidebar_notices(at)  # where the link is copied: the link opens the book's classes anywhere else
    assert "exists only in your session" in shared and "--checkpoint FOLDER" in shared and "Train page" in shared
    weights._session_models.clear()  # the server forgets it (it keeps weights.MAX_SESSION_MODELS)
    at.run()
    no_exception(at)
    assert at.sidebar.selectbox(key="weights").value == weights.BOOK
    gone = [w for w in at.main.warning if "no longer listed" in w.value]
    assert [w.icon for w in gone] == [":material/model_training:"] and not link_notices(at)
    monkeypatch.setattr(ui_weights, "session_id", lambda: "session-two")
    other = app(weights=option.name)
    no_exception(other)
    assert option.name not in other.sidebar.selectbox(key="weights").options
    assert other.sidebar.selectbox(key="weights").value == weights.BOOK


def test_a_checkpoint_path_that_holds_nothing_is_noted_in_the_sidebar(checkpoints, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CHECKPOINTS", f"{checkpoints}{os.pathsep}{checkpoints / 'missing-folder'}")
    at = app()
    no_exception(at)
    notes = " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    assert "missing-folder does not exist" in notes
    assert NAME in at.sidebar.selectbox(key="weights").options


def test_the_induction_lab_knocks_out_every_head_of_a_checkpoint(checkpoints):
    at = app("pages/induction.py", weights=NAME)
    no_exception(at)
    knockout = next(f for f in figures(at) if f["layout"]["title"]["text"].startswith("knock out one head"))
    delta = np.array(decode(knockout["data"][0]["z"]), dtype=float)
    assert delta.shape == (3, 4)  # the checkpoint's layers × heads
    T = int(at.text_input(key="induction_T").value)
    ids = repeated_random_tokens(T, int(at.text_input(key="induction_seed").value), bos=True)
    expected, _ = models.ablation_grid(models.load_checkpoint(checkpoints / NAME), ids, T)
    np.testing.assert_allclose(delta, expected, atol=1e-4)
    at.multiselect(key="induction_knockout").set_value(["L2H3", "L0H1"]).run()
    no_exception(at)
    curves = next(f for f in figures(at) if f["layout"]["title"]["text"].startswith("knocked out vs intact"))
    assert curves["data"][1]["name"].startswith("without L2H3, L0H1") or curves["data"][1]["name"].startswith(
        "without L0H1, L2H3")


def test_the_heads_page_knocks_out_a_checkpoints_focused_head(checkpoints):
    at = app(weights=NAME, layer="2", text="The cat sat on the mat. The cat sat on the")
    no_exception(at)
    at.session_state["heads_what"] = True  # "What this attention does", opened
    at.run()
    no_exception(at)
    table = next(d.value for d in at.dataframe if "intact" in list(d.value.index))
    assert list(table.index) == ["intact", "without L2H0"] and table.shape == (2, 5)
    at.session_state["heads_what_tab"] = "Rollout, logit lens"
    at.run()
    no_exception(at)
    lens = next(d.value for d in at.dataframe if "after block 0" in list(d.value.index))
    assert list(lens.index) == ["after block 0", "after block 1", "after block 2"]


def test_the_knock_out_compares_with_the_model_as_trained_when_the_mask_is_off(checkpoints):
    at = app(weights=NAME, layer="1", causal="false", text="The cat sat on the mat. The cat sat on the")
    no_exception(at)
    assert "causal mask OFF" in at.caption[0].value
    at.session_state["heads_what"] = True
    at.run()
    no_exception(at)
    assert any("runs the model as it was trained" in c.value for c in at.caption)
    at.session_state["heads_what_tab"] = "Rollout, logit lens"
    at.run()
    no_exception(at)
    assert any("runs the model as it was trained" in c.value for c in at.caption)
    at.session_state["heads_what_tab"] = "Knock out this head"
    at.run()
    model = models.load_checkpoint(checkpoints / NAME)
    ids = tokens.encode("The cat sat on the mat. The cat sat on the")
    intact, without = (models.ablate(model, ids, heads)[-1].log_softmax(-1) for heads in ([], [(1, 0)]))
    top = int(intact.argmax())
    knocked = next(m for m in at.metric if "log-probability of" in m.label and "without" in m.label)
    assert float(knocked.value) == pytest.approx(float(without[top]), abs=2e-3)
    change = knocked.proto.delta.removesuffix(" from intact")  # the metric's delta: knocked out minus intact
    assert float(change) == pytest.approx(float(without[top] - intact[top]), abs=2e-3)


def _prefetches_done() -> None:
    import threading

    for thread in threading.enumerate():
        if thread.name == "attnviz-prefetch":
            thread.join(timeout=TIMEOUT)


@pytest.mark.usefixtures("several_torch_threads")  # the prefetch's one thread is its own doing
def test_the_heads_page_computes_the_next_layer_while_this_one_is_read(checkpoints, monkeypatch):
    """Stepping to the next layer of a checkpoint finds its trace, grid, statistics and types computed (by a
    thread the page started once drawn, which first leaves the browser ``BROWSER_DRAWS_S`` to draw the page), and
    draws that layer's own maps; the last layer starts nothing."""
    import time

    from attnviz.producers import model_layer
    from attnviz.ui import heads_views

    monkeypatch.setattr(background, "BROWSER_DRAWS_S", 0.5)

    at = app()
    at.sidebar.text_area(key="text").set_value("A sentence no other test reads, so no layer of it is cached.").run()
    at.sidebar.selectbox(key="weights").set_value(NAME).run()  # layer 0 drawn: layer 1 is computed meanwhile
    _prefetches_done()
    from attnviz import head_types, stats
    from attnviz.views import figures as view_figures

    calls, drawn = [], []  # (layer or work, the thread that did it: the page's, or the prefetch's)
    real = model_layer._layer_trace

    def where() -> str:
        if threading.current_thread().name != "attnviz-prefetch":
            return "page"
        if sys.platform.startswith("linux"):  # it yields to the pages drawing meanwhile: one torch thread, nice 10
            assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) >= background.NICENESS
        return "prefetch" if torch.get_num_threads() == background.THREADS else "prefetch on all cores"

    started = []  # when a layer's trace was computed

    def layer_trace(*args):
        started.append(time.monotonic())
        calls.append((args[1].layer, where()))
        return real(*args)

    monkeypatch.setattr(model_layer, "_layer_trace", layer_trace)
    asked, real_prefetch = [], heads_views.prefetch_next_layer  # when the page's run asked for the next layer

    def prefetch_next_layer(*args):
        asked.append(time.monotonic())
        return real_prefetch(*args)

    monkeypatch.setattr(heads_views, "prefetch_next_layer", prefetch_next_layer)

    def spy(name, real_function):
        return lambda *args, **kwargs: drawn.append((name, where())) or real_function(*args, **kwargs)

    for module, name in ((view_figures, "heads_grid"), (stats, "head_statistics"), (head_types, "score_heads")):
        monkeypatch.setattr(module, name, spy(name, getattr(module, name)))
    at.sidebar.selectbox(key="layer").set_value(1).run()
    no_exception(at)
    assert f"{NAME} · layer 1 of 3" in at.caption[0].value
    _prefetches_done()
    assert calls == [(2, "prefetch")]  # layer 1's trace came from the cache; layer 2's was computed ahead …
    assert started[0] - asked[0] >= 0.5  # … once the browser had had its time to draw layer 1
    assert sorted(drawn) == [("head_statistics", "prefetch"), ("heads_grid", "prefetch"), ("score_heads", "prefetch")]
    z = cells_shown(focused(at))
    ids = models.load_checkpoint(checkpoints / NAME)
    expected = models.layer_maps(ids, tokens.encode(at.sidebar.text_area(key="text").value), 1)[0]
    lower = np.tril_indices(z.shape[0])
    assert np.allclose(z[lower], expected[lower], atol=1e-5)  # the prefetched trace is layer 1's
    at.sidebar.selectbox(key="layer").set_value(2).run()
    _prefetches_done()
    no_exception(at)
    assert calls == [(2, "prefetch")]  # the last layer: nothing more to compute


def test_the_heads_pages_layer_selectbox_is_drawn_once_and_the_link_follows_the_layer(checkpoints):
    """On the Heads page the Layer selectbox and Share & export are drawn by the layer's fragment into the
    sidebar: one Layer selectbox, where it always is (below Weights); the link, the URL and the views follow it."""
    at = app(weights=NAME, text="Hello world, hello world")
    at.sidebar.selectbox(key="layer").set_value(2).run()
    no_exception(at)
    labels = [widget.label for widget in at.sidebar.selectbox]
    assert labels[:3] == ["Weights", "Layer", "Attention variant"] and labels.count("Layer") == 1
    assert at.query_params["layer"] == "2"
    link = share_link(at)
    assert "layer=2" in link and f"weights={NAME}" in link
    assert f"{NAME} · layer 2 of 3" in at.caption[0].value
    assert focused(at)["layout"]["title"]["text"].startswith("head 0")
    assert [s.value for s in at.subheader].count("Next-token predictions") == 1  # drawn outside the fragment, once


def test_invalid_text_with_a_checkpoint_keeps_the_layer_selectbox_and_the_last_view(checkpoints):
    """Invalid input: setup draws the Layer selectbox itself and the page shows the last valid view; switching
    the layer still works (a whole-page run) and says the text is still invalid."""
    at = app(weights=NAME, text="Hello world, hello world")
    at.sidebar.text_area(key="text").set_value("").run()
    no_exception(at)
    assert any("last valid view" in c.value for c in at.caption)
    assert [widget.label for widget in at.sidebar.selectbox].count("Layer") == 1
    at.sidebar.selectbox(key="layer").set_value(1).run()
    no_exception(at)
    assert [widget.label for widget in at.sidebar.selectbox].count("Layer") == 1
    assert at.sidebar.text_area(key="text").value == ""
    assert at.warning, "the empty text is still said to be invalid"


def test_a_session_keeps_no_trace_once_the_heads_page_is_drawn(checkpoints):
    """Streamlit keeps a fragment's arguments (and so what they reach) for the session's lifetime, a closed tab's
    for minutes: the Heads page's fragments must reach the Trace through the cache only, or every session would
    pin a whole Trace per input (benchmarks/README.md, "Numbers moved out of the code") beyond the cache's bound."""
    import gc
    import weakref

    from attnviz.ui import cache

    at = app(weights=NAME, text="Another text first.")  # (a server's first run freezes what is alive then)
    text = "A text of its own, so that its traces are this test's to watch."
    at.sidebar.text_area(key="text").set_value(text).run()
    at.sidebar.selectbox(key="layer").set_value(1).run()
    no_exception(at)
    _prefetches_done()
    traces = cache._trace_cache()._traces
    watched = [weakref.ref(trace) for trace, _ in traces.values() if trace.text == text]
    assert len(watched) == 3  # layers 0 and 1, and layer 2 computed ahead
    traces.clear()  # as an eviction would
    gc.collect()
    assert all(ref() is None for ref in watched), "a Trace outlived the cache: the session pins it"


@pytest.mark.parametrize("page", ["pages/pitfalls.py", "pages/induction.py", "pages/steps.py"])
def test_other_pages_keep_no_trace_either(checkpoints, page):
    """The same for pages whose widgets format positions or heads: a ``format_func`` is kept with the widget."""
    import gc
    import weakref

    from attnviz.ui import cache

    at = app(page, text="Another text first, for this page.")
    text = f"A text of its own for {page}, so that its traces are this test's to watch."
    at.sidebar.text_area(key="text").set_value(text).run()
    no_exception(at)
    traces = cache._trace_cache()._traces
    watched = [weakref.ref(trace) for trace, _ in traces.values() if trace.text == text]
    if page == "pages/induction.py":  # the lab runs random tokens: the sidebar's text is not run at all
        assert watched == []
        return
    assert watched
    traces.clear()
    gc.collect()
    assert all(ref() is None for ref in watched), "a Trace outlived the cache: the session pins it"


def test_the_layers_fragment_refuses_a_page_scripts_function():
    from attnviz import ui

    page = {"__name__": "__main__"}
    exec("def views(page_run):\n    pass", page)
    with pytest.raises(TypeError, match="module's function"):
        ui.draw_layer_views(None, page["views"])
