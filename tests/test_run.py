"""``attnviz.pipeline.run``: every variant gives a complete Trace with real, ordered shapes, equal to seeding the
book's classes by hand (that the same config and text give bitwise the same Trace: tests/test_reproducibility.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.runs import TEXT, small, upper_mask

from attnviz import attention, embedding, tokens, variants
from attnviz.pipeline import run
from attnviz.producers.book import build_module

# what the bonus classes (attnviz.modern_attention) record beyond attention.STAGES; kv_groups and kv_repeat are shapes
MODERN_STAGES = ("latent", "kv_groups", "rotated_queries", "rotated_keys", "kv_repeat")


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_run_every_variant_gives_a_complete_trace(variant):
    config = small(variant)
    trace = run(TEXT, config)
    ids = tokens.encode(TEXT)
    n = len(ids)
    heads = 2 if variant in tuple(name for name, v in variants.VARIANTS.items() if v.multi_head) else 1
    width = 8
    assert trace.config == config
    assert trace.text == TEXT
    assert trace.token_ids == tuple(ids)
    assert trace.tokens == tuple(t.piece for t in tokens.pieces(ids))
    assert trace.tokens[:3] == ("Att", "ention", "·lets")
    assert [t.id for t in trace.token_details] == ids
    assert trace.n == n
    assert trace.num_heads == heads == config.heads
    assert trace.device == "cpu"
    assert trace.notes == ()
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

