"""Rotary found where it hides, widths that coincide, and what follows the rotation (tests/helpers/user_modules.py):
``rotary-placement`` reads rotary in a submodule's forward (GPT-J's attention inside a block), passes a correct
rotary whose table's width happens to equal d_model (a partial rotary's rotated width, a head_dim table of an
uncommon base), fails a norm applied after the rotation, and ``mask-convention`` reads no window off a layer that says
it is global."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks

RULE = "rotary-placement"
ON = "on one token repeated at 8 positions"
PASSES = (f"{ON} every score depends only on the distance i − j and no value is turned by its position: rotary on "
          "the queries and keys only")


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval())}


def built(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs).eval()


def test_rotary_in_a_submodules_forward_is_checked():
    """The block's own forward names nothing of rotary's; its attention submodule rotates in its forward."""
    assert verdicts(built(um.WrapsInnerAttention))[RULE] == checks.Check(RULE, "pass", PASSES)


def test_transformers_gptj_attention_is_checked_as_rotary():
    pytest.importorskip("transformers")
    assert verdicts(built(um.GPTJLayer))[RULE] == checks.Check(RULE, "pass", PASSES)


@pytest.mark.parametrize("keep_width", [True, False], ids=["rotary_ndims-kept", "width-measured"])
def test_a_partial_rotary_whose_width_equals_d_model_passes(keep_width):
    """rotary_pct 0.5 of head_dim 32 is 16 features, turned by a table of width 16 — which is d_in too."""
    results = verdicts(built(um.NeoXPartialRotary, keep_width=keep_width))
    assert results[RULE] == checks.Check(RULE, "pass", PASSES), results[RULE]


@pytest.mark.parametrize("keep_base", [True, False], ids=["theta-kept", "base-not-kept"])
def test_an_uncommon_base_over_head_dim_passes(keep_base):
    """Base 1000 over head_dim 16 turns by the same frequencies as 1e6 over d_model 32: the kept base decides, and
    without one the two explanations are equal — no failure."""
    results = verdicts(built(um.RotaryOwnBase, keep_base=keep_base))
    assert results[RULE] == checks.Check(RULE, "pass", PASSES), results[RULE]


def test_a_d_model_table_still_fails_when_its_base_is_kept():
    """The same frequencies with the base kept as 1e6 are d_model's: the kept base says which width they are of."""
    module = built(um.RotaryOwnBase, theta=1000.0)
    module.theta = 1_000_000.0  # the module says 1e6: its tables are then 1e6 over 32 features, not head_dim's 16
    check = verdicts(module)[RULE]
    assert check.status == "fail" and "frequencies of width 32 (d_model), not of head_dim = 16" in check.evidence


def test_a_norm_after_the_rotation_fails_naming_it():
    assert verdicts(built(um.QKNormRotary))[RULE] == checks.Check(RULE, "pass", PASSES)
    check = verdicts(built(um.QKNormRotary, norm_after_rope=True))[RULE]
    assert check.status == "fail", check
    assert check.evidence.startswith("scores depend on the positions, not only on the distance i − j, though the "
                                     "module rotates: every feature of the queries and keys turns by rotary's "
                                     "frequencies (1, 0.1778, 0.03162 … radians a position), but the rotation pairs "
                                     "do not keep their lengths — something after the rotation (a norm, a "
                                     f"projection) breaks relative positions — {ON}, head "), check.evidence
    assert check.evidence.endswith("apply norms and projections to q and k before rotary, and rotate last"), check


def test_a_global_layer_that_keeps_a_window_it_does_not_use_passes():
    results = verdicts(built(um.KindLayer))
    assert results["mask-convention"] == checks.Check(
        "mask-convention", "pass", "the hidden cells are exactly the future (above the diagonal)"), results
    local = verdicts(built(um.KindLayer, local=True))["mask-convention"]
    assert local.status == "pass", local  # the window read and checked, not "… window of 4 was not exercised"
    assert local.evidence.startswith("sliding window W = 4: the hidden cells are the future and the keys 4 or more "
                                     "behind"), local
    forgot = verdicts(built(um.KindLayer, local=True, forget_window=True))["mask-convention"]
    assert forgot.status == "fail" and "window is 4" in forgot.evidence, forgot
