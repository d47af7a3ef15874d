"""Rotary found where it hides, widths that coincide, and what follows the rotation (tests/helpers/user_modules.py):
``rotary-placement`` reads rotary in a submodule's forward (GPT-J's attention inside a block), passes a correct
rotary whose table's width happens to equal d_model (a partial rotary's rotated width, a head_dim table of an
uncommon base — whose PASS line says which base and width it took when the module keeps no base and was built with
none attnviz knows, and which fails as d_model's when the base it was built with says so), fails a norm applied after
the rotation, and ``mask-convention`` reads no window off a layer that says it is global."""

from pathlib import Path

import pytest
import torch
from helpers import user_modules as um
from helpers.check_table import cli_table

import attnviz
from attnviz import checks

RULE = "rotary-placement"
ON = "on one token repeated at 8 positions"
PASSES = (f"{ON} every score depends only on the distance i − j and no value is turned by its position: rotary on "
          "the queries and keys only")


HELPERS = Path(__file__).parent / "helpers" / "user_modules.py"


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


ASSUMED = (" — its queries turn by θ_i = 1000^(−2i/16): head_dim's table (16) at base 1,000, or, by the same "
           "frequencies, a table built for d_model (32) at base 1,000,000, a bug; the module keeps no rotary base "
           "under a name attnviz reads (rope_theta, rope_base, theta …) and was built with none attnviz knows, so the "
           "check takes it as head_dim's at base 1,000 — if it was built with another, tell the checker: "
           "check_module(module, sizes={\"rope_base\": …}) in Python, or, for attnviz check, keep the base "
           "(self.rope_base = …) or take it as a constructor argument named rope_theta or base, to have the table's "
           "width checked")


@pytest.mark.parametrize("keep_base", [True, False], ids=["theta-kept", "base-not-kept"])
def test_an_uncommon_base_over_head_dim_passes(keep_base):
    """Base 1000 over head_dim 16 turns by the same frequencies as 1e6 over d_model 32: the kept base decides, and
    without one the two explanations are equal — no failure, and the PASS line says which it took."""
    results = verdicts(built(um.RotaryOwnBase, keep_base=keep_base))
    assert results[RULE] == checks.Check(RULE, "pass", PASSES + ("" if keep_base else ASSUMED)), results[RULE]


def test_a_base_kept_under_a_name_attnviz_does_not_read_is_said_assumed_and_sizes_tell_it():
    """In a notebook, check_module cannot know rope_freq_base (kept as self.freq_base): the PASS line says which base
    it took and that sizes={"rope_base": …} tells it; told, the table is checked against that base (a wrong one fails:
    test_d_models_table_fails_when_the_base_it_was_built_with_is_known)."""
    module = built(um.RotaryFreqBase)
    alone = {c.rule: c for c in attnviz.check_module(module, rules=(RULE,))}[RULE]
    assert alone == checks.Check(RULE, "pass", PASSES + ASSUMED), alone
    told = {c.rule: c for c in attnviz.check_module(module, rules=(RULE,), sizes={"rope_base": 1000.0})}[RULE]
    assert told == checks.Check(RULE, "pass", PASSES), told


@pytest.mark.slow  # every rule, from the command line
def test_the_command_line_says_the_base_it_assumed_for_a_constructor_argument_it_does_not_read():
    status, table = cli_table(f"{HELPERS}:RotaryFreqBase")
    assert status == 0 and f"rotary-placement PASS {PASSES}{ASSUMED} dropout-placement" in table, table


@pytest.mark.parametrize("tables", ["exponent", "complex"])
def test_d_models_table_at_a_usual_base_that_is_head_dims_at_another_passes_saying_what_it_took(tables):
    """d_model = 2 × head_dim at base 1e6, the base kept nowhere and not known from how it was built: a table built
    for d_model turns by head_dim's frequencies at base 1000, and the frequencies cannot tell them apart."""
    results = verdicts(built(um.RotaryTablesForDModel, d_model=32, n_heads=2, tables=tables, base=1_000_000.0))
    assert results[RULE] == checks.Check(RULE, "pass", PASSES + ASSUMED), results[RULE]


@pytest.mark.parametrize("tables", ["exponent", "complex"])
def test_d_models_table_fails_when_the_base_it_was_built_with_is_known(tables):
    """The constructor's base, which it keeps nowhere, is the one it was built with: check_module's sizes say it
    (attnviz check passes the constructor's arguments, its defaults included)."""
    module = built(um.RotaryTablesForDModel, d_model=32, n_heads=2, tables=tables, base=1_000_000.0)
    check = {c.rule: c for c in checks.check_module(module, rules=(RULE,), sizes={"base": 1_000_000.0})}[RULE]
    assert check.status == "fail", check
    assert check.evidence.startswith("q and k are turned by the frequencies of width 32 (d_model), not of head_dim = "
                                     f"16: {ON} the queries turn by θ_i = 1e+06^(−2i/32)"), check.evidence
    status, table = cli_table(f"{HELPERS}:RotaryTablesForDModel", "--d-in", 32, "--num-heads", 2, "--set",
                              f"tables={tables}", "--set", "base=1000000")
    assert status == 1 and "rotary-placement FAIL q and k are turned by the frequencies of width 32 (d_model)" \
        in table, table


def test_head_dims_own_table_at_the_uncommon_base_it_was_built_with_passes_plainly():
    """The same frequencies from a right table of base 1000: the base it was built with says they are head_dim's."""
    module = built(um.RotaryTablesForDModel, d_model=32, n_heads=2, tables="head_dim", base=1000.0)
    check = {c.rule: c for c in checks.check_module(module, rules=(RULE,), sizes={"base": 1000.0})}[RULE]
    assert check == checks.Check(RULE, "pass", PASSES), check
    status, table = cli_table(f"{HELPERS}:RotaryTablesForDModel", "--d-in", 32, "--num-heads", 2, "--set",
                              "tables=head_dim", "--set", "base=1000")
    assert status == 0 and f"rotary-placement PASS {PASSES} dropout-placement" in table, table


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


@pytest.mark.slow  # four whole checks: the slow tier
@pytest.mark.parametrize(("table", "features", "fix"), [
    ("half", "feature i and i + d/2, the layout of a table built with torch.cat([angles, angles], dim=-1)",
     "rotate with rotate_half"),
    ("interleaved", "feature 2i and 2i + 1, the layout of a table built with angles.repeat_interleave(2, dim=-1)",
     "rotate the pairs x[..., ::2], x[..., 1::2]"),
], ids=["half-table", "interleaved-table"])
def test_a_rotation_that_pairs_other_features_than_its_table_fails_naming_the_tables_layout(table, features, fix):
    """rotate_half with an interleaved table, or interleaved pairs with a half-split one, fails naming the features
    that turn by one angle and the fix for the table's layout, not "something after the rotation (a norm, a
    projection)"; a rotation that pairs its table's features passes."""
    for rotation in ("half", "interleaved"):
        check = {c.rule: c for c in checks.check_module(built(um.RotaryLayouts, table=table, rotation=rotation),
                                                         rules=(RULE,))}[RULE]
        if rotation == table:
            assert check == checks.Check(RULE, "pass", PASSES), check
            continue
        assert check.status == "fail" and check.evidence.startswith(
            "scores depend on the positions, not only on the distance i − j: the features that turn by one angle are "
            f"{features}"), check
        assert "the rotation turns other features together" in check.evidence and fix in check.evidence, check
        assert "a norm" not in check.evidence


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
