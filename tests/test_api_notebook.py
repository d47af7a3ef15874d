"""What a student meets calling attnviz from a notebook, as docs/api.md shows it: the book's printed numbers, yes/no
settings, map titles that agree with the checks, short printouts, paths with ``~``, and step indexes."""

import numpy as np
import pytest

import attnviz
from attnviz import AttentionConfig

JOURNEY = "Your journey starts with one step"


@pytest.mark.parametrize(("variant", "section", "seed"), [("simplified", "3.3", 123),
                                                          ("self_attention_v1", "3.4.2", 123),
                                                          ("self_attention_v2", "3.4.2", 789)])
def test_a_book_class_masked_by_default_says_how_to_get_the_books_numbers(variant, section, seed):
    masked = attnviz.run(JOURNEY, AttentionConfig(variant=variant, d_in=3, d_out=2, embedding="book"))
    [note] = [note for note in masked.notes if "causal mask" in note]
    assert f"book's {section} listing has no causal mask" in note
    assert "causal=False" in note
    assert (f"seed={seed}" in note) == (seed != 123)  # v2's listing seeds 789
    as_printed = attnviz.run(JOURNEY, AttentionConfig(variant=variant, d_in=3, d_out=2, embedding="book",
                                                      causal=False, seed=seed))
    assert not [note for note in as_printed.notes if "causal mask" in note]
    printed = {"simplified": ("weights", [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),  # the book's row 1
               "self_attention_v1": ("context", [0.2996, 0.8053]),  # the book's row 0
               "self_attention_v2": ("context", [-0.0739, 0.0713])}
    stage, row = printed[variant]
    values = as_printed.steps[stage][0, 0, 1] if stage == "weights" else as_printed.steps[stage][0, 0]
    np.testing.assert_allclose(values, row, atol=1e-4)


@pytest.mark.parametrize("variant", ["causal", "mha_wrapper", "mha"])
def test_a_book_class_that_masks_gets_no_such_note(variant):
    trace = attnviz.run(JOURNEY, AttentionConfig(variant=variant, d_in=8, d_out=8, num_heads=2))
    assert not [note for note in trace.notes if "causal mask" in note]
