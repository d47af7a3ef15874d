"""The source of each variant, read from the running module, with the line of a stage marked."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

from attnviz import variants
from attnviz.trace import StageSource

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


def stage_place(run, stage: str) -> StageSource | None:
    """Where the line that computed ``stage`` is (``run.stage_sources``); in a trace file written before those were
    kept, the line of ``run.stage_lines`` in the module's class's source; None where the run has no line for it."""
    if run.stage_sources:
        return run.stage_sources.get(stage)
    line = run.stage_lines.get(stage)
    return None if line is None else StageSource(
        owner=run.class_name, function="", filename=run.filename or "", file_named=Path(run.filename or "").name,
        line=line, source=run.source, first_line=run.first_line, top=True)


def module_stage_code(run, stage: str) -> str | None:
    """The line of a traced user module (``trace.module_run``) that computed ``stage``, from the class or function
    whose source holds it (``run.stage_sources``) — named above the line where that is not the module's own forward
    (``# MyMultiHeadAttention.forward, line 308 of gpt.py``) —, or in words where it is a library's; None where the
    run has no line for it."""
    found = stage_place(run, stage)
    if found is None:
        return None
    if found.library or not found.source:
        within = f", in {found.name}," if found.name else ""
        whose = "a library's code, not shown" if found.library else "outside the classes and functions attnviz reads"
        return f"# line {found.line} of {found.file_named}{within} computes this stage: {whose}"
    lines = found.source.splitlines()
    index = found.line - found.first_line
    if not 0 <= index < len(lines):
        return None
    code = lines[index].strip()
    return code if found.top and found.function in ("forward", "") else (
        f"# {found.name}, line {found.line} of {found.file_named}\n{code}")


def attention_source(run):
    """The ``StageSource`` of the class or function that holds the attention's softmax (its SDPA call), where it is
    the user's code: what the source panel shows of a stage with no line of its own; None where there is none."""
    found = stage_place(run, "weights") or stage_place(run, "context")
    return found if found is not None and not found.library and found.source else None


def attention_owner(run) -> str:
    """The class or function that computed the attention shown, by name: the one holding its softmax (a GPT's
    block's attention class), else the module's own class."""
    found = attention_source(run)
    return run.class_name if found is None else found.owner


def module_marked_source(run, stage: str) -> tuple[str, int | None, str]:
    """(the source of the class or function that computed the stage — the user's class, a submodule's class, a helper
    function — with the stage's line marked, that line's number in its file or None, the name of what is shown):
    the number the op path and the user's editor give it, not its place within the class.  A stage with no line, or
    one a library computed, shows the class that computed the attention (:func:`attention_source`) unmarked, else
    the user's class."""
    found = stage_place(run, stage)
    lines = [] if found is None or found.library else found.source.splitlines()
    index = None if found is None else found.line - found.first_line
    if index is None or not 0 <= index < len(lines):
        whole = attention_source(run)
        return (run.source, None, run.class_name) if whole is None else (whole.source, None, whole.owner)
    lines[index] += MARK
    return "\n".join(lines), found.line, found.owner


def line_caption(line: int | None, run=None, stage: str | None = None) -> str:
    """What the source panel says of the stage's line: its number in the variant's class, or in the user's file
    (``run``: a traced module's ``ModuleRun``; ``stage``: the stage shown), as the op path gives it, and the method or
    function that holds it; a library's line in words."""
    found = None if run is None or stage is None else stage_place(run, stage)
    if line is None and found is not None and (found.library or not found.source):
        within = f", in {found.name}," if found.name else ""
        whose = ("a library's code, which this page does not show" if found.library
                 else "outside the classes and functions attnviz reads")
        return f"Line {found.line} of {found.file_named}{within} computes this stage: {whose}."
    if line is None:
        return "This variant has no line for this stage." if run is None else (
            f"{attention_owner(run)} has no separate line for this stage (its {run.kind} computes it).")
    if found is not None:
        return f"Line {line} of {found.file_named} (marked ◀), in {found.name}, computes this stage."
    where = f" of {Path(run.filename).name}" if run is not None and run.filename else ""
    return f"Line {line}{where} (marked ◀) computes this stage."
