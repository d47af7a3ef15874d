"""A user's file imports the modules beside it as ``python file.py`` does — for the whole run: a function-level
``from helpers import …`` in its forward finds the ``helpers.py`` beside it at forward time, and two files in two
folders each get their own ``helpers.py`` without either folder reaching another import."""

import sys
import textwrap

import torch

from attnviz import checks, cli, user_code

HELPERS = textwrap.dedent('''
    import torch

    WHERE = "{where}"


    def causal_weights(attn_scores, d_k):
        from constants_beside import MASKED  # a function-level import of another module beside it
        n = attn_scores.shape[-1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_scores = attn_scores.masked_fill(mask, MASKED)  # (b, n, n)
        return torch.softmax(attn_scores / d_k**0.5, dim=-1)  # (b, n, n)
''')

CONSTANTS = "MASKED = float('-inf')\n"

MINE = textwrap.dedent('''
    from torch import nn


    class Mine(nn.Module):
        def __init__(self, d_in=8, d_out=8):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_out, bias=False)
            self.W_key = nn.Linear(d_in, d_out, bias=False)
            self.W_value = nn.Linear(d_in, d_out, bias=False)
            self.where = None

        def forward(self, x):
            from helpers_beside_late import WHERE, causal_weights  # beside this file; imported when it runs
            self.where = WHERE
            queries = self.W_query(x)  # (b, n, d_out)
            keys = self.W_key(x)  # (b, n, d_out)
            values = self.W_value(x)  # (b, n, d_out)
            attn_weights = causal_weights(queries @ keys.transpose(1, 2), keys.shape[-1])  # (b, n, n)
            return attn_weights @ values  # (b, n, d_out)
''')


def two_folders(tmp_path):
    for where in ("one", "two"):
        folder = tmp_path / where
        folder.mkdir()
        (folder / "helpers_beside_late.py").write_text(HELPERS.format(where=where))
        (folder / "constants_beside.py").write_text(CONSTANTS)
        (folder / "mine.py").write_text(MINE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return tmp_path


def test_a_forward_imports_the_module_beside_its_file_when_it_runs(tmp_path, monkeypatch):
    folders = two_folders(tmp_path)
    monkeypatch.chdir(folders / "elsewhere")
    path_before, meta_path_before = list(sys.path), list(sys.meta_path)
    one = user_code.build(user_code.load(f"{folders / 'one' / 'mine.py'}:Mine"), d_in=8)
    two = user_code.build(user_code.load(f"{folders / 'two' / 'mine.py'}:Mine"), d_in=8)
    x = torch.randn(1, 5, 8)  # (b, n, d_in)
    for module, where in ((two, "two"), (one, "one"), (two, "two")):
        out = module(x)  # (b, n, d_out)
        assert module.where == where and out.shape == (1, 5, 8)
    assert torch.allclose(one(x)[0, 0], one.W_value(x)[0, 0])  # the first token sees itself alone: masked
    assert sys.path == path_before and sys.meta_path == meta_path_before
    assert "helpers_beside_late" not in sys.modules and "constants_beside" not in sys.modules


def test_a_forward_in_another_thread_imports_its_own_folders_module(tmp_path):
    """The app runs forwards in its sessions' threads: each file's import finds its own folder's module."""
    from concurrent.futures import ThreadPoolExecutor

    folders = two_folders(tmp_path)
    modules = [user_code.build(user_code.load(f"{folders / where / 'mine.py'}:Mine"), d_in=8)
               for where in ("one", "two")]
    x = torch.randn(1, 3, 8)  # (b, n, d_in)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda module: [module(x) for _ in range(20)], modules * 4))
    assert [module.where for module in modules] == ["one", "two"]


def test_the_cli_checks_a_module_whose_forward_imports_beside_it(tmp_path, monkeypatch, capsys):
    folders = two_folders(tmp_path)
    monkeypatch.chdir(folders / "elsewhere")
    assert cli.main(["check", f"{folders / 'one' / 'mine.py'}:Mine", "--d-in", "8"]) == 0, capsys.readouterr().err
    assert f"All {len(checks.RULES)} rules pass" in capsys.readouterr().out


def test_a_package_beside_the_file_is_imported_at_forward_time_with_its_submodules(tmp_path):
    package = tmp_path / "parts_beside"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "weights.py").write_text(HELPERS.format(where="package"))
    (tmp_path / "constants_beside.py").write_text(CONSTANTS)
    (tmp_path / "mine.py").write_text(MINE.replace("from helpers_beside_late import",
                                                   "from parts_beside.weights import"))
    module = user_code.build(user_code.load(f"{tmp_path / 'mine.py'}:Mine"), d_in=8)
    module(torch.randn(1, 4, 8))  # (b, n, d_in)
    assert module.where == "package"
    assert not {name for name in sys.modules if name.startswith("parts_beside")}


NAMESPACE_USER = textwrap.dedent('''
    from torch import nn

    from utils.rope import TABLE  # utils/ has no __init__.py: a namespace package beside the file
    from linked import WHERE  # linked.py is a symlink placed beside the file


    class Uses(nn.Module):
        def __init__(self):
            super().__init__()
            self.table, self.where = TABLE, WHERE
''')


def test_a_folder_without_init_and_a_symlink_beside_the_file_import_as_python_file_py_imports_them(tmp_path):
    folder, library = tmp_path / "mine", tmp_path / "library"
    (folder / "utils").mkdir(parents=True)
    library.mkdir()
    (folder / "utils" / "rope.py").write_text("TABLE = 'rope table'\n")
    (library / "common.py").write_text("WHERE = 'linked'\n")
    (folder / "linked.py").symlink_to(library / "common.py")
    (folder / "uses.py").write_text(NAMESPACE_USER)
    module = user_code.load(f"{folder / 'uses.py'}:Uses")()
    assert (module.table, module.where) == ("rope table", "linked")


THREADED = textwrap.dedent('''
    import threading

    from torch import nn

    {top_import}


    class Holder(nn.Module):
        def slow_import(self):
            import slow_beside  # waits in its own code until the test releases it

        def which_helpers(self):
            from helpers_threaded import WHERE
            return WHERE
''')


def test_a_files_import_running_in_one_thread_does_not_lend_its_helpers_to_another_file(tmp_path):
    """While file one's slow import runs (its kept helpers in sys.modules), file two's forward imports its own for the
    first time."""
    import threading

    started, release = threading.Event(), threading.Event()
    slow_events = sys.modules.setdefault("attnviz_test_slow_events", type(sys)("attnviz_test_slow_events"))
    slow_events.started, slow_events.release = started, release
    for where in ("one", "two"):
        folder = tmp_path / where
        folder.mkdir()
        (folder / "helpers_threaded.py").write_text(f"WHERE = {where!r}\n")
        top_import = "import helpers_threaded  # kept: while one of its imports runs, sys.modules holds it"
        (folder / "holder.py").write_text(THREADED.format(top_import=top_import if where == "one" else ""))
        (folder / "slow_beside.py").write_text(
            "import attnviz_test_slow_events as events\nevents.started.set()\nevents.release.wait(10)\n")
    one = user_code.load(f"{tmp_path / 'one' / 'holder.py'}:Holder")()
    two = user_code.load(f"{tmp_path / 'two' / 'holder.py'}:Holder")()
    slow = threading.Thread(target=one.slow_import)
    slow.start()
    assert started.wait(10)
    answer = {}
    reader = threading.Thread(target=lambda: answer.update(two=two.which_helpers()))
    reader.start()
    reader.join(0.5)  # file two's import waits for file one's to end (before the fix it read file one's at once)
    release.set()
    slow.join(10)
    reader.join(10)
    assert answer == {"two": "two"}
