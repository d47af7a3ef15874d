"""A checkpoint of the book's sliding-window GPT (``ch04/06_swa``) runs with the window its config names; where no
config names one (a bare state dict: a window is not a tensor), attnviz says it runs full causal attention.  A
grouped-query or latent checkpoint (``04_gqa``, ``05_mla``) is refused in words that name what it is.  Every
checkpoint here is written by the test (attnviz's GPTModel with random weights)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnviz import models, pipeline, weights
from attnviz.config import AttentionConfig
from attnviz.models.gpt import RANDOM_GPT_CONFIG, random_gpt

TEXT = "one two three four five six seven eight nine ten"
WINDOW = 3


def book_cfg(**extra) -> dict:
    """The cfg dict the book's gpt_with_kv_swa.py builds (its GPT_CONFIG_124M), at the small model's sizes."""
    cfg = {key: RANDOM_GPT_CONFIG[key] for key in ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers",
                                                  "drop_rate", "qkv_bias")}
    return {**cfg, **extra}


@pytest.fixture(scope="module")
def swa_model():
    return random_gpt("sliding-window", seed=7, sliding_window_size=WINDOW)


def weights_of(path, layer: int) -> np.ndarray:
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(path), layer=layer))
    return trace, trace.steps["weights"][0]  # (heads, n, n)


def outside_window(n: int) -> np.ndarray:
    i, j = np.indices((n, n))
    return (i - j) >= WINDOW  # (n, n): keys W or more behind the query


@pytest.mark.parametrize("saved_as", ["dict with cfg", "config.json beside"])
def test_a_sliding_window_checkpoint_runs_with_the_window_its_config_names(swa_model, saved_as, tmp_path):
    """The book's schedule: sliding_window_stride 1 is one window layer, then one full layer."""
    cfg = book_cfg(sliding_window_size=WINDOW, sliding_window_stride=1)
    path = tmp_path / "swa-model.pth"
    if saved_as == "dict with cfg":
        torch.save({"model_state_dict": swa_model.state_dict(), "cfg": cfg}, path)
    else:
        torch.save(swa_model.state_dict(), path)
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    trace, maps = weights_of(path, layer=0)
    far = outside_window(trace.n)
    assert np.all(maps[:, far] == 0), "a key W or more behind the query has weight 0"
    expected = models.attention_maps(swa_model, list(trace.token_ids))  # the model the file was saved from
    assert np.allclose(maps, expected[0], atol=1e-5)
    assert any(f"sliding window of {WINDOW} tokens" in note for note in trace.notes), trace.notes
    full, full_maps = weights_of(path, layer=1)  # the schedule's full-attention layer
    assert np.all(full_maps[:, outside_window(full.n)] > 0)
    assert any("full causal attention" in note for note in full.notes), full.notes


def test_every_layer_has_the_window_when_the_config_gives_no_stride(swa_model, tmp_path):
    path = tmp_path / "swa.pth"
    torch.save({"model_state_dict": swa_model.state_dict(), "cfg": book_cfg(sliding_window_size=WINDOW)}, path)
    for layer in (0, 1):
        trace, maps = weights_of(path, layer)
        assert np.all(maps[:, outside_window(trace.n)] == 0), layer


def test_a_bare_state_dict_says_once_beside_the_weights_that_it_runs_full_causal_attention(swa_model, tmp_path):
    path = tmp_path / "bare.pth"
    torch.save(swa_model.state_dict(), path)
    model = models.load_checkpoint(path)
    sizes = weights.sizes(model)
    caption = weights.attention_caption(sizes)
    assert caption is not None and "full causal attention" in caption and "state dict" in caption
    assert "sliding_window_size" in caption  # what to put in a config to run it with its window
    trace, maps = weights_of(path, layer=0)
    assert np.all(maps[:, outside_window(trace.n)] > 0)  # full causal attention, as the caption says


def test_a_checkpoint_whose_config_names_no_window_says_nothing_about_one(swa_model, tmp_path):
    path = tmp_path / "mha.pth"
    torch.save({"model_state_dict": swa_model.state_dict(), "cfg": book_cfg()}, path)
    sizes = weights.sizes(models.load_checkpoint(path))
    assert weights.attention_caption(sizes) is None
    trace, _ = weights_of(path, layer=0)
    assert not any("window" in note for note in trace.notes)


def test_the_bundled_model_says_nothing_about_a_window():
    assert weights.attention_caption(weights.sizes(models.load_checkpoint(models.BUNDLED))) is None


@pytest.mark.parametrize(("attention", "named"), [("grouped-query", "grouped-query"), ("latent", "latent")])
def test_a_grouped_query_or_latent_checkpoint_is_refused_naming_what_it_is(attention, named, tmp_path):
    path = tmp_path / f"{attention}.pth"
    torch.save(random_gpt(attention).state_dict(), path)
    with pytest.raises(models.CheckpointError, match=named) as raised:
        models.load_checkpoint(path)
    assert "multi-head" in str(raised.value)
