"""The Steps page's rotary stage as a student sees it: one pair of dimensions (x[d], x[d + hd/2]) of a head's
queries and keys as 2-D vectors that each position turns by p·θ_d (before → after, on an arc), the angle p·θ_d of
every position and pair as a heatmap, and the pair's numbers before and after side by side in a table.

Pure: a Trace in, Plotly figures and pandas tables out.  The vectors are the Trace's own — the projections before
the rotation and the rotated q and k it recorded (``Trace.head_vectors``) — and the angles are :mod:`attnviz.rope`'s
(``rope_angles``, the angles whose cos and sin the run's ``apply_rope`` used); nothing here turns a vector itself
but the arc drawn from a vector before to the same vector after.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from attnviz import rope
from attnviz.views import margins, steps

if TYPE_CHECKING:
    from attnviz.trace import Trace

PAIR_FIGURE_TOKENS = 8  # the tokens one pair's figure draws (the first ones): more arcs than this tangle
POSITION_COLOURS = "Plasma"  # one colour a position, dark (0) to bright (last drawn): later positions turn further
ANGLE_COLOURS = "Twilight"  # cyclic: 0° and 360° are one colour, as they are one direction
ARC_POINTS = 48  # points of the arc from a vector before to the same vector after
ANGLE_TITLE_PX = 420  # the angle heatmap's title fits this: the page's width at 900 px beside the sidebar


@dataclass(frozen=True, eq=False)  # holds arrays
class Rotation:
    """One head's queries and keys before and after the rotation, item 0, and the angles that turned them."""

    head: int
    kv_head: int  # the recorded K/V head whose keys this head reads (GQA, MQA)
    base: float  # the θ base
    tokens: tuple[str, ...]
    queries: np.ndarray  # (n, hd): the projections, before the rotation
    keys: np.ndarray  # (n, hd)
    rotated_queries: np.ndarray  # (n, hd): as the run recorded them after apply_rope
    rotated_keys: np.ndarray  # (n, hd)
    angles: np.ndarray  # (n, hd/2): p·θ_d, rope.rope_angles of the run's head_dim and base
    frequencies: np.ndarray  # (hd/2,): θ_d, rope.rope_frequencies

    @property
    def head_dim(self) -> int:
        return int(self.queries.shape[-1])

    @property
    def pairs(self) -> int:
        return self.head_dim // 2

    @property
    def n(self) -> int:
        return len(self.tokens)

    def vectors(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(before, after) of ``side`` ("q" or "k"), (n, hd) each."""
        return (self.queries, self.rotated_queries) if side == "q" else (self.keys, self.rotated_keys)

    def pair_of(self, side: str, pair: int) -> tuple[np.ndarray, np.ndarray]:
        """(before, after) of ``side``'s pair ``pair``: (n, 2) each, the columns x[d] and x[d + hd/2]."""
        dims = [pair, pair + self.pairs]
        before, after = self.vectors(side)
        return before[:, dims], after[:, dims]


def rotation_of(trace: Trace, head: int) -> Rotation:
    """:class:`Rotation` of map head ``head`` of a run with rotary positions (one that recorded ``rotated_queries``
    and ``rotated_keys``); its keys are those of the head's K/V group."""
    before = trace.head_vectors(head, rotated=False)  # the recorded projections' slices: (n, hd) each
    after = trace.head_vectors(head)  # the same vectors as the run turned them
    base = trace.config.rope_base
    angles = rope.rope_angles(before.head_dim, base, trace.n).numpy()  # (n, hd/2)
    frequencies = rope.rope_frequencies(before.head_dim, base).numpy()  # (hd/2,)
    return Rotation(head=head, kv_head=after.kv_head, base=base, tokens=tuple(trace.tokens),
                    queries=np.asarray(before.queries), keys=np.asarray(before.keys),
                    rotated_queries=np.asarray(after.queries), rotated_keys=np.asarray(after.keys), angles=angles,
                    frequencies=frequencies)


def pair_count(trace: Trace) -> int:
    """The pairs of dimensions (d, d + hd/2) a run with rotary positions turns in each head: head_dim / 2."""
    return trace.head_vectors(0, rotated=False).head_dim // 2


def pair_label(rotation: Rotation, pair: int) -> str:
    """"pair 3: dims 3 and 35"."""
    return f"pair {pair}: dims {pair} and {pair + rotation.pairs}"


def pair_figure(rotation: Rotation, pair: int, side: str = "q", start: int = 0) -> go.Figure:
    """``side``'s pair ``pair`` of tokens ``start`` … (at most :data:`PAIR_FIGURE_TOKENS`) as 2-D vectors: each
    token's vector before the rotation (a dotted line to an open circle), the arc along which its position turns it by
    p·θ_d (less its whole turns, which end where they start), and the vector after (a line to a filled circle,
    labelled with its position).  Lengths are kept: a rotation only turns.  Hover: the token, its whole angle, its
    numbers before and after."""
    before, after = rotation.pair_of(side, pair)  # (n, 2) each
    shown = range(start, min(rotation.n, start + PAIR_FIGURE_TOKENS))
    colours = sample_colorscale(POSITION_COLOURS, [0.85 * i / max(len(shown) - 1, 1) for i in range(len(shown))])
    name = {"q": "query", "k": "key"}[side]
    fig = go.Figure()
    for colour, p in zip(colours, shown):
        angle = float(rotation.angles[p, pair])  # p·θ_d, rad
        (x0, y0), (x1, y1) = before[p], after[p]
        radius, start_angle = math.hypot(x0, y0), math.atan2(y0, x0)
        arc = start_angle + np.linspace(0.0, angle % math.tau, ARC_POINTS)  # (ARC_POINTS,): whole turns left out
        hover = (f"position {p} · {rotation.tokens[p]}<br>angle p·θ_d = {angle:.4g} rad = {math.degrees(angle):.1f}°"
                 f"<br>before ({x0:.4f}, {y0:.4f})<br>after ({x1:.4f}, {y1:.4f})<extra></extra>")
        fig.add_trace(go.Scatter(x=[0.0, x0], y=[0.0, y0], mode="lines+markers", hoverinfo="skip", showlegend=False,
                                 line={"color": colour, "width": 1, "dash": "dot"},
                                 marker={"size": [0, 7], "color": "white", "line": {"color": colour, "width": 1.5}}))
        fig.add_trace(go.Scatter(x=radius * np.cos(arc), y=radius * np.sin(arc), mode="lines", hoverinfo="skip",
                                 showlegend=False, line={"color": colour, "width": 1}))
        fig.add_trace(go.Scatter(x=[0.0, x1], y=[0.0, y1], mode="lines+markers+text", showlegend=False,
                                 text=["", str(p)], textposition="top center", textfont={"size": 10, "color": colour},
                                 line={"color": colour, "width": 2}, marker={"size": [0, 8], "color": colour},
                                 hovertemplate=hover, name=rotation.tokens[p]))
    reach = 1.2 * max((math.hypot(*before[p]) for p in shown), default=1.0) or 1.0
    count = f"tokens {shown.start}–{shown.stop - 1} of {rotation.n:,}" if len(shown) < rotation.n else "every token"
    text = margins.wrapped_title(f"{name} (head {rotation.head if side == 'q' else rotation.kv_head}"
                                 f"{'' if side == 'q' else ' of K/V'}), {pair_label(rotation, pair)} — {count}: "
                                 "○ before, ● after", steps.PAIR_WIDTH, 14)
    margin = {"l": margins.beside(title=True), "r": 10, "t": margins.title_top(text.count("<br>") + 1, 14),
              "b": margins.LINE_PX + margins.TITLE_PX}
    plot_px = steps.PAIR_WIDTH - margin["l"] - margin["r"]
    axis = {"range": [-reach, reach], "zeroline": True, "zerolinecolor": "#bbb", "showgrid": False}
    return fig.update_layout(
        title=margins.title(text, 14), width=steps.PAIR_WIDTH, height=margins.height(plot_px, margin), margin=margin,
        xaxis={**axis, "title": {"text": f"x[{pair}]"}, "constrain": "domain"},
        yaxis={**axis, "title": {"text": f"x[{pair + rotation.pairs}]"}, "scaleanchor": "x", "scaleratio": 1,
               "constrain": "domain"},
        hovermode="closest")


def angle_heatmap(rotation: Rotation, pair: int | None = None) -> go.Figure:
    """The angle p·θ_d (θ_d = base^(−2d/hd)) by which each position p (rows, down) turns each pair d (columns), its
    colour the direction it points to, mod 360° on a cyclic scale: pair 0 turns a radian a position, so its colour
    changes every row; the last pairs turn so slowly that theirs hardly changes.  ``pair``: outlined.  Hover: the
    angle in radians and degrees, and θ_d."""
    angles = np.asarray(rotation.angles, dtype=np.float64)  # (n, hd/2), rad
    degrees = np.degrees(angles)  # (n, hd/2)
    theta = np.broadcast_to(np.asarray(rotation.frequencies, dtype=np.float64), angles.shape)  # θ_d of each cell
    custom = np.stack([angles, degrees, theta], axis=-1)  # (n, hd/2, 3)
    labels = [f"{p} {token}" for p, token in enumerate(rotation.tokens)] if rotation.n <= 40 else None
    fig = go.Figure(go.Heatmap(
        z=np.mod(degrees, 360.0), x=list(range(rotation.pairs)), y=list(range(rotation.n)), customdata=custom,
        colorscale=ANGLE_COLOURS, zmin=0, zmax=360,
        colorbar={"title": {"text": "angle<br>mod 360°"}, "tickvals": [0, 90, 180, 270, 360], "ticksuffix": "°"},
        hovertemplate=("position %{y}, pair %{x}<br>p·θ_d = %{customdata[0]:.4g} rad = %{customdata[1]:.1f}°"
                       "<br>θ_d = %{customdata[2]:.3g} rad a position<extra></extra>")))
    if pair is not None:
        fig.add_shape(type="rect", x0=pair - 0.5, x1=pair + 0.5, y0=-0.5, y1=rotation.n - 0.5,
                      line={"color": "black", "width": 2})
    text = (f"angle p·θ_d each position turns each pair (base {rotation.base:,.0f}, θ_d = base^(−2d/"
            f"{rotation.head_dim})) — low pairs turn fast, high pairs slowly")
    text = margins.wrapped_title(text, ANGLE_TITLE_PX, 14)
    margin = {"l": margins.beside(labels), "r": margins.COLORBAR_PX, "t": margins.title_top(text.count("<br>") + 1, 14),
              "b": margins.LINE_PX + margins.TITLE_PX}
    plot_px = int(min(max(rotation.n * 18, 160), 420))
    return fig.update_layout(
        title=margins.title(text, 14), height=margins.height(plot_px, margin),
        margin=margin,
        xaxis={"title": {"text": f"pair d (dims d and d + {rotation.pairs})"}, "showgrid": False},
        yaxis={"title": {"text": "position"}, "autorange": "reversed", "showgrid": False,
               **({"tickvals": list(range(rotation.n)), "ticktext": labels} if labels else {})})


ANGLE_COLUMN = "p·θ_d"  # the pair table's angle, in degrees


def pair_columns(rotation: Rotation, pair: int, side: str = "q") -> tuple[str, str, str, str]:
    """The pair table's number columns, each pair's two side by side: before (``q[3]``, ``q[35]``), then after the
    rotation, primed (``q′[3]``, ``q′[35]``)."""
    high = pair + rotation.pairs
    return f"{side}[{pair}]", f"{side}[{high}]", f"{side}′[{pair}]", f"{side}′[{high}]"


def pair_table(rotation: Rotation, pair: int, side: str = "q") -> pd.DataFrame:
    """One row per position p (the index): the token, the angle p·θ_d in degrees (:data:`ANGLE_COLUMN`), and
    ``side``'s pair ``pair`` before the rotation and after it (:func:`pair_columns`)."""
    before, after = rotation.pair_of(side, pair)  # (n, 2) each
    low, high, turned_low, turned_high = pair_columns(rotation, pair, side)
    table = pd.DataFrame({
        "token": list(rotation.tokens),
        ANGLE_COLUMN: np.degrees(np.asarray(rotation.angles[:, pair], dtype=np.float64)),
        low: before[:, 0], high: before[:, 1], turned_low: after[:, 0], turned_high: after[:, 1],
    })
    table.index.name = "p"
    return table


def pair_table_help(rotation: Rotation, pair: int, side: str = "q") -> dict[str, str]:
    """The help each number column of :func:`pair_table` gives (a header's tooltip)."""
    low, high, turned_low, turned_high = pair_columns(rotation, pair, side)
    d, d2 = pair, pair + rotation.pairs
    return {
        ANGLE_COLUMN: f"position p × θ_{d}, θ_{d} = {rotation.base:,.0f}^(−2·{d}/{rotation.head_dim}), in degrees: how "
                      "far position p turns this pair",
        low: f"{side}[{d}] before the rotation: the pair's first number",
        high: f"{side}[{d2}] before the rotation: the pair's second number (d + head_dim/2)",
        turned_low: f"{side}[{d}] after the rotation: {side}[{d}]·cos(p·θ_d) − {side}[{d2}]·sin(p·θ_d), as apply_rope "
                    "computed it",
        turned_high: f"{side}[{d2}] after the rotation: {side}[{d2}]·cos(p·θ_d) + {side}[{d}]·sin(p·θ_d), as "
                     "apply_rope computed it",
    }
