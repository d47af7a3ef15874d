"""attnviz — see how GPT-style attention works (Raschka, *Build a LLM From Scratch*, Ch. 3).

Data flows one way: text or token ids → a producer (the book's classes, a GPT model's layer, or your own
module) → ``Trace`` → ``views`` (Plotly, the shape diagram) → Streamlit pages (glue in ``attnviz.ui``, the
only place here that imports Streamlit).

From code or a notebook: ``attnviz.trace_module(module, text_or_x)`` traces any attention module,
``attnviz.check_module(module)`` checks it by rule and ``attnviz.show(trace)`` draws its heads inline.
``attnviz.models.generate(model, token_ids, n)`` generates with the KV cache step by step and
``attnviz.kv_cache_bytes(...)`` says what such a cache costs.

Importing this package imports nothing else (those three load on first use): ``attnviz.ui`` imports pandas
before any figure can be built (its docstring says why).
"""

_LAZY = {"trace_module": "attnviz.tracing", "check_module": "attnviz.checks", "show": "attnviz.views.notebook",
         "kv_cache_bytes": "attnviz.kv_cache"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
