"""pipeline.run() with a checkpoint, and the weights options (attnviz.weights), against Hugging Face transformers.

Small GPT-2s are written by the tests in real formats (``save_pretrained``: config.json + model.safetensors;
``torch.save`` of the book's GPTModel), with every LayerNorm and bias randomised so a mapping error shows.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import pathlib

import numpy as np
import pytest
import torch
from helpers.checkpoints import option_named, own_session_models, random_gpt2

from attnviz import head_types, models, pipeline, tokens, variants, weights
from attnviz.attention import STAGES
from attnviz.config import AttentionConfig, ConfigError
from attnviz.models import discover
from attnviz.producers import model_layer
from attnviz.text import prepare_text
from attnviz.views import checkpoint_view

transformers = pytest.importorskip("transformers")

TEXT = "The cat sat on the mat. The cat sat on the"
SIZES = {"n_layer": 3, "n_head": 4, "n_embd": 64, "n_positions": 96}


def make_hf(seed: int = 0, **sizes):
    """A GPT2LMHeadModel with eager attention and every LayerNorm and bias randomised
    (helpers.checkpoints.random_gpt2)."""
    return random_gpt2(seed, **{**SIZES, **sizes})


@pytest.fixture(scope="module")
def hf_model():
    return make_hf(seed=3)


@pytest.fixture(scope="module")
def checkpoint_dir(hf_model, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ckpt") / "tiny-gpt2"
    hf_model.save_pretrained(path)
    assert (path / "model.safetensors").is_file()
    return str(path)


def config_for(path: str, layer: int = 0, causal: bool = True) -> AttentionConfig:
    """What the sidebar builds for a checkpoint (urlstate.config_from_settings)."""
    from attnviz.urlstate import DEFAULTS, config_from_settings

    return config_from_settings({**DEFAULTS, "layer": layer, "causal": causal}, path).validate()


def reference(hf, token_ids):
    with torch.no_grad():
        out = hf(torch.tensor([token_ids]), output_attentions=True)
    return out.logits[0], torch.stack(out.attentions)[:, 0]  # (n, vocab), (L, h, n, n)


@pytest.fixture(autouse=True)
def fresh_layer_runs():
    model_layer._layer_runs.clear()
    yield
    model_layer._layer_runs.clear()


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_checkpoint_trace_matches_hugging_face(checkpoint_dir, hf_model, layer):
    trace = pipeline.run(TEXT, config_for(checkpoint_dir, layer))
    logits, attentions = reference(hf_model, list(trace.token_ids))
    assert trace.token_ids == tuple(tokens.encode(TEXT))
    assert np.abs(trace.steps["weights"][0] - attentions[layer].numpy()).max() <= 1e-5
    probs, ids = torch.topk(torch.softmax(logits, dim=-1), 5, dim=-1)  # (n, 5) each
    assert np.array_equal(trace.model.top_ids, ids.numpy())
    assert np.allclose(trace.model.top_probs, probs.numpy(), atol=1e-5)
    assert trace.model.layer == layer and trace.model.n_layers == 3
    assert set(STAGES) <= set(trace.steps)


def test_trace_has_the_named_steps_from_the_layernormed_input(checkpoint_dir, hf_model):
    trace = pipeline.run(TEXT, config_for(checkpoint_dir, 1))
    n = trace.n
    assert trace.num_heads == 4
    assert trace.steps["scores"].shape == (1, 4, n, n)
    assert trace.steps["norm1"].shape == (1, n, 64)
    assert np.isneginf(trace.steps["masked"][0][:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]]).all()
    assert np.allclose(trace.steps["weights"].sum(-1), 1.0, atol=1e-5)
    assert np.allclose(trace.steps["scaled"], trace.steps["scores"] / np.sqrt(16), atol=1e-5)
    # the diagram's "input" is what the attention reads: norm1 of the block input
    assert trace.shapes[0] == ("input", (1, n, 64))
    assert [name for name, _ in trace.shapes][1:] == list(variants.CHECKPOINT.shape_path[1:])
    # the whole path: tokens -> embeddings -> blocks (block 1 expanded) -> logits
    names = [name for name, _ in trace.model.path]
    assert names[:5] == ["tokens", "tok_emb", "pos_emb", "input", "block 0"]
    assert names[5] == "norm1" and names[-3:] == ["block 2", "final_norm", "logits"]
    assert dict(trace.model.path)["logits"] == (1, n, 50257)
    # the embeddings are the checkpoint's real wte / wpe rows
    wte, wpe = hf_model.transformer.wte.weight.detach().numpy(), hf_model.transformer.wpe.weight.detach().numpy()
    assert np.array_equal(trace.embeddings["token"], wte[list(trace.token_ids)])
    assert np.array_equal(trace.embeddings["position"], wpe[:n])
    assert np.allclose(trace.embeddings["input"], wte[list(trace.token_ids)] + wpe[:n])
    assert trace.output.shape == (1, n, 64)


def test_layer_switch_reuses_block_inputs_and_equals_a_fresh_run(checkpoint_dir, monkeypatch):
    from attnviz import models

    first = pipeline.run(TEXT, config_for(checkpoint_dir, 0))
    calls = []
    monkeypatch.setattr(models, "trace_layer", lambda *a, **k: calls.append(a) or pytest.fail("full forward rerun"))
    switched = pipeline.run(TEXT, config_for(checkpoint_dir, 2))  # from the kept block inputs
    monkeypatch.undo()
    model_layer._layer_runs.clear()
    fresh = pipeline.run(TEXT, config_for(checkpoint_dir, 2))
    assert not calls
    for name in STAGES:
        assert np.allclose(switched.steps[name], fresh.steps[name], atol=1e-6, equal_nan=True), name
    assert switched.model.path == fresh.model.path
    assert np.array_equal(switched.model.top_ids, first.model.top_ids)


def test_causal_off_is_allowed_and_sees_the_future(checkpoint_dir):
    trace = pipeline.run(TEXT, config_for(checkpoint_dir, 1, causal=False))
    n = trace.n
    upper = trace.steps["weights"][0][:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]]
    assert (upper > 0).all()
    causal = pipeline.run(TEXT, config_for(checkpoint_dir, 1, causal=True))
    assert not np.allclose(causal.steps["weights"], trace.steps["weights"])


def test_book_pth_checkpoint_gives_the_same_trace(checkpoint_dir, tmp_path):
    model = weights.load(checkpoint_dir)
    path = tmp_path / "book-gpt.pth"
    torch.save(model.state_dict(), path)
    # head_dim 16, not GPT-2's 64: the book's cfg beside the file says how many heads (as the loader documents)
    cfg = {"vocab_size": 50257, "context_length": 96, "emb_dim": 64, "n_heads": 4, "n_layers": 3, "drop_rate": 0.0,
           "qkv_bias": True}
    path.with_suffix(".json").write_text(json.dumps(cfg))
    from_pth = pipeline.run(TEXT, config_for(str(path), 1))
    from_hf = pipeline.run(TEXT, config_for(checkpoint_dir, 1))
    assert np.allclose(from_pth.steps["weights"], from_hf.steps["weights"], atol=1e-6)
    assert np.array_equal(from_pth.model.top_ids, from_hf.model.top_ids)


def test_a_checkpoint_and_a_layer_alone_run_with_the_checkpoints_sizes(checkpoint_dir, hf_model):
    """AttentionConfig(checkpoint=…, layer=…) alone: width 64, 4 heads and 96 positions come from the file."""
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=checkpoint_dir, layer=2))
    assert (trace.config.d_in, trace.config.d_out, trace.config.num_heads) == (64, 64, 4)
    assert trace.config.context_length == 96 and trace.num_heads == 4
    _, attentions = reference(hf_model, list(trace.token_ids))
    assert np.abs(trace.steps["weights"][0] - attentions[2].numpy()).max() <= 1e-5
    assert trace.config == config_for(checkpoint_dir, 2)  # one cache key, whatever the caller's other settings
    assert trace.notes == ()  # the defaults are not worth a notice


def test_settings_the_checkpoint_decides_are_ignored_with_a_notice(checkpoint_dir):
    asked = AttentionConfig(checkpoint=checkpoint_dir, layer=1, num_heads=8, d_in=32, dropout=0.5,
                                     train=True, variant="causal", seed=7)
    trace = pipeline.run(TEXT, asked)
    expected = pipeline.run(TEXT, config_for(checkpoint_dir, 1))
    assert np.array_equal(trace.steps["weights"], expected.steps["weights"])
    assert trace.config == expected.config
    [note] = [note for note in trace.notes if note.startswith("Ignored")]
    for named in ("num_heads = 8", "d_in = 32", "dropout = 0.5", "train = True", "variant = causal", "seed = 7"):
        assert named in note
    assert "4 heads" in note and "width 64" in note


@pytest.mark.parametrize(("overrides", "words"), [
    (dict(positions="rotary"), "learned positional embeddings"),
    (dict(positions="rotary", rope_base=500_000), "rope_base turns rotary positions only"),
    (dict(num_kv_groups=2), "a K/V head for each of its 4 heads"),
    (dict(latent_dim=16), "no latent"),
    (dict(sliding_window_size=3), "its own config"),
    (dict(device="cuda"), "the CPU"),
    (dict(qkv_bias=False), "trained with a bias in W_query, W_key and W_value"),
], ids=["rotary", "rope_base", "num_kv_groups", "latent_dim", "sliding_window_size", "device", "qkv_bias"])
def test_a_setting_of_the_attention_a_checkpoint_does_not_use_is_named_and_not_kept(checkpoint_dir, overrides,
                                                                                     words):
    """positions="rotary", rope_base, num_kv_groups, latent_dim, sliding_window_size, a device or qkv_bias given with
    a checkpoint that does not use them: the run is the checkpoint's own (its config and weights), a note starting
    "Ignored" names each and says why, and the config that ran runs again with no note."""
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=checkpoint_dir, layer=1, **overrides))
    expected = pipeline.run(TEXT, config_for(checkpoint_dir, 1))
    assert trace.config == expected.config  # what ran: learned positions, the file's K/V heads, no window setting
    assert np.array_equal(trace.steps["weights"], expected.steps["weights"])
    for name, value in overrides.items():
        [note] = [note for note in trace.notes if f"{name} = {value}" in note]
        assert note.startswith("Ignored"), note
    assert words in " ".join(trace.notes), trace.notes
    assert pipeline.run(TEXT, trace.config).notes == ()  # the config that ran runs again with no note


def test_a_layer_the_checkpoint_does_not_have_is_refused(checkpoint_dir):
    config = config_for(checkpoint_dir, 0)
    with pytest.raises(ConfigError, match="3 layers"):
        pipeline.run(TEXT, dataclasses.replace(config, layer=3))
    with pytest.raises(ConfigError, match="layer"):
        dataclasses.replace(config, layer=-1).validate()
    with pytest.raises(ConfigError, match="layer"):
        pipeline.run(TEXT, AttentionConfig(checkpoint=checkpoint_dir, layer=-1))


def test_checkpoint_fixes_the_settings_it_decides():
    spec = variants.CHECKPOINT
    for setting in ("variant", "preset", "d_in", "d_out", "num_heads", "dropout", "train", "seed"):
        assert spec.not_applicable(setting)
    assert spec.not_applicable("causal") is None  # turning the mask off stays allowed
    assert spec.cls.__name__ == "MultiHeadAttention"
    assert variants.CHECKPOINT.name not in variants.VARIANTS or variants.VARIANTS[spec.name] is not spec


def test_a_long_text_is_truncated_to_the_models_context(checkpoint_dir):
    trace = pipeline.run("word " * 500, config_for(checkpoint_dir, 0))
    assert trace.n == 96
    assert "The text has 501 tokens; only the first 96 are shown (the context length)." in trace.notes


def test_a_model_with_a_longer_context_is_cut_at_attnvizs_1024_and_says_so(tmp_path):
    """A checkpoint of 1,200 positions: attnviz's cap cuts the text at 1,024, not the model's context, and the
    notice gives that reason, not "the context length"."""
    random_gpt2(0, n_layer=1, n_head=2, n_embd=16, n_positions=1200).save_pretrained(tmp_path / "long")
    settled, _ = pipeline.settle(config_for(str(tmp_path / "long")))
    # what pipeline.run cuts and says, without running 1,024 tokens (seconds on this machine's quick tier)
    _, token_ids, notes = prepare_text("word " * 1100, settled.context_length)
    assert len(token_ids) == 1024
    assert notes == ["The text has 1,101 tokens; only the first 1,024 are shown (attnviz runs at most 1,024 tokens, "
                     "GPT-2's context)."]


def test_trace_cache_key_is_consistent(checkpoint_dir):
    cache = pipeline.TraceCache(256 * 2**20)
    config = config_for(checkpoint_dir, 1)
    trace = cache.get(TEXT, config)
    assert cache.get(trace.text, trace.config) is trace
    assert cache.misses == 1
    cache.get(TEXT, dataclasses.replace(config, layer=2))
    assert cache.misses == 2


def test_bad_checkpoint_raises_the_loaders_message(tmp_path):
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x00" * 10)
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        weights.load(str(broken))
    with pytest.raises(ValueError, match="no longer in memory"):
        weights.load(weights.SESSION_PREFIX + "0" * 32)


# ============================== the weights options ==============================


def test_options_list_the_books_classes_first_then_checkpoints(checkpoint_dir, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CHECKPOINTS", str(pathlib.Path(checkpoint_dir).parent))
    monkeypatch.setenv("HF_HUB_CACHE", str(pathlib.Path(checkpoint_dir).parent / "no-cache"))
    listed = weights.options("session-a")
    assert listed[0] == weights.BOOK_OPTION and listed[0].ref is None
    names = [option.name for option in listed]
    assert "tiny-gpt2" in names
    assert option_named("tiny-gpt2", "session-a").ref == checkpoint_dir


def test_bundled_model_is_an_option_when_present(monkeypatch, tmp_path, checkpoint_dir):
    from attnviz import models

    monkeypatch.setattr(models, "BUNDLED", tmp_path / "absent")
    assert all(option.source != "bundled" for option in weights.options(None, discover([], environ={})))
    monkeypatch.setattr(models, "BUNDLED", pathlib.Path(checkpoint_dir))
    listed = weights.options(None, discover([checkpoint_dir], environ={}))
    bundled = [option for option in listed if option.source == "bundled"]
    assert len(bundled) == 1 and "bundled" in bundled[0].label.lower() and "bundled" in bundled[0].name
    assert listed[1] is not None and listed[1].source == "bundled"
    assert sum(option.ref == checkpoint_dir for option in listed) == 1  # not listed twice


def test_a_listed_checkpoint_that_became_a_link_loop_is_still_listed_and_named(monkeypatch, tmp_path, checkpoint_dir):
    """Discovery's list is reused for a while: an entry whose path has since become a link loop does not break the
    sidebar's options, and a loader's message about it shows its listed name, not the path."""
    from attnviz import models
    from attnviz.ui.weights import _named

    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "back")
    (tmp_path / "back").symlink_to(loop)
    stale = [dataclasses.replace(entry, path=str(loop)) for entry in discover([checkpoint_dir], environ={})]
    monkeypatch.setattr(models, "BUNDLED", pathlib.Path(checkpoint_dir))
    listed = weights.options(None, stale)
    assert [option.name for option in listed if option.ref == str(loop)] == ["tiny-gpt2"]
    assert _named(f"Could not read {loop}: too many links", "tiny-gpt2", str(loop)) == (
        "Could not read tiny-gpt2: too many links")


def test_a_weights_name_from_the_browser_never_touches_the_file_system(checkpoint_dir, monkeypatch):
    """What the sidebar does with the ``weights`` name from the URL or its widget (``ui.weights.choose``): an unlisted
    name — a path, a traversal, not a string — is the book's classes, found without a file-system call."""
    from attnviz.ui import weights as ui_weights

    checkpoints = discover([checkpoint_dir], environ={})

    def forbidden(*args, **kwargs):
        raise AssertionError("a browser string reached the file system")

    for name in ("stat", "lstat", "open", "listdir", "scandir"):
        monkeypatch.setattr(os, name, forbidden)
    monkeypatch.setattr(pathlib.Path, "exists", forbidden)
    monkeypatch.setattr(pathlib.Path, "is_file", forbidden)
    monkeypatch.setattr(weights, "bundled_option", lambda: None)
    listed = weights.options("s", checkpoints)
    assert [option.ref for option in listed if option.name == "tiny-gpt2"] == [checkpoint_dir]
    for tampered in ("/etc/passwd", "../../secret.pth", checkpoint_dir, "tiny-gpt2/../x", "tiny-gpt2 ", "TINY-GPT2",
                     "tiny", "", "~/.ssh/id_rsa", "file:///etc/passwd", "tiny-gpt2\0", None, 3, ["tiny-gpt2"],
                     b"tiny-gpt2"):
        assert ui_weights.choose(listed, tampered) == ui_weights.Choice(weights.BOOK_OPTION)


def test_session_models_are_listed_for_their_session_only(checkpoint_dir, monkeypatch):
    model = weights.load(checkpoint_dir)
    own_session_models(monkeypatch)
    option = weights.register_session_model("session-a", "my model", model)
    again = weights.register_session_model("session-a", "my model", model)
    assert option.name == "trained: my model" and again.name == "trained: my model (2)"
    assert option.ref.startswith(weights.SESSION_PREFIX) and "my model" not in option.ref
    empty = discover([], environ={})
    assert option.name in [o.name for o in weights.options("session-a", empty)]
    assert option.name not in [o.name for o in weights.options("session-b", empty)]
    assert option_named(option.name, "session-b", empty) is None
    assert weights.load(option.ref) is model
    trace = pipeline.run(TEXT, config_for(option.ref, 2))
    assert trace.model.layer == 2
    with pytest.raises(TypeError):
        weights.register_session_model("s", "x", torch.nn.Linear(2, 2))


def test_model_cache_is_bounded_and_keeps_the_model_in_use(checkpoint_dir, tmp_path, hf_model):
    other = tmp_path / "other"
    make_hf(seed=4).save_pretrained(other)
    cache = weights.ModelCache(max_bytes=1)  # smaller than any model: only the last one stays
    first = cache.get(checkpoint_dir)
    assert cache.get(checkpoint_dir) is first and cache.loads == 1
    cache.get(str(other))
    assert cache.loads == 2 and len(cache._models) == 1
    cache.get(checkpoint_dir)
    assert cache.loads == 3


# ============================== what the app draws of the whole model ==============================


def overview(model, ids, size: int, causal: bool = True):
    """What the Heads page's overview draws: every layer's maps as the view's tiles, and every head's type scores."""
    tiles = functools.partial(checkpoint_view.overview_tiles, causal=causal, size=size)
    return models.every_layer(model, ids, tiles, causal=causal)


def test_overview_is_every_layers_pooled_maps(checkpoint_dir):
    model = weights.load(checkpoint_dir)
    ids = tokens.encode(TEXT)
    pooled, scores = overview(model, ids, size=64)  # n < 64: no pooling
    maps = models.attention_maps(model, ids)
    lower = np.tril(np.ones((len(ids), len(ids)), dtype=bool))
    assert pooled.shape == maps.shape
    assert np.allclose(pooled[..., lower], maps[..., lower], atol=1e-6)
    assert np.isnan(pooled[..., ~lower]).all()
    expected = head_types.score_heads(maps, ids, masked=True)  # (L, h) each, from every map at once
    assert scores.keys() == expected.keys()
    for name, values in scores.items():
        assert values.shape == (3, 4)
        assert np.allclose(values, expected[name], equal_nan=True), name
    small, _ = overview(model, ids, size=4)
    assert small.shape[:2] == (3, 4) and small.shape[2] <= 4
    fig = checkpoint_view.overview_figure(small, len(ids), focus=(1, 2))
    assert list(fig.layout.yaxis.ticktext) == ["L0", "L1", "L2"]
    assert list(fig.layout.xaxis.ticktext) == ["H0", "H1", "H2", "H3"]


def test_the_overviews_first_token_mass_reads_query_0_only_with_the_mask_off(checkpoint_dir):
    """Every layer's first-token mass counts the queries the Heads page's tables count: with the mask off query 0 weighs
    every key, and its weight on the first token is one like any other query's."""
    model = weights.load(checkpoint_dir)
    ids = tokens.encode(TEXT)
    _, scores = overview(model, ids, size=64, causal=False)
    maps = models.attention_maps(model, ids, causal=False)  # (L, h, n, n)
    assert np.allclose(scores["first_token"], maps[..., :, 0].mean(axis=-1), atol=1e-6)
    assert not np.allclose(scores["first_token"], maps[..., 1:, 0].mean(axis=-1), atol=1e-6)


@pytest.mark.parametrize(("layers", "heads", "size"), [(2, 2, 12), (12, 12, 24), (48, 25, 16)])
def test_the_overviews_tiles_are_square_and_sized_by_the_grid(layers, heads, size):
    """Each tile is the map it is: square cells (the y axis anchored to the x axis, the plot area shrunk to the
    mosaic), and a height from the grid's shape — the bundled model's 2 × 2 tiles of 12 × 12 are not strips."""
    pooled = np.zeros((layers, heads, size, size), dtype=np.float32)
    layout = checkpoint_view.overview_figure(pooled, size).layout
    assert layout.yaxis.scaleanchor == "x" and layout.yaxis.scaleratio == 1
    assert layout.xaxis.constrain == layout.yaxis.constrain == "domain"
    rows, columns = layout.yaxis.range[0] + 0.5, layout.xaxis.range[1] + 0.5  # cells, gaps included
    cell = (layout.height - layout.margin.t - layout.margin.b) / rows  # px per cell side, as the height allows
    assert columns * cell <= checkpoint_view.OVERVIEW_WIDTH_PX + 1  # the mosaic's width fits the column
    assert size * cell >= min(checkpoint_view.OVERVIEW_TILE_PX - 1, 20)  # tiles big enough to read
    if layers == 2:
        assert "each tile at full resolution" in layout.title.text
        assert round(size * cell) == checkpoint_view.OVERVIEW_TILE_PX  # 200 px squares, not 320 × 74 px strips


def test_next_token_table_and_model_path(checkpoint_dir):
    trace = pipeline.run(TEXT, config_for(checkpoint_dir, 1))
    table = checkpoint_view.next_tokens(trace, trace.n - 1)
    assert list(table["id"]) == [int(i) for i in trace.model.top_ids[-1]]
    assert list(table["next token"]) == [tokens.pieces([int(i)])[0].piece for i in trace.model.top_ids[-1]]
    assert table["probability"].is_monotonic_decreasing
    every = checkpoint_view.predictions(trace)
    assert len(every) == trace.n and every["actual next in top 5"].iloc[-1] is None
    rows = checkpoint_view.model_path_rows(trace)
    assert [row["stage"] for row in rows] == [name for name, _ in trace.model.path]
    assert {row["where"] for row in rows if row["stage"] in STAGES} == {"block 1"}
    dot = checkpoint_view.model_path_dot(trace)
    assert "cluster_layer" in dot and "logits" in dot and "block 0" in dot and "block 2" in dot


def test_two_sessions_loading_the_same_file_load_it_once(checkpoint_dir, monkeypatch):
    import threading
    import time

    from attnviz import models

    real, calls = models.load_checkpoint, []

    def slow_load(path):
        calls.append(path)
        time.sleep(0.3)
        return real(path)

    monkeypatch.setattr(models, "load_checkpoint", slow_load)
    cache = weights.ModelCache(max_bytes=2**34)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(checkpoint_dir))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and cache.loads == 1
    assert len(got) == 3 and got[0] is got[1] is got[2]


def test_downloaded_trace_names_the_checkpoint_without_the_servers_directories(checkpoint_dir):
    """The NPZ manifest a browser downloads shows the checkpoint's folder name, never the server's path."""
    from attnviz import trace_file

    trace = pipeline.run("The cat sat on the mat.", config_for(checkpoint_dir))
    data = np.load(io.BytesIO(trace_file.trace_npz(trace)))
    manifest = json.loads(bytes(data["manifest.json"]))
    parent = str(pathlib.Path(checkpoint_dir).parent)
    assert manifest["config"]["checkpoint"] == pathlib.Path(checkpoint_dir).name
    assert parent not in json.dumps(manifest)


def test_a_checkpoint_without_a_config_says_its_head_count_is_assumed(tmp_path):
    """A bare .safetensors of a 4-head, 64-wide GPT-2 loads as one 64-wide head (GPT-2's head size), and a note says
    that no config gives its head count and that it assumes 1 head.  With its config.json the same weights have their
    4 heads and no note."""
    from safetensors.torch import save_file

    hf = random_gpt2(0, n_layer=1, n_head=4, n_embd=64, n_positions=32)
    bare = tmp_path / "bare.safetensors"
    save_file({k: v.contiguous().clone() for k, v in hf.state_dict().items() if k != "lm_head.weight"}, bare)
    trace = pipeline.run("Hello there", config_for(str(bare)))
    assert trace.num_heads == 1
    assert any("no config giving its head count" in note and "gives 1 head." in note for note in trace.notes)
    hf.save_pretrained(tmp_path / "folder")
    trace = pipeline.run("Hello there", config_for(str(tmp_path / "folder")))
    assert trace.num_heads == 4 and not any("head count" in note for note in trace.notes)
