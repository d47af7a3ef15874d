"""Small configs and Trace comparisons the run tests share."""

from __future__ import annotations

import numpy as np

from attnviz import embedding, variants
from attnviz.config import AttentionConfig
from attnviz.trace import Trace

JOURNEY = embedding.JOURNEY_TEXT
TEXT = "Attention lets every token look back at the tokens before it."
ATOL = 1e-4


def setting_notes(notes) -> tuple[str, ...]:
    """A run's notes on its settings: all but the note that a book listing without a mask (3.3, 3.4) runs masked
    (``variants.added_mask_note``, which tests of its own check)."""
    return tuple(note for note in notes if not variants.is_added_mask_note(note))


def small(variant: str = "mha", **overrides) -> AttentionConfig:
    """A small config for invariants: d 8, 2 heads where the variant has heads (a single-head class one: its run
    ignores nothing it is given)."""
    values = {"variant": variant, "d_in": 8, "d_out": 8, "num_heads": 2, "context_length": 64, "device": "cpu"}
    if variant in variants.VARIANTS:  # else the config's validation names the unknown variant
        spec = variants.get(variant)
        values.update(d_out=spec.out_width(8, 8), num_heads=spec.head_count(2))
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
