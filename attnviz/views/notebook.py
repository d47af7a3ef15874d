"""The Heads view inline in Jupyter: the head grid, one head in full and the shape flow, with no Streamlit server.

``show(trace)`` displays Plotly figures and HTML through ``IPython.display``, the same pure builders the app's
Heads page draws from (``attnviz.show(module, text)`` traces the module, then calls it); where no Jupyter kernel
runs (plain Python, IPython in a terminal) it raises an InputError naming ``figures_of`` instead of printing every
figure's repr.
"""

from __future__ import annotations

from attnviz.config import InputError
from attnviz.tokens import counted
from attnviz.trace import Trace, index_in, require_trace
from attnviz.views import diagram, figures, steps


def figures_of(trace, stage: str = "weights", head: int = 0) -> dict:
    """{"grid": the head grid, "head": head ``head`` in full, "flow": the shape flow's HTML} of a Trace; anything else
    is an InputError naming what it takes."""
    require_trace(trace)
    config = trace.config
    maps_stages = [name for name in figures.MAP_TITLES if name in trace.steps]
    if stage not in maps_stages:
        raise InputError(f"stage must be one of {', '.join(maps_stages)} (the maps this run recorded), got {stage!r}")
    heads = trace.steps[stage].shape[1]
    head = index_in(head, heads, "head")
    maps = trace.steps[stage][0]  # (heads, n, n)
    # the run's own mask (a checkpoint's layer has its own window, and may hide the future whatever causal says; a
    # user's module hides what its code hid)
    hidden = trace.hidden_cells()  # (heads, n, n) or None
    mask = {"causal": trace.hides_future, "dropout": config.effective_dropout}
    # heads that share K/V heads (grouped-query, multi-query) are titled with their K/V head, as on the Heads page
    shared = config.module is None and config.kv_groups != config.heads
    labels = [f"head {h}<br>K/V {config.kv_group(h)}" for h in range(heads)] if shared else None
    title = steps.stage_title(trace, stage)  # what ran: the Heads page's titles
    grid = figures.mark_focus(figures.heads_grid(maps, stage, hidden=hidden, window=trace.window, labels=labels,
                                                 group=config.group_size if shared else 1, stage_title=title, **mask),
                              head)
    focused = figures.attention_heatmap(maps[head], trace.tokens, stage, **mask,
                                        hidden=None if hidden is None else hidden[head], width=figures.FOCUSED_MAP_PX,
                                        title=f"{config.head_label(head) if shared else f'head {head}'}: {title}")
    # a notebook draws a figure as wide as its cell unless it says its width
    focused.layout.width = figures.FOCUSED_MAP_PX
    flow = (diagram.op_flow_html(trace, highlight=stage) if trace.module_run is not None
            else diagram.shape_flow_html(trace.shapes, config, highlight=stage, window=trace.window,
                                         hides_future=trace.hides_future,
                                         layer=trace.model_layer))
    return {"grid": grid, "head": focused, "flow": flow}


def show(trace: Trace, *, stage: str = "weights", head: int = 0) -> Trace:
    """Display the Heads view of a Trace (``attnviz.show`` traces a module first when given one).  Returns the
    Trace."""
    require_trace(trace)
    parts = figures_of(trace, stage, head)
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        raise InputError("show displays in Jupyter, which needs IPython (pip install ipython, or run it in a "
                         "notebook); outside one, attnviz.views.notebook.figures_of(trace) gives the figures") from None
    if getattr(get_ipython(), "kernel", None) is None:  # plain Python, or IPython in a terminal: no notebook to draw in
        raise InputError("show draws in Jupyter, and no Jupyter kernel is running here: outside a notebook, "
                         "attnviz.views.notebook.figures_of(trace) gives the figures (a figure's .show() opens it in "
                         "a browser)")
    title = trace.module_run.class_name if trace.module_run is not None else trace.config.spec.label
    batch = trace.steps[stage].shape[0]  # the figures draw item 0 of a trace_module batch
    items = f" · item 0 of {batch}" if batch > 1 else ""
    display(HTML(f"<h4>{title}: {trace.num_heads} heads · {counted(trace.n)}{items}</h4>"))
    display(parts["grid"])
    display(parts["head"])
    display(HTML(parts["flow"]))
    return trace
