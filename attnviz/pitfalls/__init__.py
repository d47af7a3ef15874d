"""Pitfall lab: seven classic attention bugs, each one line away from the book's MultiHeadAttention.

Every buggy version is a small subclass of :class:`~attnviz.pitfalls.bugs.LabMultiHeadAttention` (the
book's forward, line for line, with the lines the bugs touch as methods) or, for "model.eval()
forgotten", the book's module left in training mode.  Weights are copied from the correct module
(``state_dict``), so the only difference is the bug.  Each bug's effect is *detected by code* — a
verdict computed from tensors or from the exception raised — and :func:`~attnviz.pitfalls.leak.leak_report`
(perturb token j, see which outputs move) is the causality detector shared by the page's leak section
and pitfall 1.

One job per module:

* :mod:`~attnviz.pitfalls.bugs` — the seven bugs;
* :mod:`~attnviz.pitfalls.workbench` — the lab's module, inputs and seeded construction from the sidebar's config;
* :mod:`~attnviz.pitfalls.leak` — the causality leak detector;
* :mod:`~attnviz.pitfalls.detectors` — one verdict per bug, computed from the tensors;
* :mod:`~attnviz.pitfalls.catalogue` — the seven pitfalls and running one on both versions;
* :mod:`~attnviz.pitfalls.figures` — the Plotly figures.

Pure compute and Plotly figure builders: no Streamlit here.
"""
