"""Checks that rotary turns the queries and keys only, by head_dim's frequencies: the ``rotary-placement`` rule of
:mod:`attnviz.checks`.

A rotary module (by the names it holds and calls) is traced once more on one token repeated at every position, and
passes when:

* every score QKᵀ depends only on i − j, not on the query's or the key's position: rotary on the queries only, or
  the keys only, fails only when one of them is that token turned by its position, or, their heads side by side,
  over the full width (rotary applied before the split into heads);
* q is turned by head_dim's frequencies, not those of a table as wide as d_model (inv_freq with d_model in the
  exponent's denominator, d_model's cos and sin sliced to head_dim);
* no value is that token turned by its position (rotary on V; values that differ otherwise, a position embedding,
  are not rotary's).

A module not rotary by its names, or in which nothing turns by position, skips it.  A failure names its cause where
the tokens show it — among them a rotation that turns other features together than its table's angles pair
(``rotate_half`` with an interleaved table, or the reverse: :func:`_unpaired_layout`).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from attnviz import tracing
from attnviz.declarations import NUMBER_SETTINGS, config_setting
from attnviz.rule_base import Check, per_query_head


def rotary_placement(module: nn.Module, x: torch.Tensor, built_base: float | None = None) -> Check:
    """On one token repeated at n positions (:func:`_one_token_repeated`), rotary on Q and K only makes every score
    QKᵀ (from the recorded Q and K, per query head) a function of i − j and leaves every value the same.  A score that
    moves along a diagonal fails when Q or K is that token's vector turned by its position (:func:`_turned`), the
    other turned too or the same everywhere (:func:`_rotated_side`); a value so turned is rotary on V.  Of a score
    that moves while no head's Q or K is so turned, Q or K turned with its heads side by side — pairs that cross heads
    (:func:`_turned_across_heads`) — fails: rotary applied before the split into heads.  Queries turned by the
    frequencies of a table as wide as d_model, not head_dim (:func:`_wrong_table`) fail too: as a rotation whose
    scores depend only on i − j (inv_freq with d_model in the exponent's denominator), or, each feature turned by its
    own frequency, as scores that move (d_model's rotate_half tables sliced to head_dim).  Positions that enter
    otherwise (an embedding added inside the module) are not rotary's to name: no failure.  ``built_base``: the
    rotary base the module was built with (``check_module``'s ``sizes``: its constructor's ``rope_theta``, ``base`` …),
    read where it keeps none; with no base anywhere, a table that is head_dim's at a base a module may choose and
    d_model's at a usual one passes, and the PASS line says which it took (:func:`_assumed_words`)."""
    rule = "rotary-placement"
    if not uses_rotary(module):
        return Check(rule, "skip", NOT_ROTARY)
    n = rotary_tokens(module, x)
    if n < 2:
        return Check(rule, "skip", "1 token: no distance i − j to compare — check 2 or more tokens")
    attention = tracing.combine(tracing.record(module, _one_token_repeated(x, n)).attentions)
    stages = (attention.queries, attention.keys, attention.values)
    if any(stage is None or stage.shape[-2] != n for stage in stages):
        return Check(rule, "skip", "the module's Q, K and V could not be identified on one token repeated")
    queries, keys, values = (stage[0].float() for stage in stages)  # (h, n, d), (g, n, d), (g, n, dv)
    on = f"on one token repeated at {n} positions"
    unfinished = next((name for name, stage in zip(("queries", "keys", "values"), (queries, keys, values))
                       if not torch.isfinite(stage).all()), None)
    if unfinished is not None:  # NaN equals nothing: every score would seem to move
        return Check(rule, "skip", f"not checked: {on} the {unfinished} hold NaN or ∞, and NaN equals nothing, "
                                   "so how they turn with position cannot be seen — fix that, then check again")
    scores = queries @ per_query_head(keys[None], queries[None])[0].transpose(-2, -1)  # (h, n, d) @ (h, d, n)
    moved = _moved_along_diagonal(scores)  # (head, query, key) or None
    side = None if moved is None else _rotated_side(queries, keys)
    findings = [] if side is None else [_diagonal_words(scores, moved, side, on)]
    if (turned := _turned(values)) is not None:
        findings.append(_values_words(turned, values.shape[0] < queries.shape[0], values.shape[0] > 1,
                                      "" if findings else on))
    if moved is not None and not findings and (across := _turned_across_heads(queries, keys)):
        tiled = _table(_side_by_side(queries), module, (queries.shape[-1],))
        findings.append(_across_heads_words(scores, moved, across, on, tiled is not None))
    assumed = ""
    if not findings and (table := _wrong_table(queries, module, x.shape[-1], built_base)) is not None:
        if table.assumed is not None:  # head_dim's at a base a module may choose, or d_model's at a usual one
            assumed = _assumed_words(table, queries.shape[-1])
        elif moved is None:  # a rotation, with other frequencies than head_dim's
            findings.append(_wrong_table_words(table, queries.shape[-1], on))
        elif not table.shared:  # every feature its own frequency: d_model's table sliced, no rotation
            findings.append(_sliced_table_words(scores, moved, table, queries.shape[-1], on))
    if moved is not None and not findings and (rates := _rotary_rates(queries, keys)) is not None:
        layout = _unpaired_layout(queries)
        findings.append(_after_rotation_words(scores, moved, rates, on) if layout is None else
                        _unpaired_words(scores, moved, layout, on))
    if findings:
        return Check(rule, "fail", "; ".join(findings))
    if moved is not None:
        return Check(rule, "skip", f"not checked: {on} the scores move along a diagonal, but not as rotary moves them: "
                                   "Q or K changes with position by more than a turn (a position embedding inside the "
                                   "module?)")
    if _same_everywhere(scores.flatten(1)[..., None]) and _same_everywhere(values):
        return Check(rule, "skip", f"not rotary: {on} every score QKᵀ and every value is the same — nothing turns "
                                   "the queries, keys or values by their position")
    return Check(rule, "pass", f"{on} every score depends only on the distance i − j and no value is turned by its "
                               f"position: rotary on the queries and keys only{assumed}")


ROTARY_NAMES = ("cos", "sin", "freq", "freqs", "rope", "rotary", "rotate")  # the names rotary embeddings go by


def uses_rotary(module: nn.Module) -> bool:
    """Whether the module uses rotary embeddings by the names it holds and calls: a buffer or submodule, or a name
    its forward's code or a submodule's uses (:func:`_code_names`: GPT-J's attention rotates inside its own forward,
    called from a block that names nothing of rotary's), with a part (split at "." and "_") in ROTARY_NAMES.  A module
    holding ``cos``/``sin`` buffers it never reads counts too: a recording keeps each op's shape, not which tensors it
    read, so whether the forward used a buffer is not known cheaply.  That costs little: the rotary cause is named
    only when the step's query or key also has the whole sequence's length and another direction
    (:func:`_rotary_cause`), and rotary-placement says "not rotary" of a module that turns nothing by position."""
    names = [name for name, _ in module.named_buffers()] + [name for name, _ in module.named_modules()]
    for sub in module.modules():
        code = getattr(type(sub).forward, "__code__", None)  # None: a forward that is not Python code
        names += _code_names(code) if code is not None else []
    return any(part.lower() in ROTARY_NAMES for name in names for part in name.replace(".", "_").split("_"))


def _code_names(code: types.CodeType) -> list[str]:
    """The names ``code`` uses, and the code nested in it (a generator expression, a lambda): ``(rope(t, cos, sin)
    for t in (q, k))`` names rope, cos and sin in a code object of its own."""
    nested = [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return [*code.co_names, *(name for inner in nested for name in _code_names(inner))]


ROTARY_TOKENS = 4  # rotary-placement repeats one token at this many positions at least (the checked n when more)
ROTARY_MOST_TOKENS = 64  # and at most: float32 angles p·θ drift by about p × 6e-8, far below the tolerance up to here
ROTARY_TOLERANCE = 1e-4  # of the largest |entry|: a float32 rotation is far closer; a wrong one moves by ~1 radian
NOT_ROTARY = "not rotary (no cos, sin, freqs, rope, rotary or rotate in its names)"  # ROTARY_NAMES, in a line
ROTATED_SIDE = {  # (how the scores depend on position, the fix) by what rotary turns (:func:`_rotated_side`)
    "queries": ("scores depend on the query's position, not the distance i − j: rotary applied to the queries only "
                "(the keys are the same at every position)", "rotate the keys too, by their own positions"),
    "keys": ("scores depend on the key's position, not the distance i − j: rotary applied to the keys only (the "
             "queries are the same at every position)", "rotate the queries too, by their own positions"),
    "both": ("scores depend on the positions, not only on the distance i − j: the queries and the keys are turned by "
             "angles whose difference is not a function of i − j", "rotate both with the same cos and sin, each at "
             "its token's position"),
}


def rotary_tokens(module: nn.Module, x: torch.Tensor) -> int:
    """How many positions rotary-placement repeats its token at: the checked tokens, at least ``ROTARY_TOKENS`` and at
    most ``ROTARY_MOST_TOKENS``, within the module's context."""
    n = min(max(x.shape[1], ROTARY_TOKENS), ROTARY_MOST_TOKENS)
    context = tracing.module_context(module)
    return min(n, context[0]) if context else n


def _one_token_repeated(x: torch.Tensor, n: int) -> torch.Tensor:
    """(1, n, d_in): one seeded random token, as wide as ``x``, at every position."""
    token = torch.randn(1, 1, x.shape[-1], generator=torch.Generator().manual_seed(4))  # (1, 1, d_in)
    return token.to(device=x.device, dtype=x.dtype).expand(1, n, x.shape[-1]).contiguous()  # (1, n, d_in)


def _tolerance(tensor: torch.Tensor) -> float:
    """``ROTARY_TOLERANCE`` of the largest |entry| of ``tensor``."""
    return ROTARY_TOLERANCE * tensor.abs().max().item()


def _same_everywhere(rows: torch.Tensor) -> bool:
    """Whether (h, n, d) rows are the same at every position n, within ``_tolerance``."""
    return (rows - rows[:, :1]).abs().max().item() <= _tolerance(rows)


def _moved_along_diagonal(scores: torch.Tensor) -> tuple[int, int, int] | None:
    """(head, query i, key j) of the score on or below the diagonal of (h, n, n) maps that differs most from the first
    of its diagonal (query i − j, key 0), when that is by more than ``_tolerance``; None when every one is the same."""
    rows, cols = torch.tril_indices(*scores.shape[-2:])  # (cells,) each: j ≤ i
    departure = (scores[:, rows, cols] - scores[:, rows - cols, 0]).abs()  # (h, cells)
    if departure.max().item() <= _tolerance(scores):
        return None
    head, cell = divmod(int(departure.argmax()), departure.shape[1])
    return head, int(rows[cell]), int(cols[cell])


def _rotation_pairs(d: int):
    """The ways rotary pairs a head's d features, as (first, second) index tensors: neighbours (2k, 2k + 1), as GPT-J
    and Meta's ``view_as_complex`` pair them; and halves (k, k + r/2) of the first or the last r features, as
    ``rotate_half`` does (Llama's r = d; GPT-NeoX's partial rotary first; DeepSeek's rotary part last)."""
    yield torch.arange(0, d - 1, 2), torch.arange(1, d, 2)
    for r in range(2, d + 1, 2):
        for start in sorted({0, d - r}):
            first = torch.arange(start, start + r // 2)  # (r/2,)
            yield first, first + r // 2


def _turned(rows: torch.Tensor) -> tuple[int, int] | None:
    """(head, position) where (h, n, d) rows — one token's vector at each position — first differ from position 0 by
    a rotation: paired as rotary pairs a head's features (:func:`_rotation_pairs`), every pair keeps its length and
    every feature outside the pairs its value; None when no head's rows are so turned."""
    tolerance = _tolerance(rows)
    moved = (rows - rows[:, :1]).abs().amax(-1) > tolerance  # (h, n)
    for first, second in _rotation_pairs(rows.shape[-1]):
        alone = torch.ones(rows.shape[-1], dtype=torch.bool)  # (d,)
        alone[first], alone[second] = False, False
        kept = torch.cat([rows[..., first].hypot(rows[..., second]), rows[..., alone]], dim=-1)  # (h, n, d - pairs)
        turned = moved.any(-1) & ((kept - kept[:, :1]).abs().amax(dim=(1, 2)) <= tolerance)  # (h,)
        if turned.any():
            head = int(turned.nonzero()[0])
            return head, int(moved[head].nonzero()[0])
    return None


def _rotated_side(queries: torch.Tensor, keys: torch.Tensor) -> str | None:
    """What rotary turns, of (h, n, d) queries and (g, n, d) keys of one token repeated: "queries" (turned by their
    position, the keys the same everywhere), "keys" (the reverse), "both" (each turned); None otherwise (one of them
    changes with position by more than a turn)."""
    queries_turned, keys_turned = _turned(queries) is not None, _turned(keys) is not None
    if queries_turned and keys_turned:
        return "both"
    if queries_turned and _same_everywhere(keys):
        return "queries"
    return "keys" if keys_turned and _same_everywhere(queries) else None


def _side_by_side(rows: torch.Tensor) -> torch.Tensor:
    """(h, n, d) heads' rows as one (1, n, h·d) vector per position: the width before the split into heads."""
    return rows.transpose(0, 1).reshape(1, rows.shape[1], -1)  # (h, n, d) -> (n, h, d) -> (1, n, h·d)


def _turned_across_heads(queries: torch.Tensor, keys: torch.Tensor) -> str:
    """What is turned by its position only with its heads side by side (:func:`_side_by_side`), each head's part not
    turned within it: "queries", "keys", "queries and keys", or "" (none).  That is a rotation whose pairs cross
    heads: rotary applied to the whole d_model-wide q or k, with tables built for that width, before the split."""
    sides = [name for name, rows in (("queries", queries), ("keys", keys))
             if rows.shape[0] > 1 and _turned(rows) is None and _turned(_side_by_side(rows)) is not None]
    return " and ".join(sides)


def _across_heads_words(scores: torch.Tensor, moved: tuple[int, int, int], sides: str, on: str,
                        tiled: bool = False) -> str:
    """rotary-placement's words for a rotation that does not act within each head (``sides``: what it turns;
    ``tiled``: its frequencies are head_dim's, a head's tables repeated for each head, not d_model's)."""
    head, query, key = moved
    distance = query - key
    diagonal = torch.diagonal(scores[head], offset=-distance)  # (n - distance,): query i · key i - distance
    how = (" before the split into heads: its cos and sin are head_dim's, repeated for each head, but rotate_half over "
           "the full width pairs feature i with i + d_model/2, in another head" if tiled else
           ", its cos and sin built for d_model, before the split into heads")
    return (f"scores depend on the positions, not only on the distance i − j: the rotation does not act within each "
            f"head — the {sides}, their heads side by side, are the token's vector turned by its position over the "
            f"full width, in pairs that cross heads (rotary applied to the whole d_model-wide q and k{how}) — {on}, "
            f"head {head}: the scores at distance {distance} "
            f"run from {diagonal.min().item():.4g} to {diagonal.max().item():.4g} along the diagonal (query {query} · "
            f"key {key} = {scores[head, query, key].item():.4g}, query {distance} · key 0 = "
            f"{scores[head, distance, 0].item():.4g}); split q and k into heads first, then rotate each head with cos "
            "and sin built for head_dim")


ROPE_BASES = (10_000.0, 500_000.0, 1_000_000.0)  # rotary's usual bases (GPT-NeoX and Llama 2, Llama 3, Qwen, Gemma)
BASE_NAMES = NUMBER_SETTINGS["rope_base"]  # where a module keeps one: rope_theta, rope_base, base, theta …
ROUND_BASES = tuple(m * 10.0 ** k for k in range(3, 8) for m in (1, 2, 5))  # bases a module may choose: 1000 … 5e7
WIDTH_NAMES = ("rotary_dim", "rotary_ndims", "rotary_emb_dim", "rope_dim", "qk_rope_head_dim")  # a rotated width
SHARE_NAMES = ("rotary_pct", "partial_rotary_factor")  # the rotated share of head_dim
SLOWEST_MEASURED = 0.02  # radians a position: a slower feature's angle is too close to 0 to measure in float32
SAME_RATE = 1e-3  # relative: two features turn by one frequency (float32 measures them to about 1e-4)
TABLE_TOLERANCE = 0.01  # of a frequency's log, and relative for a width: the frequencies are a table's, its width one


@dataclass(frozen=True)
class RotaryTable:
    """The rotary table a module's queries are turned by, measured (:func:`_table`): frequencies θ_i =
    ``base``^(−2i/``width``), ``rates`` the ones measured, fastest first (1 radian a position, then ρ, ρ², …);
    ``name`` the width's ("d_model"); ``shared``: some two features of a head turn together (rotary's pairs)."""

    width: int
    base: float
    rates: tuple[float, ...]
    name: str = ""
    shared: bool = True
    # no base kept anywhere, and head_dim's (or the rotated width's) table at this base a module may choose turns by
    # the same frequencies: the base taken (and ``assumed_width`` its width) instead of ``base`` over ``width``
    assumed: float | None = None
    assumed_width: int | None = None


def _feature_rates(rows: torch.Tensor) -> torch.Tensor | None:
    """(h, d) float64: the angle each feature of (h, n, d) rows — one token's vector at each position — turns by a
    position, NaN where a feature is too small to measure; None when a feature is not one cosine of its position
    (a position embedding added), or fewer than 3 positions.  Rotary makes each feature x·cos(pθ) + y·sin(pθ), so
    u_{p-1} + u_{p+1} = 2 cos θ · u_p in every layout, paired or not."""
    if rows.shape[1] < 3:
        return None
    values = rows.double()  # (h, n, d)
    before, now, after = values[:, :-2], values[:, 1:-1], values[:, 2:]  # (h, n - 2, d) each
    power = (now * now).sum(1)  # (h, d)
    cos = ((before + after) * now).sum(1) / power.clamp_min(torch.finfo(torch.float64).tiny)  # (h, d): 2 cos θ
    small = values.abs().amax(1) <= _tolerance(rows)  # (h, d): too small to measure
    residual = (before + after - cos[:, None] * now).abs().amax(1).masked_fill(small, 0.0)  # (h, d)
    if residual.max().item() > _tolerance(rows):
        return None
    return torch.acos((cos / 2).clamp(-1.0, 1.0)).masked_fill(small, float("nan"))  # (h, d)


def _ladder(rows: torch.Tensor) -> tuple[list[float], float] | None:
    """The distinct measurable frequencies (:data:`SLOWEST_MEASURED` or faster) (h, n, d) rows of one token at each
    position turn by, fastest first, and log ρ, when they are the powers of one ρ from 1 radian a position, as
    rotary's are (:func:`_feature_rates`); None otherwise."""
    rates = _feature_rates(rows)
    if rates is None:
        return None
    measured = sorted((rate for rate in rates.flatten().tolist() if rate >= SLOWEST_MEASURED), reverse=True)
    distinct: list[float] = []  # the table's frequencies, fastest first
    for rate in measured:
        if not distinct or not math.isclose(rate, distinct[-1], rel_tol=SAME_RATE):
            distinct.append(rate)
    if len(distinct) < 2 or not math.isclose(distinct[0], 1.0, rel_tol=SAME_RATE):
        return None
    logs = [math.log(rate) for rate in distinct]  # k · log ρ for the k-th
    log_ratio = sum(k * log for k, log in enumerate(logs)) / sum(k * k for k in range(len(logs)))  # least squares
    if any(abs(log - k * log_ratio) > TABLE_TOLERANCE for k, log in enumerate(logs)):
        return None
    return distinct, log_ratio


def _rotary_rates(queries: torch.Tensor, keys: torch.Tensor) -> list[float] | None:
    """The frequencies (h, n, d) queries and (g, n, d) keys of one token repeated turn by, fastest first, when every
    feature of both is one cosine of its position and they are a rotary table's (:func:`_ladder`); None otherwise.
    Of scores that move along a diagonal, that says positions enter only by rotary's angles, and something after the
    rotation (a norm's per-feature scale, a projection) turns a pair's two features unequally: its length changes."""
    found = _ladder(queries), _ladder(keys)
    return None if None in found else found[0][0]


PAIRED_LAYOUTS = {  # a table's layout, by the features it turns alike: (which they are, the fix)
    "half": ("feature i and i + d/2, the layout of a table built with torch.cat([angles, angles], dim=-1) "
             "(rotate_half's)", "rotate with rotate_half, torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1), or "
                                "build the table with angles.repeat_interleave(2, dim=-1)"),
    "interleaved": ("feature 2i and 2i + 1, the layout of a table built with angles.repeat_interleave(2, dim=-1) "
                    "(Meta's and GPT-J's interleaved pairs)", "rotate the pairs x[..., ::2], x[..., 1::2], or build "
                                                              "the table with torch.cat([angles, angles], dim=-1)"),
}
QUADRATURE = 0.1  # |cos| of the angle between two paired features' phases: a rotation pair is a quarter turn apart


def _unpaired_layout(rows: torch.Tensor) -> str | None:
    """"half" or "interleaved" when the features of (h, n, d) rows — one token's vector at each position — that turn
    by one angle are laid out as that table pairs them (:data:`PAIRED_LAYOUTS`), yet some two of them are not a
    quarter turn apart, as the two features of a rotation are (x·cos − y·sin, y·cos + x·sin), scaled or not: the
    rotation turns other features together than the table's angles pair — rotate_half with an interleaved table, or
    the reverse.  None when they are (a norm after the rotation only rescales them) or the layout is neither."""
    rates = _feature_rates(rows)  # (h, d)
    d = rows.shape[-1]
    if rates is None or d % 2:
        return None
    halves = (torch.arange(d // 2), torch.arange(d // 2) + d // 2)  # half-split pairs (i, i + d/2)
    twos = (torch.arange(0, d, 2), torch.arange(1, d, 2))  # interleaved pairs (2i, 2i + 1)
    for layout, (first, second) in (("half", halves), ("interleaved", twos)):
        a, b = rates[:, first], rates[:, second]  # (h, d/2) each
        measured = (a >= SLOWEST_MEASURED) & (b >= SLOWEST_MEASURED)  # (h, d/2): NaN compares False
        if not measured.any() or ((a - b).abs() > SAME_RATE * a)[measured].any():
            continue
        positions = torch.arange(rows.shape[1], dtype=torch.float64)[:, None, None]  # (n, 1, 1)
        angle = positions * a.T[None]  # (n, d/2, h): both features of a pair turn by a's rate
        basis = torch.stack((angle.cos(), angle.sin()), -1)  # (n, d/2, h, 2)
        values = rows.double().permute(1, 2, 0)  # (n, d, h)
        phases = [torch.linalg.lstsq(basis.permute(1, 2, 0, 3), values[:, index].permute(1, 2, 0)[..., None]).solution
                  for index in (first, second)]  # (d/2, h, 2, 1) each: u(p) = c·cos(pθ) + s·sin(pθ)
        u, v = (phase[..., 0] for phase in phases)  # (d/2, h, 2)
        cos = (u * v).sum(-1).abs() / (u.norm(dim=-1) * v.norm(dim=-1)).clamp_min(1e-12)  # (d/2, h)
        large = (u.norm(dim=-1) > 1e-3 * u.norm(dim=-1).max()) & (v.norm(dim=-1) > 1e-3 * v.norm(dim=-1).max())
        return layout if (cos > QUADRATURE)[measured.T & large].any() else None
    return None


def _unpaired_words(scores: torch.Tensor, moved: tuple[int, int, int], layout: str, on: str) -> str:
    """rotary-placement's words for a rotation whose pairs are not the features its table turns alike
    (:func:`_unpaired_layout`)."""
    head, query, key = moved
    distance = query - key
    features, fix = PAIRED_LAYOUTS[layout]
    return (f"scores depend on the positions, not only on the distance i − j: the features that turn by one angle are "
            f"{features}, but the rotation turns other features together — {on}, head {head}: query {query} · key "
            f"{key} = {scores[head, query, key].item():.4g} but query {distance} · key 0 = "
            f"{scores[head, distance, 0].item():.4g}, the same distance {distance} apart; {fix}")


def _after_rotation_words(scores: torch.Tensor, moved: tuple[int, int, int], rates: list[float], on: str) -> str:
    """rotary-placement's words for scores that move though every feature of q and k turns by rotary's frequencies
    (``rates``, fastest first): the rotation is followed by something that breaks relative positions."""
    head, query, key = moved
    distance = query - key
    first = ", ".join(f"{rate:.4g}" for rate in rates[:3])
    return (f"scores depend on the positions, not only on the distance i − j, though the module rotates: every "
            f"feature of the queries and keys turns by rotary's frequencies ({first} … radians a position), but the "
            f"rotation pairs do not keep their lengths — something after the rotation (a norm, a projection) breaks "
            f"relative positions — {on}, head {head}: query {query} · key {key} = "
            f"{scores[head, query, key].item():.4g} but query {distance} · key 0 = "
            f"{scores[head, distance, 0].item():.4g}, the same distance {distance} apart; apply norms and "
            "projections to q and k before rotary, and rotate last")


def _table(rows: torch.Tensor, module: nn.Module, widths: Iterable[int],
           built_base: float | None = None) -> RotaryTable | None:
    """The rotary table (h, n, d) rows of one token at each position are turned by, when its width is one of
    ``widths`` (tried in order) for the base the module keeps (:data:`BASE_NAMES`), else the one it was built with
    (``built_base``), or else one of rotary's usual ones (:data:`ROPE_BASES`): the measurable frequencies the powers
    of one ρ from 1 radian a position (:func:`_ladder`), ρ = base^(−2/width) fitted to them.  None otherwise — no
    rotation, scaled positions, another table."""
    rates, ladder = _feature_rates(rows), _ladder(rows)
    if rates is None or ladder is None:
        return None
    distinct, log_ratio = ladder
    shared = any(len({round(math.log(rate) / log_ratio) for rate in head if rate >= SLOWEST_MEASURED})
                 < sum(rate >= SLOWEST_MEASURED for rate in head) for head in rates.tolist())
    declared = _rope_base(module) or built_base
    for width in widths:
        for base in (declared,) if declared else ROPE_BASES:
            if math.isclose(-2 * math.log(base) / log_ratio, width, rel_tol=TABLE_TOLERANCE):
                return RotaryTable(width, base, tuple(distinct), shared=shared)
    return None


def _rope_base(module: nn.Module) -> float | None:
    """The rotary base the module (or a submodule, or its config: :func:`config_setting`) keeps (:data:`BASE_NAMES`;
    a config's ``rope_theta``, in ``rope_parameters`` too); None when it keeps none."""
    for sub in module.modules():
        parameters = config_setting(sub, "rope_parameters")
        found = [vars(sub).get(name) for name in BASE_NAMES] + [config_setting(sub, "rope_theta")] + [
            parameters.get("rope_theta") if isinstance(parameters, dict) else None]
        base = next((value for value in found if isinstance(value, int | float) and not isinstance(value, bool)
                     and value > 1), None)
        if base is not None:
            return float(base)
    return None


def _wrong_table(queries: torch.Tensor, module: nn.Module, d_model: int,
                 built_base: float | None = None) -> RotaryTable | None:
    """The table of (h, n, hd) queries of one token repeated when it is as wide as d_model (or num_heads × head_dim)
    and neither head_dim nor the rotated width (:func:`_rotated_widths`): inv_freq with d_model in the exponent's
    denominator, or d_model's tables sliced to head_dim; None when it is head_dim's or the rotated width's (or
    another width: a scaled table) at the base the module keeps or was built with (``built_base``).  A rotation
    whose base is kept nowhere (:func:`_rope_base`) and not known from its construction, for which head_dim's or the
    rotated width's table of a base a module may choose (:data:`ROUND_BASES`) turns by the same frequencies — base
    1000 over head_dim 16 is 1e6 over 32, and the frequencies alone do not tell them apart —, is that table with the
    base taken (``assumed``) instead: a pass that says so."""
    head_dim = queries.shape[-1]
    right = (head_dim, *_rotated_widths(queries, module))
    names = {queries.shape[0] * head_dim: "num_heads × head_dim", d_model: "d_model"}  # d_model's name when equal
    table = _table(queries, module, (*right, *(width for width in names if width not in right)), built_base)
    if table is None or table.width in right:
        return None
    found = RotaryTable(table.width, table.base, table.rates, names[table.width], table.shared)
    if not table.shared or _rope_base(module) is not None or built_base is not None:
        return found
    for width in right:
        for base in ROUND_BASES:  # base^(−2i/width) = table.base^(−2i/table.width)
            if math.isclose(table.width * math.log(base), width * math.log(table.base), rel_tol=TABLE_TOLERANCE):
                return RotaryTable(found.width, found.base, found.rates, found.name, True, base, width)
    return found


def _assumed_words(table: RotaryTable, head_dim: int) -> str:
    """The PASS line's words for a table of no known base that is head_dim's (or the rotated width's) at a base a
    module may choose and d_model's at a usual one (:func:`_wrong_table`'s ``assumed``): which one the check took,
    and how to tell the checker the base — ``check_module``'s ``sizes`` in Python, a kept base or a constructor
    argument attnviz check reads."""
    width = table.assumed_width
    which = "head_dim" if width == head_dim else "the rotated width"
    return (f" — its queries turn by θ_i = {table.assumed:g}^(−2i/{width}): {which}'s table ({width}) at base "
            f"{_base(table.assumed)}, or, by the same frequencies, a table built for {table.name} ({table.width}) at "
            f"base {_base(table.base)}, a bug; the module keeps no rotary base under a name attnviz reads "
            f"({', '.join(BASE_NAMES[:2])}, theta …) "
            f"and was built with none attnviz knows, so the check takes it as {which}'s at base "
            f"{_base(table.assumed)} — if it was built with another, tell the checker: check_module(module, "
            "sizes={\"rope_base\": …}) in Python, or, for attnviz check, keep the base (self.rope_base = …) or take it "
            "as a constructor argument named rope_theta or base, to have the table's width checked")


def _base(base: float) -> str:
    """A rotary base as people write it: "1,000,000", "10,000", "2.5e+07" past whole numbers."""
    return f"{base:,.0f}" if float(base).is_integer() else f"{base:g}"


def _rotated_widths(queries: torch.Tensor, module: nn.Module) -> tuple[int, ...]:
    """The widths a partial rotary turns of each head of (h, n, hd) queries, when fewer than head_dim: those the
    module (or a submodule, or its config: :func:`config_setting`) declares (:data:`WIDTH_NAMES`; :data:`SHARE_NAMES`
    × head_dim), and the features of a head that change with position, measured (the rest pass through unturned)."""
    head_dim, widths = queries.shape[-1], []
    for sub in module.modules():
        for setting in (vars(sub).get, functools.partial(config_setting, sub)):  # its attribute, its config's
            widths += [value for name in WIDTH_NAMES if isinstance(value := setting(name), int)]
            widths += [round(value * head_dim) for name in SHARE_NAMES
                       if isinstance(value := setting(name), float | int) and 0 < value < 1]
    moving = ((queries - queries[:, :1]).abs().amax(1) > _tolerance(queries)).sum(-1)  # (h,): features that move
    widths.append(int(moving.max()))
    return tuple(sorted({width for width in widths if 0 < width < head_dim and not isinstance(width, bool)}))


WRONG_TABLE_FIX = "build inv_freq = 1 / base ** (torch.arange(0, head_dim, 2) / head_dim)"


def _frequencies(table: RotaryTable, width: int) -> str:
    """θ_i of ``table``'s base for ``width`` in words, with its first three values."""
    first = ", ".join(f"{table.base ** (-2 * i / width):.4g}" for i in range(3))
    return f"θ_i = {table.base:g}^(−2i/{width}) ({first} …)"


def _wrong_table_words(table: RotaryTable, head_dim: int, on: str) -> str:
    """rotary-placement's words for queries turned by a rotation of ``table``'s frequencies, not head_dim's."""
    name = table.name
    return (f"q and k are turned by the frequencies of width {table.width} ({name}), not of head_dim = {head_dim}: "
            f"{on} the queries turn by {_frequencies(table, table.width)} radians a position, where head_dim's table "
            f"turns them by {_frequencies(table, head_dim)} — inv_freq has {name} in the exponent's denominator, or "
            f"cos and sin built for {name} are sliced to head_dim: the scores still depend only on i − j, but a model "
            f"trained with head_dim's frequencies reads other positions from them; {WRONG_TABLE_FIX}")


def _sliced_table_words(scores: torch.Tensor, moved: tuple[int, int, int], table: RotaryTable, head_dim: int,
                        on: str) -> str:
    """rotary-placement's words for queries whose every feature turns by its own frequency of ``table``: the first
    head_dim columns of rotate_half's tables for d_model, which turn no pair together."""
    head, query, key = moved
    distance = query - key
    return (f"scores depend on the positions, not only on the distance i − j: q and k are turned by cos and sin built "
            f"for width {table.width} ({table.name}) and sliced to head_dim = {head_dim} — each feature i of a head by "
            f"its own frequency, θ_i = {table.base:g}^(−2i/{table.width}), where rotate_half turns features i and "
            f"i + {head_dim // 2} together by θ_i = {table.base:g}^(−2i/{head_dim}), so no pair keeps its length — "
            f"{on}, head {head}: query {query} · key {key} = {scores[head, query, key].item():.4g} but query "
            f"{distance} · key 0 = {scores[head, distance, 0].item():.4g}, the same distance {distance} apart; "
            f"{WRONG_TABLE_FIX}")


def _diagonal_words(scores: torch.Tensor, moved: tuple[int, int, int], side: str, on: str) -> str:
    """rotary-placement's words for a score that moves along its diagonal: how, and two of its cells."""
    head, query, key = moved
    distance = query - key
    where = f"head {head}: " if scores.shape[0] > 1 else ""
    how, fix = ROTATED_SIDE[side]
    return (f"{how} — {on}, {where}query {query} · key {key} = {scores[head, query, key].item():.4g} but query "
            f"{distance} · key 0 = {scores[head, distance, 0].item():.4g}, the same distance {distance} apart; {fix}")


def _values_words(turned: tuple[int, int], grouped: bool, heads: bool, on: str) -> str:
    """rotary-placement's words for values turned by their position (``grouped``: K/V heads fewer than the queries';
    ``on``: how they were found, "" when the words before say it)."""
    head, position = turned
    where = (f"{on}, " if on else "") + (f"{'K/V ' if grouped else ''}head {head}: " if heads else "")
    return (f"values are rotated by position: rotary applied to V (RoPE rotates queries and keys only) — {where}the "
            f"value at position {position} is the value at position 0 turned (each rotation pair keeps its length, "
            "another direction); rotate q and k only")
