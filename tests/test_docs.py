"""What the README and docs/ show works as written: every Python block runs in plain Python and prints the values its
comments show (a block that starts ``# in a Jupyter notebook`` runs in a stand-in kernel: ``attnviz.show`` draws only
there), every ``$ attnviz check`` session prints its table and exit status, and every link between the files resolves.

A comment that starts with a Python literal is a claim about the expression on its line (or on the line above, for a
comment on a line of its own): ``trace.steps["weights"].shape  # (1, 12, 6, 6): …`` must evaluate to ``(1, 12, 6,
6)``.  A table's lines must appear in the command's output in order; a line ``…`` skips lines.  The notebook in
docs/notebooks runs in tests/views/test_notebook.py.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import types
from pathlib import Path

import pytest

from attnviz import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLE = ROOT / "docs" / "examples" / "my_attention.py"


def fenced_blocks(path: Path) -> list[tuple[str, int, str]]:
    """(language, line number of the opening fence, text) of every fenced block in a Markdown file, each closed as
    GitHub closes it: by a line of backticks alone (a fence followed by words does not close the block)."""
    blocks, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        opening = re.match(r"\s*```(\w*)", lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if re.fullmatch(r"\s*```+\s*", lines[j]))
            blocks.append((opening.group(1), i + 1, "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return blocks


def blocks_of(language: str, keep=lambda text: True):
    return [pytest.param(path, text, id=f"{path.relative_to(ROOT)}:{line}")
            for path in DOCS for lang, line, text in fenced_blocks(path) if lang == language and keep(text)]


def is_excerpt(text: str) -> bool:
    return text.startswith(" ")


def is_notebook_cell(text: str) -> bool:
    """A block that runs only in Jupyter (``attnviz.show``): it says so on its first line."""
    return text.lower().startswith("# in a jupyter notebook")


# --------------------------------------------------------------------------- Python blocks

def claim(comment: str):
    """The literal a comment starts with (followed by nothing or a colon), or None."""
    comment = comment.strip()
    for end in range(len(comment), 0, -1):
        if end < len(comment) and comment[end] != ":":
            continue
        try:
            return (ast.literal_eval(comment[:end]),)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def claims(source: str) -> dict[int, object]:
    """line number of an expression statement's last line -> the value its comment claims."""
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Expr):
            continue
        last = node.end_lineno
        trailing = lines[last - 1][node.end_col_offset:].strip()
        following = lines[last].strip() if last < len(lines) else ""
        comment = trailing if trailing.startswith("#") else following if following.startswith("#") else None
        if comment is not None and (value := claim(comment[1:])) is not None:
            found[last] = value[0]
    return found


@pytest.mark.parametrize(("path", "source"), blocks_of("python", lambda text: not is_excerpt(text)))
def test_a_python_block_runs_and_prints_what_its_comments_say(path, source, monkeypatch):
    if is_notebook_cell(source):  # show draws in Jupyter: here, in a stand-in kernel whose display keeps the items
        pytest.importorskip("IPython")
        import IPython
        import IPython.display

        monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace(kernel=object()))
        monkeypatch.setattr(IPython.display, "display", lambda item: None)
    monkeypatch.chdir(ROOT)
    expected = claims(source)
    namespace: dict = {"__name__": "__docs__"}
    checked = 0
    for node in ast.parse(source).body:
        if isinstance(node, ast.Expr):
            with contextlib.redirect_stdout(io.StringIO()):
                value = eval(compile(ast.Expression(node.value), str(path), "eval"), namespace)
            if node.end_lineno in expected:
                assert value == expected[node.end_lineno], ast.get_source_segment(source, node)
                checked += 1
        else:
            exec(compile(ast.Module([node], type_ignores=[]), str(path), "exec"), namespace)
    assert checked == len(expected)


def test_api_md_says_where_import_attnviz_works_before_its_first_example():
    intro = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").split("```", 1)[0]
    assert "`pip install -e .`" in intro and "ModuleNotFoundError" in intro


def test_the_readme_gives_the_cpu_build_before_the_command_that_installs_torch():
    """A newcomer runs the Run-it commands as they come: on Linux `pip install -r requirements.txt` takes PyPI's
    CUDA build of torch unless the CPU build is there first, so the CPU build's command is read before them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    run_it = readme.split("## Run it", 1)[1].split("\n## ", 1)[0]
    cpu_build = run_it.find("`pip install torch --index-url https://download.pytorch.org/whl/cpu`")
    assert 0 <= cpu_build < run_it.find("pip install -r requirements.txt")


def test_the_readme_says_how_to_open_the_notebook_it_names():
    """The requirements (which CI installs) hold no notebook app: the README names the one to install and its
    command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/notebooks/your_module.ipynb" in readme
    assert "`pip install jupyterlab`" in readme and "`jupyter lab docs/notebooks/`" in readme
    requirements = (ROOT / "requirements.txt").read_text() + (ROOT / "requirements-dev.txt").read_text()
    assert not re.search(r"^(jupyterlab|notebook|jupyter)\b", requirements, re.M | re.I)


def test_the_literal_claims_are_found():
    source = 'x = (1, 2)\nx  # (1, 2): a pair\nlen(x)  # the number of items\nsum(x)\n# 3: the sum\n'
    assert claims(source) == {2: (1, 2), 4: 3}
    assert claim(" 2 K/V heads") is None


def test_the_buggy_module_excerpt_is_the_example_file():
    (excerpt,) = [text for path in DOCS for lang, _, text in fenced_blocks(path) if lang == "python"
                  and is_excerpt(text)]
    assert excerpt in EXAMPLE.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- attnviz check sessions

def sessions(text: str) -> list[tuple[str, list[str], int | None]]:
    """(command, its output lines, the exit status an ``echo $?`` shows) of each ``$ `` command in a text block."""
    found, status_next = [], False
    for line in text.splitlines():
        if line.startswith("$ echo $?"):
            status_next = True
        elif status_next:
            found[-1][2], status_next = int(line), False
        elif line.startswith("$ "):
            found.append([line[2:], [], None])
        elif found:
            found[-1][1].append(line)
    return [tuple(session) for session in found]


def runnable_session(text: str) -> bool:
    """A text block of ``$ attnviz check`` sessions the test runs: not one that shows a Ctrl-C (``^C``), which
    illustrates a slow module stopped by hand."""
    return "$ " in text and "attnviz check" in text and "^C" not in text


@pytest.mark.parametrize(("path", "text"), blocks_of("text", runnable_session))
def test_an_attnviz_check_session_prints_its_table(path, text, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "100")  # the width the docs' tables are wrapped at
    for command, expected, status in sessions(text):
        words = shlex.split(command)
        words = words[words.index("attnviz") + 1:]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            returncode = cli.main(words)
        actual = out.getvalue().splitlines()
        parts = [[]]  # the expected lines, cut at each line "…"
        for line in expected:
            if line == "…":
                parts.append([])
            else:
                parts[-1].append(line)
        position = 0
        for lines in filter(None, parts):
            starts = [i for i in range(position, len(actual) - len(lines) + 1) if actual[i:i + len(lines)] == lines]
            assert starts, f"{command}: not in its output:\n" + "\n".join(lines) + "\n--- output:\n" + out.getvalue()
            position = starts[0] + len(lines)
        if status is not None:
            assert returncode == status, command


def test_the_sessions_are_read_with_their_status():
    text = "$ attnviz check a.py:A\nA from a.py\n\n1 of 9 rules fail.\n$ echo $?\n1\n$ attnviz check b.py:B\n…\n"
    assert sessions(text) == [("attnviz check a.py:A", ["A from a.py", "", "1 of 9 rules fail."], 1),
                              ("attnviz check b.py:B", ["…"], None)]


# --------------------------------------------------------------------------- links

def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+\s+(.*)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("path", [*DOCS, ROOT / "benchmarks" / "README.md"],
                         ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_and_image_resolves(path):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
        if re.match(r"\w+:", target):
            continue  # http(s): no network here
        file, _, anchor = target.partition("#")
        destination = (path.parent / file) if file else path
        missing_anchor = anchor and destination.suffix == ".md" and anchor not in anchors(destination)
        if not destination.exists() or missing_anchor:
            broken.append(target)
    assert not broken


def vector_shape_rows() -> list[tuple[list[str], list[str]]]:
    """api.md's table of the vectors' shapes: (the variants a row names, or ["trace_module"]; its three shapes)."""
    text = (ROOT / "docs" / "api.md").read_text()
    header = "| producer | `queries` | `keys`, `values` | `context` |\n|---|---|---|---|\n"
    assert header in text, "api.md has the table of the vectors' shapes"
    rows = []
    for line in text.split(header, 1)[1].splitlines():
        if not line.startswith("|"):
            break
        producer, *shapes = (cell.strip() for cell in line.strip("|").split("|"))
        names = ["trace_module"] if producer == "`trace_module`" else re.findall(r"`(\w+)`", producer.split(":")[1])
        rows.append((names, [shape.strip("`") for shape in shapes]))
    return rows


def shape_of(cell: str, sizes: dict) -> tuple:
    return tuple(eval(part.replace("×", "*"), {}, sizes) for part in cell.strip("()").split(", "))  # noqa: S307


class TwoHeads:
    """A user's two-head causal attention, for trace_module (built lazily: torch loads with the test)."""

    @staticmethod
    def build():
        import torch
        from torch import nn

        class Module(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = nn.Linear(16, 48)

            def forward(self, x):
                b, n, d = x.shape
                q, k, v = self.qkv(x).view(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)  # 3 × (b, 2, n, 8)
                scores = q @ k.transpose(-2, -1) / 8 ** 0.5  # (b, 2, n, n)
                scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
                return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, d)  # (b, n, 16)

        return Module()


def test_the_vector_shapes_api_md_gives_are_what_each_producer_records():
    import torch

    import attnviz

    rows = vector_shape_rows()
    assert sum(len(names) for names, _ in rows) == 11  # the ten variants and trace_module
    for names, shapes in rows:
        for name in names:
            if name == "trace_module":
                trace = attnviz.trace_module(TwoHeads.build(), torch.randn(3, 5, 16))
                sizes = {"batch": 3, "heads": 2, "kv_heads": 2, "head_dim": 8}
            else:
                kv_heads = {"gqa": 2, "mqa": 1}.get(name)
                config = attnviz.AttentionConfig(variant=name, d_in=24, d_out=24, num_heads=4, context_length=64,
                                                 num_kv_groups=2 if name == "gqa" else None)
                trace = attnviz.run("Your journey starts with one step", config)
                heads = 1 if trace.steps["weights"].shape[1] == 1 else 4
                sizes = {"d_out": 24, "heads": heads, "head_dim": 24 // heads, "kv_heads": kv_heads}
            sizes["n"] = trace.n
            for stages, cell in zip((["queries"], ["keys", "values"], ["context"]), shapes, strict=True):
                for stage in stages:
                    assert trace.steps[stage].shape == shape_of(cell, sizes), (name, stage)


@pytest.mark.parametrize(("variant", "kv_heads"), [("mha", 4), ("gqa", 2), ("mqa", 1), ("swa", 4)])
def test_the_rotated_vectors_have_the_shapes_api_md_gives(variant, kv_heads):
    import attnviz

    text = (ROOT / "docs" / "api.md").read_text()
    assert "`rotated_queries` `(1, heads, n, head_dim)` and `rotated_keys` `(1, kv_heads, n, head_dim)`" in text
    config = attnviz.AttentionConfig(variant=variant, d_in=24, d_out=24, num_heads=4, positions="rotary",
                                     num_kv_groups=2 if variant == "gqa" else None)
    trace = attnviz.run("Your journey starts with one step", config)
    assert trace.steps["rotated_queries"].shape == (1, 4, trace.n, 6)
    assert trace.steps["rotated_keys"].shape == (1, kv_heads, trace.n, 6)


def test_load_trace_takes_the_batch_api_md_gives_it():
    """api.md's load_trace section gives every map as (batch, heads, n, n), and a trace_module batch of 4 saves and
    loads as it says."""
    import torch

    import attnviz
    from attnviz import trace_file

    section = (ROOT / "docs" / "api.md").read_text().split("## `attnviz.load_trace`")[1].split("\n## ")[0]
    assert "(1, heads, n, n)" not in section
    assert "every map `(batch, heads, n, n)`" in section and "`(4, heads, n, n)`" in section
    batch = attnviz.trace_module(TwoHeads.build(), torch.randn(4, 7, 16))
    loaded = attnviz.load_trace(trace_file.trace_npz(batch))
    assert loaded.steps["weights"].shape == (4, 2, 7, 7) and loaded.output.shape == (4, 7, 16)


def test_the_transformers_section_says_to_install_transformers_before_its_code():
    """Its code imports transformers, which requirements.txt does not install."""
    requirements = (ROOT / "requirements.txt").read_text()
    assert not re.search(r"^transformers\b", requirements, re.M)
    section = (ROOT / "docs" / "check-your-module.md").read_text().split("## A transformers layer")[1]
    before_the_code = section.split("```python")[0]
    assert "`pip install transformers`" in before_the_code
    assert "from transformers import" in section.split("```python")[1]

def test_the_dev_extra_pins_what_requirements_dev_pins():
    import tomllib

    pins = {line.split("#")[0].strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()}
    pins -= {"", "-r requirements.txt"}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert sorted(extra) == sorted(pins)


@pytest.mark.parametrize("path", [*DOCS, ROOT / "benchmarks" / "README.md"], ids=lambda path: path.name)
def test_every_test_file_the_docs_name_exists(path):
    named = set(re.findall(r"`(tests/[\w/]+\.py)", path.read_text()))
    assert not {name for name in named if not (ROOT / name).is_file()}


BENCHMARK_NOTES = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
NOT_RESULTS = {"config.json"}  # named in benchmarks/README.md as a file of a checkpoint's folder, not a result


def brace_expanded(name: str) -> list[str]:
    """``a_{x,y}.{json,log}`` -> a_x.json, a_x.log, a_y.json, a_y.log (the notes name a set of files so)."""
    group = re.search(r"\{([^{}]*)\}", name)
    if group is None:
        return [name]
    return [expanded for choice in group.group(1).split(",")
            for expanded in brace_expanded(name[:group.start()] + choice + name[group.end():])]


def result_mentions(text: str) -> list[tuple[str, str]]:
    """(file in benchmarks/results/, the rest of its sentence or table cell) for every result file a text names in
    backticks: a path under ``results/`` or a bare ``.csv``/``.json``/``.log``/``.png`` name."""
    pieces = []  # a table's rows one by one; a paragraph's other lines joined
    for paragraph in re.split(r"\n\s*\n", text):
        prose = []
        for line in paragraph.splitlines():
            if line.startswith("|"):
                pieces.append(line)
            else:
                prose.append(line.strip())
        pieces.append(" ".join(prose))
    found = []
    for piece in pieces:
        names = []  # the last name's files: a name that is only a suffix (`.png`) is that file's sibling
        for match in re.finditer(r"`([^`\s]+)`", piece):
            name = re.sub(r"^(benchmarks/)?results/", "", match.group(1))
            if re.fullmatch(r"\.\w+", name):
                files = [str(Path(file).with_suffix(name)) for file in names]
            else:
                files = names = [file for file in brace_expanded(name) if "/" not in file and file not in NOT_RESULTS
                                 and re.fullmatch(r"\w[\w.*-]*\.(csv|json|log|png)", file)]
            rest = re.split(r"\.(?:\s|$)|\s\|", piece[match.end():], maxsplit=1)[0]
            found += [(file, rest) for file in files]
    return found


def test_the_result_mentions_are_read_with_the_rest_of_their_sentence():
    text = ("| a | `memory.csv` (+ `.png`), commit 1234567 | b |\n\nFiles: `benchmarks/results/x_{a,b}.json` at\n"
            "commit abcdef0, in git history. Then `results/y.log`. `python x.py` and `model.safetensors`\n")
    assert result_mentions(text) == [("memory.csv", " (+ `.png`), commit 1234567"),
                                     ("memory.png", "), commit 1234567"),
                                     ("x_a.json", " at commit abcdef0, in git history"),
                                     ("x_b.json", " at commit abcdef0, in git history"), ("y.log", "")]


def test_every_result_file_the_benchmark_notes_name_is_there_or_cited_from_git_history():
    """A file gone from benchmarks/results/ is cited as the notes cite earlier results: "at commit X, in git
    history", in the same sentence or table cell."""
    mentions = result_mentions(BENCHMARK_NOTES.read_text(encoding="utf-8"))
    assert len(mentions) > 50
    missing = [(file, rest) for file, rest in mentions if not any(RESULTS.glob(file))  # `generate_browser_*.json`
               and not (re.search(r"\bcommit [0-9a-f]{7,40}\b", rest) and "in git history" in rest)]
    assert missing == [], [file for file, _ in missing]


def design_rows() -> dict[str, str]:
    """docs/design.md's module tables: every path a row's first cell names -> that row."""
    rows = {}
    for line in (ROOT / "docs" / "design.md").read_text().splitlines():
        if line.startswith("| `attnviz/"):
            rows.update(dict.fromkeys(re.findall(r"`(attnviz/[\w/.]+)`", line.split("|")[1]), line))
    return rows


def test_design_md_has_a_row_for_every_module():
    rows = design_rows()

    def named(path: Path) -> bool:
        folder = f"{path.parent.relative_to(ROOT).as_posix()}/"
        return (path.relative_to(ROOT).as_posix() in rows or path.name == "__init__.py"
                or (folder in rows and f"`{path.stem}`" in rows[folder]))

    assert [path for path in sorted((ROOT / "attnviz").rglob("*.py")) if not named(path)] == []


def test_design_md_lists_each_module_under_its_layer():
    """A module's row sits under the heading of its layer (tests/test_core_boundaries.py's: a module's folder, the
    top-level modules the core): urlstate, a top-level module the core imports, is listed under core, not ui."""
    folders = {"views": "attnviz/views/", "labs": "attnviz/labs/", "ui": "attnviz/ui/"}
    misplaced, heading = [], None
    for line in (ROOT / "docs" / "design.md").read_text().splitlines():
        if line.startswith("### "):
            heading = line.removeprefix("### ").strip()
        elif line.startswith("| `attnviz/") and heading in ("core", *folders):
            for path in re.findall(r"`(attnviz/[\w/.]+)`", line.split("|")[1]):
                inside = [layer for layer, folder in folders.items() if path.startswith(folder)]
                if (inside[0] if inside else "core") != heading:
                    misplaced.append((heading, path))
    assert misplaced == []


def test_design_md_lists_every_public_name():
    import attnviz

    row = design_rows()["attnviz/__init__.py"]
    assert [name for name in attnviz.__all__ if f"`{name}`" not in row] == []


# --------------------------------------------------------------------------- the forward counts the docs give

def said(path: str, pattern: str) -> tuple[int, ...]:
    """The numbers ``pattern`` captures in a doc (its lines joined: a sentence may wrap anywhere)."""
    text = " ".join((ROOT / path).read_text(encoding="utf-8").split())
    found = re.search(pattern, text)
    assert found, f"{path} no longer says {pattern!r}"
    return tuple(int(number) for number in found.groups())


def forwards_of_a_passing_check(module, x=None) -> int:
    """How many forwards a check of ``module`` runs, which must be the plan it reported from the start (it passes)."""
    from attnviz import checks

    reports, ran = [], []
    hook = module.register_forward_pre_hook(lambda *args: ran.append(1))
    try:
        results = checks.check_module(module, x, progress=reports.append)
    finally:
        hook.remove()
    assert [check.status for check in results if check.status == "fail"] == []
    assert {report.forwards_planned for report in reports[1:]} == {len(ran)}
    return len(ran)


# the functions whose api.md section writes out their call (show's takes a trace or a module, written as two calls)
def test_the_swa_labels_kv_cache_md_quotes_are_those_the_generate_page_draws():
    """docs/kv-cache.md quotes the cost chart's SWA labels of real models: each is the label the Generate page draws
    for that model (its "window 1,024 on 5 of 6 layers" fitted no model the page offers: the window is a quarter of a
    context shorter than 4,096)."""
    from attnviz import kv_cache

    text = " ".join((ROOT / "docs" / "kv-cache.md").read_text(encoding="utf-8").split())
    names = {model.name for model in kv_cache.PRESETS}
    quoted = [(label, name) for label, name in re.findall(r'"(window [^"]+)" for ([^(]+?) \(', text) if name in names]
    assert len(quoted) >= 2, "docs/kv-cache.md no longer quotes a real model's SWA label"
    for label, name in quoted:
        drawn = kv_cache.describe("SWA", kv_cache.preset(name).variant_settings()["SWA"])
        assert drawn.endswith(f", {label})"), (name, drawn)


def test_the_cache_shapes_pages_md_gives_for_generate_are_those_the_page_states():
    """docs/pages.md's Generate row names the cache's shapes: each is one the page states for a layer (the book's MHA
    and a sliding window keep (b, n, heads, head_dim), tokens first; GQA and MQA (b, kv_heads, n, head_dim); MLA its
    latent), and it names no model whose MLA latent would save nothing where the chart says it saves."""
    from attnviz.models.generation import _layer_holds

    row = next(line for line in (ROOT / "docs" / "pages.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| **Generate**"))
    sizes = {"n_heads": 8, "n_kv_heads": 8, "head_dim": 16, "latent_dim": None}
    stated = {
        _layer_holds(sizes, None, 1), _layer_holds(sizes, 16, 1), _layer_holds({**sizes, "n_kv_heads": 2}, None, 2),
        _layer_holds({**sizes, "latent_dim": 32}, None, 1)}
    symbols = {shape for said in stated for shape in re.findall(r"`(\(b, [^`]*\))` =", said)}
    given = re.findall(r"`(\(b, [^`]*\))`", row)
    assert given and set(given) <= symbols, (given, symbols)
    assert "(b, n, heads, head_dim)" in given  # the book's MHA (every checkpoint's) and the sliding window's layout
    assert "the bundled model's 2 heads" not in row  # its latent of 16 is 16 × narrower than its K and V (256)


WRITTEN_OUT = ("run", "trace_module", "check_module", "load_trace", "explain_weight", "kv_cache_bytes")


@pytest.mark.parametrize("name", WRITTEN_OUT)
def test_api_md_writes_out_every_parameter_of_a_function(name):
    """api.md's section of each function in WRITTEN_OUT writes out every parameter of its signature — check_module's
    ``sizes=`` too (what attnviz check and the app's Check panel pass)."""
    import inspect

    import attnviz

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = " ".join(text.split(f"## `attnviz.{name}`\n", 1)[1].split("\n## ", 1)[0].split())
    written = {argument.split("=")[0].strip(" *") for call in re.findall(rf"\b{name}\(([^)]*)\)", section)
               for argument in call.split(",")}
    assert [p for p in inspect.signature(getattr(attnviz, name)).parameters if p not in written] == []


def test_the_forward_counts_the_docs_give_are_what_a_check_runs():
    """api.md's and your-module.md's counts of a check's forwards, for a module whose KV cache it resets itself and one
    whose caller holds it, are what check_module runs and plans, and so is api.md's allowance for a kv-cache
    failure's diagnosis."""
    import torch
    from helpers import named_caches, user_modules

    from attnviz import checks

    def resets():
        return user_modules.LearnerCachedMHA(16, 16, 64, 0.0, 4).eval()

    def caller_holds():  # a window wider than mask-convention retraces on more tokens: no forward beyond the count
        return named_caches.PastWindow(d_model=16, sliding_window_size=128, keep_all=True).eval()

    def tokens(n):  # the Check panel's input: the text's first n tokens, embedded (one item)
        return torch.randn(1, n, 16, generator=torch.Generator().manual_seed(n))

    default = said("docs/api.md", r"\((\d+) forwards on the default input of a module that resets its cache, (\d+) "
                                  r"when the caller holds it\)")
    assert default == (forwards_of_a_passing_check(resets()), forwards_of_a_passing_check(caller_holds()))
    (allowance,) = said("docs/api.md", r"n − n // 2 \+ (\d+) for `kv-cache`")
    x = checks.default_input(resets())
    assert allowance == checks._diagnosis_forwards(resets(), x, ["kv-cache"]) - (x.shape[1] - x.shape[1] // 2)

    (plain,) = said("docs/your-module.md", r"3 \+ n times on the text's first n ≤ 16 tokens \((\d+) on 16 tokens\)")
    assert plain == forwards_of_a_passing_check(user_modules.MyMultiHeadAttention(16, 16, 64, 0.0, 4).eval(),
                                                tokens(16))
    cached = said("docs/your-module.md", r"\((\d+) on 16 tokens; (\d+) when the caller holds it\)")
    assert cached == (forwards_of_a_passing_check(resets(), tokens(16)),
                      forwards_of_a_passing_check(caller_holds(), tokens(16)))
    slow = said("docs/your-module.md", r"on 15 tokens: \*One forward of SleepyCachedAttention takes [\d.]+ s after the "
                                       r"traced one and the rules run up to (\d+) forwards.*?\*(\d+) forwards of your "
                                       r"module")
    assert slow == (forwards_of_a_passing_check(resets(), tokens(15)),) * 2


def test_guarantees_md_gives_the_forwards_a_failures_diagnosis_may_add():
    """guarantees.md's allowance for a failure's diagnosis — causal's, batch-independence's and kv-cache's
    n − n // 2 + k — is what check_module's diagnosis adds."""
    from helpers import user_modules

    from attnviz import checks

    module = user_modules.LearnerCachedMHA(16, 16, 64, 0.0, 4).eval()
    x = checks.default_input(module)
    n = x.shape[1]
    causal, batch, kv = said("docs/guarantees.md", r"adds at most (\d+) for `causal`, (\d+) for `batch-independence`, "
                                                   r"n − n // 2 \+ (\d+) for `kv-cache`")
    assert causal == checks._diagnosis_forwards(module, x, ["causal"])
    assert batch == checks._diagnosis_forwards(module, x, ["batch-independence"])
    assert kv == checks._diagnosis_forwards(module, x, ["kv-cache"]) - (n - n // 2)
