"""A shape in the compact HTML diagrams stays on one line: "(1, 1024, 768)" is never split into "(1, / 1024, 768)",
however narrow the box the browser gives it.  Read from the markup: every shape is in an element that cannot wrap
(``white-space: nowrap`` or ``pre`` on it or an element around it), or has no place a line may break (no ordinary
space, and nothing around it that breaks inside words)."""

from __future__ import annotations

import html.parser

import pytest
from helpers.runs import small
from helpers.texts import english_text

from attnviz import pipeline, tracing, variants
from attnviz.config import preset_config
from attnviz.views import diagram

_NO_WRAP = ("white-space:nowrap", "white-space:pre")
_BREAKS_WORDS = ("overflow-wrap:anywhere", "overflow-wrap:break-word", "word-break:break-all",
                 "word-wrap:break-word", "word-break:break-word")


def _style(attrs: dict) -> str:
    return (attrs.get("style") or "").replace(" ", "").lower()


class _Shapes(html.parser.HTMLParser):
    """Each ``<code>`` (a shape) with its text and the styles of it and every element around it."""

    def __init__(self):
        super().__init__()
        self.open: list[tuple[str, str]] = []  # (tag, style)
        self.shapes: list[dict] = []
        self.inside: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "wbr"):
            return
        self.open.append((tag, _style(dict(attrs))))
        if tag == "code":
            self.inside = {"text": "", "styles": [style for _, style in self.open]}
            self.shapes.append(self.inside)

    def handle_endtag(self, tag):
        assert self.open.pop()[0] == tag
        if tag == "code":
            self.inside = None

    def handle_data(self, data):
        if self.inside is not None:
            self.inside["text"] += data


def shapes_in(markup: str) -> list[dict]:
    parser = _Shapes()
    parser.feed(markup)
    parser.close()
    return parser.shapes


def cannot_wrap(shape: dict) -> bool:
    styles = ";".join(shape["styles"])
    if any(rule in styles for rule in _NO_WRAP):
        return True
    return " " not in shape["text"] and "-" not in shape["text"] and not any(rule in styles for rule in _BREAKS_WORDS)


def assert_shapes_whole(markup: str, expected: int) -> None:
    shapes = shapes_in(markup)
    assert len(shapes) >= expected, shapes
    assert all(shape["text"].startswith("(") for shape in shapes), shapes
    wrapping = [shape["text"] for shape in shapes if not cannot_wrap(shape)]
    assert not wrapping, wrapping


def test_the_predicate_sees_a_shape_that_can_wrap():
    """The check can fail: a bare shape, or one with no-break spaces in a box that breaks words, can wrap."""
    assert not cannot_wrap(shapes_in('<div><code>(1, 6, 768)</code></div>')[0])
    assert not cannot_wrap(shapes_in('<div style="overflow-wrap:break-word"><code>(1,\xa06,\xa0768)</code></div>')[0])
    assert cannot_wrap(shapes_in('<div><code style="white-space: nowrap">(1, 6, 768)</code></div>')[0])


@pytest.mark.slow  # a forward of GPT-2 small's sizes on 1,024 tokens: seconds, not the quick tier's milliseconds
def test_gpt2_small_shapes_at_the_full_context_stay_whole():
    """GPT-2 small's sizes: (1, 1024, 768) for the queries, keys and values, 12 heads of 64."""
    config = preset_config("gpt2-small", variant="mha", device="cpu")
    trace = pipeline.run(english_text(1024), config)
    assert ("queries", (1, 1024, 768)) in [(name, tuple(shape)) for name, shape in trace.shapes]
    assert_shapes_whole(diagram.shape_flow_html(trace.shapes, config, highlight="weights"), len(trace.shapes))


@pytest.mark.parametrize("variant", list(variants.LABELS))
def test_every_variants_shapes_stay_whole(variant):
    spec = variants.get(variant)
    config = small(variant, d_in=768, d_out=spec.out_width(768, 768), num_heads=spec.head_count(12))
    trace = pipeline.run("Your journey starts with one step", config)
    assert_shapes_whole(diagram.shape_flow_html(trace.shapes, config), len(trace.shapes))


def test_the_cache_flows_and_a_modules_op_flow_keep_their_shapes_whole():
    from helpers import user_modules as um

    assert_shapes_whole(diagram.cache_flow_html({"cache_k": (1, 12, 1024, 64), "cache_v": (1, 12, 1024, 64)},
                                                fed=1, seen=1024, layer=11, token_axis=2), 4)
    trace = tracing.trace_module(um.CausalSelfAttention(flash=False).eval(), "Your journey starts with one step")
    assert_shapes_whole(diagram.op_flow_html(trace), len(diagram.op_rows(trace)))
