"""The shape diagram tells the story of the run it was drawn from: its shapes, its variant's path."""

from __future__ import annotations

import html.parser
import re
import shutil
import subprocess

import pytest
from helpers.runs import small

from attnviz import pipeline, variants
from attnviz.attention import MAP_STAGES, STAGES
from attnviz.config import AttentionConfig, preset_config
from attnviz.trace import Trace
from attnviz.views import diagram

JOURNEY = "Your journey starts with one step"  # 6 tokens
LONGER = "Your journey starts with one step, and then another, and another."


def traced(config: AttentionConfig, text: str = JOURNEY) -> Trace:
    return pipeline.run(text, config)


# --- a tiny DOT reader: enough to check structure without the graphviz binary -------------------

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NODE = re.compile(r'^\s*("(?:[^"\\]|\\.)*")\s*\[(.*)\];\s*$')
_EDGE = re.compile(r'^\s*("(?:[^"\\]|\\.)*")\s*->\s*("(?:[^"\\]|\\.)*")\s*(?:\[(.*)\])?;\s*$')
_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*")')


def _unquote(token: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), token[1:-1])


def parse(dot: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str, dict[str, str]]]]:
    """(nodes: id -> attrs, edges: (tail, head, attrs)); asserts every line is something DOT allows."""
    nodes: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict[str, str]]] = []
    for line in dot.splitlines():
        if edge := _EDGE.match(line):
            attrs = {k: _unquote(v) for k, v in _ATTR.findall(edge.group(3) or "")}
            edges.append((_unquote(edge.group(1)), _unquote(edge.group(2)), attrs))
        elif (node := _NODE.match(line)) and node.group(1) != '"graph"':
            nodes[_unquote(node.group(1))] = {k: _unquote(v) for k, v in _ATTR.findall(node.group(2))}
        else:
            bare = _QUOTED.sub('""', line).strip()
            assert re.fullmatch(r"digraph \w+ \{|subgraph cluster_\w+ \{|\}|(graph|node|edge) \[.*\];|", bare), line
    return nodes, edges


def assert_plausible_dot(dot: str) -> None:
    bare = _QUOTED.sub('""', dot)  # braces inside labels do not count
    assert bare.count('"') % 2 == 0
    depth = 0
    for char in bare:
        depth += {"{": 1, "}": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0
    assert bare.count("[") == bare.count("]")
    assert dot.lstrip().startswith("digraph ")
    nodes, edges = parse(dot)
    for tail, head, _ in edges:
        assert tail in nodes, f"edge from undeclared node {tail!r}"
        assert head in nodes, f"edge to undeclared node {head!r}"
    linked = {name for tail, head, _ in edges for name in (tail, head)}
    assert set(nodes) == linked, f"nodes without edges: {set(nodes) - linked}"


def contrast(ink: str, fill: str) -> float:
    """WCAG's contrast ratio of two ``#rrggbb`` colours."""
    def luminance(colour: str) -> float:
        channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    light, dark = sorted((luminance(ink), luminance(fill)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def assert_text_readable_on_every_fill(dot: str) -> None:
    """Every filled node's text has its own colour, set in the DOT with its fill, and reads on it (4:1): the
    page's theme colours only what the DOT leaves unset (Streamlit's dark theme: pale text)."""
    default = dict(_ATTR.findall(re.search(r"^\s*node \[(.*)\];$", dot, re.M).group(1)))
    for name, attrs in parse(dot)[0].items():
        ink, fill = (attrs.get(key) or _unquote(default.get(key, '""')) for key in ("fontcolor", "fillcolor"))
        assert ink and contrast(ink, fill) >= 4, (name, ink, fill)
    for kind in ("graph", "edge"):  # cluster and edge labels, edges: on the page's background, white or dark
        ink = _unquote(dict(_ATTR.findall(re.search(rf"^\s*{kind} \[(.*)\];$", dot, re.M).group(1)))["fontcolor"])
        assert min(contrast(ink, "#ffffff"), contrast(ink, "#0e1117")) >= 4, (kind, ink)


def labels(dot: str) -> dict[str, str]:
    return {name: attrs.get("label", "") for name, attrs in parse(dot)[0].items()}


# --- every variant, every mode: valid DOT ------------------------------------------------------


@pytest.mark.parametrize("variant", list(variants.LABELS))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rankdir", [None, "TB"])
def test_dot_is_plausible_for_every_variant(variant, causal, rankdir):
    config = small(variant, causal=causal)
    dot = diagram.shape_dot(traced(config).shapes, config, highlight="weights", rankdir=rankdir)
    assert_plausible_dot(dot)
    assert_text_readable_on_every_fill(dot)


@pytest.mark.skipif(shutil.which("dot") is None, reason="the graphviz binary is not installed")
@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_graphviz_accepts_the_dot(variant):
    config = small(variant)
    dot = diagram.shape_dot(traced(config).shapes, config, highlight="masked")
    result = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("dot") is None, reason="the graphviz binary is not installed")
@pytest.mark.parametrize("variant", ["mha", "gqa", "mla"])
def test_the_shapes_pages_diagram_is_narrow_enough_to_read_in_a_narrow_window(variant):
    """The Shapes page scales its top-to-bottom diagram down to its column (about 440 px beside the sidebar in a 900 px
    window): at most 500 pt wide (≈ 667 px), so its 12-pt text keeps at least two thirds of its size."""
    config = preset_config("gpt2-small", variant=variant)
    trace = traced(config)
    dot = diagram.shape_dot(trace.shapes, config, rankdir="TB", window=trace.window, hides_future=trace.hides_future)
    svg = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=True).stdout
    width = float(re.search(r'<svg width="([\d.]+)pt"', svg).group(1))
    assert width <= 500, width


# --- the shapes come from the trace ------------------------------------------------------------


def test_every_recorded_shape_is_on_the_diagram():
    config = small("mha")
    trace = traced(config)
    node_labels = labels(diagram.shape_dot(trace.shapes, config))
    for name, shape in trace.shapes:
        node = diagram._split_name(name)[0]
        assert diagram.format_shape(shape) in node_labels[node].splitlines()


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_text_length_changes_the_shapes(variant):
    config = small(variant)
    short, long = traced(config, JOURNEY), traced(config, LONGER)
    assert short.n == 6 and long.n > 6
    short_labels = labels(diagram.shape_dot(short.shapes, config))
    long_labels = labels(diagram.shape_dot(long.shapes, config))
    assert "6, 6)" in short_labels["weights"]
    assert f"{long.n}, {long.n})" in long_labels["weights"]
    assert f"(1, {long.n}, 8)" in long_labels["input"]
    assert short_labels != long_labels


@pytest.mark.parametrize("heads, head_dim", [(2, 4), (4, 2)])
def test_num_heads_changes_the_mha_shapes(heads, head_dim):
    config = small("mha", num_heads=heads)
    node_labels = labels(diagram.shape_dot(traced(config).shapes, config))
    assert f"(1, 6, {heads}, {head_dim})" in node_labels["view"]
    assert f"(1, {heads}, 6, {head_dim})" in node_labels["transpose"]
    assert f"(1, {heads}, 6, 6)" in node_labels["scores"]
    assert f"dₖ = head_dim = {head_dim}" in node_labels["scaled"]
    assert f"(1, {heads}, 6, {head_dim})" in node_labels["context"]
    assert "(1, 6, 8)" in node_labels["concat"]


@pytest.mark.parametrize("heads", [2, 4])
def test_num_heads_changes_the_wrapper_labels(heads):
    config = small("mha_wrapper", num_heads=heads)
    dot = diagram.shape_dot(traced(config).shapes, config)
    node_labels = labels(dot)
    assert node_labels["queries"].startswith(f"queries ×{heads}\n")
    assert f"(1, 6, {8 // heads})" in node_labels["queries"]
    assert f"W_query ×{heads}" in node_labels["W_query"]
    assert f"×{heads}" in [attrs.get("label") for tail, head, attrs in parse(dot)[1] if head == "concat"]


def test_d_out_changes_the_shapes():
    narrow, wide = small("mha", d_out=8), small("mha", d_out=16)
    narrow_labels = labels(diagram.shape_dot(traced(narrow).shapes, narrow))
    wide_labels = labels(diagram.shape_dot(traced(wide).shapes, wide))
    assert "(1, 6, 8)" in narrow_labels["queries"] and "(1, 6, 16)" in wide_labels["queries"]
    assert "(1, 6, 2, 8)" in wide_labels["view"]
    assert "nn.Linear\n8 → 16" in wide_labels["W_query"]
    assert "nn.Linear\n16 → 16 + bias" in wide_labels["out_proj"]


def test_v1_shows_parameters_and_v2_linear_layers():
    v1, v2 = small("self_attention_v1", d_out=6), small("self_attention_v2", d_out=6, qkv_bias=True)
    v1_labels, v2_labels = (
        labels(diagram.shape_dot(traced(v1).shapes, v1)),
        labels(diagram.shape_dot(traced(v2).shapes, v2)),
    )
    assert "nn.Parameter\n(8, 6)" in v1_labels["W_key"] and "x @ W_key" in v1_labels["keys"]
    assert "nn.Linear\n8 → 6 + bias" in v2_labels["W_key"] and "W_key(x)" in v2_labels["keys"]


def test_variant_changes_the_diagram():
    """4 heads where the variant has heads: GQA groups them (2 K/V heads), unlike MHA (4) and MQA (1)."""
    configs = {v: small(v, **({"num_heads": 4} if variants.get(v).multi_head else {})) for v in variants.LABELS}
    dots = {v: diagram.shape_dot(traced(config).shapes, config) for v, config in configs.items()}
    assert len(set(dots.values())) == len(dots)


def test_a_trace_from_another_variant_is_rejected():
    mha_shapes = traced(small("mha")).shapes
    with pytest.raises(ValueError, match="concat"):
        diagram.shape_dot(traced(small("causal")).shapes, small("mha"))
    with pytest.raises(ValueError, match="lacks"):
        diagram.shape_dot(mha_shapes[:5], small("mha"))


# --- each variant has its own path -------------------------------------------------------------


@pytest.mark.parametrize("layer, x", [
    (None, "x: input embeddings"),  # the book's classes read the embeddings themselves
    (0, "x = norm1(the input embeddings)"),
    (2, "x = norm1(the residual stream entering block 2)"),
])
def test_the_input_node_says_what_the_attention_reads(layer, x):
    """A model's block L attends over norm1 of the residual stream entering it, not over the embeddings."""
    config = small("mha")
    shapes = traced(config).shapes
    nodes, _ = parse(diagram.shape_dot(shapes, config, layer=layer))
    assert x in nodes["input"]["label"]
    assert f'title="{x}"' in diagram.shape_flow_html(shapes, config, layer=layer).replace("&#x27;", "'")
    assert ("embeddings" in nodes["input"]["label"]) == (layer in (None, 0))


def test_mha_path():
    config = small("mha")
    nodes, edges = parse(diagram.shape_dot(traced(config).shapes, config))
    pairs = {(tail, head) for tail, head, _ in edges}
    assert {"view", "transpose", "out_proj", "concat", "W_query", "W_key", "W_value"} <= set(nodes)
    assert {("queries", "view"), ("view", "transpose"), ("transpose", "scores"), ("context", "concat")} <= pairs
    assert {("concat", "out_proj"), ("out_proj", "output"), ("transpose", "context")} <= pairs
    assert not any("×" in attrs["label"] for name, attrs in nodes.items())


def test_wrapper_path():
    config = small("mha_wrapper")
    dot = diagram.shape_dot(traced(config).shapes, config)
    nodes, edges = parse(dot)
    pairs = {(tail, head) for tail, head, _ in edges}
    assert "concat" in nodes and "view" not in nodes and "transpose" not in nodes and "out_proj" not in nodes
    for stage in ("queries", "keys", "values", *MAP_STAGES, "context"):
        assert nodes[stage]["label"].startswith(f"{stage} ×2")
    assert {("context", "concat"), ("concat", "output"), ("W_query", "queries")} <= pairs
    assert "subgraph cluster_heads" in dot


@pytest.mark.parametrize("variant", ["self_attention_v1", "self_attention_v2", "causal"])
def test_single_head_path(variant):
    config = small(variant, d_out=6)
    nodes, edges = parse(diagram.shape_dot(traced(config).shapes, config))
    pairs = {(tail, head) for tail, head, _ in edges}
    assert {"W_query", "W_key", "W_value"} <= set(nodes)
    assert not {"view", "transpose", "concat", "out_proj"} & set(nodes)
    assert "dₖ = d_out = 6" in nodes["scaled"]["label"]
    assert "(1, 6, 6)" in nodes["queries"]["label"]
    assert {("queries", "scores"), ("keys", "scores"), ("values", "context"), ("context", "output")} <= pairs


def test_simplified_path_has_no_weights_and_skips_scaling():
    config = small("simplified")
    nodes, edges = parse(diagram.shape_dot(traced(config).shapes, config))
    assert not {"W_query", "W_key", "W_value", "out_proj", "view", "concat"} & set(nodes)
    assert ("input", "queries") in {(tail, head) for tail, head, _ in edges}
    assert "skipped" in nodes["scaled"]["label"] and "√" in nodes["scaled"]["label"]
    assert "dashed" in nodes["scaled"]["style"]
    assert "= inputs" in nodes["queries"]["label"]


# --- mask, dropout, highlight ------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["causal", "mha", "mha_wrapper", "self_attention_v2"])
def test_mask_off_is_dashed_and_grey(variant):
    on = small(variant, causal=True)
    off = small(variant, causal=False)
    on_nodes = parse(diagram.shape_dot(traced(on).shapes, on))[0]
    off_nodes, off_edges = parse(diagram.shape_dot(traced(off).shapes, off))
    assert "mask off" not in on_nodes["masked"]["label"] and "dashed" not in on_nodes["masked"].get("style", "")
    assert "mask off" in off_nodes["masked"]["label"]
    assert "dashed" in off_nodes["masked"]["style"] and off_nodes["masked"]["color"] == diagram.OFF_COLOR
    assert any(head == "masked" and attrs.get("style") == "dashed" for _, head, attrs in off_edges)


@pytest.mark.parametrize("variant", ["causal", "mha", "mha_wrapper"])
def test_dropout_off_in_eval_and_on_in_training(variant):
    evaluating = small(variant, dropout=0.1, train=False)
    training = small(variant, dropout=0.1, train=True)
    assert training.dropout_runs and not evaluating.dropout_runs
    eval_node = parse(diagram.shape_dot(traced(evaluating).shapes, evaluating))[0]["dropped"]
    train_node = parse(diagram.shape_dot(traced(training).shapes, training))[0]["dropped"]
    assert "off (eval)" in eval_node["label"] and "dashed" in eval_node["style"]
    assert "p = 0.1" in train_node["label"] and "style" not in train_node


def test_dropout_absent_from_the_class_is_off():
    config = small("self_attention_v1", dropout=0.5, train=True)
    node = parse(diagram.shape_dot(traced(config).shapes, config))[0]["dropped"]
    assert "no dropout" in node["label"] and "dashed" in node["style"]


@pytest.mark.parametrize("variant", list(variants.LABELS))
@pytest.mark.parametrize("rankdir", [None, "TB"])
def test_highlight_marks_exactly_one_node(variant, rankdir):
    config = small(variant)
    shapes = traced(config).shapes
    assert diagram.HIGHLIGHT_FILL not in diagram.shape_dot(shapes, config, rankdir=rankdir)
    for name, _ in shapes:
        nodes = parse(diagram.shape_dot(shapes, config, highlight=name, rankdir=rankdir))[0]
        lit = [node for node, attrs in nodes.items() if attrs.get("fillcolor") == diagram.HIGHLIGHT_FILL]
        assert lit == [diagram._split_name(name)[0]]


def test_highlight_accepts_base_names_and_ignores_stages_the_variant_lacks():
    config = small("mha_wrapper")
    shapes = traced(config).shapes
    assert diagram.shape_dot(shapes, config, highlight="masked") == diagram.shape_dot(
        shapes, config, highlight="masked ×2"
    )
    assert diagram.HIGHLIGHT_FILL not in diagram.shape_dot(shapes, config, highlight="view")
    with pytest.raises(ValueError, match="Unknown stage"):
        diagram.shape_dot(shapes, config, highlight="attention")


def test_every_book_stage_can_be_highlighted():
    config = small("mha")
    shapes = traced(config).shapes
    for stage in STAGES:
        assert diagram.shape_dot(shapes, config, highlight=stage).count(diagram.HIGHLIGHT_FILL) == 1


# --- layout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_top_to_bottom_layout_has_the_same_shapes(variant):
    config = small(variant)
    shapes = traced(config).shapes
    wide, tall = diagram.shape_dot(shapes, config), diagram.shape_dot(shapes, config, rankdir="TB")
    assert 'rankdir="TB"' in tall and 'rankdir="LR"' in wide
    tall_labels = labels(tall)
    for name, shape in shapes:
        assert diagram.format_shape(shape) in tall_labels[diagram._split_name(name)[0]]


# --- escaping, rows, equation ------------------------------------------------------------------


@pytest.mark.parametrize("text", ['say "hi"', "back\\slash", "two\nlines", "braces {x} [y]", 'end\\"'])
def test_quote_makes_one_valid_dot_string(text):
    quoted = diagram.quote(text)
    assert _QUOTED.fullmatch(quoted)
    assert _unquote(quoted) == text.replace("\r", "")


def test_shape_rows_follow_the_trace():
    config = small("mha")
    trace = traced(config)
    rows = diagram.shape_rows(trace.shapes, config)
    assert [row["stage"] for row in rows] == [name for name, _ in trace.shapes]
    by_stage = {row["stage"]: row for row in rows}
    assert by_stage["input"] == {"stage": "input", "shape": "(1, 6, 8)", "meaning": "(b, n, d_in)"}
    assert by_stage["view"]["meaning"] == "(b, n, h, hd)"
    assert by_stage["transpose"]["meaning"] == "(b, h, n, hd)"
    assert by_stage["weights"] == {"stage": "weights", "shape": "(1, 2, 6, 6)", "meaning": "(b, h, n, n)"}
    assert by_stage["output"]["meaning"] == "(b, n, d_out)"
    for row in rows:  # the symbols have as many entries as the shape has dimensions
        assert row["meaning"].count(",") == row["shape"].count(",")


def test_shape_rows_follow_the_variant_path():
    wrapper = diagram.shape_rows(traced(small("mha_wrapper")).shapes, small("mha_wrapper"))
    assert {row["stage"]: row["meaning"] for row in wrapper}["scores ×2"] == "(b, n, n)"
    single = diagram.shape_rows(traced(small("causal", d_out=6)).shapes, small("causal", d_out=6))
    assert {row["stage"]: row["meaning"] for row in single}["queries"] == "(b, n, d_out)"
    simplified = diagram.shape_rows(traced(small("simplified")).shapes, small("simplified"))
    assert {row["stage"]: row["meaning"] for row in simplified}["queries"] == "(b, n, d_in)"


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
def test_shape_rows_list_the_tensors_the_diagram_draws_in_its_order(variant):
    """One list for the Shapes page's diagram and its table: every tensor node of the diagram is a row with its shape,
    GQA's and MQA's kv_view ((b, n, g, hd)) included, between the view and K and V's transpose."""
    config = small(variant)
    trace = traced(config)
    rows = diagram.shape_rows(trace.shapes, config)
    nodes = parse(diagram.shape_dot(trace.shapes, config))[0]
    tensors = [node for node, attrs in nodes.items() if attrs.get("shape") != "parallelogram"]
    assert sorted(row["stage"].split(" ×")[0] for row in rows) == sorted(tensors)
    for row in rows:
        assert nodes[row["stage"].split(" ×")[0]]["label"].splitlines()[2] == row["shape"]
    if variants.get(variant).grouped:
        kv_view = next(row for row in rows if row["stage"] == "kv_view")
        assert kv_view["meaning"] == "(b, n, g, hd)"
        b, g, n, hd = dict(trace.shapes)["kv_groups"]
        assert kv_view["shape"] == f"({b}, {n}, {g}, {hd})"
        stages = [row["stage"] for row in rows]
        assert stages.index("view") < stages.index("kv_view") < stages.index("transpose")


def test_shape_rows_drop_the_batch_symbol_for_unbatched_shapes():
    rows = diagram.shape_rows([("input", (6, 3)), ("queries", (6, 2)), ("weights", (6, 6))], small("causal"))
    assert [row["meaning"] for row in rows] == ["(n, d_in)", "(n, d_out)", "(n, n)"]


def test_head_dim_equation():
    assert diagram.head_dim_equation(preset_config("gpt2-small")) == (
        "d_out = num_heads × head_dim: 768 = 12 × 64"
    )
    assert diagram.head_dim_equation(preset_config("gpt2-xl")).endswith("1600 = 25 × 64")
    assert "8 = 2 × 4" in diagram.head_dim_equation(small("mha_wrapper"))
    assert "dₖ = d_out = 8" in diagram.head_dim_equation(small("causal"))
    assert "d_in = 8" in diagram.head_dim_equation(small("simplified"))


def test_book_preset_mha_example():
    config = preset_config("book", variant="mha")
    trace = traced(config)
    node_labels = labels(diagram.shape_dot(trace.shapes, config, highlight="weights"))
    assert "(1, 6, 3)" in node_labels["input"]
    assert "(1, 6, 2, 1)" in node_labels["view"]
    assert "(1, 2, 6, 6)" in node_labels["weights"]
    assert diagram.head_dim_equation(config) == "d_out = num_heads × head_dim: 2 = 2 × 1"


# --- the compact flow (HTML) beside the Heads and Steps views ------------------------------------


class _Boxes(html.parser.HTMLParser):
    """The flow's stage boxes in document order: {stage, style, title, text}; checks tags balance."""

    def __init__(self):
        super().__init__()
        self.boxes: list[dict[str, str]] = []
        self.open: list[str] = []
        self.depth_of_box: int | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "wbr"):  # void elements: no end tag
            return
        self.open.append(tag)
        attrs = dict(attrs)
        if "attnviz-stage" in (attrs.get("class") or ""):
            self.boxes.append({"stage": attrs["data-stage"], "style": attrs["style"], "title": attrs["title"],
                               "text": ""})
            self.depth_of_box = len(self.open)

    def handle_endtag(self, tag):
        assert self.open.pop() == tag
        if self.depth_of_box is not None and len(self.open) < self.depth_of_box:
            self.depth_of_box = None

    def handle_data(self, data):
        if self.depth_of_box is not None:
            self.boxes[-1]["text"] += data


def flow_boxes(markup: str) -> list[dict[str, str]]:
    parser = _Boxes()
    parser.feed(markup)
    parser.close()
    assert parser.open == [], "unclosed tags"
    return parser.boxes


@pytest.mark.parametrize("variant", list(variants.LABELS))
@pytest.mark.parametrize("causal", [True, False])
def test_flow_shows_every_recorded_tensor_in_pipeline_order_with_its_shape(variant, causal):
    config = small(variant, causal=causal)
    trace = traced(config, LONGER)
    markup = diagram.shape_flow_html(trace.shapes, config, highlight="weights")
    boxes = flow_boxes(markup)
    recorded = {diagram._split_name(name)[0]: (name, shape) for name, shape in trace.shapes}
    assert sorted(box["stage"] for box in boxes) == sorted([*recorded, *(["kv_view"] if "kv_groups" in recorded
                                                                         else [])])
    row = flow_rows(markup)
    assert all(row[tail] <= row[head] for tail, head in zip(recorded, list(recorded)[1:]))  # top to bottom
    boxes = [box for box in boxes if box["stage"] in recorded]  # kv_view: see the grouped variants' test
    for box in boxes:
        name, shape = recorded[box["stage"]]
        assert box["text"].startswith(f"{name} {diagram.format_shape(shape)}"), box
    # the same shapes as the Graphviz diagram of the Shapes page
    dot_labels = labels(diagram.shape_dot(trace.shapes, config))
    for box in boxes:
        assert diagram.format_shape(recorded[box["stage"]][1]) in dot_labels[box["stage"]]


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_flow_highlights_exactly_the_stage_on_view(variant):
    config = small(variant)
    shapes = traced(config).shapes
    assert diagram.HIGHLIGHT_FILL not in diagram.shape_flow_html(shapes, config)
    for name, _ in shapes:
        boxes = flow_boxes(diagram.shape_flow_html(shapes, config, highlight=name))
        lit = [box["stage"] for box in boxes if diagram.HIGHLIGHT_FILL in box["style"]]
        assert lit == [diagram._split_name(name)[0]]
        for box in boxes:  # its text has its own colour, set with its fill: the theme's (pale in dark) would vanish
            declared = dict(part.split(":", 1) for part in box["style"].split(";") if ":" in part)
            assert contrast(declared.get("color", "#fafafa"), declared["background"]) >= 4, box
    with pytest.raises(ValueError, match="Unknown stage"):
        diagram.shape_flow_html(shapes, config, highlight="attention")


def test_flow_marks_what_did_nothing_in_this_run():
    config = small("causal", causal=False, dropout=0.5)  # eval mode: dropout off too
    boxes = {box["stage"]: box for box in flow_boxes(diagram.shape_flow_html(traced(config).shapes, config))}
    for stage, reason in (("masked", "mask off"), ("dropped", "dropout off (eval)")):
        assert "dashed" in boxes[stage]["style"] and reason in boxes[stage]["text"], boxes[stage]
    assert "dashed" not in boxes["weights"]["style"]
    trained = small("causal", causal=True, dropout=0.5, train=True)
    boxes = {box["stage"]: box for box in flow_boxes(diagram.shape_flow_html(traced(trained).shapes, trained))}
    assert "dashed" not in boxes["masked"]["style"] and "dashed" not in boxes["dropped"]["style"]
    assert boxes["dropped"]["title"] == "dropout p = 0.5 (train)"


def test_flow_arrows_name_the_weights_and_the_value_path():
    config = small("self_attention_v1")
    markup = diagram.shape_flow_html(traced(config).shapes, config)
    for arrow in ("↓ W_query", "↓ W_key", "↓ W_value", "↓ Q, Kᵀ", "↓ · V (values)"):
        assert arrow in markup
    mha = small("mha")
    assert "↓ out_proj" in diagram.shape_flow_html(traced(mha).shapes, mha)


def test_flow_rejects_a_trace_from_another_variant():
    shapes = traced(small("causal")).shapes
    with pytest.raises(ValueError, match="lacks"):
        diagram.shape_flow_html(shapes, small("mha"))


# --- a user's module: its own op path ---------------------------------------------------------------------------

@pytest.mark.parametrize("flash", [True, False])
def test_a_traced_modules_op_path_is_valid_dot_in_the_order_it_ran(flash):
    from helpers import user_modules as um

    from attnviz import tracing

    trace = tracing.trace_module(um.CausalSelfAttention(flash=flash).eval(), "a <b> & \"c\"")
    dot = diagram.op_dot(trace)
    assert_plausible_dot(dot)
    assert_text_readable_on_every_fill(dot)
    ops = [row["op"] for row in diagram.op_rows(trace)]
    assert ops[:3] == ["input", "linear", "split"] and ops[-2:] == ["linear", "dropout"]
    assert ("scaled_dot_product_attention" in ops) == flash and ("softmax" in ops) != flash
    if shutil.which("dot"):
        assert subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True).returncode == 0
    html = diagram.op_flow_html(trace, highlight="weights")
    assert html.count('class="attnviz-op"') == len(ops) and "<b>" in html
    assert ("2.5px solid" in html) != flash  # the softmax op is the one on view; SDPA hides it


def test_the_cache_flow_shows_the_fed_slice_concatenated_onto_the_cache():
    prefill = diagram.cache_flow_html({"cache_k": (1, 2, 7, 64), "cache_v": (1, 2, 7, 64)}, fed=7, seen=7, layer=1,
                                      token_axis=2)
    assert "layer 1" in prefill and prefill.count("(1, 2, 7, 64)") == 4  # the fed slice is the whole cache
    step = diagram.cache_flow_html({"cache_k": (1, 2, 8, 64), "cache_v": (1, 2, 8, 64)}, fed=1, seen=8, layer=0,
                                   token_axis=2)
    assert step.count("(1, 2, 1, 64)") == 2 and step.count("(1, 2, 8, 64)") == 2 and "dropped" not in step
    book = diagram.cache_flow_html({"cache_k": (1, 8, 2, 64), "cache_v": (1, 8, 2, 64)}, fed=1, seen=8, layer=0,
                                   token_axis=1)  # the book's MHA layout (b, n, heads, head_dim)
    assert book.count("(1, 1, 2, 64)") == 2 and book.count("(1, 8, 2, 64)") == 2
    latent = diagram.cache_flow_html({"cache_c_kv": (1, 8, 32)}, fed=1, seen=8, layer=0, token_axis=1)
    assert "(1, 1, 32)" in latent and "cache_c_kv" in latent and "(1, 8, 32)" in latent
    window = diagram.cache_flow_html({"cache_k": (1, 2, 4, 16), "cache_v": (1, 2, 4, 16)}, fed=1, seen=9, layer=0,
                                     token_axis=2)
    assert "the last 4 kept" in window  # a sliding window's cache holds at most W tokens


# --- the bonus variants' own paths: K/V's view in GQA/MQA, MLA's latent, the rotation ---------------------------


class _Rows(html.parser.HTMLParser):
    """The compact flow's rows, top to bottom: the stages of each row (a direct child of the flow's frame)."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "wbr"):  # void elements: no end tag
            return
        self.depth += 1
        if self.depth == 2:
            self.rows.append([])
        stage = dict(attrs).get("data-stage")
        if stage and "attnviz-stage" in (dict(attrs).get("class") or ""):
            self.rows[-1].append(stage)

    def handle_endtag(self, tag):
        self.depth -= 1


def flow_rows(markup: str) -> dict[str, int]:
    """stage -> its row in the compact flow (0: the top row)."""
    parser = _Rows()
    parser.feed(markup)
    rows = [row for row in parser.rows if row]  # a bare "↓" between rows is no row
    return {stage: index for index, row in enumerate(rows) for stage in row}


def grouped(variant: str, positions: str = "learned") -> AttentionConfig:
    """A small GQA (4 query heads, 2 K/V heads) or MQA (one K/V head) run."""
    extra = {"num_kv_groups": 2} if variant == "gqa" else {}
    return small(variant, d_in=8, d_out=16, num_heads=4, positions=positions, **extra)


def base_shapes(trace: Trace) -> dict[str, tuple[int, ...]]:
    return {diagram._split_name(name)[0]: tuple(shape) for name, shape in trace.shapes}


@pytest.mark.parametrize("variant", ["gqa", "mqa"])
@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_grouped_keys_and_values_are_viewed_into_their_own_kv_heads(variant, positions):
    config = grouped(variant, positions)
    trace = traced(config)
    shapes = base_shapes(trace)
    b, g, n, hd = shapes["kv_groups"]  # recorded: K after its view and transpose
    assert g < shapes["view"][2] and g * hd == shapes["keys"][-1]  # fewer K/V heads than query heads
    nodes, edges = parse(diagram.shape_dot(trace.shapes, config))
    into = {head: sorted(tail for tail, h, _ in edges if h == head) for head in nodes}
    assert into["view"] == ["queries"]  # only the queries are split into num_heads
    (kv_view,) = {head for tail, head, _ in edges if tail == "keys"}
    assert into[kv_view] == ["keys", "values"]
    label = nodes[kv_view]["label"]
    assert diagram.format_shape((b, n, g, hd)) in label and "(b, n, g, hd)" in label
    assert (f"into {g} K/V heads\n" if g > 1 else "into 1 K/V head\n") in label  # MQA's one head in the singular
    assert into["kv_groups"] == [kv_view] and "transpose(1, 2)" in nodes["kv_groups"]["label"]
    for tensor in (kv_view, "kv_groups"):  # no node on the K/V path claims the queries' head count
        assert diagram.format_shape(shapes["view"]) not in nodes[tensor]["label"]
    # the compact flow: the same view beside the queries', with the same shape
    markup = diagram.shape_flow_html(trace.shapes, config)
    boxes = {box["stage"]: box for box in flow_boxes(markup)}
    assert boxes[kv_view]["text"].split(" ", 1)[1].startswith(diagram.format_shape((b, n, g, hd)))
    row = flow_rows(markup)
    assert row[kv_view] == row["view"] and row["kv_groups"] == row["transpose"]
    assert row["view"] < row["transpose"] < row["kv_repeat"] < row["scores"]


def test_mla_queries_come_from_the_input_keys_and_values_from_the_latent():
    config = small("mla")
    trace = traced(config)
    node_labels = labels(diagram.shape_dot(trace.shapes, config))
    assert "W_UK(latent)" in node_labels["keys"] and "W_UV(latent)" in node_labels["values"]
    assert "W_query(x)" in node_labels["queries"]
    markup = diagram.shape_flow_html(trace.shapes, config)
    row = flow_rows(markup)
    assert row["input"] == 0 and row["queries"] == row["latent"] == 1  # both made from x
    assert row["keys"] == row["values"] == row["latent"] + 1  # up-projected from the latent
    assert "↓ W_query" in markup and "↓ W_DKV" in markup and "↓ W_UK" in markup and "↓ W_UV" in markup


@pytest.mark.parametrize("variant", ["mha", "gqa", "mqa", "swa"])
def test_flow_draws_the_rotation_of_a_rotary_run(variant):
    config = grouped(variant, "rotary") if variant in ("gqa", "mqa") else small(variant, positions="rotary")
    trace = traced(config)
    markup = diagram.shape_flow_html(trace.shapes, config, highlight="rotated_queries")
    boxes = {box["stage"]: box for box in flow_boxes(markup)}
    shapes = base_shapes(trace)
    assert set(shapes) <= set(boxes)  # every recorded tensor has its box
    for stage in ("rotated_queries", "rotated_keys"):
        assert boxes[stage]["text"].split(" ", 1)[1].startswith(diagram.format_shape(shapes[stage]))
        assert diagram.HIGHLIGHT_FILL in boxes[stage]["style"]  # the Steps page's "rotate q, k": both lit
    row = flow_rows(markup)
    assert row["rotated_queries"] == row["rotated_keys"]
    assert row["transpose"] < row["rotated_queries"] < row["scores"]


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_flow_breaks_no_word_in_two(variant):
    config = small(variant)
    for box in flow_boxes(diagram.shape_flow_html(traced(config).shapes, config)):
        assert "anywhere" not in box["style"] and "break-all" not in box["style"], box


@pytest.mark.parametrize("variant", ["mha", "gqa", "mqa", "swa"])
def test_flow_offers_no_break_inside_a_rotary_stage_name(variant):
    """"rotated_queries" and "rotated_keys" are one unbreakable word each, as every other name is: no break after the
    underscore (``_<wbr>``), where a box would shrink to "rotated_" even where the whole name fits."""
    config = grouped(variant, "rotary") if variant in ("gqa", "mqa") else small(variant, positions="rotary")
    markup = diagram.shape_flow_html(traced(config).shapes, config)
    names = re.findall(r"<b>(.*?)</b>", markup)
    assert {"rotated_queries", "rotated_keys", "kv_repeat" if variant in ("gqa", "mqa") else "scores"} <= set(names)
    assert all(re.fullmatch(r"\w+", name) for name in names), names  # no <wbr>, no space: one word each
