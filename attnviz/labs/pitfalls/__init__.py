"""Pitfall lab: seven classic attention bugs, each one line away from the book's MultiHeadAttention.

Every buggy version is a subclass of the book's :class:`~attnviz.attention.MultiHeadAttention` whose
``forward`` (or ``__init__``) is the book's own method with one line replaced (read with
``inspect.getsource``, see :mod:`~attnviz.labs.pitfalls.bugs`) or, for "model.eval() forgotten", the book's
module left in training mode.  Weights are copied from the correct module (``state_dict``), so the only
difference is the bug.  Each bug's effect is *detected by code* — a verdict computed from tensors or from
the exception raised — and :func:`~attnviz.labs.pitfalls.leak.leak_report` (perturb token j, see which
outputs move) is the causality detector shared by the page's leak section and pitfall 1.

One job per module:

* :mod:`~attnviz.labs.pitfalls.bugs` — the seven bugs, each the book's code with one line changed;
* :mod:`~attnviz.labs.pitfalls.workbench` — the lab's module, inputs and seeded construction from the sidebar's config;
* :mod:`~attnviz.labs.pitfalls.leak` — the causality leak detector;
* :mod:`~attnviz.labs.pitfalls.detectors` — one verdict per bug, computed from the tensors;
* :mod:`~attnviz.labs.pitfalls.catalogue` — the seven pitfalls and running one on both versions;
* :mod:`~attnviz.labs.pitfalls.figures` — the Plotly figures.

Pure compute and Plotly figure builders: no Streamlit here.
"""
