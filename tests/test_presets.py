"""Presets: the book preset reproduces the book's printed tensors (Chapter 3 and its exercises, dropout
included) through the app's own path; GPT-2 presets have GPT-2's sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.book import BOOK_EXERCISE_3_2
from helpers.runs import ATOL, JOURNEY, upper_mask

from attnviz import attention, embedding
from attnviz.config import AttentionConfig, ConfigError, preset_config
from attnviz.pipeline import run
from attnviz.producers.book import build_module
from attnviz.urlstate import config_from_settings, link_settings

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


BOOK_WRAPPER = [  # 3.6.1: MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2) after torch.manual_seed(123)
    [-0.4519, 0.2216, 0.4772, 0.1063], [-0.5874, 0.0058, 0.5891, 0.3257], [-0.6300, -0.0632, 0.6202, 0.3860],
    [-0.5675, -0.0843, 0.5478, 0.3589], [-0.5526, -0.0981, 0.5321, 0.3428], [-0.5299, -0.1081, 0.5077, 0.3493],
]


def test_book_preset_wrapper_runs_its_listings_d_out_per_head_and_prints_the_books_tensor():
    """The book's wrapper takes d_out per head: its listing's d_out = 2 with 2 heads is an output 4 wide, and the
    book size gives it that (AttentionConfig.d_out is the total width: 2 heads × 2)."""
    config = preset_config("book", variant="mha_wrapper")
    assert (config.d_out, config.num_heads, config.head_dim) == (4, 2, 2)
    trace = run(JOURNEY, config)
    assert trace.output.shape == (1, 6, 4)
    assert np.allclose(trace.output[0], BOOK_WRAPPER, atol=ATOL)


def test_the_book_size_of_a_link_runs_the_wrappers_listing():
    """``?variant=mha_wrapper&preset=book``: the sidebar's d_out is the listing's total (4), the size stays the
    book's, and the run prints the book's 3.6.1 tensor; with ``d_out=2`` it stays the book's too, exercise 3.2."""
    values = link_settings({"variant": "mha_wrapper", "preset": "book"})
    assert (values["preset"], values["d_in"], values["d_out"], values["num_heads"]) == ("book", 3, 4, 2)
    trace = run(JOURNEY, config_from_settings(values))
    assert np.allclose(trace.output[0], BOOK_WRAPPER, atol=ATOL)
    mha = link_settings({"variant": "mha", "preset": "book"})  # MHA's listing: d_out = 2 in all
    assert (mha["preset"], mha["d_out"], mha["num_heads"]) == ("book", 2, 2)
    exercise = link_settings({"variant": "mha_wrapper", "preset": "book", "d_out": "2"})  # exercise 3.2: the book's
    assert (exercise["preset"], exercise["d_out"], exercise["num_heads"]) == ("book", 2, 2)
    assert np.allclose(run(JOURNEY, config_from_settings(exercise)).output[0], BOOK_EXERCISE_3_2, atol=ATOL)
    assert link_settings({"variant": "mha_wrapper", "preset": "book", "d_out": "6"})["preset"] == "custom"
    assert link_settings({"variant": "mha", "preset": "book", "d_out": "4"})["preset"] == "custom"


BOOK_V1 = [[0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203], [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040]]
BOOK_V2 = [[-0.0739, 0.0713], [-0.0748, 0.0703], [-0.0749, 0.0702], [-0.0760, 0.0685], [-0.0763, 0.0679],
           [-0.0754, 0.0693]]
BOOK_SIMPLE = [[0.4421, 0.5931, 0.5790], [0.4419, 0.6515, 0.5683], [0.4431, 0.6496, 0.5671],
               [0.4304, 0.6298, 0.5510], [0.4671, 0.5910, 0.5266], [0.4177, 0.6503, 0.5645]]
BOOK_NON_CAUSAL = [("self_attention_v1", 123, BOOK_V1), ("self_attention_v2", 789, BOOK_V2),
                   ("simplified", 123, BOOK_SIMPLE)]


@pytest.mark.parametrize(("variant", "seed", "expected"), BOOK_NON_CAUSAL)
def test_book_preset_non_causal_variants_reproduce_the_book_without_the_mask(variant, seed, expected):
    trace = run(JOURNEY, preset_config("book", variant=variant, seed=seed, causal=False))
    assert np.allclose(trace.output[0], expected, atol=ATOL)


@pytest.mark.parametrize(("variant", "seed", "expected"), BOOK_NON_CAUSAL)
def test_book_preset_reproduces_the_book_for_non_causal_variants_by_default(variant, seed, expected):
    """No seed given: the book preset picks the seed of the class's listing (SelfAttention_v2: 789)."""
    config = preset_config("book", variant=variant)
    assert config.seed == seed
    trace = run(JOURNEY, config)
    assert np.allclose(trace.output[0], expected, atol=ATOL)


@pytest.mark.parametrize(("variant", "seed"), [("self_attention_v1", 123), ("self_attention_v2", 789),
                                               ("causal", 123), ("mha_wrapper", 123), ("mha", 123)])
def test_book_preset_picks_each_classs_book_seed_and_a_given_seed_wins(variant, seed):
    assert preset_config("book", variant=variant).seed == seed
    assert preset_config("book", variant=variant, seed=5).seed == 5
    assert preset_config("gpt2-small", variant=variant).seed == 123  # only the book size is the book's example


def test_the_book_size_of_a_link_runs_self_attention_v2_with_the_books_seed():
    """``?variant=self_attention_v2&preset=book``: the book's printed v2 output, as the book's listing seeds it."""
    values = link_settings({"variant": "self_attention_v2", "preset": "book"})
    assert values["seed"] == 789
    trace = run(JOURNEY, config_from_settings(values))
    assert np.allclose(trace.output[0], BOOK_V2, atol=ATOL)
    own = link_settings({"variant": "self_attention_v2", "preset": "book", "seed": "123"})
    assert own["seed"] == 123  # a seed the link gives is its own


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


# ============================== the app path against the book's printouts ==============================


def test_book_preset_wrapper_two_wide_is_exercise_3_2():
    """d_out is the total width, so the book preset's wrapper asked for d_out 2 with 2 heads has 1-dimensional
    heads: exercise 3.2's printout."""
    trace = run(JOURNEY, preset_config("book", variant="mha_wrapper", d_out=2))
    assert trace.steps["context"].shape == (1, 2, 6, 1)
    assert np.allclose(trace.output[0], BOOK_EXERCISE_3_2, atol=ATOL)


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
