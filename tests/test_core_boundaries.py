"""Architecture rules of the core: no Streamlit outside the attnviz/ui package; a shape comment on every tensor line."""

from __future__ import annotations

import ast
import copy
import fnmatch
import functools
import io
import json
import re
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attnviz"
UI = PACKAGE / "ui"  # the Streamlit glue: the only package that may import Streamlit
CORE_FILES = sorted(path for path in PACKAGE.rglob("*.py") if UI not in path.parents)


def core_modules() -> list[str]:
    """Dotted names of every attnviz module that exists now, except the attnviz.ui package."""
    names = []
    for path in CORE_FILES:
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# ============================== no Streamlit in the core ==============================


def streamlit_imports(source: str, module: str = "attnviz.x") -> list[str]:
    """Imports of streamlit (or of attnviz.ui, which imports it) anywhere in ``source``, even in functions."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import ui / from ..ui import x
                base = ".".join(filter(None, [module.rsplit(".", node.level)[0], base]))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            func_name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if func_name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [
            name for name in names
            if name.split(".")[0] == "streamlit" or name == "attnviz.ui" or name.startswith("attnviz.ui.")
        ]
    return found


def test_there_are_core_modules_to_check():
    assert {"attnviz", "attnviz.tokens", "attnviz.embedding", "attnviz.attention", "attnviz.pipeline"} <= set(
        core_modules()
    )
    assert "attnviz.ui" not in core_modules()
    assert not [name for name in core_modules() if name.startswith("attnviz.ui.")]
    # outside the Streamlit glue, so plain tests reach them
    assert {"attnviz.variants", "attnviz.views.steps"} <= set(core_modules())


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_core_source_never_imports_streamlit(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    assert streamlit_imports(path.read_text(encoding="utf-8"), module) == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import streamlit as st",
        "import streamlit.components.v1",
        "from streamlit import session_state",
        "def f():\n    import streamlit\n",
        "import importlib\nimportlib.import_module('streamlit')",
        "__import__('streamlit')",
        "from attnviz import ui",
        "from . import ui",
        "from .ui import sidebar",
        "from .. import ui",
        "from ..ui import sidebar",
    ],
)
def test_the_import_checker_catches_streamlit(snippet):
    module = "attnviz.views.figures" if snippet.startswith("from ..") else "attnviz.pipeline"
    assert streamlit_imports(snippet, module) != []


def test_the_import_checker_allows_other_imports():
    assert streamlit_imports("import torch\nfrom attnviz import pipeline\nfrom . import tokens\n", "attnviz.x") == []


# ============================== no figures in the core ==============================

VIEWS_AND_LATER = ("views", "labs")  # the layers that draw (attnviz/ui is not in CORE_FILES)


def plotly_imports(source: str) -> list[str]:
    """Imports of plotly anywhere in ``source``, even in functions: drawing is the views' job."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "plotly"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "plotly":
            found.append(node.module)
    return found


@pytest.mark.parametrize("path", [path for path in CORE_FILES if not set(VIEWS_AND_LATER) & set(
    path.relative_to(PACKAGE).parts[:-1])], ids=lambda path: str(path.relative_to(ROOT)))
def test_the_core_draws_no_figures(path):
    assert plotly_imports(path.read_text(encoding="utf-8")) == []


def test_the_plotly_checker_sees_imports_in_functions():
    assert plotly_imports("import plotly.graph_objects as go\n") == ["plotly.graph_objects"]
    assert plotly_imports("def f():\n    from plotly.subplots import make_subplots\n") == ["plotly.subplots"]
    assert plotly_imports("import numpy\nfrom attnviz.views import figures\n") == []


def _loaded_after_import(modules: list[str]) -> tuple[bool, list[str]]:
    code = textwrap.dedent(
        f"""
        import importlib, json, sys
        for name in {modules!r}:
            importlib.import_module(name)
        print(json.dumps(["streamlit" in sys.modules, sorted(m for m in sys.modules if m.startswith("attnviz"))]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded, attnviz_modules = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded, attnviz_modules


def test_importing_the_core_does_not_load_streamlit():
    modules = core_modules()
    loaded, attnviz_modules = _loaded_after_import(modules)
    assert set(modules) <= set(attnviz_modules)
    assert "attnviz.ui" not in attnviz_modules
    assert loaded is False


@pytest.mark.slow  # starts a fresh Python that imports the whole app (Streamlit, torch, pandas)
def test_importing_ui_does_load_streamlit():
    """The subprocess check can fail: importing attnviz.ui really loads streamlit."""
    pytest.importorskip("streamlit")
    loaded, _ = _loaded_after_import(["attnviz.ui"])
    assert loaded is True


# ============================== shape comments ==============================

TENSOR_EXPRESSION = re.compile(
    r"@|\.view\(|\.transpose\(|softmax|\bW_\w+\(|\btorch\.cat\(|\.repeat_interleave\(|\.reshape\(")


class _WithoutText(ast.NodeTransformer):
    """Every string constant emptied: a label that names ``softmax`` or ``W_query`` is text, not a tensor line."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.Constant("") if isinstance(node.value, str) else node


def lines_missing_shape_comments(source: str) -> list[str]:
    """Assignments whose value uses ``@``, ``.view(``, ``.transpose(``, softmax, a ``W_`` call, ``torch.cat(``,
    ``.repeat_interleave(`` or ``.reshape(`` in its code (not in its strings) and carry no ``#`` comment with a ``(``
    on any of their lines or on a comment line directly above them (for a line too long to carry one)."""
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string
    lines = source.splitlines()
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) or node.value is None:
            continue
        value = ast.unparse(_WithoutText().visit(copy.deepcopy(node.value)))
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            value = "@ " + value
        if not TENSOR_EXPRESSION.search(value):
            continue
        spanned = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        above = node.lineno - 1
        if above in comments and lines[above - 1].lstrip().startswith("#"):
            spanned = range(above, spanned.stop)
        if not any("(" in comments.get(line, "") for line in spanned):
            missing.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return missing


SHAPE_COMMENTED = sorted(  # the files the rule covers: the attention code, the model, producers, labs and views
    [PACKAGE / "attention.py", PACKAGE / "modern_attention.py", PACKAGE / "rope.py",
     *(path for folder in ("models", "producers", "labs", "views") for path in (PACKAGE / folder).rglob("*.py"))]
)


@pytest.mark.parametrize("path", SHAPE_COMMENTED, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_tensor_lines_have_shape_comments(path):
    assert lines_missing_shape_comments(path.read_text(encoding="utf-8")) == []


def test_attention_has_tensor_lines_to_check():
    source = (PACKAGE / "attention.py").read_text(encoding="utf-8")
    checked = [
        node for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign) and TENSOR_EXPRESSION.search(ast.get_source_segment(source, node.value) or "")
    ]
    assert len(checked) >= 20  # the 6 classes really are covered


@pytest.mark.parametrize(
    "snippet",
    [
        "attn_scores = queries @ keys.T\n",
        "attn_scores = queries @ keys.T  # scores\n",
        "keys = keys.view(b, n, h, hd)\n",
        "keys = keys.transpose(1, 2)  # swap heads and tokens\n",
        "attn_weights = torch.softmax(attn_scores, dim=-1)\n",
        "keys = self.W_key(x)\n",
        "x = (\n    queries\n    @ keys\n)\n",
        "x @= w\n",
        "self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)\n",
        "keys = keys.repeat_interleave(self.group_size, dim=1)\n",
        "flat = values.reshape(-1)\n",
        "# (n, d) @ (d, n)\n\nx = queries @ keys\n",
        "y = 1  # (n,)\nx = queries @ keys\n",
        'label = f"head {head}: " + str(queries @ keys.T)\n',
    ],
)
def test_the_shape_comment_checker_catches_missing_comments(snippet):
    assert len(lines_missing_shape_comments(snippet)) == 1


@pytest.mark.parametrize(
    "snippet",
    [
        "attn_scores = queries @ keys.T  # (n, d) @ (d, n) -> (n, n)\n",
        "x = (\n    queries\n    @ keys  # (n, d) @ (d, n)\n)\n",
        "self.W_key = nn.Linear(3, 2)\n",
        "b, n, d = x.shape\n",
        'TITLES = {"weights": "weights = softmax(masked)", "scores": "Q @ K"}\n',
        'verdict = f"the W_query(x) of head {head}"\n',
        "# (n, d) @ (d, n) -> (n, n)\nattn_scores = queries @ keys.T\n",
    ],
)
def test_the_shape_comment_checker_accepts_commented_and_non_tensor_lines(snippet):
    assert lines_missing_shape_comments(snippet) == []


# ============================== packaging ==============================


def test_pyproject_declares_the_runtime_requirements_and_ships_the_assets():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requirements = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert sorted(project["project"]["dependencies"]) == sorted(line for line in requirements if line)
    shipped = project["tool"]["setuptools"]["package-data"]["attnviz"]
    for asset in (PACKAGE / "assets").rglob("*"):
        if asset.is_file():
            relative = asset.relative_to(PACKAGE).as_posix()
            assert any(fnmatch.fnmatch(relative, pattern) for pattern in shipped), relative




# ============================== layers: no upward imports, no cycles ==============================

LAYERS = ("core", "views", "labs", "ui", "entry")  # each may import its own layer and the ones before it
ENTRY = ("attnviz", "attnviz.cli", "attnviz.__main__")  # the public API and the command line: they reach every layer


def layer_of(module: str) -> str:
    """``attnviz.views.figures`` -> "views"; a top-level module, ``models`` and ``producers`` are the core."""
    if module in ENTRY:
        return "entry"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS[1:-1] else "core"


def attnviz_imports(path: Path) -> list[tuple[str, bool]]:
    """(imported attnviz name, at module level?) for every import in the file, functions included.

    ``from attnviz.producers import book`` yields ``attnviz.producers.book`` and ``attnviz.producers`` (either may
    be the module: ``imported_modules`` picks)."""
    return [(name, top) for names, top in _import_statements(path) for name in names]


def _import_statements(path: Path) -> list[tuple[list[str], bool]]:
    """For every import statement naming attnviz: (its candidate names, at module level?)."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return _statements(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")


def _statements(source: str, module: str, *, is_package: bool = False) -> list[tuple[list[str], bool]]:
    package = module if is_package else module.rsplit(".", 1)[0]
    tree = ast.parse(source)
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "attnviz":
                    found.append(([alias.name], id(node) in top_level))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x / from ..y import z
                base = ".".join(filter(None, [package.rsplit(".", node.level - 1)[0], base]))
            if base.split(".")[0] == "attnviz":
                for alias in node.names:
                    found.append(([f"{base}.{alias.name}", base], id(node) in top_level))
    return found


def imported_modules(statements: list[tuple[list[str], bool]], modules) -> list[tuple[str, bool]]:
    """(module, at module level?) each import statement loads: ``from package import submodule`` counts as the
    submodule (Python loads the package first, but the package does not need the importer), ``from module
    import name`` as the module."""
    found = []
    for names, top in statements:
        module = next((name for name in names if name in modules), None)
        if module is not None:
            found.append((module, top))
    return found


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def upward_imports(modules: dict[str, list[tuple[str, bool]]]) -> list[str]:
    """"A imports B (in a function)" for every import, at module level or inside a function, of a later layer."""
    return [f"{module} imports {imported}{'' if top else ' (in a function)'}"
            for module, imports in modules.items() for imported, top in imports
            if LAYERS.index(layer_of(imported)) > LAYERS.index(layer_of(module))]


def import_cycles(modules: dict[str, list[tuple[str, bool]]], *, functions: bool) -> list[str]:
    """Every cycle "a -> b -> a" of imports: at module level only, or with imports inside functions too.

    A package's ``__init__`` importing its own submodules at module level is how a package is assembled, not a
    cycle; inside a function (a registry picking a submodule) it is an edge like any other."""
    graph = {module: {name for name, top in imports
                      if name != module and (top or functions) and not (top and name.startswith(module + "."))}
             for module, imports in modules.items()}
    state, cycles = {}, []

    def visit(module, stack):
        state[module] = "open"
        for name in sorted(graph.get(module, ())):
            if state.get(name) == "open":
                cycles.append(" -> ".join([*stack[stack.index(name):], name]))
            elif name not in state:
                visit(name, [*stack, name])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


@functools.cache  # parsed once for the four tests below, which only read it
def package_imports() -> dict[str, list[tuple[str, bool]]]:
    modules = _modules()
    return {module: imported_modules(_import_statements(path), modules) for module, path in modules.items()}


def test_no_module_imports_a_later_layer_even_inside_a_function():
    assert upward_imports(package_imports()) == []


# what runs attention: the producers, the tracer and the pipeline (a Trace), the GPT models (their layers' maps)
RUNNERS = ("attnviz.producers", "attnviz.tracing", "attnviz.pipeline", "attnviz.models")


def running_imports(modules: dict[str, list[tuple[str, bool]]]) -> list[str]:
    """"A imports B (in a function)" for every import of a producer, the tracer, the pipeline or a GPT model by a view
    (a type named for a checker included): views only draw the arrays their caller computed (STYLE.md §4)."""
    return [f"{module} imports {imported}{'' if top else ' (in a function)'}"
            for module, imports in modules.items() if layer_of(module) == "views" for imported, top in imports
            if any(imported == runner or imported.startswith(runner + ".") for runner in RUNNERS)]


def test_no_view_runs_attention_even_inside_a_function():
    assert running_imports(package_imports()) == []


def test_module_level_imports_have_no_cycles():
    assert import_cycles(package_imports(), functions=False) == []


def test_imports_inside_functions_close_no_cycles():
    """An import deferred into a function still ties the two modules together: no cycle may run through one."""
    assert import_cycles(package_imports(), functions=True) == []


FAKE = {"attnviz.config", "attnviz.producers", "attnviz.producers.book", "attnviz.tracing", "attnviz.pipeline",
        "attnviz.views.figures", "attnviz.ui.heads", "attnviz.models"}


def _fake_imports(sources: dict[str, str]) -> dict[str, list[tuple[str, bool]]]:
    return {module: imported_modules(_statements(source, module, is_package=module == "attnviz.producers"), FAKE)
            for module, source in sources.items()}


def test_the_checkers_catch_a_function_level_upward_import_and_cycle():
    sources = {
        "attnviz.config": "",
        "attnviz.tracing": "def embed():\n    from attnviz import pipeline\n",
        "attnviz.pipeline": "from attnviz import producers\n",
        "attnviz.producers": "def for_config():\n    from attnviz.producers import book\n",
        "attnviz.producers.book": "from attnviz import tracing\n",
        "attnviz.views.figures": "def f():\n    from attnviz.ui import heads\n",
        "attnviz.ui.heads": "from attnviz.views import figures\n",
    }
    imports = _fake_imports(sources)
    assert upward_imports(imports) == ["attnviz.views.figures imports attnviz.ui.heads (in a function)"]
    assert import_cycles(imports, functions=False) == []
    assert import_cycles(imports, functions=True) == [
        "attnviz.pipeline -> attnviz.producers -> attnviz.producers.book -> attnviz.tracing -> attnviz.pipeline",
        "attnviz.ui.heads -> attnviz.views.figures -> attnviz.ui.heads"]


def test_the_running_checker_catches_a_view_that_traces_or_runs():
    imports = _fake_imports({
        "attnviz.views.figures": "def show(module):\n    from attnviz import tracing\n",
        "attnviz.ui.heads": "from attnviz import pipeline\nfrom attnviz.views import figures\n",
        "attnviz.tracing": "from attnviz.config import X\n",
    })
    assert running_imports(imports) == ["attnviz.views.figures imports attnviz.tracing (in a function)"]
    assert running_imports(_fake_imports({"attnviz.views.figures": "from attnviz.producers import book\n"})) == [
        "attnviz.views.figures imports attnviz.producers.book"]
    assert running_imports(_fake_imports({"attnviz.views.figures": "def tiles(model):\n    from attnviz.models import "
                                                                    "iter_layer_maps\n"})) == [
        "attnviz.views.figures imports attnviz.models (in a function)"]


def test_the_cycle_checker_lets_a_package_assemble_itself():
    imports = _fake_imports({"attnviz.producers": "from attnviz.producers import book\n",
                             "attnviz.producers.book": "from attnviz.config import X\nfrom attnviz import producers\n",
                             "attnviz.config": ""})
    assert import_cycles(imports, functions=True) == []


def test_the_layer_checker_sees_layers():
    assert layer_of("attnviz.views.figures") == "views" and layer_of("attnviz.labs.pitfalls.bugs") == "labs"
    assert layer_of("attnviz.pipeline") == "core" and layer_of("attnviz.models.gpt") == "core"
    assert layer_of("attnviz.ui.frame") == "ui"
    assert layer_of("attnviz.cli") == "entry" and layer_of("attnviz") == "entry"


# ============================== the ui facade ==============================

UI_CALLERS = ("app.py", "pages/*.py", "tests/**/*.py", "benchmarks/**/*.py")  # what calls the facade as ui.<name>
_UI_NAME = re.compile(r"(?<![\w.])ui\.([A-Za-z_]\w*)")  # ui.setup, not attnviz.ui.setup or page_ui.setup


def ui_facade_names() -> list[str]:
    """``attnviz.ui.__all__``, read from its source (importing it would import Streamlit)."""
    tree = ast.parse((UI / "__init__.py").read_text(encoding="utf-8"))
    assigned = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                    and any(getattr(target, "id", None) == "__all__" for target in node.targets))
    return list(ast.literal_eval(assigned))


def names_called_as_ui(patterns=UI_CALLERS) -> dict[str, set[str]]:
    """{name: the files that write ``ui.<name>``} over ``patterns`` (relative to the project)."""
    called: dict[str, set[str]] = {}
    for pattern in patterns:
        for path in ROOT.glob(pattern):
            for match in _UI_NAME.finditer(path.read_text(encoding="utf-8")):
                called.setdefault(match.group(1), set()).add(str(path.relative_to(ROOT)))
    return called


def test_the_ui_facade_lists_what_is_called_through_it():
    """``ui.__all__`` is what app.py, the pages, the tests and the benchmarks call as ``ui.<name>``: no name that nobody
    calls so, and every ``ui.<name>`` of app.py and the pages is in it (or is one of the package's modules)."""
    listed, called = ui_facade_names(), names_called_as_ui()
    assert [name for name in listed if name not in called] == []
    modules = {path.stem for path in UI.glob("*.py")}
    scripts = names_called_as_ui(("app.py", "pages/*.py"))
    assert sorted(name for name in scripts if name not in listed and name not in modules) == []


def test_the_ui_name_finder_reads_only_ui_dot_names():
    assert _UI_NAME.findall("ui.setup() attnviz.ui.sidebar page_ui.x ui_weights.load (ui.share_link)") == [
        "setup", "share_link"]
