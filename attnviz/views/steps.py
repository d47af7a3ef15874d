"""What each step of attention does, in words and tables: the Steps page's text, without Streamlit.

Pure functions of a Trace or an AttentionConfig: the sentence that says what a stage does, the line of
the running source that does it, why dropout did nothing, a stage map's title that says what ran (the Heads page's
too), the note that a mask on a book listing without one (3.3, 3.4) is attnviz's addition, how the class shown
differs from the book's listing (``listing_note``: the recording lines, and ÷√dₖ before the mask where the book
masks first), the titles of each stage's maps broken into lines that fit their boxes (``map_titles``,
``fitted_titles``), the K/V groups stage's words and its head → group table, the focused head's row shaded
(``group_caption``, ``focus_caption``, ``group_table``), why a stage without a head dimension picks no head
(``headless_note``), and the query/key/context tables (pandas).  The rotary stage's figures and table are
:mod:`attnviz.views.rotation`'s.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnviz import explain, variants
from attnviz.views import figures, margins, source
from attnviz.words import amount

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

    from attnviz.config import AttentionConfig
    from attnviz.trace import Trace

# the stages the bonus material's variants add before QKᵀ, in pipeline order, with their names (shown only where a
# run has them, numbered 0, or 0a, 0b … when a run has more than one)
EXTRA_STEP_LABELS = {
    "latent": "latent",
    "rotated_queries": "rotate q, k",
    "kv_repeat": "K/V groups → heads",
}
# the Steps page's stages, in order, with their labels (attention.STAGES names every recorded tensor)
STEP_LABELS = {
    "scores": "1 · QKᵀ",
    "scaled": "2 · ÷√dₖ",
    "masked": "3 · causal mask",
    "weights": "4 · softmax",
    "dropped": "5 · dropout",
    "context": "6 · ·V",
}

PAIR_WIDTH = 330  # px: a map with its labels and colour bar; two fit beside the diagram at 1,400 px, one at 1,100
# px: the narrowest a map of the page is, in the column beside the shape diagram: a page 864 px wide, where the sidebar
# takes its room beside the page (narrower, it folds away), leaves that column less than PAIR_WIDTH
NARROWEST_MAP_PX = 295
TITLE_BOX_PX = min(PAIR_WIDTH, NARROWEST_MAP_PX)  # what a map's title fits in, at any width of the page

UNSCALED_LABEL = "2 · no ÷√dₖ"  # the stage of a class that does not divide (3.3): its scaled scores are its scores

# the recorded steps each of QKᵀ … ·V draws (a user's module may record fewer: tracing.Attention.unrecorded)
STEP_NEEDS = {"scores": ("scores", "queries", "keys"), "scaled": ("scores", "scaled"), "context": ("context",)}


def stage_labels(trace: Trace) -> dict[str, str]:
    """The Steps page's stages for this run, in order, with their labels: the bonus variants' own stages (the
    latent, the rotation, the K/V repeat) first where the run recorded them, numbered "0" when there is one and
    "0a", "0b" … when there are more (GQA with rotary positions), then those of QKᵀ … ·V, numbered 1 to 6, whose
    steps the run recorded (see :func:`unrecorded_note`)."""
    recorded = {name for name, _ in trace.shapes}
    extra = [stage for stage in EXTRA_STEP_LABELS if stage in recorded]
    letters = "abcdefghijklmnopqrstuvwxyz" if len(extra) > 1 else ""
    labels = {stage: f"0{letters[i:i + 1]} · {EXTRA_STEP_LABELS[stage]}" for i, stage in enumerate(extra)}
    labels.update({stage: label for stage, label in STEP_LABELS.items() if stage not in _unrecorded_stages(trace)})
    if trace.config.module is None and trace.window is not None:
        labels["masked"] = "3 · window mask"
    if "scaled" in labels and not trace.config.spec.scaled:
        labels["scaled"] = UNSCALED_LABEL
    return labels


def _unrecorded_stages(trace: Trace) -> list[str]:
    """The stages of QKᵀ … ·V whose steps the run did not record, in order."""
    return [stage for stage, needs in STEP_NEEDS.items() if any(name not in trace.steps for name in needs)]


def unrecorded_note(trace: Trace) -> str | None:
    """One line: which of QKᵀ … ·V the page does not show and why ("1 · QKᵀ and 2 · ÷√dₖ are not shown: no Q @ Kᵀ
    before the softmax: the tanh on line 12 comes between them"); None when it shows them all."""
    missing = _unrecorded_stages(trace)
    if not missing:
        return None
    why = trace.module_run.unrecorded if trace.module_run is not None else {}
    sides = {"scores": [s for s in missing if s != "context"], "context": [s for s in missing if s == "context"]}
    found = {"scores": "no Q @ Kᵀ before the softmax was found",
             "context": "no weights @ V after the softmax was found"}
    parts = []
    for side, stages in sides.items():
        if stages:
            names = " and ".join(STEP_LABELS[stage] for stage in stages)
            parts.append(f"{names} {'are' if len(stages) > 1 else 'is'} not shown: {why.get(side, found[side])}")
    return "; ".join(parts) + "."


def dropout_off_reason(config: AttentionConfig, short: bool = False, title: bool = False) -> str:
    """Why the dropout stage does nothing in this run: the Steps page's sentence, (``short``) the shape diagram's
    label, or (``title``) the words a map's title gives in brackets (``dropped = weights (eval mode)``: short, as the
    Heads page's stage buttons are these titles)."""
    if config.checkpoint is not None:
        return "eval mode" if title else "dropout off (eval)" if short else (
            "A loaded checkpoint runs in eval mode, as at inference: dropout is off, dropped = weights.")
    if not config.spec.dropout:
        return "no dropout in this class" if short or title else (
            "This variant has no dropout in the book: dropped = weights.")
    if not config.train:
        return "eval mode" if title else "dropout off (eval)" if short else (
            "Dropout is off (eval mode): dropped = weights. Turn on 'Dropout active' in the sidebar.")
    return "p = 0" if title else "dropout off (p = 0)" if short else "Dropout p is 0: dropped = weights."


def stage_title(trace: Trace, stage: str) -> str:
    """The title of ``stage``'s map of this run (``figures.map_title``), saying what ran: the shown layer's own window
    and mask, a class that does not scale, a mask or dropout that did nothing.  A user module's scale is the one its
    run measured (head 0, as ``explain_weight`` reads it: ``explain.head_scale``), not the class's: set by the model's
    config, beside the book's, where its config declares it (``ModuleRun.declared_scales``), else "not" the book's."""
    config = trace.config
    scaled, divisor = config.spec.scaled, None
    if stage == "masked" and trace.leaks_future:
        return LEAK_TITLES[_hides_some_future(trace)]
    if stage == "scaled" and trace.module_run is not None:
        measured, d_head = explain.head_scale(trace)
        if measured is not None and d_head is not None and measured != math.sqrt(d_head):
            scaled = measured != 1.0
            declared = explain.declared_divisor(measured, trace.module_run.declared_scales) is not None
            book = f"√dₖ = √{d_head}"
            divisor = (f"{measured:.4g}, set by the model's config (the book's: {book})" if declared
                       else f"{measured:.4g} (not {book})")
    return figures.map_title(stage, trace.window, scaled, masks=trace.hides_future or trace.window is not None,
                             dropout_off=None if config.dropout_runs else dropout_off_reason(config, title=True),
                             divisor=divisor)


# a user module that asks for the causal mask while its weights reach the future (``Trace.leaks_future``): the Heads
# page's caption, its masked map's title (False: no later key hidden; True: some are) and the Steps page's note
LEAK_CAPTION = "causal mask asked; the module's weights reach the future"
LEAK_TITLES = {False: "masked (no later key hidden)",
               True: "masked (some later keys not hidden)"}


def _hides_some_future(trace: Trace) -> bool:
    """Whether the run's own mask hides any key after its query, in any head (``Trace.hidden_cells``)."""
    hidden = trace.hidden_cells()  # (heads, n, n) or None
    return hidden is not None and bool(np.triu(hidden, 1).any())


def leak_note(trace: Trace) -> str | None:
    """The Steps page's words on the mask of a module that asks for the causal mask while its weights reach the
    future (``Trace.leaks_future``); None for any other run."""
    if not trace.leaks_future:
        return None
    which = "only some of the later keys" if _hides_some_future(trace) else "no later key"
    return (f"Your module asks for a causal mask, but its mask hides {which}: their scores reach the softmax as "
            "numbers, not −∞, so the softmax gives them weight and a query sees the future. The Check panel on the "
            "Heads page says where.")


ADDED_MASK_MARK = " — attnviz's addition, not in the book's listing"  # after source.MARK on the mask's line


BOOK_SOFTMAX = "torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)"  # the book's scaling, inside the softmax
# attnviz's helper functions a class's steps run in (``Variant.source_parts``; no book name), in words
HELPERS = {
    "_single_head": "the steps v1, v2 and `CausalAttention` share",
    "_mask_bool": "the causal mask: the class's `mask` buffer as the book slices it, "
                  "`self.mask.bool()[:num_tokens, :num_tokens]`, after a check that the tokens fit it, or for v1 and "
                  "v2, which have none, the same triangle built for the tokens",
    "scaled_dot_product": "the steps GQA, MQA, MLA and sliding-window attention share",
}
ADDED_ARGUMENTS = ("causal", "rope_base")  # attnviz's keyword arguments; their defaults run the book's class
SIZE_CHECKS = ("check_sizes", "check_context")  # attnviz's lines that refuse sizes in words


def listing_note(trace: Trace) -> str | None:
    """One line: how the class on the Steps page (what runs, read with ``inspect``) differs from the book's listing —
    lines that record each stage, the size checks its source and helpers call, attnviz's keyword arguments, and the
    scaling as a stage of its own, before the mask where the book masks the raw scores and divides inside
    ``torch.softmax`` (−∞ ÷ √dₖ is still −∞: the same weights).  None for a user's module (its own source)."""
    config = trace.config
    if config.module is not None:
        return None
    spec = config.spec
    book = variants.VARIANTS.get(spec.name, spec)  # a checkpoint's layer: the listing of the class it holds
    where = f"Section {book.section}" if book.section[:1].isdigit() else f"the bonus material's {book.section[6:]}"
    helpers = [part.__name__ for part in spec.source_parts if not inspect.isclass(part)]  # attnviz's, shown below
    moved = ""
    if helpers:
        named = " and ".join(f"`{name}` ({HELPERS[name]})" for name in helpers)
        moved = (f" — attnviz runs its steps in {'a helper function' if len(helpers) == 1 else 'helper functions'} "
                 f"shown below the class: {named} —")
    added = [f"`{name}`" for name in ADDED_ARGUMENTS if name in inspect.signature(spec.cls.__init__).parameters]
    arguments = (f" (and attnviz's {', '.join(added)} argument, whose default runs the book's code)" if len(added) == 1
                 else f" (and attnviz's {', '.join(added)} arguments, whose defaults run the book's code)" if added
                 else "")
    if not spec.scaled:  # 3.3: the book runs its steps without a class, and does not scale
        return (f"`{spec.cls.__name__}` puts the steps of {where}, which the book runs without a class, in a class "
                f"with `record(recorder, …)` lines added{arguments}. Like the book, it does not scale.")
    shown = source.spec_source(spec)  # the class and its helpers, as the source expander shows them
    calls = ["`record(recorder, …)`", *(f"`{name}(…)`" for name in SIZE_CHECKS if f"{name}(" in shown)]
    added_lines = f"{', '.join(calls[:-1])} and {calls[-1]}" if len(calls) > 1 else calls[0]
    checked = (" The size checks make a size the class cannot take a ValueError in words, where the book's code "
               "reaches torch's own error." if len(calls) > 1 else "")
    lead = f"The book's `{spec.cls.__name__}` ({where}){moved} with {added_lines} lines added{arguments}.{checked}"
    labels = {**STEP_LABELS, **stage_labels(trace)}
    if spec.book_causal and trace.hides_future:
        return (f"{lead} It scales ({labels['scaled']}) before it masks ({labels['masked']}); the book masks, then "
                f"scales inside `{BOOK_SOFTMAX}` — −∞ ÷ √dₖ is still −∞, so the weights are the same.")
    return (f"{lead} It scales as a stage of its own ({labels['scaled']}); the book scales inside `{BOOK_SOFTMAX}` — "
            "the same division, so the weights are the same.")


STEP_TEXT = {
    "scores": "Each query is compared with every key: a dot product per (query, key) pair.",
    "scaled": "Divide by √dₖ so the scores' variance does not grow with the head size.",
    "masked": "Hide the future: scores above the diagonal become −∞, so softmax gives them weight 0.",
    "weights": "Softmax turns each query's row of scores into weights that sum to 1.",
    "dropped": "In training, dropout zeroes a random fraction p of the weights and scales the rest by 1/(1−p).",
    "context": "Each context vector is the weighted sum of the value vectors.",
    "latent": "Keys and values come from one small latent vector per token (W_DKV down, then W_UK and W_UV up): "
              "a KV cache keeps only the latent.",
    "rotated_queries": "Rotary positions: each pair of dimensions (d, d + hd/2) of q and k turns by position × θ_d, "
                       "so q_i · k_j depends only on the distance i − j.",
    "kv_repeat": "Each K/V head serves a group of neighbouring query heads: repeat_interleave copies it to every "
                 "head of its group ([K1, K2] → [K1, K1, K2, K2]).",
}
WINDOW_TEXT = ("Hide the future and the distant past: query i sees key j only when 0 ≤ i − j < W; the rest become "
               "−∞, so softmax gives them weight 0.")


def step_text(config: AttentionConfig, stage: str, run=None, *, window: int | None = None,
              hides_future: bool | None = None) -> dict:
    """What the stage does, and the line of the running source that does it (``run``: a traced user module's
    ``trace.module_run``, whose own line is shown, from the class or function that computed it:
    :func:`attnviz.views.source.module_stage_code`; ``window`` and ``hides_future``: the run's own mask,
    ``trace.window`` and ``trace.hides_future``, where a checkpoint's layer has its own; else the config's)."""
    what = STEP_TEXT[stage]
    window = window if window is not None else config.window
    if stage == "masked" and run is None and window is not None:
        what = WINDOW_TEXT.replace("W;", f"W (W = {window});")
    if run is not None:
        code = source.module_stage_code(run, stage)
        return {"what": what, "code": code or f"# {source.attention_owner(run)} has no separate line for this stage "
                                               f"(its {run.kind} computes it)"}
    code = source.stage_code(config.variant, stage)
    if code is None:
        what = {
            "scaled": "The simplified version (section 3.3) does not scale: scaled = scores.",
            "dropped": "The simplified version (section 3.3) has no dropout: dropped = weights.",
        }.get(stage, what)
        code = "# this variant has no such line"
    elif stage == "masked" and not (hides_future if hides_future is not None else config.hides_future):
        code += "  # skipped: causal mask off"
    elif stage == "masked" and variants.added_mask_note(config) is not None:  # said above the line, shown whole
        code = f"# attnviz's addition: the book's {config.spec.section} listing has no mask\n{code}"
    return {"what": what, "code": code}


def group_caption(config: AttentionConfig) -> str:
    """How the query heads share their K/V heads, in words: "4 K/V heads for 12 query heads: groups of 3.", one K/V
    head shared by all (multi-query), or one each (as in MHA)."""
    kv_heads, heads = config.kv_groups, config.heads
    if kv_heads == heads:
        share = "each query head has its own, as in MHA"
    elif kv_heads == 1:
        share = f"all {heads:,} share it"
    else:
        share = f"groups of {config.group_size:,}"
    return f"{amount(kv_heads, 'K/V head')} for {amount(heads, 'query head')}: {share}."


FOCUSED_ROW = "background-color: rgba(255, 75, 75, 0.38)"  # the focused head's row of the head → group table
SHARING_ROW = "background-color: rgba(255, 75, 75, 0.12)"  # the rows of the other heads of its K/V group


def group_table(config: AttentionConfig, head: int) -> Styler:
    """One row per query head: the K/V group (head) whose keys and values it uses; the focused ``head``'s row shaded,
    and the rows of the heads that share its K/V group shaded lighter (a Styler ``st.dataframe`` draws)."""
    table = pd.DataFrame({"query head": list(range(config.heads)), "K/V group": list(config.head_groups)})
    group = config.kv_group(head)

    def shade(row: pd.Series) -> list[str]:
        style = (FOCUSED_ROW if row["query head"] == head else SHARING_ROW if row["K/V group"] == group else "")
        return [style] * len(row)

    return table.style.apply(shade, axis=1)


def focus_caption(config: AttentionConfig, head: int) -> str:
    """Which K/V group the focused ``head`` uses and who shares it, naming the table's shading: "Head 7 (shaded
    darker) uses K/V group 2, with heads 6 and 8 (shaded lighter)."."""
    group = config.kv_group(head)
    others = [other for other in range(config.heads) if other != head and config.kv_group(other) == group]
    if not others:
        return f"Head {head} (shaded) uses K/V group {group}, its own."
    if len(others) == config.heads - 1:
        return f"Head {head} (shaded darker) uses K/V group {group}, as every other head does (shaded lighter)."
    names = ", ".join(map(str, others[:-1])) + f" and {others[-1]}" if len(others) > 1 else str(others[0])
    return (f"Head {head} (shaded darker) uses K/V group {group}, with {'heads' if len(others) > 1 else 'head'} "
            f"{names} (shaded lighter).")


def headless_note(trace: Trace, stage: str) -> str | None:
    """Why the Focused head picks nothing on ``stage``: the tensor it shows has no head dimension (MLA's latent,
    ``(b, n, latent_dim)``, which every head's keys and values are made from); None where the stage shows a head."""
    if stage not in EXTRA_STEP_LABELS or stage not in trace.steps or trace.steps[stage].ndim >= 4:
        return None
    return (f"The {stage} {shape_of(trace, stage)} has no head dimension: every head's keys and values are made from "
            "it, so there is no head to pick here. The focused head is kept for the next stages.")


LATENT_SHOWN = 6  # the latent's values its table prints: a row fits the page's width at 900 px
TABLE_ROWS = 64  # the tokens a vector table lists, the first ones


def latent_table(trace: Trace, max_rows: int = TABLE_ROWS) -> pd.DataFrame:
    """One row per token: its latent vector's first :data:`LATENT_SHOWN` values, the column named by how many there
    are."""
    latent = trace.steps["latent"][0]  # (n, latent_dim)
    return vector_table(trace, latent, f"latent vector (first {LATENT_SHOWN} of {latent.shape[-1]})", max_rows,
                        shown=LATENT_SHOWN)


def shape_of(trace: Trace, stage: str) -> tuple:
    return tuple(trace.steps[stage].shape)


def qk_table(trace: Trace, head: int, max_rows: int = 64):
    """Query and key vectors of one head (first ``max_rows`` tokens) for the QKᵀ step."""
    vectors = trace.head_vectors(head)  # as they meet in QKᵀ
    queries, keys = vectors.queries, vectors.keys  # (n, hd) each
    rows = min(trace.n, max_rows)
    return pd.DataFrame({
        "token": list(trace.tokens[:rows]),
        "query": [", ".join(f"{v:.3f}" for v in q[:8]) + (" …" if len(q) > 8 else "") for q in queries[:rows]],
        "key": [", ".join(f"{v:.3f}" for v in k[:8]) + (" …" if len(k) > 8 else "") for k in keys[:rows]],
    })


def _vector_text(vector, digits: int = 4, shown: int = 8) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in vector[:shown]) + (" …" if len(vector) > shown else "")


def vector_table(trace: Trace, vectors, column: str, max_rows: int = TABLE_ROWS, shown: int = 8):
    """One row per token: its vector (first ``shown`` values, 4 decimals as the book prints them)."""
    rows = min(trace.n, max_rows)
    return pd.DataFrame({"token": list(trace.tokens[:rows]),
                         column: [_vector_text(v, shown=shown) for v in vectors[:rows]]})


def context_table(trace: Trace, head: int, max_rows: int = 64):
    context = trace.steps["context"][0]
    per_head = context[head] if context.ndim == 3 else context
    return vector_table(trace, per_head, "context vector", max_rows)


def map_titles(trace: Trace, stage: str) -> dict[str, str]:
    """The titles of the maps ``stage`` draws on the Steps page, by place: "before" and "after" (the pair; the scores'
    "after" only, beside its table; "before" only where the masked stage's scaled scores were not recorded, and the
    context stages' weights used), and the scale stage's softmax pair ("ran", "other": :func:`scaling_titles`) and the
    dropout stage's "difference" map.  One line each: :func:`fitted_titles` breaks them to fit."""
    config, window = trace.config, trace.window  # the shown layer's own: a checkpoint's may mix window and full
    if stage == "scores":
        return {"after": "scores = Q·Kᵀ (before scaling)"}
    if stage == "scaled":
        ran, other = scaling_titles(config)
        return {"before": "before: scores", "after": f"after: scores ÷ √{config.head_dim}" if config.spec.scaled
                else "after: scaled = scores (no division)", "ran": ran, "other": other}
    if stage == "masked":
        before = {"before": f"before: {stage_title(trace, 'scaled')}"} if "scaled" in trace.steps else {}
        return {**before, "after": f"after: {stage_title(trace, 'masked')}" if trace.leaks_future
                else "after: masked (grey = −∞)" if window is None else f"after: window W = {window} (grey = −∞)"}
    if stage == "weights":
        return {"before": f"before: {stage_title(trace, 'masked')}", "after": "after: softmax — each row sums to 1"}
    if stage == "dropped":
        return {"before": "before: weights", "after": f"after: dropout (p = {config.dropout:g})"
                if config.dropout_runs else "after: dropout off — unchanged",
                "difference": "difference: dropped − weights"}
    return {"before": "attention weights used"}


def fitted_titles(*titles: str) -> tuple[tuple[str, ...], int]:
    """``titles`` of maps side by side, each broken into lines that fit :data:`TITLE_BOX_PX` (Plotly cuts a title at
    its figure's edge), and the room above their key tokens' labels for the one of most lines: maps side by side with
    the same room are as tall (``figures.attention_heatmap``'s ``title_px``)."""
    wrapped = tuple(margins.wrapped_title(title, TITLE_BOX_PX) for title in titles)
    return wrapped, margins.title_top(max((title.count("<br>") + 1 for title in wrapped), default=1))


def scaling_titles(config: AttentionConfig) -> tuple[str, str]:
    """The titles of :func:`scaling_panels`' pair: what the class runs, then the other way."""
    if config.spec.scaled:
        return "softmax(scores ÷ √dₖ)", "softmax(scores) — no scaling"
    return "softmax(scores) — what this class runs: no ÷√dₖ", f"softmax(scores ÷ √{config.head_dim}) — had it divided"


def scaling_panels(config: AttentionConfig, scores: np.ndarray,
                   masked: np.ndarray) -> tuple[tuple[str, np.ndarray], tuple[str, np.ndarray]]:
    """The scale stage's softmax pair, each (title, weights), what the class runs first: for a class that divides,
    softmax(scores ÷ √dₖ) and softmax(scores) without it; for one that does not (3.3: its masked scores are not
    divided), softmax(scores) and what ÷√dₖ (dₖ = its width) would have given.  ``scores`` and ``masked``: one
    head's (rows, cols) crops."""
    ran, other = scaling_titles(config)
    if config.spec.scaled:
        with_scale, without_scale = softmax_with_and_without_scaling(scores, masked)  # (rows, cols) each
        return (ran, with_scale), (other, without_scale)
    divided = np.asarray(masked, dtype=np.float64) / np.sqrt(config.head_dim)  # (rows, cols); −∞ stays −∞
    return (ran, figures.softmax(masked)), (other, figures.softmax(divided))


def softmax_with_and_without_scaling(scores: np.ndarray, masked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(softmax of what the model saw, softmax of the same scores without ÷√dₖ): ``scores`` and ``masked``
    are one head's (rows, cols) crops; cells the mask hid stay hidden in both."""
    unscaled = np.where(np.isneginf(masked), -np.inf, scores)  # (rows, cols)
    return figures.softmax(masked), figures.softmax(unscaled)
