"""The Steps page: one head through its stages, the viewed stage as a before/after pair beside the shape diagram
(highlighted there), its line of code and the running module's source.  ``pages/steps.py`` calls :func:`draw`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import streamlit as st

from attnviz import variants
from attnviz.config import AttentionConfig
from attnviz.stats import row_entropy
from attnviz.trace import Trace
from attnviz.ui.frame import (
    Context,
    beside_shape_diagram,
    book_listing_note,
    plotly_config,
    weights_caption,
)
from attnviz.ui.heads import head_selector, window_selector, within_layer_from_url
from attnviz.ui.share import file_name, layer_part, share_link
from attnviz.ui.state import forget_page_params, page_bind, page_widgets_from_url, url_notices
from attnviz.urlstate import PAIR, STAGE, parse_pair
from attnviz.views import figures, rotation, source, steps
from attnviz.words import amount


def draw(page_run: Context) -> None:
    """The page below its title: the stage picker, the shape diagram with the viewed stage beside it, the source."""
    trace, config = page_run.trace, page_run.trace.config
    st.caption(weights_caption(page_run) + (" · the attention reads norm1(the block's input), the LayerNorm'd residual "
                                            "stream" if page_run.checkpoint else ""))
    book_listing_note(config)  # a 3.3/3.4 class masked by the sidebar: the mask is attnviz's, not the book's
    labels = steps.stage_labels(trace)
    within_layer_from_url("steps", trace, labels, "masked")  # a session's first visit: the link's head, stage, window
    stage = st.segmented_control(
        "Stage", list(labels), format_func=labels.get,
        **page_bind("steps_stage", "masked", lambda s: s in labels, url=STAGE)
    ) or "masked"
    url_notices("steps_stage")
    if (listing := steps.listing_note(trace)) is not None:  # the class shown is the book's, with these changes
        st.caption(listing)
    if (missing := steps.unrecorded_note(trace)) is not None:
        st.caption(missing)

    pair_bind = _pair_from_url(trace, labels)

    with beside_shape_diagram(trace, highlight=stage):
        url_notices("steps_focus", "steps_row0", "steps_col0", "steps_pair")
        head = head_selector("steps_focus", trace.num_heads, why_not=steps.headless_note(trace, stage))
        row0, col0, size = window_selector("steps", trace.n, overview=False, **_window_use(stage, trace.n))
        share_link(page_run.link)  # the URL holds the head, stage, window and pair this run draws
        step = steps.step_text(config, stage, trace.module_run, window=trace.window, hides_future=trace.hides_future)
        st.markdown(f"**{step['what']}**")
        st.code(step["code"], language="python", wrap_lines=True)  # a long line wraps in the column, never cut
        view = HeadWindow(trace, head, row0, col0, size, stage, pair_bind)
        before, after = pair()
        below = STAGE_VIEWS.get(stage, _context)(view, before, after, steps.map_titles(trace, stage))
    if below is not None:  # what needs the page's width, under the shape diagram
        below()

    _source(trace, stage)


@dataclass(frozen=True)
class HeadWindow:
    """One head's maps, cropped to the window on view, and how they are drawn."""

    trace: Trace
    head: int
    row0: int
    col0: int
    size: int
    stage: str = ""  # the stage the page shows: its maps' file names say it
    pair_bind: dict | None = None  # the pair slider's page_bind (None: the run turns fewer than two pairs)

    @property
    def config(self) -> AttentionConfig:
        return self.trace.config

    def crop(self, name: str) -> np.ndarray:
        """The stage's map of this head inside the window: (size, size) at most."""
        return self.window_of(self.trace.attention_map(name, self.head))

    def window_of(self, cells: np.ndarray) -> np.ndarray:
        """An (n, n) array of this head's cropped to the window on view: (size, size) at most."""
        return cells[self.row0 : self.row0 + self.size, self.col0 : self.col0 + self.size]

    def hidden(self) -> np.ndarray:
        """The cells of the window the run hid, as the maps grey them: the causal triangle where the run hides the
        future, and what a sliding window or a user module's own mask hid beyond it (``Trace.hidden_cells``)."""
        n = self.trace.n
        hidden = figures.causal_mask(n) if self.trace.hides_future else np.zeros((n, n), dtype=bool)  # (n, n)
        if (beyond := self.trace.hidden_cells(self.head)) is not None:
            hidden = hidden | beyond
        return self.window_of(hidden)

    def shared(self, *names: str) -> tuple[float, float]:
        """One colour range for a before/after pair of score maps, so equal values look equal."""
        return figures.shared_range([self.crop(name) for name in names])

    def file_name(self, *parts: str | None) -> str:
        """A download's file name: the Steps page, the layer of a checkpoint, the head, the stage, then ``parts``."""
        return file_name("attnviz-steps", layer_part(self.config), f"head{self.head}", self.stage, *parts)

    def heatmap(self, name, title: str, **extra) -> int:
        """A stage's map (by name) or a computed one (an array, drawn as ``as_stage``), at the window's offsets, its
        cells square across a pair's column (:data:`~attnviz.views.steps.PAIR_WIDTH`) and its colour bar under it.
        Its file name: the page's stage and the map's part, before/after as its title starts or ``file``.  Returns
        the map's height above its colour bar: what sits beside it is made as tall."""
        config = self.config
        part = extra.pop("file", None) or (title.split(":")[0] if title.startswith(("before:", "after:")) else name)
        filename = self.file_name(part if isinstance(part, str) and part != self.stage else None)
        if (hidden := self.trace.hidden_cells(self.head)) is not None:  # a window's, a user module's own mask's
            extra.setdefault("hidden", self.window_of(hidden))
        fig = figures.attention_heatmap(self.crop(name) if isinstance(name, str) else name, self.trace.tokens,
                                        extra.pop("as_stage", name), causal=self.trace.hides_future,
                                        dropout=config.effective_dropout,  # the colour scale of kept, rescaled weights
                                        title=title, row_offset=self.row0, col_offset=self.col0,
                                        width=steps.PAIR_WIDTH, scale_below=True, **extra)
        st.plotly_chart(fig, config=plotly_config(filename))
        return fig.layout.height - figures.COLOUR_BAR_BELOW_PX


def _pair_from_url(trace: Trace, labels: dict[str, str]) -> dict | None:
    """The rotary pair the "rotate q, k" stage draws, bound to the URL's ``pair`` on every stage of a run that turns
    two pairs or more (the page keeps it, in the URL too, for that stage, as it keeps the head on the latent's): a
    link's pair, or one the settings no longer have (a smaller head_dim), refused with the page's notice, pair 0
    instead.  A run that turns no pair leaves the URL without one.  The slider's ``page_bind``, or None."""
    pairs = rotation.pair_count(trace) if "rotated_queries" in labels else 0
    page_widgets_from_url("steps_rotation", {"steps_pair": (PAIR, functools.partial(parse_pair, pairs=pairs),
                                                            "showing pair 0" if pairs else "no stage draws a pair")})
    if pairs < 2:
        forget_page_params(PAIR)
        return None
    return page_bind("steps_pair", 0, lambda value: isinstance(value, int) and 0 <= value < pairs, url=PAIR)


def _window_use(stage: str, n: int) -> dict:
    """What the window's sliders do on ``stage`` (``heads.window_selector``'s caption, helps, why_not): the maps'
    window; on the rotation, the first token of each pair figure; on the latent and the K/V groups, nothing."""
    if stage in ("latent", "kv_repeat"):
        shows = (f"its table lists the latent vectors of the first {steps.TABLE_ROWS} tokens" if stage == "latent"
                 else "its table lists which K/V head each query head reads")
        return {"caption": f"{amount(n, 'token')}: the maps of the stages from 1 · QKᵀ on show a window of them; "
                           "this stage draws no map, so the window's sliders move nothing here.",
                "why_not": f"This stage draws no map: {shows}. The window moves the maps of the stages from 1 · QKᵀ "
                           "on, and stays where it is for them."}
    if stage == "rotated_queries":
        count = rotation.PAIR_FIGURE_TOKENS
        return {"caption": f"{amount(n, 'token')}: each pair figure draws {count} tokens, the query figure from the "
                           "first query row, the key figure from the first key column; the angles and the tables "
                           "below list every position.",
                "helps": (f"The first of the {count} tokens the query figure draws.",
                          f"The first of the {count} tokens the key figure draws.")}
    return {}


def pair():
    """Two places for a before/after pair: side by side where two maps fit, one above the other on a narrow
    page (two columns of a narrow page leave each map's cells too narrow a strip to read)."""
    row = st.container(horizontal=True, gap="medium")
    return row.container(width=steps.PAIR_WIDTH), row.container(width=steps.PAIR_WIDTH)


def _latent(view: HeadWindow, before, after, titles) -> Callable[[], None]:
    """The latent's size and the up-projections from it, beside the shape diagram; under it, at the page's width, the
    latent vector of each token."""
    trace, config = view.trace, view.config
    st.caption(f"latent: `{steps.shape_of(trace, 'latent')}` — {config.latent_width} numbers per token, where "
               f"multi-head attention caches keys and values: 2 × d_out = {2 * config.d_out}.")
    st.code("\n".join(filter(None, (source.stage_code(config.variant, name) for name in ("keys", "values")))),
            language="python", wrap_lines=True)  # the up-projections from the latent, wrapped in the column

    def below() -> None:
        st.dataframe(steps.latent_table(trace))  # ten rows high at most: a longer text scrolls in it

    return below


def _rotated_queries(view: HeadWindow, before, after, titles) -> Callable[[], None]:
    """One pair of the head's q and k turned by each position (the pair picked here), beside the shape diagram; under
    it, the page's width: the angle of every position and pair, and the pair's numbers before and after."""
    config, head = view.config, view.head
    turned = rotation.rotation_of(view.trace, head)
    st.caption(f"RoPE base {config.rope_base:,} · head {head} uses K/V head {turned.kv_head}. Each pair of "
               f"dimensions (x[d], x[d + {turned.pairs}]) is a 2-D vector; position p turns it by p·θ_d, "
               f"θ_d = base^(−2d/{turned.head_dim}): position 0 not at all, pair 0 one radian a position, the last "
               "pair hardly.")
    d = 0  # the pair drawn
    if view.pair_bind is not None:
        d = st.slider("Pair d — dimensions d and d + head_dim/2", 0, turned.pairs - 1,
                      help="The pair of q's and k's dimensions the figures and tables show: low pairs turn fast, "
                           "high pairs slowly.", **view.pair_bind)
    for place, side, start in zip(pair(), ("q", "k"), (view.row0, view.col0)):  # under the slider: it follows the pair
        with place:
            st.plotly_chart(rotation.pair_figure(turned, d, side, start=start),
                            config=plotly_config(view.file_name(f"pair{d}", side)))
    st.caption("Each token's vector keeps its length and turns by its own position's angle, q_i by i·θ_d and k_j by "
               "j·θ_d, so the pair's part of q_i · k_j depends on the angle between them, (i − j)·θ_d plus the one "
               "they had before: on i − j only (the Compare page checks it).")

    def below() -> None:
        st.plotly_chart(rotation.angle_heatmap(turned, d), config=plotly_config(view.file_name("angles")))
        st.caption(f"The pair's numbers: before the rotation, then after it (primed: q′ = q turned by its "
                   f"position's angle p·θ_{d}).")
        tables = st.container(horizontal=True, gap="medium")  # q's and k's side by side where both fit
        for side in ("q", "k"):
            helps = rotation.pair_table_help(turned, d, side)
            columns = {name: st.column_config.NumberColumn(name, help=text, format="%.1f°" if
                                                           name == rotation.ANGLE_COLUMN else "%.3f")
                       for name, text in helps.items()}
            tables.dataframe(rotation.pair_table(turned, d, side), column_config=columns, width="content")

    return below


def _kv_repeat(view: HeadWindow, before, after, titles) -> None:
    config = view.config
    st.caption(f"{steps.group_caption(config)} {steps.focus_caption(config, view.head)}")
    st.dataframe(steps.group_table(config, view.head), hide_index=True, height="content")  # every row: the focused one


def _scores(view: HeadWindow, before, after, titles) -> None:
    (title,), title_px = steps.fitted_titles(titles["after"])
    with after:
        height = view.heatmap("scores", title, title_px=title_px)
    with before:  # as tall as the map beside it
        st.dataframe(steps.qk_table(view.trace, view.head), height=height)


def _scaled(view: HeadWindow, before, after, titles) -> None:
    trace, divides = view.trace, view.config.spec.scaled  # the simplified class (3.3) does not divide
    st.caption("Both panels use the same colour scale: the division shrinks every score toward 0." if divides else
               "Both panels use the same colour scale: this class does not divide, so scaled = scores and the two "
               "maps are the same.")
    (before_title, after_title), title_px = steps.fitted_titles(titles["before"], titles["after"])
    with before:
        view.heatmap("scores", before_title, zrange=view.shared("scores"), title_px=title_px)
    with after:
        view.heatmap("scaled", after_title, zrange=view.shared("scores"), title_px=title_px)
    # softmax of what the model saw, and of the same scores the other way (without the division, or with it)
    ran, other = steps.scaling_panels(view.config, view.crop("scores"), view.crop("masked"))
    st.markdown("**Softmax with vs without ÷√dₖ** — without it, large dₖ pushes softmax toward one-hot "
                "(saturation: low entropy, tiny gradients)." + ("" if divides else " This class runs without it."))
    left, right = pair()
    (ran_title, other_title), title_px = steps.fitted_titles(ran[0], other[0])
    with left:
        view.heatmap(ran[1], ran_title, as_stage="weights", file="softmax-scaled" if divides else "softmax-unscaled",
                     title_px=title_px)
    with right:
        view.heatmap(other[1], other_title, as_stage="weights",
                     file="softmax-unscaled" if divides else "softmax-scaled", title_px=title_px)
    with_scale, without_scale = (ran[1], other[1]) if divides else (other[1], ran[1])
    st.plotly_chart(figures.entropy_bars(trace.tokens[view.row0:], row_entropy(with_scale),
                                         row_entropy(without_scale), width=steps.NARROWEST_MAP_PX),
                    config=plotly_config(view.file_name("entropy")))


def _masked(view: HeadWindow, before, after, titles) -> None:
    if (leak := steps.leak_note(view.trace)) is not None:
        st.warning(leak, icon=":material/visibility:")
    elif not view.trace.hides_future:
        st.info("The causal mask is off: masked = scaled, every token sees every other token.")
    scaled = "scaled" in view.trace.steps  # a user's module may not have recorded it (see the note above)
    zrange = view.shared("scaled") if scaled else None
    shown = [titles[place] for place in ("after", "before") if place in titles]  # no "before": scaled not recorded
    (after_title, *before_title), title_px = steps.fitted_titles(*shown)
    with before:
        if before_title:
            view.heatmap("scaled", before_title[0], zrange=zrange, title_px=title_px)
        else:
            st.caption("before: the scaled scores were not recorded (see above)")
    with after:
        view.heatmap("masked", after_title, zrange=zrange, title_px=title_px)


def _weights(view: HeadWindow, before, after, titles) -> None:
    (before_title, after_title), title_px = steps.fitted_titles(titles["before"], titles["after"])
    with before:
        view.heatmap("masked", before_title, title_px=title_px)  # the Heads page's title, in lines that fit
    with after:
        view.heatmap("weights", after_title, title_px=title_px)


def _dropped(view: HeadWindow, before, after, titles) -> None:
    config = view.config
    if not config.dropout_runs:
        st.info(steps.dropout_off_reason(config))
    dropped_range = (0.0, 1.0 / (1.0 - config.effective_dropout))  # both on 0…1/(1−p): a doubled weight is brighter
    (before_title, after_title), title_px = steps.fitted_titles(titles["before"], titles["after"])
    with before:
        view.heatmap("weights", before_title, zrange=dropped_range, title_px=title_px)
    with after:
        view.heatmap("dropped", after_title, zrange=dropped_range, title_px=title_px)
    if config.dropout_runs:
        st.caption(f"Kept weights are multiplied by 1/(1−p) = {1 / (1 - config.dropout):.4f}; "
                   f"dropped ones are exactly 0.")
    with pair()[0]:  # a pair's map: under the one before it, as wide
        st.plotly_chart(figures.difference_heatmap(view.crop("dropped"), view.crop("weights"), view.trace.tokens,
                                                   title=titles["difference"], row_offset=view.row0,
                                                   col_offset=view.col0, hidden=view.hidden(),
                                                   width=steps.PAIR_WIDTH, scale_below=True),
                        config=plotly_config(view.file_name("difference")))


def _context(view: HeadWindow, before, after, titles) -> None:
    """The weights used, the context and the module's output (the ``context`` and ``output`` stages)."""
    trace = view.trace
    (title,), title_px = steps.fitted_titles(titles["before"])
    with before:
        view.heatmap("dropped", title, title_px=title_px)
    with after:
        st.markdown(f"context = weights @ values: `{steps.shape_of(trace, 'context')}`  \n"
                    f"output: `{steps.shape_of(trace, 'output')}`")
        st.dataframe(steps.context_table(trace, view.head), height=300)
    st.markdown(f"**Output of the module** `{steps.shape_of(trace, 'output')}`"
                + (" (after `out_proj`)" if view.config.spec.out_proj else ""))
    st.dataframe(steps.vector_table(trace, trace.output[0], "output vector"), height=300)


# what each stage draws below its code; any other stage (context, output) draws _context.  A view may return what it
# draws under the shape diagram, at the page's width (the rotation's angles and tables), which draw() then calls
STAGE_VIEWS = {"latent": _latent, "rotated_queries": _rotated_queries, "kv_repeat": _kv_repeat, "scores": _scores,
               "scaled": _scaled, "masked": _masked, "weights": _weights, "dropped": _dropped}


def _source(trace: Trace, stage: str) -> None:
    """The running module's source with the stage's line marked: a user's module the class or function of its code
    that computed the stage (a submodule's class, a helper), numbered as in its file, else the book's class."""
    config, run = trace.config, trace.module_run
    added = steps.ADDED_MASK_MARK if stage == "masked" and variants.added_mask_note(config) else ""
    code, line, shown = (source.module_marked_source(run, stage) if run
                         else (*source.marked_source(config.variant, stage, note=added),
                               source.CLASSES[config.variant].__name__))
    with st.expander(f"Source of {shown} — read from the running module", expanded=run is not None):
        st.caption(source.line_caption(line, run, stage) + (" It is attnviz's addition, run because Causal mask is "
                                                            "on: the book's listing has no mask." if added else ""))
        if (listing := steps.listing_note(trace)) is not None:
            st.caption(listing)
        st.code(code, language="python", line_numbers=run is None)  # the gutter counts from 1, not the file's line
