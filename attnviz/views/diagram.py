"""The shape diagram: Graphviz DOT source for one run's pipeline, with the shapes the tensors really had, and
compact HTML flows of the same (:func:`shape_flow_html`), of a KV cache's step (:func:`cache_flow_html`) and of a
user module's own ops (:func:`op_flow_html`, :func:`op_dot`).

Pure functions of ``Trace.shapes`` (the ordered ``(stage, shape)`` pairs recorded from the real
tensors), the run's ``AttentionConfig`` and its own mask (``Trace.window``, ``Trace.hides_future``: a checkpoint's layer
has its own); nothing here runs a model or imports Streamlit.  The Shapes page
hands :func:`shape_dot`'s string to ``st.graphviz_chart`` and :func:`shape_rows` to a table; the other pages draw
the HTML flows with ``st.html``.

Tensors are nodes, labelled with their stage name (``attention.STAGES`` plus ``input``, ``view``,
``transpose`` and ``concat``), the operation that produced them, the actual shape and its symbolic
meaning, e.g. ``(1, 12, 6, 6)`` = ``(b, h, n, n)``.  Weight matrices (``W_query``, ``W_key``,
``W_value``, ``out_proj``) are separate, parallelogram-shaped nodes.  Stages that do nothing in this
run (no mask, no scaling in the simplified version, dropout in eval mode) are dashed and grey.  The bonus
material's variants add their own nodes: MLA's ``latent`` (b, n, latent_dim) between ``W_DKV`` and
``W_UK``/``W_UV``, with the queries made from x beside it; GQA's and MQA's keys and values viewed into their own
``num_kv_groups`` heads, ``kv_view`` (b, n, g, hd), transposed to ``kv_groups`` (b, g, n, hd) and repeated to
``kv_repeat`` (b, h, n, hd), beside the queries' ``view`` into ``num_heads``; rotary's
``rotated_queries``/``rotated_keys``; SWA's mask names its band.

``kv_view`` is the one node not recorded by name: the run records K after its view and transpose
(``kv_groups``), and ``kv_view`` is that recorded shape with axes 1 and 2 swapped back, ``(b, n, g, hd)``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from attnviz import variants
from attnviz.attention import MAP_STAGES, STAGES
from attnviz.views.steps import dropout_off_reason

if TYPE_CHECKING:
    from attnviz.config import AttentionConfig

Shapes = Iterable[tuple[str, Sequence[int]]]

EXTRA_STAGES = ("input", "view", "transpose", "concat", "kv_view", "kv_groups", "kv_repeat", "latent",
                "rotated_queries", "rotated_keys")
ROTATION = ("rotated_queries", "rotated_keys")  # one step: highlighting either lights both
KNOWN_STAGES = frozenset(STAGES) | frozenset(EXTRA_STAGES)
WEIGHTS = ("W_query", "W_key", "W_value")
QKV = variants.QKV

HIGHLIGHT_FILL = "#ffd54f"  # the stage the user is viewing
TENSOR_FILL = "#e8f0fe"
WEIGHT_FILL = "#fff4e0"
OFF_FILL = "#f4f4f4"
OFF_COLOR = "#9e9e9e"  # the border and the arrow of a stage that did nothing in this run
OFF_INK = "#757575"  # its text, on OFF_FILL
# the diagrams sit on the page's own background, light or dark (Streamlit's theme): text on a box's light fill is
# dark, set with the fill; between the boxes, on the page's background, an HTML flow's notes take the theme's text
# colour, dimmed, and a DOT graph's edges and labels (Graphviz takes no theme colour) a grey that reads on both
INK = "#1f1f1f"
DIM = "opacity:0.7"
LINE = "#787878"  # as far from white as from the dark theme's background

# symbolic shapes, as in the code's shape comments: b batch, n tokens, h heads, hd head_dim
_MEANINGS = {
    "input": "b n d_in",
    "view": "b n h hd",
    "transpose": "b h n hd",
    "concat": "b n d_out",
    "kv_view": "b n g hd",
}


def _projections(spec: variants.Variant) -> tuple[tuple[str, str, str], ...]:
    """(weight, from stage, to stage) of each learned projection before the heads: Q, K, V from the input, or
    (MLA) keys and values up-projected from the latent."""
    if "latent" in spec.shape_path:
        return (("W_query", "input", "queries"), ("W_DKV", "input", "latent"), ("W_UK", "latent", "keys"),
                ("W_UV", "latent", "values"))
    return tuple((weight, "input", stage) for weight, stage in zip(WEIGHTS, QKV))


def _stages(spec: variants.Variant, shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """The diagram's tensors in pipeline order: the variant's shape path, K/V's own view after the queries' (GQA,
    MQA) and the rotation before the K/V repeat or QKᵀ where the run recorded one."""
    stages = list(spec.shape_path)
    if "kv_groups" in shapes and "view" in stages:
        stages.insert(stages.index("view") + 1, "kv_view")
    rotated = [stage for stage in ROTATION if stage in shapes]
    if rotated:
        at = stages.index("kv_repeat" if "kv_repeat" in stages else "scores")
        stages[at:at] = rotated
    return stages


def _split_name(name: str) -> tuple[str, int | None]:
    """``"queries ×12"`` -> ``("queries", 12)``; ``"queries"`` -> ``("queries", None)``."""
    base, sep, count = name.partition(" ×")
    return (base, int(count)) if sep and count.isdigit() else (name, None)


def _meaning(base: str, spec: variants.Variant, rank: int) -> str:
    """Symbolic shape of stage ``base`` in the variant ``spec``, e.g. ``(b, h, n, n)``; ``rank`` trims ``b``."""
    symbols = _MEANINGS.get(base) or spec.meaning(base)
    if not symbols:
        return ""
    parts = symbols.split()
    if 0 < rank < len(parts):
        parts = parts[len(parts) - rank :]  # unbatched tensors: drop the leading b
    return "(" + ", ".join(parts) + ")"


def format_shape(shape: Sequence[int]) -> str:
    """``(1, 6, 768)``; a 1-d shape keeps its comma like Python's: ``(6,)``."""
    return str(tuple(int(d) for d in shape))


def shape_rows(trace_shapes: Shapes, config: AttentionConfig) -> list[dict[str, str]]:
    """One row per tensor :func:`shape_dot` draws: ``{"stage", "shape", "meaning"}``, in pipeline order — the
    recorded stages and GQA's and MQA's ``kv_view`` (the diagram's own list, :func:`_stages`).  Shapes that lack
    some of the variant's stages (hand-made) give a row each, in their order.

    ``meaning`` is the symbolic shape (``(b, n, d_out)``, ``(b, h, n, n)`` …) in the run's variant.
    """
    spec = config.spec
    try:
        shapes, names = _read_shapes(trace_shapes, spec, None)[:2]
    except ValueError:  # not a run of this variant's whole path: its shapes as given
        pairs = [(str(name), tuple(shape)) for name, shape in trace_shapes]
    else:
        pairs = [(names[base], shapes[base]) for base in _stages(spec, shapes)]
    return [
        {"stage": name, "shape": format_shape(shape),
         "meaning": _meaning(_split_name(name)[0], spec, len(shape))}
        for name, shape in pairs
    ]


def head_dim_equation(config: AttentionConfig) -> str:
    """How the widths relate for this variant, with the numbers.

    E.g. ``d_out = num_heads × head_dim: 768 = 12 × 64``.
    """
    c = config
    spec = c.spec
    if spec.heads == variants.BATCHED:
        return f"d_out = num_heads × head_dim: {c.d_out} = {c.num_heads} × {c.d_out // c.num_heads}"
    if spec.heads == variants.PER_HEAD:
        per_head = c.d_out // c.num_heads
        exercise = c.embedding == "book" and spec.per_head_d_out and any(
            preset.book and preset.dims == (c.d_in, c.d_out, c.num_heads) for preset in variants.PRESETS.values())
        return (
            f"d_out = num_heads × head_dim: {c.d_out} = {c.num_heads} × {per_head} "
            f"(each CausalAttention head has d_out = {per_head}; the heads are concatenated — the book's "
            f"{spec.cls.__name__} takes d_out per head: {spec.cls.__name__}(d_in, d_out={per_head}, …, "
            f"num_heads={c.num_heads}))"
            + (f" · the book's exercise 3.2: {c.d_out}-dimensional context vectors with {c.num_heads} heads"
               if exercise else "")
        )
    if spec.weights is None:
        return f"no weights: queries = keys = values = inputs, d = d_in = {c.d_in}"
    return f"one head: dₖ = d_out = {c.d_out} (d_in = {c.d_in})"


def quote(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, newlines as DOT's ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return f'"{escaped}"'


def _attrs(**attrs: str | float | None) -> str:
    return ", ".join(f"{key}={quote(str(value))}" for key, value in attrs.items() if value is not None)


def _mask(config: AttentionConfig, window: int | None, hides_future: bool | None) -> tuple[int | None, bool]:
    """(window, hides the future) of the run: those given (the trace's own), else the config's."""
    return (window if window is not None else config.window,
            hides_future if hides_future is not None else config.hides_future)


def input_title(layer: int | None) -> str:
    """What the attention's input x is: the input embeddings, or for block ``layer`` of a model, norm1 of the residual
    stream entering that block (the embeddings themselves at block 0)."""
    if layer is None:
        return "x: input embeddings"
    entering = "the input embeddings" if layer == 0 else f"the residual stream entering block {layer}"
    return f"x = norm1({entering})"


def _titles(
    config: AttentionConfig, shapes: dict[str, tuple[int, ...]], heads: int | None, mask: tuple[int | None, bool],
    layer: int | None = None,
) -> dict[str, tuple[str, bool]]:
    """stage -> (operation line, off?).  ``off`` stages did nothing in this run; ``mask`` is the run's own (window,
    hides the future) (:func:`_mask`); ``layer``: the model's block whose attention this is (:func:`input_title`)."""
    spec = config.spec
    window, hides_future = mask
    if spec.heads == variants.BATCHED:
        d_k = shapes["transpose"][-1]
        scale = f"÷√dₖ, dₖ = head_dim = {d_k}"
    elif spec.heads == variants.PER_HEAD:
        d_k = shapes["keys"][-1]
        scale = f"÷√dₖ, dₖ = d_out per head = {d_k}"
    else:
        d_k = shapes["keys"][-1]
        scale = f"÷√dₖ, dₖ = d_out = {d_k}"
    unscaled = not spec.scaled

    def project(weight: str, source: str) -> str:
        if spec.weights is None:
            return "= inputs"
        if spec.weights == "parameter":
            return f"x @ {weight}"
        return f"{weight}({'x' if source == 'input' else source})"  # MLA: W_UK(latent), W_UV(latent)

    dropout_off = not config.dropout_runs
    projections = _projections(spec)
    masked = "causal mask: −∞ above diagonal" if hides_future else "mask off"
    if window is not None:
        masked = f"sliding window W = {window}: −∞ where j > i or i − j ≥ {window} (a band)"
    elif "sliding_window_size" in spec.settings:
        masked = "sliding window W = None: −∞ above diagonal (no band)"
    g = shapes["kv_groups"][1] if "kv_groups" in shapes else None
    rotation = f"rotate by position (RoPE, base {config.rope_base:,})"
    return {
        "input": (input_title(layer), False),
        **{stage: (project(weight, source), False) for weight, source, stage in projections},
        "latent": ("W_DKV(x): down to the latent", False),
        "kv_view": (f"split K, V into {g} K/V head{'' if g == 1 else 's'}", False),
        "kv_groups": ("transpose(1, 2)", False),
        "kv_repeat": (f"repeat_interleave({config.group_size}, dim=1): {g} → {config.heads} heads", False),
        "rotated_queries": (rotation, False),
        "rotated_keys": (rotation, False),
        "view": (f"split {'Q' if g else 'Q, K, V'} into {shapes['view'][2]} heads" if "view" in shapes
                 else "split heads", False),
        "transpose": ("transpose(1, 2)", False),
        "scores": ("Q · Kᵀ", False),
        "scaled": (("skipped: no ÷√dₖ" if unscaled else scale), unscaled),
        "masked": (masked, not hides_future),
        "weights": ("softmax (rows sum to 1)", False),
        "dropped": (
            dropout_off_reason(config, short=True) if dropout_off else f"dropout p = {config.dropout:g} (train)",
            dropout_off,
        ),
        "context": ("weights · V", False),
        "concat": (f"concatenate {heads or (shapes['transpose'][1] if 'transpose' in shapes else '')} heads", False),
        "output": (
            "out_proj(concat)" if spec.out_proj else ("= concat" if spec.multi_head else "= context"),
            False,
        ),
    }


def _read_shapes(trace_shapes: Shapes, spec: variants.Variant, highlight: str | None):
    """(base stage -> shape, base stage -> name as recorded ("queries ×12"), head count or None, the
    highlighted base stages: none, one, or both of the rotation's); raises ValueError for another variant's shapes
    or an unknown stage.  GQA's and MQA's ``kv_view`` is added: the recorded ``kv_groups`` before its transpose."""
    shapes: dict[str, tuple[int, ...]] = {}
    names: dict[str, str] = {}
    heads = None
    for name, shape in trace_shapes:
        base, count = _split_name(str(name))
        shapes[base], names[base] = tuple(int(d) for d in shape), str(name)
        heads = heads or count
    missing = [stage for stage in spec.shape_path if stage not in shapes]
    if missing:
        raise ValueError(f"trace_shapes lacks {', '.join(missing)} for variant {spec.name!r}: is it from another run?")
    if "kv_groups" in shapes:  # K, V before their transpose: the recorded (b, g, n, hd) as (b, n, g, hd)
        b, g, n, hd = shapes["kv_groups"]
        shapes["kv_view"], names["kv_view"] = (b, n, g, hd), "kv_view"
    lit: frozenset[str] = frozenset()
    if highlight is not None:
        base = _split_name(highlight)[0]
        if base not in KNOWN_STAGES:
            raise ValueError(f"Unknown stage {highlight!r}; choose one of {', '.join(sorted(KNOWN_STAGES))}.")
        lit = frozenset(ROTATION) if base in ROTATION else frozenset({base})
    return shapes, names, heads, lit


def shape_dot(
    trace_shapes: Shapes,
    config: AttentionConfig,
    highlight: str | None = None,
    rankdir: str | None = None,
    *,
    window: int | None = None,
    hides_future: bool | None = None,
    layer: int | None = None,
) -> str:
    """Graphviz DOT source of this run's attention pipeline, with the recorded shapes.

    ``trace_shapes`` is ``Trace.shapes``; ``config`` the run's config (variant, causal, dropout); ``window`` and
    ``hides_future`` the run's own mask (``Trace.window``, ``Trace.hides_future``: a checkpoint's layer has its own),
    else the config's; ``layer``: the block of a model this attention is in (its input is norm1 of the residual stream
    entering it), ``None`` for the book's classes on the input embeddings.
    ``highlight`` names a stage (``"masked"``, ``"masked ×12"``, ``"view"`` …): that node gets
    :data:`HIGHLIGHT_FILL` (the rotation's two nodes together); a known stage this variant does not have
    (``"view"`` for a single head) highlights nothing.  ``rankdir`` overrides the left-to-right layout
    (``"TB"``: top to bottom).
    """
    spec = config.spec
    shapes, names, heads, lit = _read_shapes(trace_shapes, spec, highlight)
    titles = _titles(config, shapes, heads, _mask(config, window, hides_future), layer)
    graph = _DotGraph(spec, _stages(spec, shapes), shapes, names, titles, heads, lit)
    lines = [*_dot_header(rankdir or "LR"), *graph.nodes(config.qkv_bias), *graph.edges(), "}"]
    return "\n".join(lines) + "\n"


_FONTSIZE = 12


def _dot_header(rankdir: str) -> list[str]:
    """The graph, node and edge defaults."""
    graph_attrs = _attrs(rankdir=rankdir, nodesep=0.3, ranksep=0.35, fontname="Helvetica", fontsize=_FONTSIZE,
                         fontcolor=LINE, bgcolor="transparent")
    node_attrs = _attrs(shape="box", style="rounded,filled", fillcolor=TENSOR_FILL, fontcolor=INK, fontname="Helvetica",
                        fontsize=_FONTSIZE)
    edge_attrs = _attrs(fontname="Helvetica", fontsize=_FONTSIZE - 2, arrowsize=0.8, color=LINE, fontcolor=LINE)
    return ["digraph attention {", f"  graph [{graph_attrs}];", f"  node [{node_attrs}];", f"  edge [{edge_attrs}];"]


class _DotGraph:
    """The nodes and edges of one run's pipeline diagram (see :func:`shape_dot`)."""

    def __init__(self, spec, stages, shapes, names, titles, heads, lit):
        self.spec, self.stages, self.shapes, self.names, self.titles = spec, stages, shapes, names, titles
        self.heads, self.lit = heads, lit

    def tensor_node(self, base: str, indent: str = "  ") -> str:
        operation, off = self.titles[base]
        shape = self.shapes[base]
        label = f"{self.names[base]}\n{operation}\n{format_shape(shape)}\n{_meaning(base, self.spec, len(shape))}"
        style = "rounded,dashed,filled" if off else None
        fill = HIGHLIGHT_FILL if base in self.lit else (OFF_FILL if off else None)
        color = OFF_COLOR if off else None
        penwidth = 2.5 if base in self.lit else None
        attrs = _attrs(label=label, style=style, fillcolor=fill, color=color, fontcolor=OFF_INK if off else None,
                       penwidth=penwidth)
        return f"{indent}{quote(base)} [{attrs}];"

    def weight_node(self, weight: str, width_in: int, width_out: int, bias: bool) -> str:
        """A parallelogram: the weight's name, its kind and its sizes each on a line of their own, as a parallelogram
        is as wide as its longest line and then some, and three stand side by side (Q, K, V) — so the diagram
        stays narrow enough to be read where a narrow window scales it down."""
        if self.spec.weights == "parameter":  # the book's first version: a bare (d_in, d_out) matrix
            kind = f"nn.Parameter\n{format_shape((width_in, width_out))}"
        else:
            kind = f"nn.Linear\n{width_in} → {width_out}" + (" + bias" if bias else "")
        label = f"{weight}{' ×' + str(self.heads) if self.heads else ''}\n{kind}"
        attrs = _attrs(label=label, shape="parallelogram", style="filled", fillcolor=WEIGHT_FILL, margin=0.04)
        return f"  {quote(weight)} [{attrs}];"

    def nodes(self, qkv_bias: bool) -> list[str]:
        """Tensors in pipeline order, the weights beside them; a multi-head run's per-head part in a cluster."""
        spec, shapes = self.spec, self.shapes
        grouped, where = [], ""
        if spec.heads == variants.BATCHED:
            grouped = ["transpose", *MAP_STAGES, "context"]
            where = f"{shapes['transpose'][1]} heads at once (batched)"
        elif spec.heads == variants.PER_HEAD:
            grouped = [*QKV, *MAP_STAGES, "context"]
            where = f"each of {self.heads} CausalAttention heads"
        lines = []
        grouped += [stage for stage in ("kv_groups", *ROTATION, "kv_repeat") if stage in shapes]
        if spec.weights is not None:
            lines.extend(self.weight_node(w, shapes[source][-1], shapes[stage][-1], qkv_bias)
                         for w, source, stage in _projections(spec))
        if spec.out_proj:
            lines.append(self.weight_node("out_proj", shapes["concat"][-1], shapes["output"][-1],
                                          not spec.grouped))  # the book's GQA has no out_proj bias
        lines.extend(self.tensor_node(stage) for stage in self.stages if stage not in grouped)
        if grouped:
            lines.append("  subgraph cluster_heads {")
            lines.append(
                f"    graph [{_attrs(label=where, style='rounded,dashed', color=OFF_COLOR)}];"
            )
            lines.extend(self.tensor_node(stage, indent="    ") for stage in grouped)
            lines.append("  }")
        return lines

    def edges(self) -> list[str]:
        """Input → Q, K, V (through the weights) → scores → … → context → output."""
        spec, shapes = self.spec, self.shapes
        lines = []
        for weight, source, stage in _projections(spec):
            if spec.weights is None:
                lines.append(_edge("input", stage, "as is"))
            else:
                lines += [_edge(source, weight), _edge(weight, stage)]
        if spec.heads == variants.BATCHED:
            q_from = k_from = v_from = "transpose"
            if "kv_groups" in shapes:  # grouped K/V: viewed into their own, fewer heads; the queries into num_heads
                lines += [_edge("queries", "view"), _edge("keys", "kv_view"), _edge("values", "kv_view")]
                lines += [_edge("view", "transpose"), _edge("kv_view", "kv_groups")]
                k_from = v_from = "kv_groups"
            else:
                lines += [_edge(stage, "view") for stage in QKV]
                lines.append(_edge("view", "transpose"))
            if "rotated_queries" in shapes:
                lines += [_edge(q_from, "rotated_queries", "Q"), _edge(k_from, "rotated_keys", "K")]
                q_from, k_from = "rotated_queries", "rotated_keys"
            if "kv_repeat" in shapes:
                lines += [_edge(k_from, "kv_repeat", "K"), _edge(v_from, "kv_repeat", "V")]
                k_from = v_from = "kv_repeat"
            if q_from == k_from:
                lines.append(_edge(q_from, "scores", "Q, K"))
            else:
                lines += [_edge(q_from, "scores", "Q"), _edge(k_from, "scores", "Kᵀ")]
            lines.append(_edge(v_from, "context", "V"))
        else:
            lines += [_edge("queries", "scores", "Q"), _edge("keys", "scores", "Kᵀ"), _edge("values", "context", "V")]
        chain = ["scores", "scaled", "masked", "weights", "dropped", "context"]
        lines += [_edge(tail, head, off=self.titles[head][1]) for tail, head in zip(chain, chain[1:])]
        if spec.out_proj:
            lines += [_edge("context", "concat"), _edge("concat", "out_proj"), _edge("out_proj", "output")]
        elif spec.multi_head:
            lines += [_edge("context", "concat", f"×{self.heads}"), _edge("concat", "output")]
        else:
            lines.append(_edge("context", "output"))
        return lines


def _edge(tail: str, head: str, label: str | None = None, off: bool = False) -> str:
    attrs = _attrs(label=label, style="dashed" if off else None, color=OFF_COLOR if off else None)
    return f"  {quote(tail)} -> {quote(head)}" + (f" [{attrs}];" if attrs else ";")


_FLOW_PAIRS = {"view": "kv_view", "transpose": "kv_groups"}  # the queries' step and K/V's, side by side


def _flow_rows(stages: Sequence[str]) -> list[list[tuple[str | None, int]]]:
    """The compact flow's rows, top to bottom, on three columns (Q, K, V): each row's cells as (stage or None for
    an empty cell, columns spanned).  MLA's queries sit beside the latent, both made from x, and its keys and
    values under the latent; GQA's and MQA's K/V view and transpose beside the queries', the rotation's q and k
    side by side; every other stage spans the three columns."""
    rows: list[list[tuple[str | None, int]]] = []
    for stage in stages:
        if stage == "queries":
            rows.append([("queries", 1), ("latent", 2)] if "latent" in stages else [(name, 1) for name in QKV])
            if "latent" in stages:
                rows.append([(None, 1), ("keys", 1), ("values", 1)])
        elif stage in _FLOW_PAIRS and _FLOW_PAIRS[stage] in stages:
            rows.append([(stage, 1), (_FLOW_PAIRS[stage], 2)])
        elif stage == ROTATION[0]:
            rows.append([(ROTATION[0], 1), (ROTATION[1], 1), (None, 1)])  # V is not rotated
        elif stage == "kv_repeat":
            rows.append([(None, 1), ("kv_repeat", 2)])  # K and V only: the queries have their heads
        elif stage not in (*QKV, "latent", ROTATION[1], *_FLOW_PAIRS.values()):
            rows.append([(stage, 3)])
    return rows


def _tensor_box(name: str, shape: str, style: str, *, layout: str, note: str = "", attrs: str = "") -> str:
    """One tensor of an HTML flow diagram: its name in bold and its shape in code, a small ``note`` below; ``style``
    its border and fill, ``layout`` its alignment and wrapping, ``attrs`` its class and data attributes (already
    escaped).  A name is one word (``rotated_queries``) and a shape never wraps (``(1, 1024, 768)`` stays on one
    line): its box is never narrower than either; a narrow box puts the shape on the line below the name.  Every
    string is escaped."""
    return (f'<div{attrs} style="color:{INK};{style};border-radius:6px;padding:2px 4px;{layout}">'
            f'<b>{html.escape(name)}</b> '
            '<code style="font-size:0.85em;background:none;color:inherit;white-space:nowrap">'
            f'{html.escape(shape)}</code>'
            + (f'<br><span style="font-size:0.75em">{html.escape(note)}</span>' if note else "") + "</div>")


def _flow(css_class: str, body: str, style: str = "") -> str:
    """An HTML flow diagram's frame: the page's small sans-serif type around ``body``, then ``style``."""
    return (f'<div class="{css_class}" style="font-family:sans-serif;font-size:0.8rem;line-height:1.25{style}">'
            f'{body}</div>')


def shape_flow_html(trace_shapes: Shapes, config: AttentionConfig, highlight: str | None = None, *,
                    window: int | None = None, hides_future: bool | None = None, layer: int | None = None) -> str:
    """The compact shape diagram as plain HTML: one box per recorded tensor, top to bottom, with its
    shape, the stage on view (``highlight``) filled like :func:`shape_dot`'s, and stages that did
    nothing in this run dashed and grey.  Same stages, shapes and operations as :func:`shape_dot`, but
    laid out by the browser's own HTML layout: a Graphviz chart is laid out and animated in the browser
    on every change, which makes each settings change wait for it.  ``window`` and ``hides_future``: the run's own
    mask, and ``layer``, as for :func:`shape_dot`.

    Every string is escaped; the result is safe for ``st.html``."""
    spec = config.spec
    shapes, names, heads, lit = _read_shapes(trace_shapes, spec, highlight)
    titles = _titles(config, shapes, heads, _mask(config, window, hides_future), layer)
    weighted = spec.weights is not None
    arrows = {  # what the arrow into a stage carries, where it is not just "the row above"
        **{stage: (weight if weighted else "as is") for weight, _, stage in _projections(spec)},
        "latent": "W_DKV" if "latent" in shapes else None,
        "scores": "Q, Kᵀ",
        "context": "· V (values)",
        "concat": f"×{heads}" if spec.heads == variants.PER_HEAD else None,
        "output": "out_proj" if spec.out_proj else None,
    }

    def box(stage: str | None, span: int, basis: str) -> str:
        cell = f"flex:{span} 1 {basis};text-align:center"  # never narrower than its longest word or its shape
        if stage is None:  # nothing happens in this column here
            return f'<div style="{cell}"></div>'
        operation, off = titles[stage]
        style = (f"border:1px dashed {OFF_COLOR};color:{OFF_INK};background:{OFF_FILL}" if off
                 else "border:1px solid #8fa8d6")
        if stage in lit:
            style = f"border:2.5px solid #333;background:{HIGHLIGHT_FILL}"
        elif not off:
            style += f";background:{TENSOR_FILL}"
        arrow = arrows.get(stage)
        into = "" if stage == "input" else (
            f'<div style="font-size:0.7em;{DIM}">{html.escape("↓ " + arrow if arrow else "↓")}</div>')
        attrs = f' class="attnviz-stage" data-stage="{html.escape(stage)}" title="{html.escape(operation)}"'
        tensor = _tensor_box(names[stage], format_shape(shapes[stage]), style, layout="overflow-wrap:break-word",
                             note=operation if off else "", attrs=attrs)
        return f'<div style="{cell}">{into}{tensor}</div>'

    # the frame is a size container: a narrow column (the Heads page at 1,100 px: ~150 px) sets smaller type
    # (cqi: % of its width); a row whose boxes do not fit side by side stacks them, one under the other, rather than
    # break a word or a shape or leave one box alone on a second line
    row_style = "display:flex;flex-wrap:wrap;gap:4px;font-size:clamp(0.65rem, 6.5cqi, 1em)"
    rows = _flow_rows(_stages(spec, shapes))
    return _flow("attnviz-flow", "".join(
        f'<div style="{row_style}">{"".join(box(stage, span, _basis(row, names, shapes)) for stage, span in row)}'
        "</div>" for row in rows), style=";container-type:inline-size")


# the widths a row's boxes need, in em of the row's type, per character: a bold name (the widest glyphs of
# common sans-serif fonts) and a shape in code (monospace at 0.85em: 0.51em a character)
_NAME_EM, _SHAPE_EM = 0.65, 0.52
_BOX_PX, _GAP_PX = 13, 4  # a box's padding and borders (the highlighted one's 2.5px); the gap between boxes


def _basis(row: Sequence[tuple[str | None, int]], names: dict[str, str], shapes: dict) -> str:
    """The flex-basis of a compact-flow row's cells: 0 (shared by their spans) when the row is at least as wide as
    its boxes need side by side (each box's wider of its name and its shape, in its share of the three columns),
    else more than the row (each cell on a line of its own): ``calc((needed - 100%) * 999)``, which CSS clamps
    to 0 when negative.  A row of one cell: 0."""
    if len(row) == 1:
        return "0"
    needed_em = max(3 * max(_NAME_EM * len(names[stage]), _SHAPE_EM * len(format_shape(shapes[stage]))) / span
                    for stage, span in row if stage is not None)
    needed_px = 3 * _BOX_PX / min(span for stage, span in row if stage is not None) + _GAP_PX * (len(row) - 1)
    return f"calc(({needed_em:.2f}em + {needed_px:.0f}px - 100%) * 999)"


# -------------------------------------------------------------------- the KV cache of one generation step

_CACHE_NEW = {"cache_k": "keys of the fed tokens", "cache_v": "values of the fed tokens",
              "cache_c_kv": "latent c_kv of the fed tokens"}


def cache_flow_html(cache_shapes: dict[str, tuple[int, ...]], fed: int, seen: int, layer: int,
                    token_axis: int) -> str:
    """One layer's cache in one generation step, as the compact shape diagram: for each cached tensor, the fed
    tokens' new slice — ``fed`` on ``token_axis``: ``(b, fed, heads, head_dim)`` in the book's MHA layout (axis 1),
    ``(b, kv_heads, fed, head_dim)`` after the transpose (axis 2), MLA's ``(b, fed, latent_dim)`` (axis 1) —
    concatenated along that axis onto what the cache held, giving ``cache_shapes[name]`` — at most the window's
    length when the cache drops its oldest tokens (``seen``: the tokens fed so far).  Every string is escaped; safe
    for ``st.html``."""
    def box(name: str, shape: tuple[int, ...], filled: bool) -> str:
        style = f"border:1px solid #8fa8d6;background:{TENSOR_FILL if filled else '#fff'}"
        return _tensor_box(name, format_shape(shape), style, layout="text-align:center")

    columns = []
    for name, shape in cache_shapes.items():
        axis = token_axis
        if axis >= len(shape):
            continue
        new = tuple(fed if i == axis else size for i, size in enumerate(shape))
        held = shape[axis]
        how = "↓ concatenated along the tokens" + (f", the oldest dropped: the last {held} kept" if held < seen else "")
        columns.append(  # a column is never narrower than its shapes: in a narrow frame the next one goes below
            f'<div style="flex:1 1 0">{box(_CACHE_NEW.get(name, name), new, False)}'
            f'<div style="font-size:0.7em;{DIM};text-align:center">{html.escape(how)}</div>'
            f"{box(name, shape, True)}</div>")
    title = f"layer {layer}: what this step adds to its cache"
    return _flow("attnviz-cache-flow", f'<div style="font-size:0.8em;{DIM};margin-bottom:2px">{html.escape(title)}'
                 f'</div><div style="display:flex;flex-wrap:wrap;gap:4px">{"".join(columns)}</div>')


# -------------------------------------------------------------------- a user's module: its own op path

_OP_STAGE_WORDS = {"queries": "Q", "keys": "K", "values": "V", "scores": "scores = Q·Kᵀ", "scaled": "÷√dₖ",
                   "masked": "mask", "weights": "softmax → weights", "dropped": "dropout", "context": "· V → context"}
# a call that computes every stage inside (its weights are computed by attnviz from its arguments)
_WHOLE_CALLS = {"scaled_dot_product_attention": "Q·Kᵀ, scale, mask, softmax, · V inside",
                "multi_head_attention_forward": "projections, Q·Kᵀ, mask, softmax, · V, out_proj inside"}


def op_rows(trace) -> list[dict[str, str]]:
    """One row per op the user's module ran: ``{"op", "shape", "stage", "line"}`` (``trace.module_run``)."""
    run = trace.module_run
    rows = [{"op": "input", "shape": format_shape(trace.shapes[0][1]), "stage": "", "line": ""}]
    for name, shape, line, stage in run.ops:
        stage = stage or ""
        if name in ("scaled_dot_product_attention", "multi_head_attention_forward"):
            stage = "context"  # one call: scores, mask, softmax and · V inside
        rows.append({"op": name, "shape": format_shape(shape), "stage": stage,
                     "line": "" if line is None else str(line)})
    return rows


def op_flow_html(trace, highlight: str | None = None) -> str:
    """A traced module's own path as plain HTML: one box per op it ran (the call, its output shape, its line), the
    op that made the stage on view (``highlight``) filled.  Every string is escaped; safe for ``st.html``."""
    rows = op_rows(trace)
    parts = []
    for index, row in enumerate(rows):
        on_view = bool(row["stage"]) and row["stage"] == highlight
        style = (f"border:2.5px solid #333;background:{HIGHLIGHT_FILL}" if on_view
                 else f"border:1px solid #8fa8d6;background:{TENSOR_FILL}")
        stage = _WHOLE_CALLS.get(row["op"]) or _OP_STAGE_WORDS.get(row["stage"], row["stage"])
        note = " · ".join(filter(None, [stage, f"line {row['line']}" if row["line"] else ""]))
        if index:
            parts.append(f'<div style="text-align:center;line-height:1;{DIM}">↓</div>')
        parts.append(_tensor_box(row["op"], row["shape"], style, layout="text-align:center;overflow-wrap:break-word",
                                 note=note, attrs=f' class="attnviz-op" data-stage="{html.escape(row["stage"])}"'))
    return _flow("attnviz-flow", "".join(parts))


def op_dot(trace, rankdir: str = "TB") -> str:
    """A traced module's own path as Graphviz DOT: one node per op, in the order it ran."""
    rows = op_rows(trace)
    lines = ["digraph ops {", f'  graph [rankdir={rankdir}, bgcolor="transparent", fontcolor="{LINE}"];',
             f'  node [shape=box, style="rounded,filled", fillcolor="{TENSOR_FILL}", fontcolor="{INK}", '
             'fontname="sans-serif", fontsize=11];', f'  edge [color="{LINE}", fontcolor="{LINE}"];']
    for index, row in enumerate(rows):
        stage = _WHOLE_CALLS.get(row["op"]) or _OP_STAGE_WORDS.get(row["stage"], row["stage"])
        label = "\n".join(filter(None, [f"{row['op']}  {row['shape']}", stage,
                                        f"line {row['line']}" if row["line"] else ""]))
        fill = f', fillcolor="{HIGHLIGHT_FILL}", penwidth=2' if row["stage"] in ("weights", "context") else ""
        lines.append(f'  "op{index}" [label={quote(label)}{fill}];')
        if index:
            lines.append(f'  "op{index - 1}" -> "op{index}";')
    lines.append("}")
    return "\n".join(lines)
