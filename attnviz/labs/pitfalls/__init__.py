"""Pitfall lab: fourteen classic attention bugs, each one line away from the correct code — seven in the book's
MultiHeadAttention, four in today's attention (grouped-query, sliding-window, rotary) and three in a KV cache.

Every buggy version is a subclass of the correct class — the book's :class:`~attnviz.attention.MultiHeadAttention`,
or one of the lab's own learner-style classes (:mod:`~attnviz.labs.pitfalls.modern`) — whose ``forward`` (or
``__init__``, or ``reset_cache``) is the correct method with one line replaced (read with ``inspect.getsource``,
see :mod:`~attnviz.labs.pitfalls.bugs`) or, for "model.eval() forgotten", the book's module left in training
mode.  Weights are copied from the correct module (``state_dict``), so the only
difference is the bug.  Each bug's effect is *detected by code* — a verdict computed from tensors or from
the exception raised — and :func:`~attnviz.labs.pitfalls.leak.leak_report` (perturb token j, see which
outputs move) is the causality detector shared by the page's leak section and pitfall 1.

One job per module:

* :mod:`~attnviz.labs.pitfalls.bugs` — the seven bugs, each the book's code with one line changed;
* :mod:`~attnviz.labs.pitfalls.modern` — grouped-query, sliding-window, rotary and cached attention as a learner
  writes them, and their seven bugs;
* :mod:`~attnviz.labs.pitfalls.workbench` — the lab's sizes (and the notes on those the user did not choose),
  inputs and seeded construction from the sidebar's config;
* :mod:`~attnviz.labs.pitfalls.leak` — the causality leak detector;
* :mod:`~attnviz.labs.pitfalls.detectors` — one verdict per bug, computed from the tensors;
* :mod:`~attnviz.labs.pitfalls.catalogue` — the pitfalls and running one on both versions;
* :mod:`~attnviz.labs.pitfalls.figures` — the Plotly figures.

Pure compute and Plotly figure builders: no Streamlit here.
"""
