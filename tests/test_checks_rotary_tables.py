"""Rotary tables built for the model's width and used per head (tests/helpers/user_modules.py's RotaryTablesForDModel
and RotaryTiledBeforeTheSplit): what each module computes, written here with rotary's formula independently, and
what ``rotary-placement`` says of it.  Tables whose frequencies are those of width d_model — inv_freq with d_model in
the exponent's denominator, or d_model's cos and sin sliced to head_dim — are a port's bug (a checkpoint trained with
head_dim's frequencies gets other positions) and fail, named; tables that give head_dim's own angles pass."""

import math

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks

RULE = "rotary-placement"
ON = "on one token repeated at 8 positions"
PASSES = (f"{ON} every score depends only on the distance i − j and no value is turned by its position: rotary on "
          "the queries and keys only")
FIX = "build inv_freq = 1 / base ** (torch.arange(0, head_dim, 2) / head_dim)"


def rotated(rows: torch.Tensor, base: float, width: int, layout: str) -> torch.Tensor:
    """Rotary's formula, one feature at a time: (n, d) rows, row p at position p, each feature f turned with its
    partner by p·θ_i, θ_i = base^(−2i/width).  ``layout``: "halves" (f with f + d/2, i = f mod d/2: rotate_half),
    "neighbours" (2i with 2i + 1: view_as_complex), "own" (rotate_half's partner, but i = f: every feature its own
    frequency, the first d columns of a table d_model wide)."""
    n, d = rows.shape
    out = torch.empty(n, d, dtype=torch.float64)
    for p in range(n):
        for f in range(d):
            if layout == "neighbours":
                i, partner, sign = f // 2, f ^ 1, -1.0 if f % 2 == 0 else 1.0
            else:
                partner, sign = (f + d // 2, -1.0) if f < d // 2 else (f - d // 2, 1.0)
                i = f % (d // 2) if layout == "halves" else f
            angle = p * base ** (-2 * i / width)
            out[p, f] = rows[p, f] * math.cos(angle) + sign * rows[p, partner] * math.sin(angle)
    return out


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval())}


def built(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs).eval()


@pytest.mark.parametrize(("tables", "layout", "width"), [
    ("sliced", "own", 32), ("exponent", "halves", 32), ("complex", "neighbours", 32), ("tiled", "halves", 8)])
def test_what_each_table_turns_q_by(tables, layout, width):
    """d_model's tables sliced to head_dim turn by d_model's frequencies (in rotate_half's layout, each feature by its
    own, which is no rotation); head_dim's tables repeated for every head and sliced are head_dim's own."""
    module = built(um.RotaryTablesForDModel, tables=tables)
    q = torch.randn(1, 1, 8, 8)  # (b, h, n, hd)
    turned = module.rope(q)[0, 0].double()  # (n, hd)
    assert torch.allclose(turned, rotated(q[0, 0], 10_000.0, width, layout), atol=1e-5)
    right = rotated(q[0, 0], 10_000.0, 8, "neighbours" if tables == "complex" else "halves")  # head_dim's table
    assert torch.allclose(turned, right, atol=1e-5) == (tables == "tiled")


def test_tiled_tables_before_the_split_turn_each_head_as_after_it():
    module = built(um.RotaryTiledBeforeTheSplit)
    q = torch.randn(1, 8, 32)  # (b, n, d_model)
    heads = module.rope(q)[0].view(8, 4, 8).transpose(0, 1)  # (n, d_model) -> (h, n, hd)
    for head in range(4):
        expected = rotated(q[0].view(8, 4, 8)[:, head], 10_000.0, 8, "halves")  # (n, hd)
        assert torch.allclose(heads[head].double(), expected, atol=1e-5)


@pytest.mark.parametrize("base", [10_000.0, 500_000.0])
@pytest.mark.parametrize("tables", ["exponent", "complex"])
def test_a_rotation_with_d_models_frequencies_fails_naming_the_width(tables, base):
    """Each pair is turned, and the scores depend only on i − j — with other frequencies than the model's."""
    results = verdicts(built(um.RotaryTablesForDModel, tables=tables, base=base))
    assert {rule for rule, check in results.items() if check.status == "fail"} == {RULE}, results
    evidence = results[RULE].evidence
    assert evidence.startswith("q and k are turned by the frequencies of width 32 (d_model), not of head_dim = 8: "
                               f"{ON} the queries turn by θ_i = {base:g}^(−2i/32) ("), evidence
    assert f"where head_dim's table turns them by θ_i = {base:g}^(−2i/8)" in evidence
    assert evidence.endswith(FIX), evidence


def test_d_models_tables_sliced_to_head_dim_fail_naming_the_width():
    """In rotate_half's layout the first head_dim columns of d_model's tables turn features i and i + 4 by different
    angles: no rotation, so the scores move along their diagonal — not a position embedding inside the module."""
    results = verdicts(built(um.RotaryTablesForDModel, tables="sliced"))
    assert {rule for rule, check in results.items() if check.status == "fail"} == {RULE}, results
    evidence = results[RULE].evidence
    assert evidence.startswith("scores depend on the positions, not only on the distance i − j: q and k are turned "
                               "by cos and sin built for width 32 (d_model) and sliced to head_dim = 8 — each feature "
                               "i of a head by its own frequency, θ_i = 10000^(−2i/32), where rotate_half turns "
                               "features i and i + 4 together by θ_i = 10000^(−2i/8)"), evidence
    assert f"{ON}, head " in evidence and "the same distance" in evidence
    assert evidence.endswith(FIX), evidence


@pytest.mark.parametrize("module", [
    lambda: built(um.RotaryTablesForDModel, tables="tiled"),
    lambda: built(um.RotaryTiledBeforeTheSplit, pairs="per-head"),
], ids=["tiled-sliced-per-head", "tiled-before-the-split"])
def test_tables_that_give_head_dims_own_angles_pass(module):
    results = verdicts(module())
    assert [check for check in results.values() if check.status == "fail"] == []
    assert results[RULE] == checks.Check(RULE, "pass", PASSES)


def test_head_dims_tables_over_the_full_width_are_named_as_such_not_as_d_models():
    evidence = verdicts(built(um.RotaryTiledBeforeTheSplit, pairs="full-width"))[RULE].evidence
    assert ("(rotary applied to the whole d_model-wide q and k before the split into heads: its cos and sin are "
            "head_dim's, repeated for each head, but rotate_half over the full width pairs feature i with "
            "i + d_model/2, in another head)") in evidence, evidence
    assert "built for d_model" not in evidence
