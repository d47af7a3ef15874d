"""The Steps page's line of each stage of a user's module, from the class or function of its code that computed it —
a GPT's block's attention class, a helper method, a function of the file — and a library's named in words."""

from __future__ import annotations

import inspect
import tokenize

import pytest
import torch
from helpers import user_modules as um
from helpers.source_lines import line_and_code
from torch import nn

from attnviz import tracing
from attnviz.attention import MultiHeadAttention  # the book's class, as a learner imports it from a package
from attnviz.views import source, steps


class BookClassGPT(nn.Module):
    """A small GPT whose blocks' attention is the book's MultiHeadAttention imported from a package (as a learner
    imports ``llms_from_scratch.ch03``): its code is a library's, not the user's file."""

    def __init__(self, d_in=16, num_heads=2, context_length=16):
        super().__init__()
        self.d_in = d_in
        self.blocks = nn.ModuleList(um.TransformerBlock(MultiHeadAttention(d_in, d_in, context_length, 0.0, num_heads),
                                                        d_in) for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)  # (b, n, d_in)
        return x


def traced(module: nn.Module, attention: int = 1):
    torch.manual_seed(0)
    return tracing.trace_module(module.eval(), torch.randn(1, 5, 16), attention=attention)


@pytest.mark.parametrize(("attention", "cls", "masked", "context"), [
    (1, um.LearnerSWA, "attn_weights = self.dropout(torch.softmax(", "return self.out_proj((attn_weights @ values)"),
    (2, um.MyMultiHeadAttention, "attn_scores.masked_fill_(mask_bool, -torch.inf)", "context_vec = attn_weights @ v"),
])
def test_each_attention_of_a_gpt_shows_the_lines_of_its_blocks_own_class(attention, cls, masked, context):
    """A GPT of two blocks, a sliding-window attention then the book's: each attention picked shows its own class's
    lines, named, and the class's source marked at that line, numbered as in the file."""
    trace = traced(um.LocalGlobalGPT(), attention)
    run, name = trace.module_run, cls.__name__
    for stage, snippet in (("scores", "attn_scores = queries @ keys.transpose(2, 3)"), ("masked", masked),
                           ("context", context)):
        number, line = line_and_code(cls.forward, snippet)
        assert steps.step_text(trace.config, stage, run)["code"] == (
            f"# {name}.forward, line {number} of user_modules.py\n{line}")
        code, marked, shown = source.module_marked_source(run, stage)
        assert (shown, marked) == (name, number)
        assert code.startswith(f"class {name}(nn.Module):")
        assert [row.strip() for row in code.splitlines() if source.MARK in row] == [line + source.MARK]
        assert source.line_caption(marked, run, stage) == (f"Line {number} of user_modules.py (marked ◀), in "
                                                           f"{name}.forward, computes this stage.")


def test_a_helper_method_and_a_function_of_the_file_show_their_own_lines():
    """An attention whose forward hands its heads to a method, which calls a function of the file for the mask and
    the softmax: each stage's line is from the method or the function, named, and that function's source is shown."""
    trace = traced(um.HelperMethodAttention())
    run = trace.module_run
    number, line = line_and_code(um.HelperMethodAttention.attend, "attn_scores = queries @ keys")
    assert steps.step_text(trace.config, "scores", run)["code"] == (
        f"# HelperMethodAttention.attend, line {number} of user_modules.py\n{line}")
    assert source.module_marked_source(run, "scores")[1:] == (number, "HelperMethodAttention")
    for stage, snippet in (("masked", "attn_scores.masked_fill(mask_bool"), ("weights", "torch.softmax(")):
        number, line = line_and_code(um.masked_softmax, snippet)
        assert steps.step_text(trace.config, stage, run)["code"] == (
            f"# masked_softmax, line {number} of user_modules.py\n{line}")
        code, marked, shown = source.module_marked_source(run, stage)
        assert (shown, marked) == ("masked_softmax", number) and code.startswith("def masked_softmax(")
        assert source.line_caption(marked, run, stage) == (f"Line {number} of user_modules.py (marked ◀), in "
                                                           "masked_softmax, computes this stage.")


def test_a_line_in_a_librarys_file_is_named_in_words_not_shown():
    """A GPT built on the book's class from a package: the stage's line is in the package's file, which the page
    names and does not show; the source panel shows the user's own class, unmarked."""
    trace = traced(BookClassGPT(), attention=2)
    run = trace.module_run
    number, _ = line_and_code(MultiHeadAttention.forward, "torch.softmax(")
    code = steps.step_text(trace.config, "weights", run)["code"]
    assert code == (f"# line {number} of attnviz/attention.py, in MultiHeadAttention.forward, computes this stage: a "
                    "library's code, not shown")
    shown, marked, name = source.module_marked_source(run, "weights")
    assert (shown, marked, name) == (run.source, None, "BookClassGPT") and source.MARK not in shown
    assert source.line_caption(marked, run, "weights") == (
        f"Line {number} of attnviz/attention.py, in MultiHeadAttention.forward, computes this stage: a library's code, "
        "which this page does not show.")


SAVED = '''import torch
from torch import nn


def attend(scores):
    return torch.softmax(scores, dim=-1)  # (b, n, n)


class Edited(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (b, n, d) each
        weights = attend(q @ k.transpose(1, 2) / 4.0)  # (b, n, n)
        return weights @ v  # (b, n, d)
'''


def test_a_module_whose_file_is_saved_mid_edit_after_its_import_still_traces_and_checks(tmp_path, monkeypatch):
    """The user imports their module, then saves its file half-typed (a docstring not closed, a ``def`` cut off):
    Python can no longer read its class's or its functions' lines (SyntaxError, tokenize's TokenError), and the page
    traces and checks it all the same, naming the stage's line in words — no traceback."""
    import importlib.util

    from attnviz import checks

    path = tmp_path / "edited_mid_save.py"
    path.write_text(SAVED)
    spec = importlib.util.spec_from_file_location("edited_mid_save", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "edited_mid_save", module)
    spec.loader.exec_module(module)
    # saved mid-edit, after the import: a docstring opened in the forward and not closed
    path.write_text(SAVED + '        """Half-typed\n')
    with pytest.raises(SyntaxError):
        inspect.getsourcelines(module.Edited)  # what Python itself does with the class
    with pytest.raises(tokenize.TokenError):
        inspect.getsourcelines(module.Edited.forward)  # and with its forward
    trace = traced(module.Edited())
    run = trace.module_run
    assert run.source == "" and source.module_marked_source(run, "scores")[1:] == (None, "attend")
    lines = SAVED.splitlines()
    scores, softmax = (next(number for number, line in enumerate(lines, start=1) if text in line)
                       for text in ("weights = attend(", "torch.softmax("))
    assert source.module_stage_code(run, "scores") == (
        f"# line {scores} of edited_mid_save.py computes this stage: outside the classes and functions attnviz reads")
    # the helper the edit left whole is read as before
    assert source.module_stage_code(run, "weights") == (
        f"# attend, line {softmax} of edited_mid_save.py\nreturn torch.softmax(scores, dim=-1)  # (b, n, n)")
    (check,) = checks.check_module(module.Edited().eval(), torch.randn(1, 5, 16), rules=["scaling"])
    assert check.status in ("pass", "fail", "warn"), check


def test_a_package_installed_with_pip_install_user_is_a_librarys_code_beside_a_module_in_the_home_folder():
    """A user's module in their home folder, and the book's package installed with ``pip install --user``, which
    lives in a folder under it: the package's file is a library's, named and not shown, as one in site-packages."""
    import os
    import site

    from attnviz import code_places

    own = os.path.join(os.path.dirname(site.getuserbase()), "gpt.py")  # ~/gpt.py, beside ~/.local
    package = os.path.join(site.getusersitepackages(), "llms_from_scratch", "ch03.py")
    assert code_places.users_file(os.path.join(os.path.dirname(own), "helpers.py"), own)
    assert not code_places.users_file(package, own)
