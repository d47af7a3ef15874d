"""The producer of a listed user module: a module whose run cannot be drawn is one ConfigError, before any page
draws it — weights that are not (…, n, n), an output that is not (batch, n, d_out), weights that are not finite."""

from pathlib import Path

import numpy as np
import pytest
from helpers import user_modules as um

from attnviz import pipeline, user_code
from attnviz.config import AttentionConfig, ConfigError, InputError
from attnviz.producers import user_module

MODULES = Path(um.__file__)
TEXT = "Your journey starts with one step"  # 6 tokens


def config_of(class_name: str) -> AttentionConfig:
    label = user_code.register(f"{MODULES}:{class_name}")
    return AttentionConfig(module=label, d_in=32, d_out=16, num_heads=1, context_length=64)


@pytest.mark.parametrize(("class_name", "message"), [
    ("SoftmaxOverFeatures", r"attention weights must have shape \(\.\.\., n, n\).*: \(\.\.\., 4, 4\) for an input "
                            r"of shape \(1, 4, 32\); the softmax on line \d+ gives \(1, 4, 16\)"),
    ("ReturnsTransposed", r"the forward returned shape \(1, 16, 4\) for an input of shape \(1, 4, 32\)"),
    ("NaNScores", r"6 of 6 rows of the attention weights hold NaN or ∞: every query\. .* so they are not drawn\.$"),
])
def test_a_module_whose_run_cannot_be_drawn_is_one_config_error(class_name, message):
    config = config_of(class_name)
    with pytest.raises(ConfigError, match=message) as caught:
        pipeline.run(TEXT, config)
    assert str(caught.value).startswith(f"Your module: {class_name}: ")
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, InputError)  # what every page shows as a message


@pytest.mark.parametrize("class_name", ["SequenceFirst", "MHAWithoutBatchFirst"])
def test_a_layout_error_found_on_the_first_try_says_whose_input_it_quotes(class_name):
    """The app tries a module on 4 tokens of its own to learn its sizes, before the text's 6: a message quoting that
    input's shape says it is attnviz's, not "your (1, 4, 32) input" (the QA's SeqFirst, on the 6-token default)."""
    config = config_of(class_name)
    with pytest.raises(ConfigError) as caught:
        pipeline.run(TEXT, config)
    message = str(caught.value)
    assert "has batch_first=False, so it reads the (1, 4, 32) input attnviz tries it on first as 1 token × 4 items, " \
           "and your text the same way: build it with batch_first=True (or pass it (n, batch, d))" in message
    assert "your (1, 4" not in message


def test_weights_that_are_not_finite_name_their_rows_and_keep_the_run_for_the_check():
    """SDPA handed masked_fill's mask keeps only later keys: the last query keeps none, in every head."""
    label = user_code.register(f"{MODULES}:InvertedSDPAMask")
    config = AttentionConfig(module=label, d_in=16, d_out=16, num_heads=4, context_length=64)
    message = r": 4 of 24 rows of the attention weights hold NaN or ∞: query 5, in every head\. A mask hides"
    with pytest.raises(user_module.NonFiniteWeightsError, match=message) as caught:
        pipeline.run(TEXT, config)
    weights = caught.value.trace.steps["weights"]  # (1, 4, 6, 6)
    assert np.isnan(weights[0, :, 5]).all() and np.isfinite(weights[0, :, :5]).all()


def test_the_induction_labs_token_ids_get_the_same_error():
    with pytest.raises(ConfigError, match="hold NaN"):
        pipeline.run_ids(list(range(1000, 1011)), config_of("NaNScores"))


def test_a_module_that_drops_the_batch_still_draws_a_batch_of_one():
    trace = pipeline.run(TEXT, config_of("DropsTheBatch"))
    assert trace.steps["weights"].shape == (1, 1, 6, 6) and trace.output.shape == (1, 6, 16)
