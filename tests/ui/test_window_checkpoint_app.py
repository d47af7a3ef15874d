"""AppTest: a sliding-window checkpoint in the app — its page says the window its layer runs with, and a bare state
dict of the book's GPTModel says once, under Weights, that it runs full causal attention.  The checkpoints are
attnviz's GPTModel with random weights, written here (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.apptest import no_exception
from helpers.checkpoints import use_checkpoints
from streamlit.testing.v1 import AppTest

from attnviz import background
from attnviz.models.gpt import RANDOM_GPT_CONFIG, random_gpt

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
WINDOW = 3


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("window-checkpoints")
    model = random_gpt("sliding-window", seed=7, sliding_window_size=WINDOW)
    cfg = {**{key: RANDOM_GPT_CONFIG[key] for key in ("vocab_size", "context_length", "emb_dim", "n_heads",
                                                      "n_layers", "drop_rate", "qkv_bias")},
           "sliding_window_size": WINDOW, "sliding_window_stride": 1}
    torch.save({"model_state_dict": model.state_dict(), "cfg": cfg}, folder / "swa.pth")
    torch.save(model.state_dict(), folder / "bare.pth")
    return folder


@pytest.fixture(autouse=True)
def environment(checkpoints, monkeypatch):
    use_checkpoints(monkeypatch, checkpoints)
    monkeypatch.setattr(background, "BROWSER_DRAWS_S", 0.1)


def shown(at: AppTest) -> list[str]:
    """Every caption, info and warning of the app (the sidebar's included)."""
    return [element.value for kind in (at.caption, at.info, at.warning) for element in kind]


def test_a_bare_state_dict_says_once_under_weights_that_it_runs_full_causal_attention():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.sidebar.selectbox(key="weights").set_value("bare.pth").run()
    no_exception(at)
    said = [text for text in shown(at) if "full causal attention" in text]
    assert len(said) == 1 and "not stored in a state dict" in said[0], shown(at)
    assert [caption.value for caption in at.sidebar.caption].count(said[0]) == 1


def test_a_sliding_window_checkpoints_page_names_its_layers_window():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.sidebar.selectbox(key="weights").set_value("swa.pth").run()
    no_exception(at)
    assert any(f"sliding window of {WINDOW} tokens" in text for text in shown(at)), shown(at)
    assert not any("not stored in a state dict" in text for text in shown(at))
