"""Margins that already fit a figure's tick labels, colour bar and legend, so that Plotly draws it in one pass.

Plotly's automargin (on in Plotly's and Streamlit's templates) draws a figure, measures what sticks out of the
margins — tick labels, a colour bar, a legend — and, if anything does, draws the whole figure again with wider
margins.  A figure whose margins already hold them is drawn once.  These estimates err wide; where a label is
wider still, automargin widens the margin and draws the figure again: it is right either way, only slower.  The room
for turned tick labels and their axis title (:func:`turned_axis`) is worked out from Source Sans' own character widths
instead, and the axis turns automargin off, which would leave a band past the title: a character not in the table
counts an em, so that room errs wide too.

The top :data:`MODEBAR_PX` of every figure is the modebar's: Plotly draws its toolbar over the figure's top right
corner, on hover where the screen has a pointer that hovers and always where it has none (a touch screen), so a title
there would sit under its buttons on a narrow chart.  A title starts under that row (:func:`title`), in a top margin
made for both (:func:`title_top`).  A chart of a set height takes that margin from the figure, not from its plot: it
names its plot's height, and :func:`height` adds the margins.  Plotly does not wrap a title: one wider than its
figure is cut at the figure's edge, so a narrow figure's title is broken into lines that fit (:func:`wrapped_title`).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable

import numpy as np

CHAR_PX = 7  # a 12 px label's average character width, rounded up (Streamlit's Source Sans and Plotly's Open Sans)
TITLE_PX = 34  # an axis title beside its tick labels, with the space between them
TICK_PAD_PX = 24  # between the plot and its tick labels, plus slack for wide glyphs (", <, W) and short labels
NUMBER_PX = 7 * CHAR_PX  # a numeric axis' tick labels ("−0.0025", "1.5k")
LINE_PX = 26  # a line of tick labels, upright
TICK_FONT_PX = 12  # a tick label's font size where the figure sets none (Streamlit's Plotly theme)
AXIS_TITLE_FONT_PX = 14  # an axis title's font size where the figure sets none (Streamlit's Plotly theme)
# Under a horizontal axis, as Chromium draws it (benchmarks/README.md, "The room under an axis"): its upright tick
# labels' boxes start TICK_LABEL_TOP_PX under the plot (TICKS_OUT_PX lower where the axis draws its ticks outward),
# each TICK_LINE_EM of its font tall (the line's leading included); its title's box is TITLE_LINE_EM of its font tall.
TICK_LABEL_TOP_PX = 9
TICKS_OUT_PX = 8
TICK_LINE_EM = 1.3
TITLE_LINE_EM = 1.36
# A horizontal axis' title standoff.  Plotly sets a title whose standoff is under 0.9 em of its font right under its
# tick labels' box (the lines' leading keeps the glyphs apart); a wider standoff moves it down.  Automargin reserves
# under the tick labels the standoff, TITLE_RESERVED_EM of the title's font (Plotly's CAP_SHIFT) and a pad, the
# figure's narrowest margin up to AUTOMARGIN_PAD_PX: past 0.9 em a standoff is a band left empty under the title.
AXIS_TITLE_STANDOFF_PX = 0
TITLE_RESERVED_EM = 0.7
AUTOMARGIN_PAD_PX = 12
# Tick labels turned from the horizontal, as Chromium draws them (benchmarks/README.md, "The room under and above
# turned labels"): each label's box starts TURNED_LABEL_GAP_PX from the plot (under it, or above it on an axis at the
# top) and reaches as far as its text's width times the sine of the angle and a line (TICK_LINE_EM) times its cosine,
# and up to TURNED_GLYPH_PX further where a glyph reaches past its advance ("Y", "j").  Plotly's automargin reserves
# about a pad more past such an axis' title than Chromium draws, and sets a title under the labels TURNED_TITLE_RISE_EM
# of its font higher than its standoff says: an axis whose margin holds these labels and its title turns automargin
# off (:func:`turned_title`), and its title's standoff is that rise, so that the title starts where the labels end.
TURNED_LABEL_GAP_PX = 12
TURNED_GLYPH_PX = 2
TURNED_TITLE_RISE_EM = 0.91
# Source Sans' advance widths (Streamlit's font for Plotly's text), in thousandths of an em, of the printable ASCII
# characters from " " to "~"; SOURCE_SANS_MORE: the other characters a tick label often holds (a token's leading
# space drawn as "·", a label cut short with "…").  A character in neither is counted an em wide.
SOURCE_SANS_ASCII = (
    200, 289, 426, 497, 497, 824, 609, 249, 303, 303, 418, 497, 249, 311, 249, 350, 497, 497, 497, 497, 497, 497, 497,
    497, 497, 497, 249, 249, 497, 497, 497, 425, 847, 543, 588, 571, 615, 527, 494, 617, 652, 263, 479, 579, 486, 727,
    647, 664, 566, 664, 569, 534, 536, 645, 515, 786, 513, 476, 539, 303, 350, 303, 497, 500, 542, 504, 553, 456, 555,
    496, 292, 504, 544, 246, 247, 495, 255, 829, 547, 542, 555, 555, 347, 419, 338, 544, 467, 719, 446, 467, 425, 303,
    241, 303, 497)
SOURCE_SANS_MORE = {"·": 249, "…": 948}
COLORBAR_PX = 100  # a vertical colour bar right of the plot: the bar, its tick labels and its title
LEGEND_BELOW_PX = 50  # a one-row horizontal legend under the plot
LEGEND_ROW_PX = 24  # a row of a horizontal legend
LEGEND_ENTRY_PX = 20  # a row of a legend of one entry a row (Plotly draws them 19 px apart)
LEGEND_PAD_PX = 10  # a legend's padding above and below its rows
LEGEND_FONT_PX = 13  # a legend label's 12 px text, measured as a 13 px title's (Plotly's Open Sans is the wider)
LEGEND_SAMPLE_PX = 45  # a legend entry's symbol and the gaps beside it, left of its label
# px: the page's column beside the sidebar in an 800 px window: the narrowest a chart across the page is drawn, for
# which such a chart breaks its titles and legend labels into lines and spaces its labels (a figure cannot ask the
# browser its width)
PAGE_MIN_PX = 468
# A horizontal legend at the figure's foot, in the bottom margin (which must hold its rows): Plotly's automargin does
# not move a legend placed on the container, where one placed under the plot (a paper position) makes it redraw.
LEGEND_AT_FOOT = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0}
# Plotly's modebar: a row of 26 px buttons 2 px under the figure's top edge (its stylesheet's .modebar), and a gap
MODEBAR_PX = 30
THEME_TITLE_PX = 16  # a title's font size where the figure sets none (Streamlit's Plotly theme)
# a title line's average character width in ems, at least what Chromium draws for the Steps page's bold titles in
# Streamlit's Source Sans, whose lines are narrower than CHAR_PX's tick labels (benchmarks/README.md, "Chart titles")
TITLE_CHAR_EM = 0.45
LINE_EM = 1.3  # Plotly's line spacing in ems: Streamlit's Source Sans rises 1 em above its baseline, 0.3 under it
TITLE_GAP_PX = 10  # between a title and what is under it
TITLE_INSET_PX = 4  # a title's left end, in from the figure's left edge (Streamlit's Plotly theme: x 0, pad.l 4)
SUBPLOT_TITLE_PX = 20  # a line of a subplot's title (an annotation over its panel, make_subplots' subplot_titles)
TURNED_LABELS_PX = 20  # right of a horizontal axis whose tick labels are turned: the last one leans out

# An axis whose labels these margins hold: Plotly's default for a numeric axis hides any tick label that sticks out of
# the figure, testing each label's box against the figure once per label it places (quadratic in the labels);
# "allow" skips that test.
LABELS_HELD = {"ticklabeloverflow": "allow"}


# Plotly's autorange pads a range of bars or markers by a twentieth of the axis' length at each end, which is a little
# more than a twentieth of the data's span: a sixteenth holds it
AUTORANGE_PAD = 1 / 16


def text_px(labels: Iterable[str]) -> int:
    """The widest of ``labels`` in pixels, at :data:`CHAR_PX` a character (Plotly's HTML escapes unescaped)."""
    return CHAR_PX * max((len(html.unescape(str(label))) for label in labels), default=0)


def beside(labels: Iterable[str] | None = None, *, title: bool = True) -> int:
    """The margin beside a vertical axis with these tick labels (``None``: numbers) and, if ``title``, a title."""
    width = NUMBER_PX if labels is None else text_px(labels)
    return TICK_PAD_PX + width + (TITLE_PX if title else 0)


def number_labels(low: float, high: float) -> list[str]:
    """The widest tick labels Plotly writes on a linear axis from ``low`` to ``high``: the numbers at a tenth of the
    span, rounded down to 1, 2 or 5 × 10ⁿ (Plotly's own step is as fine or coarser, so its labels are as short or
    shorter), and the last such number within :data:`AUTORANGE_PAD` of the span past each end but 0, where Plotly's
    autorange may put a tick with one more digit (bars up to 950: "1000").  An empty list where the span is not a
    finite number (the caller falls back to :data:`NUMBER_PX`)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    span = high - low
    if span <= 0:
        return [f"{high:g}"]
    rough = span / 10
    power = 10 ** math.floor(math.log10(rough))
    step = max(m * power for m in (1, 2, 5) if m * power <= rough)
    decimals = max(0, -math.floor(math.log10(step)))
    # the last tick the padded range may reach past each end but 0 (Plotly does not pad bars past their base)
    past = [math.floor((high + AUTORANGE_PAD * span) / step) * step] if high else []
    past += [math.ceil((low - AUTORANGE_PAD * span) / step) * step] if low else []
    return [f"{value:.{decimals}f}".replace("-", "−") for value in (low, high, low + step, high - step, *past)]


def beside_numbers(low: float, high: float, *, title: bool = True) -> int:
    """The margin beside a linear axis from ``low`` to ``high`` (its :func:`number_labels`) and, if ``title``, its
    title: no wider than :func:`beside` for any number, narrower for short ones ("25", "0.3")."""
    labels = number_labels(low, high)
    width = min(text_px(labels), NUMBER_PX) if labels else NUMBER_PX
    return TICK_PAD_PX + width + (TITLE_PX if title else 0)


def beside_values(*values) -> int:
    """:func:`beside_numbers` for an axis from 0 to the largest finite number of ``values`` (arrays; 0 where none is
    finite), as a loss or a |Δ| is drawn."""
    finite = [float(np.max(one[np.isfinite(one)])) for one in map(np.asarray, values) if np.isfinite(one).any()]
    return beside_numbers(0.0, max([0.0, *finite]))


def legend_one_a_row(labels: Iterable[str]) -> tuple[dict, int]:
    """A legend at the figure's foot of one entry a row (``entrywidth`` the plot's width), whatever the page's width,
    and the px it takes: ``labels`` (lines split at ``<br>``) stacked."""
    lines = sum(label.count("<br>") + 1 for label in labels)
    return ({**LEGEND_AT_FOOT, "entrywidth": 1, "entrywidthmode": "fraction"},
            lines * LEGEND_ENTRY_PX + LEGEND_PAD_PX)


def legend_label(label: str, plot_px: float) -> str:
    """A legend label in lines (``<br>``) that fit an entry ``plot_px`` wide beside its sample (Plotly neither wraps
    a legend label nor cuts it short of the figure's edge)."""
    return wrapped_title(label, plot_px - LEGEND_SAMPLE_PX + TITLE_INSET_PX, LEGEND_FONT_PX)


def across(labels: Iterable[str], *, angle: float = 60, title: bool = True) -> int:
    """The margin above or below a horizontal axis whose tick labels are turned ``angle`` degrees."""
    height = text_px(labels) * math.sin(math.radians(abs(angle))) + LINE_PX * math.cos(math.radians(angle))
    return TICK_PAD_PX + math.ceil(height) + (TITLE_PX if title else 0)


def label_px(label: str, size: float = TICK_FONT_PX) -> float:
    """The width of one label of ``size`` px in Source Sans (Plotly's HTML escapes unescaped): each character's
    advance, an em for one not in :data:`SOURCE_SANS_ASCII` or :data:`SOURCE_SANS_MORE`."""
    def em(char: str) -> int:
        code = ord(char) - 32
        return SOURCE_SANS_ASCII[code] if 0 <= code < len(SOURCE_SANS_ASCII) else SOURCE_SANS_MORE.get(char, 1000)
    return size * sum(map(em, html.unescape(str(label)))) / 1000


TURNED_DEGREES = 60  # the turn of a turned axis' tick labels from the horizontal (its ``tickangle``: -60)


def turned_labels(labels: Iterable[str], *, angle: float = TURNED_DEGREES) -> int:
    """The px from the plot's edge to the far end of tick labels (:data:`TICK_FONT_PX`) turned ``angle`` degrees
    from the horizontal (:data:`TURNED_DEGREES`, or 90 where a grid's head labels stand), as Chromium draws them:
    the widest label's box."""
    turn = math.radians(abs(angle))  # a tickangle of -90 stands as 90 does
    widest = max((label_px(label, TICK_FONT_PX) for label in labels), default=0.0)
    box = widest * math.sin(turn) + math.ceil(TICK_LINE_EM * TICK_FONT_PX) * math.cos(turn) + TURNED_GLYPH_PX
    return TURNED_LABEL_GAP_PX + math.ceil(box)


def labels_under(labels: Iterable[str], *, angle: float = 0) -> int:
    """The margin under a horizontal axis with no title whose tick labels stand upright (``angle`` 0) or are turned
    ``angle`` degrees, as Chromium draws them: an upright line's box, or the turned labels' box
    (:func:`turned_labels`), no more."""
    if angle == 0:
        return TICK_LABEL_TOP_PX + math.ceil(TICK_LINE_EM * TICK_FONT_PX)
    return turned_labels(labels, angle=angle)


def turned_axis(labels: Iterable[str]) -> int:
    """The margin under (or above) a horizontal axis whose tick labels are turned (:func:`turned_labels`) and whose
    title is a :func:`turned_title`: the labels' box, then the title's, no more (the axis turns Plotly's automargin
    off, which would reserve a band past the title)."""
    return turned_labels(labels) + math.ceil(TITLE_LINE_EM * AXIS_TITLE_FONT_PX)


def turned_title(text: str, *, under: bool = True) -> dict:
    """A horizontal axis' settings for tick labels turned and ``text`` as its title (:data:`AXIS_TITLE_FONT_PX`), in
    the margin :func:`turned_axis` makes: the title starts where the labels' box ends (``under`` the plot, or above
    it on an axis at the top), and Plotly's automargin is off (that margin holds both: none is widened)."""
    standoff = math.ceil(TURNED_TITLE_RISE_EM * AXIS_TITLE_FONT_PX) if under else 0
    return {"title": {"text": text, "standoff": standoff}, "automargin": False}


def under_axis(tick_size: float = TICK_FONT_PX, *, ticks_out: bool = False,
               title_size: float = AXIS_TITLE_FONT_PX) -> int:
    """The margin under a horizontal axis of upright one-line tick labels ``tick_size`` px (``ticks_out``: under
    ticks drawn outward) and its :func:`axis_title` ``title_size`` px: what Chromium draws there, or what Plotly's
    automargin reserves for it where that is more (a margin narrower than that it widens, drawing the figure again)."""
    labels = TICK_LABEL_TOP_PX + (TICKS_OUT_PX if ticks_out else 0) + math.ceil(TICK_LINE_EM * tick_size)
    drawn = labels + TITLE_LINE_EM * title_size
    reserved = labels + AXIS_TITLE_STANDOFF_PX + TITLE_RESERVED_EM * title_size + AUTOMARGIN_PAD_PX
    return math.ceil(max(drawn, reserved))


def axis_title(text: str) -> dict:
    """A horizontal axis' ``title``: ``text`` right under its tick labels (:data:`AXIS_TITLE_STANDOFF_PX`)."""
    return {"text": text, "standoff": AXIS_TITLE_STANDOFF_PX}


def title(text: str, size: float | None = None, **more) -> dict:
    """A figure's ``layout.title``: ``text`` at ``size`` px (None: the theme's), its first line under the modebar's
    row.  Plotly sets a one-line title's baseline 0.7 em under ``pad.t`` (its top 0.3 em above ``pad.t``) and the first
    baseline of a title of several lines at ``pad.t`` (its top 1 em above): the pad adds that rise.  ``more``: other
    title settings (a ``subtitle``)."""
    rise = 1.0 if "<br>" in text else 0.3
    font = {"font": {"size": size}} if size else {}
    return {"text": text, **font, "y": 1, "yref": "container", "yanchor": "top",
            "pad": {"t": MODEBAR_PX + math.ceil(rise * (size or THEME_TITLE_PX))}, **more}


def title_top(lines: int = 1, size: float = THEME_TITLE_PX, above_plot: int = 0) -> int:
    """The top margin of a figure whose :func:`title` has ``lines`` lines of ``size`` px: the modebar's row, the
    title, a gap, and ``above_plot`` px more between the title and the plot (tick labels or panel titles above it)."""
    return MODEBAR_PX + math.ceil(LINE_EM * size * lines) + TITLE_GAP_PX + above_plot


def height(plot_px: int, margin: dict) -> int:
    """The height of a figure whose plot is ``plot_px`` tall between ``margin``'s top (the modebar's row, the title and
    what sits above the plot) and bottom: a chart of a set height grows with its title instead of giving it its plot."""
    return margin["t"] + plot_px + margin["b"]


def title_px(text: str, size: float = THEME_TITLE_PX) -> int:
    """The width of a title's widest line (lines split at ``<br>``; Plotly's HTML escapes unescaped) of ``size`` px:
    :data:`TITLE_CHAR_EM` of the size a character."""
    widest = max((len(html.unescape(line)) for line in text.split("<br>")), default=0)
    return math.ceil(TITLE_CHAR_EM * size * widest)


# where a title's phrase ends: before a bracket opened after a space, after a dash between spaces
_PHRASE_END = re.compile(r" (?=\()|(?<= —) ")


def wrapped_title(text: str, width_px: float, size: float = THEME_TITLE_PX) -> str:
    """``text`` broken into lines (``<br>``) that fit a figure ``width_px`` wide from its :data:`TITLE_INSET_PX`, at
    ``size`` px: between its phrases (before " (", after " — ") where that takes no more lines than breaking at any
    space, else at the spaces that fill each line most.  A word wider than the figure stays whole."""
    room = width_px - TITLE_INSET_PX

    def fill(pieces: list[str]) -> list[str]:
        lines: list[str] = []
        for piece in pieces:
            if lines and title_px(f"{lines[-1]} {piece}", size) <= room:
                lines[-1] = f"{lines[-1]} {piece}"
            else:
                lines.append(piece)
        return lines

    by_words = fill(text.split(" "))
    by_phrases = [line for phrase in _PHRASE_END.split(text) for line in fill(phrase.split(" "))]
    by_phrases = fill(by_phrases)  # phrases that fit on one line together
    return "<br>".join(by_phrases if len(by_phrases) <= len(by_words) else by_words)
