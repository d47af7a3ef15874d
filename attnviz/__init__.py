"""attnviz — see how GPT-style attention works (Raschka, *Build a LLM From Scratch*, Ch. 3).

What a user calls (docs/api.md):

* ``run(text, AttentionConfig(...))`` -> ``Trace``: a text through the book's classes or a GPT model's layer,
  every step and every head (``trace.steps["weights"]`` is ``(1, heads, n, n)``);
* ``AttentionConfig``: the settings of a run (variant, sizes, seed, weights, layer …), validated;
* ``Trace``: what every run returns — tokens, the named steps as float32 arrays, shapes, notes;
* ``trace_module(module, text_or_x)`` -> ``Trace``: any attention ``nn.Module``, unchanged, traced;
* ``check_module(module)`` -> the rules of attention with evidence, one result per rule;
* ``show(trace)`` (``show(trace, "scores")``: another stage) or ``show(module, text)``: the Heads view inline in
  Jupyter (a module traced first);
* ``load_trace(file)`` -> ``Trace``: a saved trace file (a page's "Download this trace", ``trace_file.trace_npz``)
  back, ready to ``show``;
* ``explain_weight(trace, head, query, key)``: why one weight is what it is — q_i[d]·k_j[d] per dimension, their
  sum (the score), the scaled score and the softmax over the query's row;
* ``kv_cache_bytes(...)``: what a model's KV cache holds in bytes (MHA, GQA, MQA, MLA, sliding windows);
* ``models``: the book's ``GPTModel``, checkpoints, knock-outs, rollout, the logit lens and ``generate`` (greedy,
  with the KV cache, step by step).

The names docs/api.md documents in ``config``, ``tracing``, ``time_limit``, ``explain``, ``checks``, ``trace_file``,
``tokens`` and ``views.notebook`` are stable too; everything else is internal and may change.  Importing this
package imports nothing else: each name (and each of those modules, ``attnviz.config`` …) loads its module on
first use, so ``import attnviz`` (and the ``attnviz`` command's ``--help``) stays free of torch.

Data flows one way: text or token ids → a producer (the book's classes, a GPT model's layer, or your own
module) → ``Trace`` → ``views`` (Plotly, the shape diagram) → ``labs`` (the Pitfall and induction labs, the comparisons,
training) → Streamlit pages (glue in ``attnviz.ui``, the only place here that imports Streamlit).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"  # the package's one version (pyproject.toml reads it from here)

# name -> (module, attribute; None: the module itself)
_PUBLIC = {
    "run": ("attnviz.pipeline", "run"),
    "AttentionConfig": ("attnviz.config", "AttentionConfig"),
    "Trace": ("attnviz.trace", "Trace"),
    "trace_module": ("attnviz.tracing", "trace_module"),
    "check_module": ("attnviz.checks", "check_module"),
    "load_trace": ("attnviz.trace_file", "load_trace"),
    "explain_weight": ("attnviz.explain", "explain_weight"),
    "kv_cache_bytes": ("attnviz.kv_cache", "kv_cache_bytes"),
    "models": ("attnviz.models", None),
}
# the modules whose documented names are stable too (docs/api.md): ``attnviz.config`` loads on first use
_STABLE_MODULES = ("checks", "config", "explain", "time_limit", "tokens", "trace_file", "tracing")
__all__ = [
    "AttentionConfig", "Trace", "check_module", "explain_weight", "kv_cache_bytes", "load_trace", "models", "run",
    "show", "trace_module",
]

if TYPE_CHECKING:  # what the names are, for readers and type checkers; at run time __getattr__ loads them
    from attnviz import models
    from attnviz.checks import check_module
    from attnviz.config import AttentionConfig
    from attnviz.explain import explain_weight
    from attnviz.kv_cache import kv_cache_bytes
    from attnviz.pipeline import run
    from attnviz.trace import Trace
    from attnviz.trace_file import load_trace
    from attnviz.tracing import trace_module


def show(trace_or_module, text: str | None = None, *, stage: str | None = None, head: int = 0, attention: int = 1):
    """Display the Heads view of a Trace, or of ``module`` traced on ``text`` (:func:`trace_module`; ``attention``:
    which of its attentions, counted from 1), in Jupyter (:func:`attnviz.views.notebook.show` draws it).  Returns the
    Trace.

    A Trace is drawn as it ran, so its second argument is the stage: ``show(trace, "scores")`` is
    ``show(trace, stage="scores")`` (the weights when none is given); a text there is refused, naming the stages."""
    import torch

    from attnviz import tracing
    from attnviz.config import InputError
    from attnviz.trace import require_trace
    from attnviz.views import notebook

    if isinstance(trace_or_module, torch.nn.Module):
        if text is None:
            raise InputError("show(module, text): give the text to trace the module on")
        trace = tracing.trace_module(trace_or_module, text, attention=attention)
    else:
        trace = require_trace(trace_or_module, "trace_or_module", also="an attention torch.nn.Module and a text")
        if attention != 1:
            raise InputError(f"show(trace, attention={attention!r}): a Trace shows the attention it was traced with"
                             f"{_shown_attention(trace)}; trace the module again with trace_module(module, x, "
                             f"attention={attention!r})")
        if text is not None:
            if stage is not None:
                raise InputError(f"show(trace, {text!r}, stage={stage!r}) names the stage twice: give it once")
            stage = text  # figures_of names the stages a string that is not one could have been
    return notebook.show(trace, stage=stage or "weights", head=head)


def _shown_attention(trace) -> str:
    """`` (attention 1 of 2 on line 35)``: which of a module's attentions ``trace`` shows; "" for one."""
    named = "" if trace.module_run is None else trace.module_run.attention_named
    return f" ({named})" if named else ""


def __getattr__(name: str):
    """Load a public name's module on first use (``attnviz.run``, ``attnviz.models`` …), or a stable module
    (``attnviz.config`` …)."""
    if name in _STABLE_MODULES:
        return importlib.import_module(f"attnviz.{name}")
    if name not in _PUBLIC:
        raise AttributeError(f"module 'attnviz' has no attribute {name!r}")
    module_name, attribute = _PUBLIC[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)


def __dir__():
    """The public names only (docs/api.md: ``import attnviz`` gives these and nothing else)."""
    return sorted(__all__)
