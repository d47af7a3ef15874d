"""Loading and building a user's class from path/to/file.py:ClassName, and the modules the command line lists."""

import os
import textwrap
from types import SimpleNamespace

import pytest

from attnviz import time_limit, user_code

GOOD = textwrap.dedent('''
    import torch
    from torch import nn


    class MyAttention(nn.Module):
        def __init__(self, embed_dim, n_head, block_size=32, attn_pdrop=0.0):
            super().__init__()
            self.sizes = (embed_dim, n_head, block_size, attn_pdrop)
            self.q = nn.Linear(embed_dim, embed_dim)

        def forward(self, x):
            return torch.softmax(self.q(x) @ x.transpose(1, 2), dim=-1) @ x


    class FromConfig(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config


    class NeedsVocab(nn.Module):
        def __init__(self, d_in, vocab_size):
            super().__init__()
''')


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(GOOD)
    return path


def test_a_class_is_loaded_and_built_with_its_own_spellings(good):
    cls = user_code.load(f"{good}:MyAttention")
    module = user_code.build(cls, d_in=48, num_heads=6, context_length=16, dropout=0.1)
    assert module.sizes == (48, 6, 16, 0.1)


def test_a_single_config_parameter_gets_nanogpts_names(good):
    module = user_code.build(user_code.load(f"{good}:FromConfig"), d_in=32, num_heads=4, context_length=8)
    assert isinstance(module.config, SimpleNamespace)
    assert (module.config.n_embd, module.config.n_head, module.config.block_size) == (32, 4, 8)


@pytest.mark.parametrize(("spec", "message"), [
    ("{dir}/missing.py:X", "no such file"),
    ("{good}", "name a class as .*mine.py:ClassName; it defines MyAttention, FromConfig, NeedsVocab"),
    ("{good}:", "name a class as .*mine.py:ClassName; it defines MyAttention, FromConfig, NeedsVocab"),
    ("{good}:not a name", "path/to/file.py:ClassName"),
    ("{good}:Nope", "has no class Nope; it defines MyAttention, FromConfig, NeedsVocab"),
    ("{good}:torch", "is not a torch.nn.Module class"),
])
def test_what_cannot_be_loaded_is_one_line(good, spec, message):
    with pytest.raises(user_code.UserCodeError, match=message) as caught:
        user_code.load(spec.format(dir=good.parent, good=good))
    assert "\n" not in str(caught.value)


def test_a_syntax_error_names_its_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\nclass A(torch.nn.Module)\n    pass\n")
    with pytest.raises(user_code.UserCodeError, match="line 3: syntax error"):
        user_code.load(f"{path}:A")


@pytest.mark.parametrize("suffix", [".txt", "", ".PY"])
def test_a_class_in_a_file_not_named_py_loads_and_other_text_is_a_syntax_error(good, tmp_path, suffix):
    """A tutorial's class saved as notes.txt is still Python: it loads; a text that is not Python is a one-line
    syntax error, not an error of the loader."""
    copy = tmp_path / f"tutorial{suffix}"
    copy.write_text(good.read_text())
    assert user_code.load(f"{copy}:MyAttention").__name__ == "MyAttention"
    notes = tmp_path / f"notes{suffix or '.md'}"
    notes.write_text("Attention is all you need.\nRead chapter 3 first.\n")
    with pytest.raises(user_code.UserCodeError, match="line 1: syntax error") as caught:
        user_code.load(f"{notes}:A")
    assert "\n" not in str(caught.value)


def test_a_relative_spec_gives_the_code_the_modules_own_file(good, monkeypatch):
    """Named relative to the working directory, the class's code and its module name the same (absolute) file: the
    op path and the source panel match a stage's line by that file."""
    import inspect

    monkeypatch.chdir(good.parent)
    cls = user_code.load(f"{good.name}:MyAttention")
    assert cls.forward.__code__.co_filename == inspect.getsourcefile(cls) == str(good)


def test_a_file_that_raises_on_import(tmp_path):
    path = tmp_path / "raises.py"
    path.write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(user_code.UserCodeError, match="raised RuntimeError on import: no GPU here"):
        user_code.load(f"{path}:A")


def test_a_constructor_or_an_import_that_never_returns_is_stopped_with_one_line(tmp_path, monkeypatch):
    """A user's constructor, and their file's import, run under the time limit of a forward: a loop there is a
    message, not a page (or ``attnviz check``) that waits for ever."""
    monkeypatch.setattr(time_limit, "SECONDS", 0.3)
    path = tmp_path / "waits.py"
    path.write_text(textwrap.dedent("""
        from torch import nn

        class Waits(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.ready = False
                while not self.ready:  # set by a callback that never comes
                    pass
    """))
    with pytest.raises(user_code.UserCodeError,
                       match=r"^Waits\(d_in=16, d_out=16\) ran for 0\.3 s without returning \(an endless loop\?\)$"):
        user_code.build(user_code.load(f"{path}:Waits"), d_in=16, d_out=16)
    script = tmp_path / "script.py"
    script.write_text("while True:\n    pass\n")
    with pytest.raises(user_code.UserCodeError, match=r"script\.py ran for 0\.3 s on import without returning \(an "
                                                      r"endless loop\?\): put its script part under"):
        user_code.load(f"{script}:A")


def test_an_argument_nobody_can_fill_is_named(good):
    with pytest.raises(user_code.UserCodeError, match="needs vocab_size"):
        user_code.build(user_code.load(f"{good}:NeedsVocab"))


def test_a_transformers_layer_imported_into_a_file_points_to_the_wrapper_not_to_set(tmp_path):
    """LlamaAttention(config, layer_idx) named in a file that imports it: a config object is no --set NAME=VALUE."""
    pytest.importorskip("transformers")
    path = tmp_path / "layers.py"
    path.write_text("from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: F401\n")
    with pytest.raises(user_code.UserCodeError, match="needs config, layer_idx") as caught:
        user_code.build(user_code.load(f"{path}:LlamaAttention"))
    assert '"A transformers layer"' in str(caught.value) and "--set" not in str(caught.value)


def test_the_command_line_and_the_environment_list_modules(good, monkeypatch):
    argv = ["--", "--checkpoint", "x.pth", "--module", f"{good}:MyAttention", f"--module={good}:FromConfig"]
    assert user_code.module_args(argv) == [f"{good}:MyAttention", f"{good}:FromConfig"]
    monkeypatch.setattr("sys.argv", ["app.py", "--module", f"{good}:MyAttention"])
    monkeypatch.setenv(user_code.ENV, f"{good}:NeedsVocab")
    listed = user_code.listed()
    assert listed["Your module: MyAttention"] == f"{good}:MyAttention"
    assert listed["Your module: NeedsVocab"] == f"{good}:NeedsVocab"


def test_only_listed_labels_are_built(good):
    with pytest.raises(user_code.UserCodeError, match="only the command line lists modules"):
        user_code.build_listed(f"{good}:MyAttention", SimpleNamespace())


@pytest.fixture
def listed_alone(monkeypatch):
    """attnviz's list of modules (and what it remembers of them) starts empty; ``listed_alone(spec)`` lists one.  The
    test leaves none."""
    user_code.forget_listed()
    monkeypatch.setattr("sys.argv", ["app.py"])

    def listing(spec: str) -> str:
        monkeypatch.setenv(user_code.ENV, spec)
        return next(label for label, listed_spec in user_code.listed().items() if listed_spec == spec)
    yield listing
    user_code.forget_listed()


def sizes(**given) -> SimpleNamespace:
    """The settings ``build_listed`` reads from an AttentionConfig."""
    return SimpleNamespace(**{"d_in": 16, "d_out": 16, "num_heads": 4, "context_length": 8, "dropout": 0.0,
                              "qkv_bias": False, "num_kv_groups": None, "latent_dim": None,
                              "sliding_window_size": None, **given})


def saved(path, text: str) -> None:
    """``text`` written to ``path`` as a later save (a modification time that differs even on a coarse clock)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


STUCK = textwrap.dedent('''
    from torch import nn

    class Stuck(nn.Module):
        def __init__(self, d_in, num_heads):
            super().__init__()
            calls.append(num_heads)
            while True:  # a callback that never comes
                pass

    calls = []
''')


def test_a_listed_constructor_that_was_stopped_is_not_run_again_with_the_same_arguments(tmp_path, monkeypatch,
                                                                                      listed_alone):
    """The app's builds of a listed module (every session's, every rerun's) pay the time limit once per module and
    arguments; another size runs the constructor again."""
    monkeypatch.setattr(time_limit, "SECONDS", 0.3)
    path = tmp_path / "stuck.py"
    path.write_text(STUCK)
    label = listed_alone(f"{path}:Stuck")
    calls = user_code._classes[label].__init__.__globals__["calls"]
    for _ in range(3):
        with pytest.raises(user_code.UserCodeError, match=r"^Stuck\(d_in=16, num_heads=4\) ran for 0\.3 s without "
                           r"returning \(an endless loop\?\)\. attnviz does not run it again with these sizes, in any "
                           r"session, until the file is saved again or you press Try again\.$"):
            user_code.build_listed(label, sizes())
    assert calls == [4]
    assert list(user_code.failures()) == [label]
    with pytest.raises(user_code.UserCodeError, match="ran for 0.3 s"):
        user_code.build_listed(label, sizes(num_heads=2))
    assert calls == [4, 2]
    user_code.try_again(label)
    assert user_code.failures() == {}
    with pytest.raises(user_code.UserCodeError, match="ran for 0.3 s"):
        user_code.build_listed(label, sizes())
    assert calls == [4, 2, 4]


def test_a_listed_module_saved_after_its_constructor_failed_is_imported_anew(tmp_path, monkeypatch, listed_alone):
    monkeypatch.setattr(time_limit, "SECONDS", 0.3)
    path = tmp_path / "stuck.py"
    path.write_text(STUCK)
    label = listed_alone(f"{path}:Stuck")
    with pytest.raises(user_code.UserCodeError):
        user_code.build_listed(label, sizes())
    saved(path, "while True:\n    pass\n")  # a save half-way through an edit: its import never returns
    assert user_code.failures() == {}  # saved: to be tried anew
    with pytest.raises(user_code.UserCodeError, match="on import without returning .* attnviz does not run it again, "
                                                      "in any session"):
        user_code.build_listed(label, sizes())
    with pytest.raises(user_code.UserCodeError, match="on import without returning"):  # remembered: no import
        user_code.build_listed(label, sizes(num_heads=2))
    assert "on import" in user_code.failures()[label]
    saved(path, STUCK.replace("while True:  # a callback that never comes\n            pass", "self.ready = True"))
    module = user_code.build_listed(label, sizes())
    assert module.ready and user_code.failures() == {}

# ------------------------------------------------------------------ a file's own folder, what is passed, messages

BASE = textwrap.dedent('''
    from torch import nn

    WHERE = "{where}"


    class Base(nn.Module):
        def __init__(self, d_in=64, num_heads=4):
            super().__init__()
            self.sizes = (d_in, num_heads)
            self.q = nn.Linear(d_in, d_in)
''')

USES_BASE = textwrap.dedent('''
    import copy

    from helpers_beside import WHERE, Base


    class Mine(Base):
        where = WHERE
        deepcopy = copy.deepcopy
''')


def test_a_file_imports_the_modules_beside_it_from_any_folder(tmp_path, monkeypatch):
    """``from helpers_beside import Base`` works as ``python mine.py`` runs it, from any working folder; two files in
    two folders each get their own ``helpers_beside``; a module beside them named like the standard library's
    (``copy.py``) does not replace it; and sys.path and sys.modules are as they were."""
    import copy
    import sys

    for where in ("one", "two"):
        folder = tmp_path / where
        folder.mkdir()
        (folder / "helpers_beside.py").write_text(BASE.format(where=where))
        (folder / "mine.py").write_text(USES_BASE)
        (folder / "copy.py").write_text("raise RuntimeError('not the standard library')\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path_before, modules_before = list(sys.path), set(sys.modules)
    one = user_code.load(str(tmp_path / "one" / "mine.py") + ":Mine")
    two = user_code.load(str(tmp_path / "two" / "mine.py") + ":Mine")
    assert (one.where, two.where) == ("one", "two")
    assert one.deepcopy is two.deepcopy is copy.deepcopy
    assert user_code.build(one, d_in=8, num_heads=2).sizes == (8, 2)
    assert sys.path == path_before
    assert "helpers_beside" not in sys.modules and sys.modules["copy"] is copy
    assert {name for name in set(sys.modules) - modules_before if not name.startswith("attnviz_user_")} == set()


def test_a_file_beside_that_fails_to_import_leaves_sys_path_as_it_was(tmp_path):
    import sys

    (tmp_path / "broken_beside.py").write_text("raise RuntimeError('half-written')\n")
    (tmp_path / "mine.py").write_text("import broken_beside\n")
    path_before = list(sys.path)
    with pytest.raises(user_code.UserCodeError, match="mine.py raised RuntimeError on import: half-written"):
        user_code.load(f"{tmp_path / 'mine.py'}:A")
    assert sys.path == path_before and "broken_beside" not in sys.modules


@pytest.mark.parametrize(("name", "content", "kind"), [
    ("config.json", '{"n_embd": 64, "bias": false, "dropout": null}\n', "JSON"),
    ("model.safetensors", b"\xb0\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\"", "binary"),
    ("weights", b"PK\x03\x04\x00\x00", "binary"),
    ("image.py", b"\x89PNG\r\n\x1a\n\x00\x00garbage", "binary"),  # named .py, as a PNG named .png is refused
    ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00garbage", "binary"),
    ("nul.py", b"x = 1\x00\n", "binary"),  # text that Python cannot compile: no source holds a NUL byte
])
def test_a_file_that_is_not_python_is_refused_as_such(tmp_path, name, content, kind):
    path = tmp_path / "ckpt" / name
    path.parent.mkdir()
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.load(f"{path}:X")
    assert str(caught.value) == (f"{path} is not a Python file ({kind}): name the .py file that defines the class, "
                                 "as path/to/file.py:ClassName")


ASSERTS = textwrap.dedent('''
    from torch import nn


    class Divisible(nn.Module):
        def __init__(self, d_out=64, num_heads=4):
            super().__init__()
            assert d_out % num_heads == 0


    class Said(nn.Module):
        def __init__(self, d_out=64, num_heads=4):
            super().__init__()
            assert (d_out
                    % num_heads == 0), f"d_out ({d_out}) must be divisible by num_heads"
''')


def test_a_failed_assert_in_a_constructor_says_so_with_its_line(tmp_path):
    path = tmp_path / "asserts.py"
    path.write_text(ASSERTS)
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.build(user_code.load(f"{path}:Divisible"), d_out=64, num_heads=3)
    assert str(caught.value) == ("Divisible(d_out=64, num_heads=3) failed an assertion (asserts.py, line 8): "
                                 "assert d_out % num_heads == 0")
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.build(user_code.load(f"{path}:Said"), d_out=64, num_heads=3)
    assert str(caught.value) == ("Said(d_out=64, num_heads=3) failed an assertion (asserts.py, line 14): d_out (64) "
                                 "must be divisible by num_heads")
    on_import = tmp_path / "gpu.py"
    on_import.write_text("import torch\nassert torch.cuda.device_count() > 7\n")
    with pytest.raises(user_code.UserCodeError) as caught:
        user_code.load(f"{on_import}:A")
    assert str(caught.value) == (f"{on_import} failed an assertion on import (gpu.py, line 2): "
                                 "assert torch.cuda.device_count() > 7")


BIASED = textwrap.dedent('''
    from torch import nn


    class Good(nn.Module):
        def __init__(self, n_embd=64, n_head=4, block_size=32, dropout=0.0, bias=True):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)


    class FromConfig(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.qkv_bias = config.qkv_bias
''')


def test_a_constructors_own_bias_default_wins(tmp_path, listed_alone):
    """nanoGPT's ``bias=True`` is its own default: attnviz never passes bias=False unless asked (``--set``); a config
    object carries nanoGPT's ``bias`` and the book's ``qkv_bias`` at their own projects' defaults."""
    path = tmp_path / "biased.py"
    path.write_text(BIASED)
    good = user_code.load(f"{path}:Good")
    assert "bias" not in user_code.constructor_arguments(good, d_in=64, num_heads=4)
    assert user_code.build(good, d_in=64, num_heads=4).c_attn.bias is not None
    assert user_code.build(good, {"bias": False}, d_in=64).c_attn.bias is None
    from_config = user_code.build(user_code.load(f"{path}:FromConfig"), d_in=64, num_heads=4)
    assert from_config.c_attn.bias is not None and from_config.qkv_bias is False
    assert user_code.build(user_code.load(f"{path}:FromConfig"), {"bias": False}, d_in=64).c_attn.bias is None
    assert user_code.build_listed(listed_alone(f"{path}:Good"), sizes(d_in=64, d_out=64)).c_attn.bias is not None

KWARGS = textwrap.dedent('''
    from torch import nn


    class Base(nn.Module):
        def __init__(self, d_in=64, num_heads=4, context_length=64, dropout=0.0):
            super().__init__()
            self.sizes = (d_in, num_heads, context_length, dropout)


    class Kw(Base):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)


    class Named(Base):
        def __init__(self, d_in=64, **kwargs):
            super().__init__(d_in, **kwargs)
''')


def test_a_kwargs_constructor_gets_the_settings_given_by_attnvizs_names(tmp_path):
    """``Kw(**kwargs)`` names no setting: it gets the ones given (the CLI's flags given), by attnviz's own names, and
    none that nobody gave (its own defaults decide); a named parameter still gets its setting by its own name."""
    path = tmp_path / "kw.py"
    path.write_text(KWARGS)
    kw, named = user_code.load(f"{path}:Kw"), user_code.load(f"{path}:Named")
    assert user_code.constructor_arguments(kw, d_in=32, num_heads=2) == {"d_in": 32, "num_heads": 2}
    assert user_code.build(kw, d_in=32, num_heads=2).sizes == (32, 2, 64, 0.0)
    assert user_code.constructor_arguments(kw) == {}
    assert user_code.constructor_arguments(named, d_in=16, dropout=0.1) == {"d_in": 16, "dropout": 0.1}
    assert user_code.settings_not_taken(kw, {"num_heads": 2, "d_out": 32}) == {}



def test_a_class_without_a_constructor_of_its_own_takes_no_arguments():
    """nn.Module's own ``__init__(self, *args, **kwargs)`` is no **kwargs constructor: given d_in=16, a class that
    keeps it is built with no arguments, not as ``NoConstructor(d_in=16)``, which nn.Module refuses."""
    from helpers.user_modules import WeightlessScaled

    assert user_code.constructor_arguments(WeightlessScaled, d_in=16, num_heads=2) == {}
    assert user_code.kwargs_settings(WeightlessScaled, {"d_in": 16}) == []
    assert user_code.takes_no_arguments(WeightlessScaled)
    assert isinstance(user_code.build(WeightlessScaled, d_in=16, num_heads=2), WeightlessScaled)

OWN_SIZES = textwrap.dedent('''
    from torch import nn


    class Sized(nn.Module):
        def __init__(self, num_kv_groups, d_in=32, d_out=16, num_heads=8, context_length=16, dropout=0.1):
            super().__init__()
            self.sizes = (num_kv_groups, d_in, d_out, num_heads, context_length, dropout)


    class Required(nn.Module):
        def __init__(self, d_in, num_heads=8):
            super().__init__()
            self.sizes = (d_in, num_heads)
''')


def test_a_size_with_a_default_keeps_it_unless_given(tmp_path, listed_alone):
    """``LlamaGQA(d_in=64, num_heads=8, num_kv_groups=2)`` built without sizes given has its own 8 heads, not
    attnviz's 4: a size with a default keeps it unless given (a required one gets attnviz's), d_out follows a d_in
    given, a required variant's default is reckoned from the sizes the class is built with, and the sizes built with
    include the class's own.  The app gives every size from its sidebar, so there the class's defaults never
    decide."""
    from helpers.own_defaults import LlamaGQA

    assert user_code.constructor_arguments(LlamaGQA) == {}
    gqa = user_code.build(LlamaGQA)
    assert (gqa.num_heads, gqa.W_key.out_features) == (8, 16)
    assert user_code.sizes_taken({}, LlamaGQA) == {"d_in": 64, "num_heads": 8, "num_kv_groups": 2}
    path = tmp_path / "own.py"
    path.write_text(OWN_SIZES)
    sized, required = user_code.load(f"{path}:Sized"), user_code.load(f"{path}:Required")
    assert user_code.build(sized).sizes == (4, 32, 16, 8, 16, 0.1)  # 8 // 2 K/V heads: its own 8 heads
    assert user_code.constructor_arguments(sized, d_in=48) == {"num_kv_groups": 4, "d_in": 48, "d_out": 48}
    assert user_code.constructor_arguments(sized, num_heads=2, dropout=0.0) == {
        "num_kv_groups": 1, "num_heads": 2, "dropout": 0.0}
    arguments = user_code.constructor_arguments(sized)
    assert user_code.sizes_taken(arguments, sized) == {"num_kv_groups": 4, "d_in": 32, "d_out": 16, "num_heads": 8,
                                                       "context_length": 16}
    assert user_code.build(required).sizes == (64, 8)  # a required size: attnviz's default
    # the app gives every size from its sidebar: the class's defaults never decide them
    label = listed_alone(f"{path}:Sized")
    assert user_code.build_listed(label, sizes(d_in=16, d_out=16, num_heads=4, context_length=8)).sizes == (
        2, 16, 16, 4, 8, 0.0)
    assert user_code.listed_sizes(label, sizes()) == {"num_kv_groups": 2, "d_in": 16, "d_out": 16, "num_heads": 4,
                                                      "context_length": 8}


def test_a_module_spec_in_a_config_points_a_notebook_to_trace_module(good):
    """A notebook user who puts a file's class in AttentionConfig(module=…) is told what works from Python."""
    import attnviz
    from attnviz.config import AttentionConfig

    with pytest.raises(ValueError, match="only the command line lists modules") as caught:
        attnviz.run("hello there", AttentionConfig(module=f"{good}:MyAttention"))
    assert "attnviz.trace_module(module, x)" in str(caught.value)
    assert "attnviz.checks.check_module(module)" in str(caught.value)
