"""The bundled model: small, documented, loadable, and its heads are real on data it never saw."""

import json
import secrets
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.head_types import repeated_random_tokens
from attnviz.labs.train import evaluate, per_position_loss
from attnviz.models import load_checkpoint

ASSET = Path(attnviz.__file__).parent / "assets" / "bundled"


def _bundled() -> Path:
    from attnviz import models

    return Path(getattr(models, "BUNDLED", ASSET))


@pytest.fixture(scope="module")
def model():
    return load_checkpoint(_bundled())


def test_bundled_path_is_the_shipped_asset():
    assert _bundled().resolve() == ASSET.resolve()
    assert sorted(p.name for p in ASSET.iterdir()) == ["config.json", "model.safetensors", "training.json"]


def test_size_and_metadata():
    assert sum(p.stat().st_size for p in ASSET.iterdir()) <= 16 * 1024 * 1024
    meta = json.loads((ASSET / "training.json").read_text())
    assert meta["trained_by"] == "python -m attnviz.labs.train"
    assert {"seed", "steps"} <= set(meta["config"])
    assert "repeated random tokens" in meta["data"] and "frozen" in meta["data"]  # the recipe, in words
    assert meta["steps_run"] == meta["config"]["steps"]
    assert {"induction", "previous_english", "previous_code"} <= set(meta["scores"])
    from safetensors import safe_open

    with safe_open(ASSET / "model.safetensors", "pt") as handle:
        assert json.loads(handle.metadata()["attnviz"]) == meta


def test_it_is_the_books_gpt_model(model):
    cfg = json.loads((ASSET / "training.json").read_text())["config"]["cfg"]
    assert type(model).__name__ == "GPTModel"
    assert len(model.trf_blocks) == cfg["n_layers"]
    block = model.trf_blocks[0]
    assert block.att.num_heads == cfg["n_heads"]
    assert block.ff.layers[0].out_features == 4 * cfg["emb_dim"]  # the book's feed-forward, kept
    assert model.tok_emb.weight.shape == (50257, cfg["emb_dim"])
    torch.testing.assert_close(model.out_head.weight, model.tok_emb.weight)  # tied, as GPT-2


@pytest.mark.parametrize("run", range(2))
def test_previous_token_head_is_real_on_fresh_text(model, run):
    seed = secrets.randbelow(2**31)  # fresh every run; printed on failure so it can be replayed
    scores = evaluate(model, seed=seed)
    message = f"seed={seed}: " + ", ".join(f"{k} {v.max():.3f}" for k, v in scores.items())
    assert scores["previous_english"].max() >= 0.7, message  # mean A[i, i-1] on held-out English
    assert scores["previous_code"].max() >= 0.7, message  # … and on held-out stdlib code


@pytest.mark.parametrize("run", range(2))
def test_induction_head_is_real_on_fresh_repeats(model, run):
    seed = secrets.randbelow(2**31)
    scores = evaluate(model, seed=seed)
    assert scores["induction"].max() >= 0.7, f"seed={seed}: {scores['induction'].max():.3f}"  # T in 25..60


def test_the_circuit_is_the_textbook_one(model):
    """The induction head sits above the previous-token heads (it needs their output: K-composition), and the
    same seeds' stripes one place off the induction offset are dark (not a smeared or shifted copy)."""
    seed = secrets.randbelow(2**31)
    scores = evaluate(model, seed=seed)
    induction_layer = int(scores["induction"].max(axis=1).argmax())
    previous_layer = int(scores["previous_english"].max(axis=1).argmax())
    assert previous_layer < induction_layer, (seed, previous_layer, induction_layer)
    layer, head = np.unravel_index(scores["induction"].argmax(), scores["induction"].shape)
    T = 40
    ids = repeated_random_tokens(T, seed=seed, batch=4)  # (4, 2T + 1): [BOS] + x + x
    from attnviz.labs.train import _attention_maps

    maps = _attention_maps(model, torch.as_tensor(ids))[:, layer, head].numpy()  # (4, n, n)
    rows = np.arange(T + 1, 2 * T + 1)  # the second copy
    stripe = {offset: maps[:, rows, rows - T + offset].mean() for offset in (0, 1, 2)}
    assert stripe[1] >= 0.7 and stripe[0] < 0.15 and stripe[2] < 0.15, (seed, stripe)


def test_induction_shows_in_the_loss(model):
    T = 40
    ids = repeated_random_tokens(T, seed=secrets.randbelow(2**31), batch=4)  # (4, 2T + 1)
    loss = per_position_loss(model, ids).mean(axis=0)  # (2T,): predicting token i + 1 at position i
    first, second = loss[1:T].mean(), loss[T + 1:].mean()  # inside the first copy vs. inside the repeat
    assert first > 6.0  # random tokens: nothing to predict them from
    assert second < first / 3, (first, second)
    assert np.isfinite(loss).all()
