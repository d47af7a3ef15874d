"""Pure Plotly figures of why a cell has its weight and of several tokens' summed attention: an explanation or
sums in (:mod:`attnviz.explain`), ``go.Figure`` out.

No model runs here and no Streamlit (as :mod:`attnviz.views.figures`):

* ``products_figure`` — the head_dim products q_i[d]·k_j[d] as bars, the largest named (as many as fit side by side
  at the panel's width), the title adding them up: Σ = score, ÷ divisor = scaled, and the weight (or why the mask
  hides the key);
* ``row_softmax_figure`` — row i's scaled scores over every key (what the softmax took, where the module changed
  them) and the softmax of that row, key j highlighted;
* ``summed_attention_figure`` — the selected queries' attention per key (mean, sum in the hover) and what every
  query gives the selected keys.

Positions are numeric x values with token tick labels (at most ``MAX_TICKS``: as many as the panel's plot area holds
side by side: Plotly thins no array of tick labels, and its automatic ticks renamed by ``labelalias`` rename the
position in the hover too), arrays are float32 (Plotly sends
them as binary), bar colours are colour strings (plotly.js warns, with a stack trace, once a bar for a numeric colour
array on a bar trace), and every piece of token text is escaped
(:func:`~attnviz.views.figures.safe_label`).  The figures are built from dicts without Plotly's per-property
validation (``tests/views/test_explain_figures.py`` validates them): a 1,024-bar row is drawn on every click.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from attnviz.explain import AttentionSums, WeightExplanation
from attnviz.views import margins
from attnviz.views.figures import COLUMN_LABEL_PX, MASKED_COLOR, safe_label
from attnviz.words import amount

POSITIVE = "#d6604d"  # a product that raises the score
NEGATIVE = "#4393c3"  # a product that lowers it
HIGHLIGHT = "#ff7f0e"  # key j in the row, the selected positions
PLAIN = "#7f7f7f"
PLAIN_CODE, HIDDEN_CODE, HIGHLIGHT_CODE = 0, 1, 2  # a position's kind: its bar's colour is POSITION_COLORS[code]
POSITION_COLORS = np.array([PLAIN, MASKED_COLOR, HIGHLIGHT], dtype=object)
PANEL_PX = 300  # the panel's width (the Heads page gives it a column this wide): the products' names are spaced for it
PANEL_PLOT_PX = PANEL_PX - margins.beside() - margins.TURNED_LABELS_PX  # a chart's plot area there
# the turned token labels that fit side by side there, a pixel apart (Chromium rounds each label's box)
MAX_TICKS = PANEL_PLOT_PX // (COLUMN_LABEL_PX + 1)


def _number(value: float) -> str:
    return f"{value:.4g}"


def _score(value: float) -> str:
    """A score as the page's line beside the chart writes it (four decimals), so the two read the same number."""
    return f"{value:.4f}"


def _divisor_text(explanation: WeightExplanation) -> str:
    """``÷ √8`` (√d_head, the width the scale is judged by, not always q's length), ``÷ 1 (no scaling)`` or ``÷ 5``
    (a run's own scale)."""
    d_head = explanation.d_head
    if d_head is not None and math.isclose(explanation.divisor, math.sqrt(d_head), rel_tol=1e-6):
        return f"÷ √{d_head}"
    if explanation.divisor == 1.0:
        return "÷ 1 (no scaling)"
    return f"÷ {_number(explanation.divisor)}"


LINE_PX = {13: 17, 12: 16, 11: 14}  # a title line's height at each font size
# a title of several lines grows down from under the modebar's row (Plotly centres it in the margin otherwise):
# above its lines, that row; under them, a gap
TITLE_ROOM_PX = margins.MODEBAR_PX + margins.TITLE_GAP_PX
NAME_PX = 3 + math.ceil(margins.LINE_EM * margins.TICK_FONT_PX)  # a bar's name beyond its end: Plotly's gap, a line


def _wrapped(text: str, size: int = 13, width_px: int = PANEL_PX) -> tuple[str, int]:
    """``text`` with its lines (``<br>``-separated) broken at spaces into lines of ``size`` px that fit ``width_px``
    (``margins.wrapped_title``), as Plotly cuts a title at its figure's edge; and how many lines it has then.  The one
    rule of every title and panel title of these charts: lines that fit the panel's width in pixels."""
    wrapped = "<br>".join(margins.wrapped_title(line, width_px, size) if line else "" for line in text.split("<br>"))
    return wrapped, wrapped.count("<br>") + 1


NBSP = "\u00a0"  # between a name and its number ("head 0"): :func:`_wrapped` never breaks a line there


def _cell_name(explanation: WeightExplanation) -> str:
    return (f"query{NBSP}{explanation.query} “{safe_label(explanation.query_token)}” → key{NBSP}{explanation.key} "
            f"“{safe_label(explanation.key_token)}”, head{NBSP}{explanation.head}")


def named_dimensions(products: np.ndarray, largest: list[int], plot_px: float) -> list[int]:
    """Of the dimensions ``largest`` (largest product first), those whose names ("d12") are drawn: each, unless its
    name would overlap one already chosen on the same side of 0, at ``plot_px`` px for the (hd,) ``products``' bars.
    A name sits beyond its bar's end, above a product ≥ 0 and under one < 0, centred on the bar: two names on one
    side need their centres as far apart as half their widths together.  The largest is always named, and a name is
    never left out for a smaller product's."""
    bar_px = plot_px / products.shape[0]  # the x axis spans the bars, one a dimension
    named: list[int] = []
    for d in largest:
        half = margins.text_px([f"d{d}"]) / 2
        if all(abs(d - e) * bar_px >= half + margins.text_px([f"d{e}"]) / 2 for e in named
               if (products[e] >= 0) == (products[d] >= 0)):
            named.append(d)
    return named


def products_range(products: np.ndarray, named: list[int], plot_px: float) -> list[float] | None:
    """The y range of the (hd,) ``products``' bars, from 0, on a plot ``plot_px`` tall: every bar, and the names of
    the ``named`` ones beyond their ends (:data:`NAME_PX`), and no more (Plotly's autorange adds a name's height and
    a twentieth of the plot at both ends, named bar or not).  None where every product is 0 (Plotly's own range).
    Only finite products count: a product of ±inf (past float32's range) or NaN has no bar (:func:`_not_drawn`)."""
    values = np.asarray(products, dtype=np.float64)
    finite = values[np.isfinite(values)]
    high, low = max(0.0, float(finite.max(initial=0.0))), min(0.0, float(finite.min(initial=0.0)))
    if high == low:
        return None
    named = [d for d in named if np.isfinite(values[d])]
    top, bottom, unit = high, low, (high - low) / plot_px  # unit: the y a px is worth
    for _ in range(50):  # each pass widens the range less: the names' share of the plot is fixed
        top = max([high] + [float(values[d]) + NAME_PX * unit for d in named if values[d] >= 0])
        bottom = min([low] + [float(values[d]) - NAME_PX * unit for d in named if values[d] < 0])
        unit = (top - bottom) / plot_px
    return [bottom, top]


NOT_DRAWN_NAMED = 4  # the products without a bar the subtitle names; more are counted


def _not_drawn(products: np.ndarray) -> str:
    """The subtitle's words for the products that have no bar, a product of ±inf or NaN (Plotly draws no bar of a
    value that is not finite): "No bar for d3 = inf, d7 = nan: a bar draws only a finite product."; "" where every
    product is finite."""
    dims = np.flatnonzero(~np.isfinite(products))
    if dims.size == 0:
        return ""
    named = ", ".join(f"d{d}{NBSP}={NBSP}{products[d]}" for d in dims[:NOT_DRAWN_NAMED])
    more = f" and {dims.size - NOT_DRAWN_NAMED:,} more" if dims.size > NOT_DRAWN_NAMED else ""
    return f"No bar for {named}{more}: a bar draws only a finite product."


def products_figure(explanation: WeightExplanation, *, top: int = 5, height: int = 360) -> go.Figure:
    """Bars of q_i[d]·k_j[d] for every dimension d of the head; of the ``top`` largest by magnitude, those whose names
    fit beside each other on the panel beside the map (:data:`PANEL_PX`; :func:`named_dimensions`) are named on
    their bars (the hover names every bar; a product of ±inf or NaN has no bar, and the subtitle names it); the title
    adds them up to the score, the scaled score, what the softmax took where the module changed it, and the weight (or
    the mask's reason)."""
    products = np.asarray(explanation.products, dtype=np.float32)  # (hd,)
    largest = [int(d) for d in explanation.largest(top)]
    drawn = [d for d in largest if np.isfinite(products[d])]  # a name sits on a bar: none on one that is not drawn
    # r: room for half a two-digit tick label where Plotly's ticks end on the last bar (15 of 16)
    margin_l, margin_r = margins.beside(), 14
    named = named_dimensions(products, drawn, PANEL_PX - margin_l - margin_r)
    text = np.full(explanation.head_dim, "", dtype=object)
    text[named] = [f"d{d}" for d in named]
    bars = {
        "type": "bar", "x": np.arange(explanation.head_dim, dtype=np.float32), "y": products, "name": "q[d]·k[d]",
        "text": text, "textposition": "outside", "cliponaxis": False,
        "customdata": np.stack([explanation.query_vector, explanation.key_vector], axis=1).astype(np.float32),
        "marker": {"color": np.where(products >= 0, POSITIVE, NEGATIVE).astype(object)},
        "hovertemplate": ("dimension %{x}<br>q[d] = %{customdata[0]:.4f}<br>k[d] = %{customdata[1]:.4f}"
                          "<br>q[d]·k[d] = %{y:.4f}<extra></extra>"),
    }
    sums = (f"Σ q[d]·k[d] = score{NBSP}{_score(explanation.score)}   {_divisor_text(explanation)} = scaled{NBSP}"
            f"{_score(explanation.scaled)}<br>")
    if explanation.masked:
        sums += f"→ masked: weight{NBSP}0"
        subtitle = safe_label(explanation.reason or "")
    else:
        taken = (f"→ the softmax takes{NBSP}{_score(explanation.masked_score)} " if explanation.input_changed else "")
        sums += f"{taken}→ softmax over row {explanation.query}: weight{NBSP}{explanation.weight:.4f}"
        subtitle = ""
    if explanation.stand_in:
        subtitle = " ".join(filter(None, [subtitle, safe_label(explanation.stand_in)]))
    subtitle = " ".join(filter(None, [subtitle, _not_drawn(products)]))
    title, title_lines = _wrapped(f"{_cell_name(explanation)}<br>{sums}")
    subtitle, subtitle_lines = _wrapped(subtitle, 11) if subtitle else ("", 0)
    top = TITLE_ROOM_PX + LINE_PX[13] * title_lines + LINE_PX[11] * subtitle_lines  # the title above the bars' names
    bottom = margins.under_axis()
    plot_px = height - 120 - bottom  # the figure is ``height - 120`` tall but for its title's lines
    y_range = products_range(products, named, plot_px)
    layout = {
        "title": margins.title(title, 13, subtitle={"text": subtitle, "font": {"size": 11}}),
        "height": top + plot_px + bottom, "margin": {"l": margin_l, "r": margin_r, "t": top, "b": bottom},
        "showlegend": False, "bargap": 0.1,
        "uniformtext": {"minsize": 10, "mode": "show"},
        "xaxis": {"title": margins.axis_title(f"dimension d (0 … {explanation.head_dim - 1})"), "zeroline": False},
        "yaxis": {"title": {"text": "q[d]·k[d]"}, "zeroline": True, **({"range": y_range} if y_range else {})},
        "meta": {"largest": largest, "named": named, "score": explanation.score, "divisor": explanation.divisor},
    }
    return go.Figure(data=[bars], layout=layout, _validate=False)


def _token_axis(tokens, n: int, max_ticks: int = MAX_TICKS) -> dict:
    """A numeric position axis with at most ``max_ticks`` token tick labels (escaped)."""
    step = max(1, math.ceil(n / max_ticks))
    positions = list(range(0, n, step))
    return {"tickmode": "array", "tickvals": positions, "ticktext": [safe_label(tokens[p]) for p in positions],
            "tickangle": -60, "range": [-0.5, n - 0.5], "type": "linear",
            **margins.LABELS_HELD}


def _hover_names(tokens, n: int) -> np.ndarray:
    """Every position's token, escaped (Plotly renders HTML in hover text); the hover writes ``j: piece``."""
    return np.array([safe_label(tokens[p]) for p in range(n)], dtype=object)


BARS_UP_TO = 64  # positions drawn as bars; a longer row is a step line (one SVG path, not a path a bar)


def _position_bars(values: np.ndarray, codes: np.ndarray, panel: int, customdata, hovertemplate: str,
                   name: str, positions: np.ndarray | None = None, n: int | None = None,
                   line: str = PLAIN) -> list[dict]:
    """One panel's ``values`` at ``positions`` (all n positions unless given), coloured by code (plain, hidden,
    highlighted): bars up to ``BARS_UP_TO`` positions in the row (``n``); beyond, a filled step line (``line``
    its colour) with the highlighted positions as dots (a browser draws a bar chart of 1,024 positions far slower
    than one line)."""
    suffix = "" if panel == 1 else str(panel)
    positions = np.arange(values.shape[0]) if positions is None else positions  # (m,)
    x = positions.astype(np.float32)  # (m,)
    axes = {"xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}
    if (n or values.shape[0]) <= BARS_UP_TO:
        return [{"type": "bar", "x": x, "y": values.astype(np.float32), **axes, "name": name,
                 "customdata": customdata, "hovertemplate": hovertemplate,
                 "marker": {"color": POSITION_COLORS[codes]}}]
    picked = np.flatnonzero(codes == HIGHLIGHT_CODE)
    return [{"type": "scatter", "mode": "lines", "x": x, "y": values.astype(np.float32), **axes,
             "name": name, "customdata": customdata, "hovertemplate": hovertemplate,
             "line": {"shape": "hvh", "width": 1, "color": line}, "fill": "tozeroy"},
            {"type": "scatter", "mode": "markers", "x": x[picked], "y": values[picked].astype(np.float32),
             **axes, "name": f"{name} (selected)", "hoverinfo": "skip", "marker": {"color": HIGHLIGHT, "size": 7}}]


def _panels(titles: list[str], axes: list[dict], panel_px: int, gap_px: int) -> tuple[dict, int, int]:
    """Layout of panels stacked top to bottom, each ``panel_px`` high with its own x axis (``axes``) and its title
    above it, wrapped to the panel's width (:func:`_wrapped`, at 12 px); between two panels ``gap_px`` (for the upper
    one's tick labels and axis title) and the lower one's title lines.  Returns the layout, the plot's height in px and
    the first title's lines (they sit in the top margin)."""
    wrapped = [_wrapped(title, 12) for title in titles]
    gaps = [0] + [gap_px + LINE_PX[12] * lines for _, lines in wrapped[1:]]  # px above each panel
    plot_px = panel_px * len(titles) + sum(gaps)
    layout, annotations, top = {}, [], plot_px
    for index, ((title, _), axis) in enumerate(zip(wrapped, axes)):
        suffix = "" if index == 0 else str(index + 1)
        top -= gaps[index]
        layout[f"xaxis{suffix}"] = {**axis, "anchor": f"y{suffix}", "domain": [0.0, 1.0]}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": [round(max(0, top - panel_px) / plot_px, 6),
                                                                          round(top / plot_px, 6)]}
        # from the figure's left edge, as its title (the plot's left margin is margins.beside()): a title centred
        # over a narrow plot leans out of the figure on the right, where Plotly cuts it
        annotations.append({"text": title, "x": 0, "xref": "paper", "xanchor": "left",
                            "xshift": margins.TITLE_INSET_PX - margins.beside(), "align": "left",
                            "y": round(top / plot_px, 6),
                            "yref": "paper", "yanchor": "bottom", "showarrow": False, "font": {"size": 12}})
        top -= panel_px
    return {**layout, "annotations": annotations}, plot_px, wrapped[0][1]


def row_softmax_figure(explanation: WeightExplanation, tokens, *, height: int = 420) -> go.Figure:
    """Row ``query``'s scaled scores over every key (the softmax's input) above the softmax of that row (the
    weights), key ``key`` highlighted in both — or, where the module changed them before the softmax (a soft-cap, a
    mask filled with 0: ``input_changed``), the numbers the softmax took, and the title's formula is built on them.
    The keys the mask hides are a grey trace of their own at 0 in the upper panel, their hover saying the softmax
    sees −∞ there; each position's token is sent once a panel."""
    n = explanation.row_weights.shape[0]
    hidden = np.asarray(explanation.row_hidden, dtype=bool)  # (n,)
    codes = np.where(hidden, HIDDEN_CODE, PLAIN_CODE)  # (n,)
    codes[explanation.key] = HIGHLIGHT_CODE
    names = _hover_names(tokens, n)  # (n,)
    seen, unseen = np.flatnonzero(~hidden), np.flatnonzero(hidden)  # key positions the query sees, the mask hides
    changed = explanation.input_changed  # the softmax took other numbers than the scaled scores: those are drawn
    data = [
        *_position_bars(np.asarray(explanation.row_masked if changed else explanation.row_scaled)[seen],
                        codes[seen], 1, names[seen],
                        "key %{x}: %{customdata}<br>softmax input %{y:.4f}<extra></extra>", "scaled", seen, n),
        *(_position_bars(np.zeros(unseen.shape[0], dtype=np.float32), codes[unseen], 1, None,
                         "key %{x}<br>softmax input −∞: the mask hides this key<extra></extra>", "hidden", unseen, n,
                         line=MASKED_COLOR) if unseen.size else []),
        *_position_bars(np.asarray(explanation.row_weights), codes, 2, names,
                        "key %{x}: %{customdata}<br>weight %{y:.4f}<extra></extra>", "weight"),
    ]
    axis = _token_axis(tokens, n)
    layout, plot_px, first_lines = _panels(
        [f"row {explanation.query}: the softmax's input (not the scaled scores: the module changed them)" if changed
         else f"row {explanation.query}: scaled scores (the softmax's input)",
         f"softmax over row {explanation.query}: the weights (sum to 1)"],
        [{**axis, "showticklabels": False}, {**axis, "matches": "x", **margins.turned_title("key token")}],
        panel_px=max(60, (height - 170) // 2), gap_px=8)
    if explanation.masked:
        how = f"key {explanation.key} is hidden: exp(−∞) = 0, so its weight is 0"
    elif changed:
        how = (f"weight = exp({_score(explanation.masked_score)}) ÷ Σ over the row's visible keys of exp(softmax "
               f"input) = {explanation.weight:.4f}")
    else:
        how = (f"weight = exp({_score(explanation.scaled)}) ÷ Σ over the row's visible keys of exp(scaled) = "
               f"{explanation.weight:.4f}")
    title, title_lines = _wrapped(f"{_cell_name(explanation)}<br>{how}")
    top = TITLE_ROOM_PX + LINE_PX[13] * title_lines + LINE_PX[12] * first_lines  # the title, then the first panel's
    bottom = margins.turned_axis(axis["ticktext"])
    layout.update(
        title=margins.title(title, 13), height=top + plot_px + bottom,
        showlegend=False, bargap=0.1,
        margin={"l": margins.beside(), "r": margins.TURNED_LABELS_PX, "t": top, "b": bottom},
        shapes=[{"type": "line", "x0": explanation.key, "x1": explanation.key, "xref": xref, "y0": 0, "y1": 1,
                 "yref": f"{yref} domain", "line": {"color": HIGHLIGHT, "width": 1, "dash": "dot"}}
                for xref, yref in (("x", "y"), ("x2", "y2"))])
    return go.Figure(data=data, layout=layout, _validate=False)


def _selection_text(positions: tuple[int, ...], tokens, shown: int = 8) -> str:
    words = [f"{p} “{safe_label(tokens[p])}”" for p in positions[:shown]]
    more = f" … and {len(positions) - shown} more" if len(positions) > shown else ""
    return ", ".join(words) + more


def summed_attention_figure(sums: AttentionSums, tokens, *, height: int | None = None) -> go.Figure:
    """Bar charts of a several-token selection: the selected queries' attention per key (mean; the sum in the
    hover) and what each query gives the selected keys in total; the selected positions highlighted."""
    if sums.per_key_sum is None and sums.per_query_total is None:
        raise ValueError("sums hold no selection to draw")
    n = len(tokens)
    names = _hover_names(tokens, n)
    axis = _token_axis(tokens, n)
    data, titles, axes = [], [], []
    if sums.per_key_sum is not None:
        codes = np.full(n, PLAIN_CODE)
        codes[list(sums.keys)] = HIGHLIGHT_CODE  # the keys selected below, if any
        customdata = np.stack([names, np.asarray(sums.per_key_sum, dtype=np.float32).astype(object)], axis=1)
        data.extend(_position_bars(np.asarray(sums.per_key_mean), codes, len(titles) + 1, customdata,
                                   "key %{x}: %{customdata[0]}<br>mean %{y:.4f}<br>sum %{customdata[1]:.4f}"
                                   "<extra></extra>",
                                   "mean over the selected queries"))
        # the positions beside the tokens they are (the queries), not after "per key", where they read as keys
        titles.append(f"{sums.stage} of the {amount(len(sums.queries), 'selected query', 'selected queries')} "
                      f"({_selection_text(sums.queries, tokens)}), averaged per key")
        axes.append({**axis, **margins.turned_title("key token")})
    if sums.per_query_total is not None:
        codes = np.full(n, PLAIN_CODE)
        codes[list(sums.queries)] = HIGHLIGHT_CODE  # the queries selected above, if any
        data.extend(_position_bars(np.asarray(sums.per_query_total), codes, len(titles) + 1, names,
                                   "query %{x}: %{customdata}<br>to the selected keys %{y:.4f}<extra></extra>",
                                   "total to the selected keys"))
        titles.append(f"{sums.stage} each query gives the {amount(len(sums.keys), 'selected key')} "
                      f"({_selection_text(sums.keys, tokens)}) in total")
        axes.append({**axis, **margins.turned_title("query token")})
    bottom = margins.turned_axis(axis["ticktext"])
    layout, plot_px, first_lines = _panels(titles, axes, panel_px=max(80, (height or 300) - 150),
                                           gap_px=bottom + margins.TITLE_GAP_PX)
    top = TITLE_ROOM_PX + LINE_PX[13] + LINE_PX[12] * first_lines  # the title, then the first panel's
    layout.update(height=top + plot_px + bottom, showlegend=False, bargap=0.1,
                  title=margins.title(f"head {sums.head}: several tokens at once", 13),
                  margin={"l": margins.beside(), "r": margins.TURNED_LABELS_PX, "t": top, "b": bottom})
    return go.Figure(data=data, layout=layout, _validate=False)
