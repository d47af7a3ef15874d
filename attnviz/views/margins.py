"""Margins that already fit a figure's tick labels, colour bar and legend, so that Plotly draws it in one pass.

Plotly's automargin (on in Plotly's and Streamlit's templates) draws a figure, measures what sticks out of the
margins — tick labels, a colour bar, a legend — and, if anything does, draws the whole figure again with wider
margins.  A figure whose margins already hold them is drawn once.  These estimates err wide; where a label is
wider still, automargin widens the margin and draws the figure again: it is right either way, only slower.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

CHAR_PX = 7  # a 12 px label's average character width, rounded up (Streamlit's Source Sans and Plotly's Open Sans)
TITLE_PX = 34  # an axis title beside its tick labels, with the space between them
TICK_PAD_PX = 24  # between the plot and its tick labels, plus slack for wide glyphs (", <, W) and short labels
NUMBER_PX = 7 * CHAR_PX  # a numeric axis' tick labels ("−0.0025", "1.5k")
LINE_PX = 26  # a line of tick labels, upright
COLORBAR_PX = 100  # a vertical colour bar right of the plot: the bar, its tick labels and its title
LEGEND_BELOW_PX = 50  # a one-row horizontal legend under the plot
LEGEND_ROW_PX = 24  # a row of a horizontal legend
# A horizontal legend at the figure's foot, in the bottom margin (which must hold its rows): Plotly's automargin does
# not move a legend placed on the container, where one placed under the plot (a paper position) makes it redraw.
LEGEND_AT_FOOT = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0}
TURNED_LABELS_PX = 20  # right of a horizontal axis whose tick labels are turned: the last one leans out

# An axis whose labels these margins hold: Plotly's default for a numeric axis hides any tick label that sticks out of
# the figure, testing each label's box against the figure once per label it places (quadratic in the labels);
# "allow" skips that test.
LABELS_HELD = {"ticklabeloverflow": "allow"}


def text_px(labels: Iterable[str]) -> int:
    """The widest of ``labels`` in pixels, at :data:`CHAR_PX` a character (Plotly's HTML escapes unescaped)."""
    return CHAR_PX * max((len(html.unescape(str(label))) for label in labels), default=0)


def beside(labels: Iterable[str] | None = None, *, title: bool = True) -> int:
    """The margin beside a vertical axis with these tick labels (``None``: numbers) and, if ``title``, a title."""
    width = NUMBER_PX if labels is None else text_px(labels)
    return TICK_PAD_PX + width + (TITLE_PX if title else 0)


def across(labels: Iterable[str], *, angle: float = 60, title: bool = True) -> int:
    """The margin above or below a horizontal axis whose tick labels are turned ``angle`` degrees."""
    height = text_px(labels) * math.sin(math.radians(abs(angle))) + LINE_PX * math.cos(math.radians(angle))
    return TICK_PAD_PX + math.ceil(height) + (TITLE_PX if title else 0)
