"""attnviz.pipeline: run(text, config) -> Trace, presets, validation, devices, hostile text."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import astuple, replace

import numpy as np
import pytest
import torch

from attnviz import attention, embedding, pipeline, tokens, variants
from attnviz.config import (
    MAX_CHARS,
    AttentionConfig,
    ConfigError,
    EmptyTextError,
    InputError,
    available_devices,
    preset_config,
    resolve_device,
)
from attnviz.pipeline import run
from attnviz.producers import book
from attnviz.producers.book import build_module
from attnviz.trace import Trace

JOURNEY = embedding.JOURNEY_TEXT
TEXT = "Attention lets every token look back at the tokens before it."
ATOL = 1e-4


def small(variant: str = "mha", **overrides) -> AttentionConfig:
    """A small config for invariants: d 8, 2 heads."""
    values = {"variant": variant, "d_in": 8, "d_out": 8, "num_heads": 2, "context_length": 64, "device": "cpu"}
    return AttentionConfig(**{**values, **overrides})


def upper_mask(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), k=1)


def assert_traces_equal(first: Trace, second: Trace) -> None:
    assert first.token_ids == second.token_ids
    assert first.steps.keys() == second.steps.keys()
    for name in first.steps:
        assert np.array_equal(first.steps[name], second.steps[name]), name
    assert np.array_equal(first.output, second.output)
    for name in first.embeddings:
        assert np.array_equal(first.embeddings[name], second.embeddings[name]), name


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
    assert set(trace.steps) == set(attention.STAGES)
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


# ============================== the book preset ==============================


def test_book_preset_mha_reproduces_the_book():
    trace = run(JOURNEY, preset_config("book", variant="mha"))
    assert trace.output.shape == (1, 6, 2)
    assert np.allclose(trace.output[0], [
        [0.3190, 0.4858], [0.2943, 0.3897], [0.2856, 0.3593], [0.2693, 0.3873], [0.2639, 0.3928], [0.2575, 0.4028]
    ], atol=ATOL)
    assert trace.token_ids == embedding.JOURNEY_TOKEN_IDS
    assert np.array_equal(trace.embeddings["input"], np.array(embedding.JOURNEY_INPUTS, dtype=np.float32))
    assert trace.notes == ()


def test_book_preset_causal_reproduces_the_book():
    trace = run(JOURNEY, preset_config("book", variant="causal"))
    assert np.allclose(trace.output[0], [
        [-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632],
        [-0.5675, -0.0843], [-0.5526, -0.0981], [-0.5299, -0.1081],
    ], atol=ATOL)


def test_book_preset_wrapper_with_two_dims_per_head_reproduces_the_book():
    # the book's wrapper takes d_out per head; AttentionConfig.d_out is the total width (2 heads × 2)
    config = replace(preset_config("book", variant="mha_wrapper"), d_out=4).validate()
    trace = run(JOURNEY, config)
    assert np.allclose(trace.output[0], [
        [-0.4519, 0.2216, 0.4772, 0.1063], [-0.5874, 0.0058, 0.5891, 0.3257], [-0.6300, -0.0632, 0.6202, 0.3860],
        [-0.5675, -0.0843, 0.5478, 0.3589], [-0.5526, -0.0981, 0.5321, 0.3428], [-0.5299, -0.1081, 0.5077, 0.3493],
    ], atol=ATOL)


BOOK_V1 = [[0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203], [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040]]
BOOK_V2 = [[-0.0739, 0.0713], [-0.0748, 0.0703], [-0.0749, 0.0702], [-0.0760, 0.0685], [-0.0763, 0.0679],
           [-0.0754, 0.0693]]
BOOK_SIMPLE = [[0.4421, 0.5931, 0.5790], [0.4419, 0.6515, 0.5683], [0.4431, 0.6496, 0.5671],
               [0.4304, 0.6298, 0.5510], [0.4671, 0.5910, 0.5266], [0.4177, 0.6503, 0.5645]]
BOOK_NON_CAUSAL = [("self_attention_v1", 123, BOOK_V1), ("self_attention_v2", 789, BOOK_V2), ("simplified", 123, BOOK_SIMPLE)]


@pytest.mark.parametrize(("variant", "seed", "expected"), BOOK_NON_CAUSAL)
def test_book_preset_non_causal_variants_reproduce_the_book_without_the_mask(variant, seed, expected):
    trace = run(JOURNEY, preset_config("book", variant=variant, seed=seed, causal=False))
    assert np.allclose(trace.output[0], expected, atol=ATOL)


@pytest.mark.parametrize(("variant", "seed", "expected"), BOOK_NON_CAUSAL)
def test_book_preset_reproduces_the_book_for_non_causal_variants_by_default(variant, seed, expected):
    trace = run(JOURNEY, preset_config("book", variant=variant, seed=seed))
    assert np.allclose(trace.output[0], expected, atol=ATOL)


@pytest.mark.parametrize(("preset", "override"), [("book", {"d_out": 4}), ("gpt2-small", {"num_heads": 8})])
def test_preset_overrides_can_override_preset_keys(preset, override):
    config = preset_config(preset, **override)
    assert {name: getattr(config, name) for name in override} == override


def test_book_preset_dropout_replays_the_books_draws():
    """torch.manual_seed(123); ca = CausalAttention(3, 2, ctx, 0.5); ca(batch) in train mode."""
    config = preset_config("book", variant="causal", dropout=0.5, train=True)
    torch.manual_seed(123)
    ca = attention.CausalAttention(3, 2, config.context_length, 0.5)
    expected_trace = attention.Recorder()
    with torch.no_grad():
        expected = ca(embedding.journey_inputs().unsqueeze(0), expected_trace)
    trace = run(JOURNEY, config)
    assert np.array_equal(trace.output, expected.numpy())
    assert np.array_equal(trace.steps["dropped"], expected_trace.steps["dropped"].numpy())
    assert not np.array_equal(trace.steps["dropped"], trace.steps["weights"])


def test_book_embedding_on_other_text_falls_back_with_a_note():
    trace = run("Your journey ends here", preset_config("book", variant="mha"))
    assert len(trace.notes) == 1
    assert "Your journey starts with one step" in trace.notes[0]
    assert "seeded" in trace.notes[0]
    assert trace.embeddings["input"].shape == (trace.n, 3)


# ============================== GPT-2 presets ==============================


@pytest.mark.parametrize(
    ("preset", "d_model", "heads"),
    [("gpt2-small", 768, 12), ("gpt2-medium", 1024, 16), ("gpt2-large", 1280, 20), ("gpt2-xl", 1600, 25)],
)
def test_gpt2_presets(preset, d_model, heads):
    config = preset_config(preset).validate()
    assert (config.d_in, config.d_out, config.num_heads) == (d_model, d_model, heads)
    assert config.head_dim == 64
    assert config.context_length == 1024
    assert config.variant == "mha"


@pytest.mark.parametrize(("d_model", "wrong_heads"), [(1024, 24), (1280, 36)])
def test_the_wrong_head_table_is_rejected(d_model, wrong_heads):
    config = AttentionConfig(d_in=d_model, d_out=d_model, num_heads=wrong_heads)
    with pytest.raises(ConfigError, match=rf"d_out {d_model} is not divisible by {wrong_heads} heads"):
        config.validate()


def test_unknown_preset():
    with pytest.raises(ConfigError, match="Unknown preset 'gpt2-huge'.*gpt2-small"):
        preset_config("gpt2-huge")


def test_gpt2_small_on_1024_tokens():
    text = "The quick brown fox jumps over the lazy dog. " * 120  # 1,201 tokens
    trace = run(text, preset_config("gpt2-small", device="cpu"))
    assert trace.n == 1024
    assert trace.steps["weights"].shape == (1, 12, 1024, 1024)
    assert trace.output.shape == (1, 1024, 768)
    assert np.allclose(trace.steps["weights"].sum(-1), 1.0, atol=1e-5)
    assert np.all(trace.steps["weights"][..., upper_mask(1024)] == 0)
    assert np.all(np.isfinite(trace.output))


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


# ============================== text bounds ==============================


def test_more_than_1024_tokens_are_truncated_with_a_note():
    text = "one two three four five six seven eight nine ten " * 120  # 1,201 tokens
    assert len(tokens.encode(text)) > 1024
    trace = run(text, small(context_length=1024))
    assert trace.n == 1024
    assert trace.token_ids == tuple(tokens.encode(text)[:1024])
    assert trace.steps["weights"].shape == (1, 2, 1024, 1024)
    assert len(trace.notes) == 1
    assert re.search(r"\b1,?024\b", trace.notes[0])
    assert re.search(r"\b1,?201\b", trace.notes[0])  # and how many there were


def test_context_length_bounds_the_tokens():
    trace = run(TEXT, small(context_length=5))
    assert trace.n == 5
    assert trace.token_ids == tuple(tokens.encode(TEXT)[:5])
    assert any("first 5 " in note for note in trace.notes)


def test_more_than_max_chars_gives_a_note():
    text = "ab " * (MAX_CHARS // 3 + 10)
    assert len(text) > MAX_CHARS
    trace = run(text, small(context_length=16))
    assert trace.text == text[: MAX_CHARS]
    assert trace.n == 16
    assert any(re.search(r"40,?000 characters", note) for note in trace.notes)


@pytest.mark.parametrize("text", ["", " ", "   \n\t  ", "\u3000\u2003"])
def test_empty_or_whitespace_text_raises_a_helpful_error(text):
    with pytest.raises(EmptyTextError, match=r"(?i)type some text.*empty or only whitespace"):
        run(text, small())


def test_error_classes_are_value_errors():
    assert issubclass(EmptyTextError, ValueError)
    assert issubclass(ConfigError, ValueError)
    assert issubclass(EmptyTextError, InputError)
    assert issubclass(ConfigError, InputError)


def test_non_string_text_is_an_input_error():
    with pytest.raises(InputError, match="must be a string, got bytes"):
        run(b"bytes", small())


# ============================== config validation ==============================

CONFIG_ERRORS = [
    ({"variant": "gpt5"}, r"Unknown variant 'gpt5'; choose one of simplified, .*mha\."),
    ({"d_in": 1.5}, r"d_in must be a whole number, got 1\.5\."),
    ({"d_in": "3"}, r"d_in must be a whole number, got '3'\."),
    ({"d_in": True}, r"d_in must be a whole number, got True\."),
    ({"d_in": 0}, r"d_in must be between 1 and 4096, got 0\."),
    ({"d_in": 4097}, r"d_in must be between 1 and 4096, got 4097\."),
    ({"d_out": 2.0}, r"d_out must be a whole number, got 2\.0\."),
    ({"d_out": -8}, r"d_out must be between 1 and 4096, got -8\."),
    ({"context_length": None}, r"context_length must be a whole number, got None\."),
    ({"context_length": 0}, r"context_length must be between 1 and 1024, got 0\."),
    ({"context_length": 1025}, r"context_length must be between 1 and 1024, got 1025\."),
    ({"num_heads": 2.5}, r"num_heads must be a whole number, got 2\.5\."),
    ({"num_heads": 0}, r"num_heads must be between 1 and \d+, got 0\."),
    ({"num_heads": 10**6, "d_out": 8}, r"num_heads must be between 1 and \d+, got 1000000\."),
    ({"seed": "123"}, r"seed must be a whole number, got '123'\."),
    ({"seed": -1}, r"seed must be between 0 and 4294967295, got -1\."),
    ({"seed": 2**32}, r"seed must be between 0 and 4294967295, got 4294967296\."),
    ({"dropout": 5}, r"dropout is a probability: .*from 0 up to \(not including\) 1, got 5\."),
    ({"dropout": -0.1}, r"dropout is a probability: .* got -0\.1\."),
    ({"dropout": True}, r"dropout is a probability: .* got True\."),
    ({"dropout": 1.0}, r"dropout is a probability: .* got 1\.0\."),
    ({"dropout": "0.1"}, r"dropout is a probability: .* got '0\.1'\."),
    ({"dropout": math.nan}, r"dropout is a probability: .* got nan\."),
    ({"device": "tpu"}, r"Unknown device 'tpu'; choose one of auto, cpu, cuda, mps\."),
    ({"embedding": "glove"}, r"Unknown embedding 'glove'; choose 'seeded' or 'book'\."),
    ({"embedding": "book", "d_in": 768}, r"journey vectors are 3-dimensional: set d_in to 3 \(got 768\)\."),
    ({"num_heads": 16, "d_out": 8}, r"16 heads need d_out ≥ 16; d_out is 8\."),
    ({"variant": "mha_wrapper", "num_heads": 9, "d_out": 4}, r"9 heads need d_out ≥ 9; d_out is 4\."),
]


@pytest.mark.parametrize(("overrides", "message"), CONFIG_ERRORS)
def test_config_error_messages(overrides, message):
    config = small(**overrides)
    with pytest.raises(ConfigError, match=message):
        config.validate()
    with pytest.raises(ConfigError, match=message):  # run() validates before anything else
        run(TEXT, config)


@pytest.mark.parametrize(
    ("d_out", "heads", "suggested"),
    [(768, 7, [4, 6, 8]), (1024, 24, [8, 16, 32]), (1280, 36, [32, 40, 20]), (10, 3, [1, 2, 5]), (7, 2, [1, 7])],
)
@pytest.mark.parametrize("variant", tuple(name for name, v in variants.VARIANTS.items() if v.multi_head))
def test_non_divisible_heads_message_suggests_real_divisors(variant, d_out, heads, suggested):
    with pytest.raises(ConfigError) as info:
        small(variant, d_out=d_out, num_heads=heads).validate()
    message = str(info.value)
    assert message.startswith(f"d_out {d_out} is not divisible by {heads} heads; try ")
    tried = [int(v) for v in re.findall(r"\d+", message.split("try", 1)[1])]
    assert sorted(tried) == sorted(suggested)
    assert all(d_out % value == 0 for value in tried)
    assert " or " in message


def test_the_exact_768_by_7_message():
    with pytest.raises(ConfigError) as info:
        AttentionConfig(num_heads=7).validate()
    assert str(info.value) == "d_out 768 is not divisible by 7 heads; try 4, 6 or 8."


@pytest.mark.parametrize("variant", ["simplified", "self_attention_v1", "self_attention_v2", "causal"])
def test_single_head_variants_ignore_num_heads(variant):
    config = small(variant, d_out=10, num_heads=3).validate()
    trace = run(TEXT, config)
    assert config.heads == 1
    assert trace.num_heads == 1


def test_valid_configs_validate_to_themselves():
    config = small()
    assert config.validate() is config
    assert AttentionConfig().validate() == AttentionConfig()
    assert small(dropout=0).validate().dropout == 0
    assert small(dropout=np.float64(0.25)).validate().dropout == 0.25
    assert {f.name for f in dataclasses.fields(AttentionConfig)} >= {
        "variant", "d_in", "d_out", "num_heads", "dropout", "seed", "device"}


# ============================== devices ==============================


def test_cuda_on_a_gpu_less_machine_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device, notes = resolve_device("cuda")
    assert device == "cpu"
    assert len(notes) == 1
    assert "CUDA" in notes[0]
    assert "CPU" in notes[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_run_with_cuda_here_runs_on_cpu_with_a_note():
    trace = run(TEXT, small(device="cuda"))
    assert trace.device == "cpu"
    assert any("CUDA" in note for note in trace.notes)
    assert np.array_equal(trace.output, run(TEXT, small(device="cpu")).output)


def test_auto_without_accelerators_is_cpu_without_notes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == ("cpu", [])
    assert resolve_device("cpu") == ("cpu", [])
    device, notes = resolve_device("mps")
    assert device == "cpu"
    assert "MPS" in notes[0]
    assert available_devices() == ["auto", "cpu"]


def test_auto_picks_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == ("cuda", [])
    assert resolve_device("cuda") == ("cuda", [])
    assert "cuda" in available_devices()


def test_auto_picks_mps_when_only_mps_is_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == ("mps", [])


def test_cuda_out_of_memory_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_forward = book._forward
    devices = []

    def forward(input_embeddings, config, device):
        devices.append(device)
        if device != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 48.00 MiB")
        return real_forward(input_embeddings, config, device)

    monkeypatch.setattr(book, "_forward", forward)
    trace = run(TEXT, small(device="cuda"))
    assert devices == ["cuda", "cpu"]
    assert trace.device == "cpu"
    assert len(trace.notes) == 1
    assert "CUDA ran out of memory" in trace.notes[0]
    assert "CPU" in trace.notes[0]
    monkeypatch.undo()
    assert_traces_equal(trace, run(TEXT, small(device="cpu")))


# ============================== hostile text ==============================


@pytest.mark.parametrize(
    "text",
    [
        "Hello <|endoftext|> world",
        "<|endoftext|>",
        "emoji 😀🦙👩‍👩‍👧 and €",
        "NUL \x00 inside",
        "right-to-left \u202eoverride\u202c here",
        "<script>alert('x')</script><b>bold</b> &amp; <!-- -->",
        "\u200b",
        "日本語とעברית mixed",
        "line\r\nbreaks\n\n\ttabs",
    ],
)
@pytest.mark.parametrize("variant", ["mha", "simplified"])
def test_hostile_text_runs(variant, text):
    trace = run(text, small(variant))
    ids = tokens.encode(text)
    assert trace.token_ids == tuple(ids)
    assert trace.text == text
    assert trace.notes == ()
    assert len(trace.tokens) == trace.n == len(ids)
    assert all("\ufffd" not in piece for piece in trace.tokens)
    assert [t.special for t in trace.token_details] == [i == tokens.ENDOFTEXT_ID for i in ids]
    assert np.all(np.isfinite(trace.output))
    assert np.allclose(trace.steps["weights"].sum(-1), 1.0, atol=1e-5)


def test_endoftext_is_one_special_token_in_the_trace():
    trace = run("Hello <|endoftext|> world", small())
    assert trace.token_ids.count(50256) == 1
    assert "<|endoftext|>" in trace.tokens
    assert [t.special for t in trace.token_details].count(True) == 1


@pytest.mark.parametrize("text", ["a\ud800b", "\udfff", "ok \ud83d text"])
def test_lone_surrogates_run_with_a_note(text):
    trace = run(text, small())
    assert trace.text == text.encode("utf-8", "replace").decode("utf-8")
    assert "?" in trace.text
    assert trace.token_ids == tuple(tokens.encode(trace.text))
    assert len(trace.notes) == 1
    assert "surrogate" in trace.notes[0]


def test_trace_cache_is_bounded_by_bytes_and_reuses_traces():
    from attnviz.pipeline import TraceCache
    from attnviz.trace import trace_nbytes

    config = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=256)
    long_text = "word " * 300  # 256 tokens after truncation
    one = trace_nbytes(run(long_text, config))
    cache = TraceCache(max_bytes=int(2.5 * one))
    first = cache.get(long_text, config)
    assert cache.get(long_text, config) is first  # a hit returns the same (read-only) object
    for seed in (1, 2, 3):
        cache.get(long_text, replace(config, seed=seed))
    assert len(cache) == 2 and cache.nbytes <= 2.5 * one  # the oldest were evicted
    assert cache.get(long_text, replace(config, seed=3)).config.seed == 3
    assert not first.steps["weights"].flags.writeable


def test_trace_cache_makes_room_before_a_run_so_cache_plus_new_trace_stay_in_bounds(monkeypatch):
    from attnviz import pipeline
    from attnviz.pipeline import TraceCache, estimate_nbytes
    from attnviz.trace import trace_nbytes

    config = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=256)
    long_text = "word " * 300  # 256 tokens after truncation
    trace = run(long_text, config)
    maps = sum(trace.steps[stage].nbytes for stage in ("scores", "scaled", "masked", "weights", "dropped"))
    assert estimate_nbytes(long_text, config) == maps  # eval mode: dropped aliases weights, so an upper bound
    assert trace_nbytes(trace) <= estimate_nbytes(long_text, config) * 1.2
    assert estimate_nbytes("", config) == 0  # invalid text: run() raises, nothing to reserve

    one = trace_nbytes(trace)
    cache = TraceCache(max_bytes=int(2.5 * one))
    held_during_runs = []
    real_run = pipeline.run

    def watched_run(text, cfg):
        held_during_runs.append(cache.nbytes)
        return real_run(text, cfg)

    monkeypatch.setattr(pipeline, "run", watched_run)
    for seed in range(5):
        cache.get(long_text, replace(config, seed=seed))
    reserve = estimate_nbytes(long_text, config)
    assert held_during_runs[0] == 0 and all(held + reserve <= 2.5 * one for held in held_during_runs)
    assert len(cache) == 2  # after the run the cache fills up to its bound again


def test_trace_cache_prefetch_only_evicts_what_it_is_allowed_to():
    """A prefetch runs only if its trace fits after evicting the traces ``evictable`` allows, oldest first; a plan
    that cannot make room evicts nothing; after the run the real size must fit the same way, or it is not cached."""
    from attnviz.pipeline import TraceCache
    from attnviz.trace import trace_nbytes

    config = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=256)
    long_text = "word " * 300  # 256 tokens after truncation
    one = trace_nbytes(run(long_text, config))
    cache = TraceCache(max_bytes=int(2.5 * one))
    mine = lambda text, cfg: cfg.seed in (0, 1, 2)  # noqa: E731 — "this session's": seeds 0-2 stand for its layers
    seeds = lambda: [key[1].seed for key in cache._traces]  # noqa: E731 — oldest first
    other = cache.get(long_text, replace(config, seed=9))  # another session's input
    cache.get(long_text, replace(config, seed=0))
    first = cache.prefetch(long_text, replace(config, seed=1), one, mine)  # fits after evicting seed 0
    assert first.config.seed == 1 and seeds() == [9, 1] and cache.get(long_text, replace(config, seed=9)) is other
    misses = cache.misses
    assert cache.prefetch(long_text, replace(config, seed=1), one, mine) is first and cache.misses == misses
    assert cache.prefetch(long_text, replace(config, seed=5), one, lambda text, cfg: False) is None  # no room
    assert cache.misses == misses and seeds() == [1, 9]  # … and no run, nothing evicted (9 was read above)
    assert cache.prefetch(long_text, replace(config, seed=2), 1, lambda text, cfg: False) is None  # under-estimated:
    assert seeds() == [1, 9] and cache.misses == misses  # it ran, did not fit, was not cached; nothing evicted
    assert cache.prefetch(long_text, replace(config, seed=2), one, mine).config.seed == 2  # evicts 1, never 9
    assert seeds() == [9, 2]


def test_prefetching_a_layer_keeps_the_one_on_screen_and_every_other_inputs_trace(monkeypatch):
    """The Heads page's rule (``ui.cache.prefetch_trace``): to make room for the next layer only other layers of the
    same text and checkpoint are evicted — never the layer on screen nor another text's trace."""
    from attnviz import models
    from attnviz.pipeline import TraceCache
    from attnviz.trace import trace_nbytes
    from attnviz.ui import cache as ui_cache

    text, other_text = "The cat sat on the mat. " * 8, "A dog ran in the park. " * 8
    from attnviz.pipeline import settle

    layer = [settle(AttentionConfig(checkpoint=str(models.BUNDLED), layer=k))[0] for k in (0, 1)]  # as the page asks
    one = trace_nbytes(run(text, layer[0]))
    cache = TraceCache(max_bytes=int(2.5 * one))
    monkeypatch.setattr(ui_cache, "_trace_cache", lambda: cache)
    theirs = cache.get(other_text, layer[1])
    shown = cache.get(text, layer[0])
    held = lambda: [trace for trace, _ in cache._traces.values()]  # noqa: E731 — oldest first
    assert ui_cache.prefetch_trace(text, astuple(layer[1]), shown) is None  # room only by evicting shown or theirs
    assert held() == [theirs, shown]
    cache.max_bytes = int(3.5 * one)
    unmasked = cache.get(text, replace(layer[1], causal=False))  # this text and model, another view: not evictable
    assert ui_cache.prefetch_trace(text, astuple(layer[1]), shown) is None
    assert held() == [theirs, shown, unmasked]
    cache.max_bytes = int(4.5 * one)
    prefetched = ui_cache.prefetch_trace(text, astuple(layer[1]), shown)
    assert prefetched.config.layer == 1 and held() == [theirs, shown, unmasked, prefetched]


# ============================== trace cache: shared storage, in-flight runs ==============================


def test_trace_nbytes_counts_shared_storage_once():
    """In eval mode ``dropped`` is ``weights`` (the same tensor): its bytes count once."""
    from attnviz.trace import trace_nbytes

    trace = run(TEXT, small("mha"))
    arrays = [*trace.steps.values(), *trace.embeddings.values(), trace.output]
    assert np.shares_memory(trace.steps["dropped"], trace.steps["weights"])
    assert np.shares_memory(trace.output, trace.steps["output"])  # Trace.output is the recorded output
    shared = trace.steps["dropped"].nbytes + trace.output.nbytes
    assert trace_nbytes(trace) == sum(array.nbytes for array in arrays) - shared


def test_trace_nbytes_counts_separate_storage_fully():
    from attnviz.trace import trace_nbytes

    trace = run(TEXT, small("mha", dropout=0.5, train=True))  # dropout ran: dropped is a new tensor
    arrays = [*trace.steps.values(), *trace.embeddings.values(), trace.output]
    assert not np.shares_memory(trace.steps["dropped"], trace.steps["weights"])
    assert trace_nbytes(trace) == sum(array.nbytes for array in arrays) - trace.output.nbytes


def test_two_sessions_missing_the_same_key_compute_once(monkeypatch):
    import threading
    import time

    from attnviz.pipeline import TraceCache

    calls, real_run = [], pipeline.run

    def slow_run(text, config):
        calls.append(text)
        time.sleep(0.3)  # both sessions miss while the first one is still computing
        return real_run(text, config)

    monkeypatch.setattr(pipeline, "run", slow_run)
    cache, results = TraceCache(max_bytes=2**30), []
    threads = [threading.Thread(target=lambda: results.append(cache.get(TEXT, small()))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(results) == 4 and all(result is results[0] for result in results)
    assert cache.misses == 1


def test_a_failed_run_is_not_cached_and_every_waiter_sees_the_error(monkeypatch):
    import threading
    import time

    from attnviz.pipeline import TraceCache

    calls = []

    def failing_run(text, config):
        calls.append(text)
        time.sleep(0.2)
        raise torch.cuda.OutOfMemoryError("boom")

    monkeypatch.setattr(pipeline, "run", failing_run)
    cache, errors = TraceCache(max_bytes=2**30), []

    def get():
        try:
            cache.get(TEXT, small())
        except torch.cuda.OutOfMemoryError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=get) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(errors) == 3 and len(cache) == 0
    monkeypatch.setattr(pipeline, "run", run)
    assert cache.get(TEXT, small()).n > 0  # the next request runs again


def test_cache_key_is_the_prepared_text():
    """A paste longer than MAX_CHARS is stored under the text that was tokenized, so looking the Trace up
    again by its own text (what fragments and downloads keep) hits."""
    from attnviz.config import MAX_CHARS
    from attnviz.pipeline import TraceCache

    long_text = "word " * (MAX_CHARS // 5 + 2000)
    cache = TraceCache(max_bytes=2**30)
    trace = cache.get(long_text, small(context_length=64))
    assert len(trace.text) == MAX_CHARS
    assert cache.get(trace.text, small(context_length=64)) is trace
    assert cache.misses == 1


# ============================== the app path against the book's printouts ==============================


def test_book_preset_wrapper_is_exercise_3_2():
    """The sidebar's d_out is the total width, so the book preset's wrapper (d_out 2, 2 heads) has 1-dimensional
    heads: exercise 3.2's printout."""
    trace = run(JOURNEY, preset_config("book", variant="mha_wrapper"))
    assert trace.steps["context"].shape == (1, 2, 6, 1)
    assert np.allclose(trace.output[0], [
        [-0.5740, 0.2216], [-0.7320, 0.0155], [-0.7774, -0.0546],
        [-0.6979, -0.0817], [-0.6538, -0.0957], [-0.6424, -0.1065],
    ], atol=ATOL)


def test_app_dropped_stage_follows_the_books_dropout():
    """The book's causal weights (seed 789, as SelfAttention_v2) through the app in training mode with p = 0.5:
    ``dropped`` is exactly what the book's ``nn.Dropout(0.5)`` gives those weights from the same RNG state (the
    app draws right after creating the module, where the book re-seeds with 123: the pattern follows the state)."""
    config = preset_config("book", variant="causal", seed=789, dropout=0.5, train=True)
    trace = run(JOURNEY, config)
    weights = torch.from_numpy(trace.steps["weights"][0, 0].copy())
    assert np.allclose(weights, [  # the book's masked attn_weights, printed before its dropout example
        [1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000], [0.5517, 0.4483, 0.0000, 0.0000, 0.0000, 0.0000],
        [0.3800, 0.3097, 0.3103, 0.0000, 0.0000, 0.0000], [0.2758, 0.2460, 0.2462, 0.2319, 0.0000, 0.0000],
        [0.2175, 0.1983, 0.1984, 0.1888, 0.1971, 0.0000], [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529],
    ], atol=ATOL)
    torch.manual_seed(789)
    build_module(config)  # the draws the module's creation took
    expected = torch.nn.Dropout(0.5)(weights.unsqueeze(0))[0]  # the book's dropout(attn_weights), same state
    assert torch.equal(torch.from_numpy(trace.steps["dropped"][0, 0].copy()), expected)
    # and with the book's own re-seed, that call prints the book's dropout printout
    torch.manual_seed(123)
    assert np.allclose(torch.nn.Dropout(0.5)(weights), [
        [2.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000], [0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
        [0.7599, 0.6194, 0.6206, 0.0000, 0.0000, 0.0000], [0.0000, 0.4921, 0.4925, 0.0000, 0.0000, 0.0000],
        [0.0000, 0.3966, 0.0000, 0.3775, 0.0000, 0.0000], [0.0000, 0.3327, 0.3331, 0.3084, 0.3331, 0.0000],
    ], atol=ATOL)


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
