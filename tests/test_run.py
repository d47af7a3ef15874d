"""``attnviz.pipeline.run``: every variant gives a complete Trace with real, ordered shapes, equal to seeding the
book's classes by hand; the same config and text give bitwise the same Trace, dropout draws replay, and
training runs never disturb concurrent eval runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers.runs import TEXT, assert_traces_equal, small, upper_mask

from attnviz import attention, embedding, tokens, variants
from attnviz.config import AttentionConfig
from attnviz.modern_attention import MODERN_STAGES
from attnviz.pipeline import run
from attnviz.producers import book
from attnviz.producers.book import build_module

# ============================== the Trace ==============================


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
    assert trace.tokens == tuple(t.piece for t in tokens.tokenize(TEXT))
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


# ============================== determinism ==============================


@pytest.mark.parametrize(
    "overrides", [{}, {"train": True, "dropout": 0.3}, {"train": True, "dropout": 0.5, "causal": False}]
)
@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_same_config_and_text_give_bitwise_identical_traces(variant, overrides):
    config = small(variant, **overrides)
    first = run(TEXT, config)
    run(TEXT, replace(config, seed=7))  # another run in between must not leak RNG state
    torch.manual_seed(999)
    torch.rand(100)  # nor must anyone else's use of the global RNG
    second = run(TEXT, config)
    book._seeded_module.cache_clear()
    book._embedding_layer.cache_clear()
    third = run(TEXT, config)
    assert_traces_equal(first, second)
    assert_traces_equal(first, third)
    if config.dropout_runs:
        assert not np.array_equal(first.steps["dropped"], first.steps["weights"])


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_different_seeds_give_different_arrays(variant):
    first = run(TEXT, small(variant, seed=1))
    second = run(TEXT, small(variant, seed=2))
    assert not np.array_equal(first.output, second.output)
    assert not np.array_equal(first.steps["weights"], second.steps["weights"])
    assert not np.array_equal(first.embeddings["input"], second.embeddings["input"])


@pytest.mark.parametrize("variant", tuple(name for name, v in variants.VARIANTS.items() if v.dropout))
def test_train_mode_dropout_differs_from_eval(variant):
    eval_trace = run(TEXT, small(variant, dropout=0.5))
    train_trace = run(TEXT, small(variant, dropout=0.5, train=True))
    assert np.array_equal(eval_trace.steps["dropped"], eval_trace.steps["weights"])
    assert np.array_equal(train_trace.steps["weights"], eval_trace.steps["weights"])
    assert not np.array_equal(train_trace.output, eval_trace.output)
    kept = train_trace.steps["dropped"] != 0
    assert np.array_equal(train_trace.steps["dropped"][kept], train_trace.steps["weights"][kept] * np.float32(2.0))


def test_training_runs_never_switch_dropout_on_in_concurrent_eval_runs():
    """Eval-mode forwards take no RNG lock, so a module shared by sessions must never be switched between train
    and eval per run: a training run in one thread and eval runs in another each get their own bitwise result."""
    import threading

    text = "Your journey starts with one step, and then another one, and one more."
    evaluating = AttentionConfig(variant="mha", d_in=32, d_out=32, num_heads=4, context_length=64, dropout=0.5, seed=11)
    training = replace(evaluating, train=True)
    eval_reference, train_reference = run(text, evaluating), run(text, training)
    assert not np.array_equal(eval_reference.steps["dropped"], train_reference.steps["dropped"])
    stop, wrong = threading.Event(), []

    def trainer():
        while not stop.is_set():
            if not np.array_equal(run(text, training).steps["dropped"], train_reference.steps["dropped"]):
                wrong.append("train")

    thread = threading.Thread(target=trainer)
    thread.start()
    try:
        for _ in range(300):
            if not np.array_equal(run(text, evaluating).steps["dropped"], eval_reference.steps["dropped"]):
                wrong.append("eval")
    finally:
        stop.set()
        thread.join()
    assert wrong == []
