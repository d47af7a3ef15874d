"""The cost chart's SWA lines, for a model without a window, take one a learner expects for that model: the bonus
material's 1,024 (ch04/06_swa), at most a quarter of the model's context — never a window as long as the context or
longer, where a sliding window would save nothing.  A window that is given is kept as it is."""

from __future__ import annotations

import pytest

from attnviz import kv_cache


@pytest.mark.parametrize(("context_length", "window"), [
    (256, 64),  # the bundled model and the small random GPT
    (1024, 256),  # GPT-2, and the sidebar's sizes
    (4096, 1024), (131072, 1024),  # a long context: the bonus material's 1,024
    (3, 1), (1, 1),  # a window of one token at least
    (None, 1024),  # no context to fit: the bonus material's
])
def test_the_default_window_is_the_bonus_materials_at_most_a_quarter_of_the_context(context_length, window):
    assert kv_cache.default_window(context_length) == window


@pytest.mark.parametrize("context_length", [1, 2, 7, 48, 256, 1000, 1024, 2048, 32768, 163840])
def test_a_models_swa_lines_window_is_shorter_than_its_context(context_length):
    settings = kv_cache.variant_settings(emb_dim=128, n_heads=4, n_layers=2, context_length=context_length)
    for name in ("SWA", "SWA+GQA"):
        window = settings[name]["sliding_window_size"]
        assert 1 <= window <= max(1, context_length // 4), (name, window)
        assert settings[name]["swa_ratio"] == "5:1"
    # where a window saves anything, the line at the model's context is below MHA's
    if context_length >= 4:
        swa = kv_cache.kv_cache_bytes(context_length=context_length, **settings["SWA"])
        assert swa < kv_cache.kv_cache_bytes(context_length=context_length, **settings["MHA"])


@pytest.mark.parametrize("window", [1, 8, 100, 256])
def test_a_given_window_is_kept_as_it_is(window):
    settings = kv_cache.variant_settings(emb_dim=128, n_heads=4, n_layers=2, context_length=256,
                                         sliding_window_size=window, swa_ratio="1:0")
    assert settings["SWA"]["sliding_window_size"] == settings["SWA+GQA"]["sliding_window_size"] == window
    assert settings["SWA"]["swa_ratio"] == "1:0"


def test_the_label_names_the_window_the_line_draws():
    settings = kv_cache.variant_settings(emb_dim=128, n_heads=2, n_layers=2, context_length=256)
    assert kv_cache.describe("SWA", settings["SWA"]) == "SWA (2 K/V heads × 64, window 64 on both layers)"
