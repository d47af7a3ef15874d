"""attnviz in Jupyter: the notebook in docs/ runs in a real kernel (nbclient) and shows the Heads view."""

from pathlib import Path

import pytest

import attnviz
from attnviz import tracing
from attnviz.config import InputError
from attnviz.views import notebook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "notebooks" / "your_module.ipynb"


def test_the_heads_view_is_built_from_a_trace():
    from helpers import user_modules as um

    trace = tracing.trace_module(um.CausalSelfAttention(flash=False).eval(), "Hello there, general Kenobi")
    parts = notebook.figures_of(trace, head=2)
    assert parts["head"].layout.title.text.startswith("head 2")
    assert "masked_fill" in parts["flow"] and "softmax" in parts["flow"]


def test_the_notebooks_maps_say_a_mask_or_dropout_that_did_not_run_as_the_heads_page_does():
    """attnviz.show's grid and focused head are titled as the Heads page's: the mask off reads "masked = scaled",
    the simplified class's scaled and dropped stages the scores and the weights unchanged."""
    trace = attnviz.run("the cat sat on the mat", attnviz.AttentionConfig(causal=False))
    for part in ("grid", "head"):
        assert "masked = scaled (causal mask off)" in notebook.figures_of(trace, "masked")[part].layout.title.text
    trace = attnviz.run("the cat sat on the mat", attnviz.AttentionConfig(variant="simplified"))
    for stage, title in (("scaled", "scaled = scores (no ÷√dₖ in this class)"),
                         ("dropped", "dropped = weights (no dropout in this class)")):
        for part in ("grid", "head"):
            assert title in notebook.figures_of(trace, stage)[part].layout.title.text, (stage, part)


@pytest.mark.slow  # starts a Jupyter kernel and runs the notebook
def test_the_notebook_traces_checks_and_shows_a_module_without_errors():
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    outputs = [output for cell in nb.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "(1, 4, 6, 6) causal: True" in text
    assert text.count(" pass ") + text.count(" skip ") == 9  # every rule passes or does not apply
    plotly = [o for o in outputs if o.output_type == "display_data" and "application/vnd.plotly.v1+json" in o.data]
    assert len(plotly) == 2  # the head grid and the focused head
    html = [o for o in outputs if o.output_type == "display_data" and "text/html" in o.data]
    assert any("attnviz-flow" in o.data["text/html"] for o in html)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"stage": "nope"}, "stage must be one of"),
    ({"head": 99}, "head 99 is out of range: this run has 2 heads, choose head from 0 to 1"),
    ({"head": -1}, "head -1 is out of range"),  # not the last head
    ({"head": "0"}, "head must be a whole number from 0 to 1"),
])
def test_show_names_a_bad_stage_or_head(kwargs, message):
    trace = attnviz.run("Your journey starts", attnviz.AttentionConfig(d_in=8, d_out=8, num_heads=2))
    with pytest.raises(InputError, match=message):
        notebook.figures_of(trace, **kwargs)


@pytest.mark.parametrize("value", ["Your journey starts", None])
def test_show_names_what_it_takes(value):
    with pytest.raises(InputError, match="^trace_or_module must be a Trace"):
        attnviz.show(value)


def test_show_without_ipython_names_what_it_needs_after_checking_its_arguments(monkeypatch):
    """Outside Jupyter, with no IPython installed (requirements.txt does not install it), show first refuses bad
    arguments with their own message, then says it needs IPython (an InputError, not a bare ModuleNotFoundError)."""
    import sys

    monkeypatch.setitem(sys.modules, "IPython", None)  # `import IPython` raises ImportError
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    with pytest.raises(InputError, match="^trace_or_module must be a Trace"):
        attnviz.show(123)
    trace = attnviz.run("Your journey starts", attnviz.AttentionConfig(d_in=8, d_out=8, num_heads=2))
    with pytest.raises(InputError, match="needs IPython"):
        attnviz.show(trace)


class _Shell:
    """An IPython shell: a Jupyter kernel's has a ``kernel``; the terminal's (``ipython``) has none."""

    def __init__(self, kernel):
        self.kernel = kernel


@pytest.mark.parametrize("shell", [None, _Shell(None)], ids=["plain python", "ipython in a terminal"])
def test_show_outside_a_kernel_says_it_draws_in_jupyter_in_one_line(shell, monkeypatch):
    """In plain Python with IPython installed, show displays nothing (no repr of the HTML object or of every figure)
    and raises an InputError in one line saying it draws in Jupyter and pointing to figures_of(trace)."""
    pytest.importorskip("IPython")
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setattr(IPython.display, "display", shown.append)
    trace = attnviz.run("Your journey starts", attnviz.AttentionConfig(d_in=8, d_out=8, num_heads=2))
    with pytest.raises(InputError, match="draws in Jupyter") as error:
        attnviz.show(trace)
    assert "figures_of(trace)" in str(error.value) and "\n" not in str(error.value)
    assert shown == []


def test_show_in_a_kernel_displays_the_title_two_figures_and_the_flow(monkeypatch):
    pytest.importorskip("IPython")
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: _Shell(kernel=object()))
    monkeypatch.setattr(IPython.display, "display", shown.append)
    trace = attnviz.run("Your journey starts", attnviz.AttentionConfig(d_in=8, d_out=8, num_heads=2))
    assert attnviz.show(trace) is trace
    assert [type(item).__name__ for item in shown] == ["HTML", "Figure", "Figure", "HTML"]


def test_show_on_a_batch_says_which_item_its_heading_draws(monkeypatch):
    """For a batch of 4 the figures draw item 0, and the heading says so ("· item 0 of 4")."""
    pytest.importorskip("IPython")
    import IPython
    import IPython.display
    import torch
    from helpers import user_modules as um

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: _Shell(kernel=object()))
    monkeypatch.setattr(IPython.display, "display", shown.append)
    batch = attnviz.trace_module(um.CausalSelfAttention(flash=False).eval(), torch.randn(4, 7, 32))
    attnviz.show(batch)
    assert shown[0].data == "<h4>CausalSelfAttention: 4 heads · 7 tokens · item 0 of 4</h4>"
    shown.clear()
    attnviz.show(attnviz.trace_module(um.CausalSelfAttention(flash=False).eval(), torch.randn(1, 7, 32)))
    assert shown[0].data == "<h4>CausalSelfAttention: 4 heads · 7 tokens</h4>"

def test_show_traces_a_module_on_a_text_then_displays_its_heads(monkeypatch):
    """``attnviz.show(module, text)`` (docs/api.md): the caller traces, the view draws the Trace."""
    pytest.importorskip("IPython")
    import IPython
    import IPython.display
    from helpers import user_modules as um

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: _Shell(kernel=object()))
    monkeypatch.setattr(IPython.display, "display", shown.append)
    trace = attnviz.show(um.CausalSelfAttention(flash=False).eval(), "Hello there, general Kenobi", head=2)
    assert trace.module_run.class_name == "CausalSelfAttention" and trace.tokens[0] == "Hello"
    assert [type(item).__name__ for item in shown] == ["HTML", "Figure", "Figure", "HTML"]
    assert "CausalSelfAttention" in shown[0].data and shown[2].layout.title.text.startswith("head 2")
    with pytest.raises(InputError, match=r"show\(module, text\): give the text"):
        attnviz.show(um.CausalSelfAttention())


def test_a_traces_second_argument_is_the_stage_it_shows(monkeypatch):
    """``attnviz.show(trace, "scores")`` shows the scores: the second argument is the stage; a text there, which a
    Trace does not use, or a stage named twice is an InputError."""
    pytest.importorskip("IPython")
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: _Shell(kernel=object()))
    monkeypatch.setattr(IPython.display, "display", shown.append)
    trace = attnviz.run("Your journey starts", attnviz.AttentionConfig(d_in=8, d_out=8, num_heads=2))
    assert attnviz.show(trace, "scores") is trace
    focused = shown[2]  # the title, the grid, the focused head, the flow
    assert focused.layout.title.text == notebook.figures_of(trace, "scores")["head"].layout.title.text
    assert focused.layout.title.text != notebook.figures_of(trace)["head"].layout.title.text
    with pytest.raises(InputError, match="stage must be one of scores, scaled, masked, weights"):
        attnviz.show(trace, "Your journey starts")  # a Trace is drawn as it ran: no text to trace it on
    with pytest.raises(InputError, match="names the stage twice"):
        attnviz.show(trace, "scores", stage="weights")
