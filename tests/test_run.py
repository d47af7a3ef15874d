"""``attnviz.pipeline.run``: every variant gives a complete Trace with real, ordered shapes, equal to seeding the
book's classes by hand (that the same config and text give bitwise the same Trace: tests/test_reproducibility.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers.runs import TEXT, setting_notes, small, upper_mask

from attnviz import attention, embedding, tokens, variants
from attnviz.config import AttentionConfig, preset_config
from attnviz.pipeline import run, settle
from attnviz.producers.book import build_module

# what the bonus classes (attnviz.modern_attention) record beyond attention.STAGES; kv_groups and kv_repeat are shapes
MODERN_STAGES = ("latent", "kv_groups", "rotated_queries", "rotated_keys", "kv_repeat")


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_run_every_variant_gives_a_complete_trace(variant):
    heads = 2 if variant in tuple(name for name, v in variants.VARIANTS.items() if v.multi_head) else 1
    config = small(variant, num_heads=heads)
    trace = run(TEXT, config)
    ids = tokens.encode(TEXT)
    n = len(ids)
    width = 8
    assert trace.config == settle(config)[0]  # with the sizes a bonus class decides (K/V groups, latent, window)
    assert trace.text == TEXT
    assert trace.token_ids == tuple(ids)
    assert trace.tokens == tuple(t.piece for t in tokens.pieces(ids))
    assert trace.tokens[:3] == ("Att", "ention", "·lets")
    assert [t.id for t in trace.token_details] == ids
    assert trace.n == n
    assert trace.num_heads == heads == config.heads
    assert trace.device == "cpu"
    assert setting_notes(trace.notes) == (() if variant != "gqa" else (  # 2 heads cannot be grouped: what runs is said
        "Grouped-query attention cannot group 2 heads (no K/V head count lies between 1 and 2): the 2 heads share 1 "
        "K/V head, as in multi-query attention; num_kv_groups=2 gives each its own, as in multi-head attention.",))
    assert set(attention.STAGES) <= set(trace.steps) <= {*attention.STAGES, *MODERN_STAGES}  # MLA's latent too
    for name, array in trace.steps.items():
        assert isinstance(array, np.ndarray), name
        assert array.dtype == np.float32, name
    for stage in attention.MAP_STAGES:
        assert trace.steps[stage].shape == (1, heads, n, n)
        assert trace.attention_map(stage, heads - 1).shape == (n, n)
    assert isinstance(trace.output, np.ndarray)
    assert trace.output.dtype == np.float32
    assert trace.output.shape == (1, n, width)
    assert np.array_equal(trace.output, trace.steps["output"])
    assert {name: array.shape for name, array in trace.embeddings.items()} == {
        "token": (n, 8), "position": (n, 8), "input": (n, 8)
    }
    assert np.allclose(trace.embeddings["input"], trace.embeddings["token"] + trace.embeddings["position"])
    weights = trace.steps["weights"]
    assert np.allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[..., upper_mask(n)] == 0)  # causal by default
    assert np.all(trace.steps["masked"][..., upper_mask(n)] == -np.inf)


def test_mha_shapes_are_ordered_and_real():
    trace = run(TEXT, small("mha", d_in=6, d_out=12, num_heads=3))
    n = trace.n
    assert n not in (3, 4, 6, 12)  # keep every axis distinguishable
    assert trace.shapes == (
        ("input", (1, n, 6)),
        ("queries", (1, n, 12)),
        ("keys", (1, n, 12)),
        ("values", (1, n, 12)),
        ("view", (1, n, 3, 4)),
        ("transpose", (1, 3, n, 4)),
        ("scores", (1, 3, n, n)),
        ("scaled", (1, 3, n, n)),
        ("masked", (1, 3, n, n)),
        ("weights", (1, 3, n, n)),
        ("dropped", (1, 3, n, n)),
        ("context", (1, 3, n, 4)),
        ("concat", (1, n, 12)),
        ("output", (1, n, 12)),
    )
    for name, shape in trace.shapes:
        if name in trace.steps:
            assert trace.steps[name].shape == shape, name


@pytest.mark.parametrize("variant", ["simplified", "self_attention_v1", "self_attention_v2", "causal"])
def test_single_head_shapes_are_ordered_and_real(variant):
    trace = run(TEXT, small(variant, d_in=6, d_out=10))
    n, width = trace.n, 6 if variant == "simplified" else 10
    assert trace.shapes == (
        ("input", (1, n, 6)),
        ("queries", (1, n, width)),
        ("keys", (1, n, width)),
        ("values", (1, n, width)),
        ("scores", (1, n, n)),
        ("scaled", (1, n, n)),
        ("masked", (1, n, n)),
        ("weights", (1, n, n)),
        ("dropped", (1, n, n)),
        ("context", (1, n, width)),
        ("output", (1, n, width)),
    )
    for name, shape in trace.shapes[1:]:  # maps are stored with a heads axis of 1
        expected = (1, 1, *shape[1:]) if name in attention.MAP_STAGES else shape
        assert trace.steps[name].shape == expected, name


def test_wrapper_shapes_show_one_head_times_h_then_concat():
    trace = run(TEXT, small("mha_wrapper", d_in=6, d_out=12, num_heads=3))
    n = trace.n
    assert trace.shapes == (
        ("input", (1, n, 6)),
        *((f"{name} ×3", (1, n, 4)) for name in ("queries", "keys", "values")),
        *((f"{name} ×3", (1, n, n)) for name in attention.MAP_STAGES),
        ("context ×3", (1, n, 4)),
        ("concat", (1, n, 12)),
        ("output", (1, n, 12)),
    )
    assert trace.steps["context"].shape == (1, 3, n, 4)
    assert np.array_equal(
        np.concatenate([trace.steps["context"][:, h] for h in range(3)], axis=-1), trace.output
    )


@pytest.mark.parametrize("variant", list(variants.LABELS))
@pytest.mark.parametrize("seed", [0, 123, 2**32 - 1])
def test_run_equals_seeding_the_book_classes_by_hand(variant, seed):
    config = small(variant, seed=seed)
    ids = tokens.encode(TEXT)
    torch.manual_seed(seed)
    layer = embedding.InputEmbedding(8, 64)
    torch.manual_seed(seed)
    module = build_module(config).eval()
    with torch.no_grad():
        x = layer(torch.tensor([ids]))["input"]
        expected = module(x)
    assert np.array_equal(run(TEXT, config).output, expected.numpy())



# ============================== trace.config is the config that ran ==============================


def test_a_single_head_variant_settles_its_heads_and_width_and_says_what_it_ignored():
    trace = run(TEXT, AttentionConfig(variant="simplified", d_in=8, num_heads=4, d_out=64))
    assert trace.output.shape == (1, trace.n, 8)
    assert (trace.config.num_heads, trace.config.d_out, trace.config.heads) == (1, 8, 1) == (
        trace.num_heads, trace.output.shape[-1], trace.steps["weights"].shape[1])
    assert any(note.startswith("Ignored num_heads = 4") and "one head" in note for note in trace.notes), trace.notes
    assert any(note.startswith("Ignored d_out = 64") and "d_in" in note for note in trace.notes), trace.notes


@pytest.mark.parametrize(("config", "setting", "value"), [
    (AttentionConfig(variant="gqa", d_in=8, d_out=8, num_heads=8), "num_kv_groups", 4),  # the divisor nearest 4
    (AttentionConfig(variant="mqa", d_in=8, d_out=8, num_heads=8), "num_kv_groups", 1),  # MQA's one K/V head
    (AttentionConfig(variant="mla", d_in=64, d_out=64, num_heads=4), "latent_dim", 16),  # max(16, d_out // 8)
    (AttentionConfig(variant="swa", d_in=8, d_out=8, num_heads=2, context_length=64), "sliding_window_size", 64),
])
def test_a_size_left_to_the_class_is_the_one_that_ran(config, setting, value):
    trace = run(TEXT, config)
    assert getattr(trace.config, setting) == value
    assert trace.notes == ()  # left open, not set to something else: nothing to say
    again = run(TEXT, trace.config)  # the settled config runs the same attention
    assert np.array_equal(again.steps["weights"], trace.steps["weights"])
    assert np.array_equal(again.output, trace.output)
    if setting == "num_kv_groups":
        assert trace.steps["keys"].shape[-1] == value * trace.config.head_dim  # 4 K/V heads ran (MQA: 1)


@pytest.mark.parametrize(("overrides", "setting", "settled", "words"), [
    (dict(variant="swa", causal=False), "causal", True, "always hides the future"),
    (dict(variant="mha", layer=5), "layer", 0, "checkpoint"),
    (dict(variant="self_attention_v1", qkv_bias=True), "qkv_bias", False, "bias"),
    (dict(variant="self_attention_v2", dropout=0.2), "dropout", 0.0, "no dropout"),
    (dict(variant="mha", num_kv_groups=1), "num_kv_groups", None, "grouped-query"),
    (dict(variant="mha", latent_dim=4), "latent_dim", None, "latent"),
    (dict(variant="mha", sliding_window_size=3), "sliding_window_size", None, "sliding-window"),
    (dict(variant="mha", rope_base=500_000), "rope_base", 10_000, "rotary"),
])
def test_a_setting_that_changes_nothing_is_named_in_the_notes(overrides, setting, settled, words):
    config = small(**{"num_heads": 2 if variants.get(overrides["variant"]).multi_head else 1, **overrides})
    trace = run(TEXT, config)
    assert getattr(trace.config, setting) == settled
    said = [note for note in trace.notes if note.startswith(f"Ignored {setting} = ")]
    assert len(said) == 1 and words in said[0], trace.notes
    plain = run(TEXT, replace(config, **{setting: settled}))  # the setting changed nothing
    assert np.array_equal(plain.steps["weights"], trace.steps["weights"])
    assert np.array_equal(plain.output, trace.output)
    assert plain.config == trace.config and setting_notes(plain.notes) == ()


def test_the_book_classes_run_without_biases_unless_asked():
    """qkv_bias left open (None) is the book's qkv_bias=False; the trace says what ran."""
    for variant in ("self_attention_v2", "causal", "mha_wrapper", "mha"):
        assert run(TEXT, small(variant)).config.qkv_bias is False
        with_biases = run(TEXT, small(variant, qkv_bias=True))
        assert with_biases.config.qkv_bias is True and setting_notes(with_biases.notes) == ()


def test_settling_twice_changes_nothing():
    for variant in variants.VARIANTS:
        asked = small(variant, num_heads=4, d_out=8, layer=2, qkv_bias=True, causal=False, rope_base=500_000)
        settled, _ = settle(asked)
        assert settle(settled) == (settled, [])


@pytest.mark.parametrize("preset", list(variants.PRESETS))
def test_a_presets_run_ignores_nothing(preset):
    for variant in variants.VARIANTS:
        settled, notes = settle(preset_config(preset, variant=variant))
        if variant == "gqa" and preset == "book":  # 2 heads cannot be grouped: what runs instead is said
            assert [note.split(":")[0] for note in notes] == ["Grouped-query attention cannot group 2 heads (no K/V "
                                                              "head count lies between 1 and 2)"]
        else:
            assert setting_notes(notes) == (), (variant, notes)
