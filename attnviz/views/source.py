"""The source of each variant, read from the running module, with the line of a stage marked."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

from attnviz import variants

CLASSES = {name: spec.cls for name, spec in variants.VARIANTS.items()}  # name -> the class that runs
# the line that computes each stage (first match wins)
STAGE_PATTERNS = {
    "queries": r"queries = ",
    "keys": r"keys = ",
    "values": r"values = ",
    "scores": r"attn_scores = .*@",
    "scaled": r"\*\* ?0\.5",
    "masked": r"mask_bool = \(diff|masked_fill",  # a sliding window's band, else the fill
    "latent": r"latent = self\.W_DKV",
    "rotated_queries": r"apply_rope\(queries",
    "kv_repeat": r"repeat_interleave\(",
    "weights": r"softmax\(",
    "dropped": r"dropout\(attn_weights\)",
    "context": r"context_vecs? = .*@",
    "output": r"out_proj\(|return ",
}
MARK = "  # ◀ this stage"


def variant_source(variant: str) -> str:
    """Source of the variant's class, then the code it runs beside it (:func:`spec_source`)."""
    return spec_source(variants.get(variant))


def spec_source(spec: variants.Variant) -> str:
    """Source of ``spec``'s class, then the code it runs beside it (``spec.source_parts``: the wrapper's
    ``CausalAttention``, the shared single-head pipeline, the bonus classes' helpers), if any."""
    return _source_of((spec.cls, *spec.source_parts))


@functools.lru_cache(maxsize=32)
def _source_of(parts: tuple) -> str:
    """The source of each of ``parts`` (classes and functions), one after another: read once, as the classes do not
    change while the app runs."""
    return "\n\n".join(inspect.getsource(part) for part in parts)  # e.g. each head, _single_head


def stage_line(source: str, stage: str) -> int | None:
    """0-based index of the line in ``source`` that computes ``stage`` (None if it has none)."""
    pattern = re.compile(STAGE_PATTERNS[stage])
    for index, line in enumerate(source.splitlines()):
        code = line.split("#", 1)[0]
        if pattern.search(code) and not code.lstrip().startswith(("def ", "class ", '"""')):
            return index
    return None


def stage_code(variant: str, stage: str) -> str | None:
    """The single source line that computes ``stage`` in this variant (None if it has none)."""
    source = variant_source(variant)
    index = stage_line(source, stage)
    return None if index is None else source.splitlines()[index].strip()


def marked_source(variant: str, stage: str, note: str = "") -> tuple[str, int | None]:
    """(source with the stage's line marked, 1-based line number of that line or None); ``note`` follows the mark
    (``steps.ADDED_MASK_MARK`` on a mask the book's listing does not have)."""
    source = variant_source(variant)
    index = stage_line(source, stage)
    if index is None:
        return source, None
    lines = source.splitlines()
    lines[index] += MARK + note
    return "\n".join(lines), index + 1


def module_stage_code(run, stage: str) -> str | None:
    """The line of a traced user module (``trace.module_run``) that computed ``stage``, or None."""
    line = run.stage_lines.get(stage)
    lines = run.source.splitlines()
    index = None if line is None else line - run.first_line
    return lines[index].strip() if index is not None and 0 <= index < len(lines) else None


def module_marked_source(run, stage: str) -> tuple[str, int | None]:
    """(the user's class source with the stage's line marked, that line's number in the user's file or None): the
    number the op path and the user's editor give it, not its place within the class."""
    lines = run.source.splitlines()
    line = run.stage_lines.get(stage)
    index = None if line is None else line - run.first_line
    if index is None or not 0 <= index < len(lines):
        return run.source, None
    lines[index] += MARK
    return "\n".join(lines), line


def line_caption(line: int | None, run=None) -> str:
    """What the source panel says of the stage's line: its number in the variant's class, or in the user's file
    (``run``: a traced module's ``ModuleRun``), as the op path gives it."""
    if line is None:
        return "This variant has no line for this stage."
    where = f" of {Path(run.filename).name}" if run is not None and run.filename else ""
    return f"Line {line}{where} (marked ◀) computes this stage."
