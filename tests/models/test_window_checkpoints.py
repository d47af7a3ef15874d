"""A checkpoint of the book's sliding-window GPT (``ch04/06_swa``) runs with the window its config names; where no
config names one (a bare state dict: a window is not a tensor), attnviz says it runs full causal attention.  A
grouped-query or latent checkpoint (``04_gqa``, ``05_mla``) loads as what it is, without a window.  Every
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


@pytest.mark.parametrize(("attention", "cls"), [("grouped-query", "CachedGroupedQueryAttention"),
                                                ("latent", "CachedMultiHeadLatentAttention")])
def test_a_grouped_query_or_latent_checkpoint_loads_as_what_it_is_not_as_a_window(attention, cls, tmp_path):
    """(tests/models/test_modern_checkpoints.py checks such checkpoints' numbers.)"""
    path = tmp_path / f"{attention}.pth"
    model = random_gpt(attention, n_heads=2)  # heads 64 wide: what a file without a config is taken to have
    torch.save(model.state_dict(), path)
    loaded = models.load_checkpoint(path)
    assert {type(block.att).__name__ for block in loaded.trf_blocks} == {cls}
    sizes = weights.sizes(loaded)
    assert sizes.sliding_window_size is None
    assert not sizes.window_unknown  # it has no window to be unknown
    assert "full causal attention" not in weights.attention_caption(sizes)  # its caption says what it is instead


# ============================== a schedule that mixes window and full layers ==============================


def save_schedule(folder, stride: int, n_layers: int = 4):
    """A book-style checkpoint (dict with cfg) of a ``n_layers``-layer sliding-window GPT with ``stride``."""
    model = random_gpt("sliding-window", seed=5, sliding_window_size=WINDOW, n_layers=n_layers)
    path = folder / f"stride{stride}.pth"
    cfg = book_cfg(n_layers=n_layers, sliding_window_size=WINDOW, sliding_window_stride=stride)
    torch.save({"model_state_dict": model.state_dict(), "cfg": cfg}, path)
    return path


def held_bytes(model) -> list[int]:
    """Bytes of every layer's cache_k and cache_v as the model holds them now (the book's attribute names)."""
    return [sum(t.numel() * t.element_size() for t in (block.att.cache_k, block.att.cache_v))
            for block in model.trf_blocks]


@pytest.mark.parametrize(("stride", "schedule"), [(1, (WINDOW, None, WINDOW, None)),
                                                  (2, (WINDOW, WINDOW, None, WINDOW))])
def test_a_mixed_schedules_cache_bytes_count_each_layers_own_cache(stride, schedule, tmp_path):
    """The sizes, the cache's settings and the estimate read every layer's window (the book's stride K is rasbt's
    swa_ratio "K:1"): they give the bytes the layers' cache_k and cache_v hold after each step, and the schedule's
    formula (tests/helpers/window_cache.py) gives the same."""
    from helpers.window_cache import scheduled_window_bytes

    from attnviz import kv_cache_bytes

    model = models.load_checkpoint(save_schedule(tmp_path, stride))
    assert tuple(block.att.sliding_window_size for block in model.trf_blocks) == schedule  # the book's schedule
    settings = models.cache_settings(model)
    ids = [int(i) for i in torch.randint(0, 50257, (6,), generator=torch.Generator().manual_seed(0))]
    model.reset_kv_cache()
    with torch.no_grad():
        model(torch.tensor([ids]), use_cache=True)  # the prefill
        for n in range(len(ids), len(ids) + 4):
            per_layer = held_bytes(model)
            expected = [2 * 8 * (n if window is None else min(n, WINDOW)) * 16 * 4 for window in schedule]
            assert per_layer == expected, n
            assert sum(per_layer) == kv_cache_bytes(context_length=n, **settings)
            formula = scheduled_window_bytes(n, WINDOW, emb_dim=128, n_heads=8, n_layers=4, stride=stride)
            assert sum(per_layer) == formula
            model(torch.tensor([[ids[-1]]]), use_cache=True)  # one generation step
    model.reset_kv_cache()
    steps = models.generate(model, ids, 3).steps
    assert [step.cache_bytes for step in steps] == [
        kv_cache_bytes(context_length=len(ids) + k, **settings) for k in range(4)]
    sizes = weights.sizes(model)  # what the Generate page's chart draws "this model" with
    assert (sizes.sliding_window_size, sizes.swa_ratio) == (WINDOW, f"{stride}:1")
    assert models.layer_windows(model) == schedule


def test_what_each_layer_of_a_mixed_schedule_caches_is_said_per_layer(tmp_path):
    held = models.cache_holds(models.load_checkpoint(save_schedule(tmp_path, 2)))
    assert held.startswith(f"**Layers 0, 1, 3** (a sliding window of {WINDOW} tokens) cache `cache_k` and `cache_v` "
                           f"of the last W = {WINDOW} tokens only, shape `(b, min(n, W), heads, head_dim)`"), held
    assert ("; **layer 2** (full attention) caches `cache_k` and `cache_v`, shape `(b, n, heads, head_dim)` = "
            "`(1, n, 8, 16)`, the layout of the book's bonus KV cache") in held, held


def test_each_layers_trace_says_its_own_window_and_that_causal_off_is_ignored(tmp_path):
    """Stride 1: layer 0 slides, layer 1 is full.  The book's sliding-window class masks whatever the Causal switch
    says, on both: the run says so in a note ("Ignored …"), hides the future, and a saved trace keeps both."""
    from attnviz import trace_file

    path = save_schedule(tmp_path, 1)
    for layer, window in ((0, WINDOW), (1, None)):
        shown = pipeline.run(TEXT, AttentionConfig(checkpoint=str(path), layer=layer))
        assert shown.window == window and shown.hides_future
        assert not any("Ignored causal" in note for note in shown.notes)
        off = pipeline.run(TEXT, AttentionConfig(checkpoint=str(path), layer=layer, causal=False))
        maps = off.steps["weights"][0]  # (heads, n, n)
        assert np.all(np.triu(maps, 1) == 0), "the future still has weight 0"
        assert np.allclose(maps, shown.steps["weights"][0]), "the switch changes nothing"
        assert off.window == window and off.hides_future
        said = [note for note in off.notes if note.startswith("Ignored causal mask = off")]
        assert len(said) == 1 and "always hides the future" in said[0], off.notes
        again = trace_file.load_trace(trace_file.trace_npz(off))
        assert (again.window, again.hides_future) == (window, True)


def test_causal_off_on_a_model_without_a_window_is_not_called_ignored(swa_model, tmp_path):
    path = tmp_path / "mha.pth"
    torch.save({"model_state_dict": swa_model.state_dict(), "cfg": book_cfg()}, path)
    off = pipeline.run(TEXT, AttentionConfig(checkpoint=str(path), layer=0, causal=False))
    assert off.window is None and not off.hides_future
    assert np.triu(off.steps["weights"][0], 1).max() > 0  # multi-head attention: the switch applies
    assert not any("Ignored causal" in note for note in off.notes)


def test_a_saved_window_layers_heads_view_in_a_notebook_draws_its_own_mask(tmp_path):
    """``attnviz.show(attnviz.load_trace(...))`` of a window layer run with Causal off: the focused head's map greys
    every key W or more behind its query and every later key (the book's sliding-window class masks whatever the
    switch says), and the shape flow beside it names the window, not "mask off"."""
    from helpers.maps import cells_shown

    from attnviz import trace_file
    from attnviz.views import notebook

    run = pipeline.run(TEXT, AttentionConfig(checkpoint=str(save_schedule(tmp_path, 1)), layer=0, causal=False))
    saved = tmp_path / "layer0.npz"
    saved.write_bytes(trace_file.trace_npz(run))
    parts = notebook.figures_of(trace_file.load_trace(saved), head=1)
    shown = cells_shown(parts["head"])  # (n, n): NaN where the map greys the cell
    i, j = np.indices(shown.shape)
    assert np.array_equal(np.isnan(shown), (j > i) | (i - j >= WINDOW))
    assert f"sliding window W = {WINDOW}" in parts["flow"] and "mask off" not in parts["flow"]
    flow = notebook.figures_of(run, head=1)["flow"].replace("&#x27;", "'")  # the model's layer 0 reads norm1's output
    assert "x = norm1(the input embeddings)" in flow and "x: input embeddings" not in flow


def test_a_window_layers_overview_tile_greys_what_its_window_hides():
    """The Heads page's every-layer overview (``checkpoint_view.overview_tiles``) of a window layer masks the keys W
    or more behind their query, as the Heads page's grid greys them, rather than drawing their weight 0."""
    from attnviz.views import checkpoint_view

    n = 10
    i, j = np.indices((n, n))
    maps = np.where((j <= i) & (i - j < WINDOW), 1.0 / WINDOW, 0.0)[None].astype(np.float32)  # (1, n, n)
    tile = checkpoint_view.overview_tiles(maps, causal=True, size=24, window=WINDOW)[0]  # (n, n): not pooled
    assert np.array_equal(np.isnan(tile), (j > i) | (i - j >= WINDOW))
    assert np.array_equal(np.isnan(checkpoint_view.overview_tiles(maps, causal=True, size=24)[0]), j > i)


def test_every_layer_of_a_window_model_takes_tiles_that_know_nothing_of_windows(swa_model):
    """A notebook's one-argument ``tiles`` (no ``window=``) gets the window layers' maps as they are: their hidden
    weights are 0; it raised Python's TypeError on a window model before."""
    from attnviz import tokens

    ids = tokens.encode(TEXT)
    pooled, scores = models.every_layer(swa_model, ids, lambda maps: maps)  # (L, h, n, n)
    i, j = np.indices((len(ids), len(ids)))
    assert pooled.shape[:2] == (len(swa_model.trf_blocks), swa_model.trf_blocks[0].att.num_heads)
    hidden = (j > i) | (i - j >= WINDOW)
    assert np.all(pooled[:, :, hidden] == 0) and np.all(pooled[:, :, ~hidden] > 0)
    assert set(scores) and all(values.shape == pooled.shape[:2] for values in scores.values())


@pytest.mark.slow
def test_every_layers_overview_masks_each_layers_own_window(tmp_path):
    """Stride 1 (layers 0 and 2 slide, 1 and 3 are full): the overview's tiles of every layer, as the Heads page makes
    them, grey what that layer's own window hides."""
    import functools

    from attnviz import tokens
    from attnviz.views import checkpoint_view

    model = models.load_checkpoint(save_schedule(tmp_path, 1))
    ids = tokens.encode(TEXT)
    tiles = functools.partial(checkpoint_view.overview_tiles, causal=True, size=24)
    pooled, _ = models.every_layer(model, ids, tiles)  # (L, h, n, n): n ≤ 24, not pooled
    i, j = np.indices((len(ids), len(ids)))
    for layer, window in enumerate((WINDOW, None, WINDOW, None)):
        hidden = (j > i) | (i - j >= (window or len(ids)))
        assert all(np.array_equal(np.isnan(tile), hidden) for tile in pooled[layer]), layer


# ============================== windows too large to mean anything ==============================


@pytest.mark.parametrize("window", [2**31, 2**63 - 1, 2**63, 2**64 + 8])
def test_an_absurd_window_is_refused_in_words_not_run_into_nan_or_an_overflow(swa_model, window, tmp_path):
    """A window past every position means nothing a smaller one does not; one past torch's int64 made every
    weight NaN (2**63) or an OverflowError (2**64) before."""
    path = tmp_path / "huge.pth"
    torch.save({"model_state_dict": swa_model.state_dict(), "cfg": book_cfg(sliding_window_size=window)}, path)
    with pytest.raises(models.CheckpointError, match="sliding_window_size must be at most") as raised:
        pipeline.run(TEXT, AttentionConfig(checkpoint=str(path), layer=0))
    assert "full causal attention" in str(raised.value)


def test_a_window_as_long_as_the_context_says_the_layer_runs_full_causal_attention(swa_model, tmp_path):
    context = RANDOM_GPT_CONFIG["context_length"]
    path = tmp_path / "wide.pth"
    torch.save({"model_state_dict": swa_model.state_dict(), "cfg": book_cfg(sliding_window_size=context + 1000)},
               path)
    trace, maps = weights_of(path, 0)
    assert np.all(np.isfinite(maps)) and np.all(maps[:, outside_window(trace.n)] > 0)  # nothing is cut off
    said = [note for note in trace.notes if "sliding window" in note]
    assert len(said) == 1 and "full causal attention" in said[0] and f"{context} positions" in said[0], said
    assert "tokens before it" not in said[0].replace("every token before it", "")
