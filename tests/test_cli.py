"""The ``attnviz`` command line: one parser whose ``check`` prints a table of the rules with an exit status a
learner's CI can use, and whose ``train`` writes a checkpoint (its runs are tested in tests/labs/test_train.py)."""

import contextlib
import io
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers import user_modules as um
from helpers.check_table import ALL_PASS, check_table, place, rules_fail

from attnviz import checks, cli, time_limit
from attnviz.config import MAX_CONTEXT_LENGTH, MAX_DIM, MAX_HEADS

ROOT = Path(__file__).resolve().parents[1]
# a Ctrl-C test needs SIGINT to reach this process and the ones it starts: a shell's background job ignores it
ctrl_c_reaches = pytest.mark.skipif(signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
                                    reason="SIGINT is ignored here (pytest started as a background job): "
                                           "a Ctrl-C cannot be sent")

MODULES = textwrap.dedent('''
    import time

    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, scale=True):
            super().__init__()
            self.num_heads, self.head_dim, self.scale = num_heads, d_out // num_heads, scale
            self.qkv = nn.Linear(d_in, 3 * d_out, bias=False)
            self.proj = nn.Linear(d_out, d_out)
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-2, -1)
            if self.scale:
                scores = scores / self.head_dim ** 0.5
            scores = scores.masked_fill(self.mask.bool()[:n, :n], float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            return self.proj((weights @ v).transpose(1, 2).reshape(b, n, -1))


    class Unscaled(Attention):
        def __init__(self, d_in, d_out, num_heads, context_length):
            super().__init__(d_in, d_out, num_heads, context_length, scale=False)


    class NeedsVocab(nn.Module):
        def __init__(self, d_in, vocab_size):
            super().__init__()


    class Raises(Attention):
        def forward(self, x):
            return x.view(3, -1, 7)


    class PausesInTheCache(Attention):
        def forward(self, x, use_cache=False):
            if use_cache:
                time.sleep(60)  # a debugging pause left in the cached path
            return super().forward(x)

        def reset_cache(self):
            pass


    class NoSoftmax(nn.Module):
        def __init__(self, d_in):
            super().__init__()
            self.proj = nn.Linear(d_in, d_in)

        def forward(self, x):
            return self.proj(x)
''')


pytestmark = pytest.mark.usefixtures("no_slow_notice")  # stderr compared without the load-dependent notice


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "attention.py"
    path.write_text(MODULES)
    return path


def check(*args):
    """``attnviz check ARGS`` in this process (``main`` is what the console script and ``python -m attnviz`` run;
    the tests at the end run real processes): its exit status, stdout and stderr."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            returncode = cli.main(["check", *map(str, args)])
        except SystemExit as stop:  # argparse's error(): a bad command line, exit 2
            returncode = stop.code
    return subprocess.CompletedProcess(args, returncode, out.getvalue(), err.getvalue())


def check_in_a_process(*args):
    return subprocess.run([sys.executable, "-m", "attnviz", "check", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_a_correct_module_exits_0_with_every_rule_in_the_table(modules):
    result = check(f"{modules}:Attention", "--d-in", 32, "--num-heads", 4)
    assert result.returncode == 0, result.stderr
    for rule in ("rows-sum-to-one", "causal", "mask-convention", "scaling", "dropout-placement",
                 "batch-independence", "matches-reference"):
        assert rule in result.stdout
    assert "FAIL" not in result.stdout


def test_a_buggy_module_exits_1_naming_the_rule(modules):
    result = check(f"{modules}:Unscaled", "--d-in", 32, "--num-heads", 4)
    assert result.returncode == 1
    assert "scaling             FAIL  the scores are not scaled: divide by √head_dim = √8" in result.stdout


def test_the_table_is_the_same_on_every_run(modules):
    """The module's weights are seeded, so the evidence (the numbers of matches-reference) is what the docs print,
    whatever torch's global RNG held before."""
    import torch

    tables = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        tables.append(check(f"{modules}:Unscaled", "--d-in", 32, "--num-heads", 4).stdout)
    assert "matches-reference   FAIL" in tables[0]
    assert tables[0] == tables[1]


def test_one_token_skips_causal_and_mask_convention_in_words(modules):
    result = check(f"{modules}:Attention", "--d-in", 32, "--num-heads", 4, "--tokens", 1)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^causal +skip +1 token:", result.stdout, re.M), result.stdout
    assert re.search(r"^mask-convention +skip +1 token:", result.stdout, re.M), result.stdout
    assert ALL_PASS in result.stdout


@pytest.mark.parametrize(("options", "note", "checked"), [
    (["--context-length", 16, "--tokens", 40], "--tokens 40 is more than --context-length 16: checking 16 tokens", 16),
    (["--tokens", 12, "--set", "context_length=8"],  # the module's own mask is 8 × 8, --context-length 64
     "--tokens 12 is more than the module's context, 8 (its mask buffer is 8 × 8): checking 8 tokens", 8),
], ids=["context-length-flag", "the-modules-own-mask"])
def test_more_tokens_than_the_context_says_it_capped_in_one_line(modules, options, note, checked):
    """--tokens 2000 with the default --context-length 64 checked 64 tokens without a word."""
    result = check(f"{modules}:Attention", "--d-in", 32, "--num-heads", 4, *options)
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"attnviz check: {note}\n"
    assert f"(j = 1 … {checked - 1})" in " ".join(result.stdout.split())  # causal ran on that many tokens


def test_tokens_within_the_context_print_no_note(modules):
    result = check(f"{modules}:Attention", "--d-in", 32, "--num-heads", 4, "--context-length", 16, "--tokens", 16)
    assert result.returncode == 0 and result.stderr == ""


def test_a_context_kept_under_another_constructor_name_caps_the_tokens():
    """max_position_embeddings is a name the check builds a module's context with, but the cap read the context only
    as context_length/block_size/…: 20 tokens ran past the module's table of 12 and the check stopped at torch's
    shape error (exit 2)."""
    result = check(f"{USER_MODULES}:FusedPositionTable", "--tokens", 20, "--set", "max_position_embeddings=12")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ("attnviz check: --tokens 20 is more than the module's context, 12 (its "
                             "max_position_embeddings is 12): checking 12 tokens\n")
    assert "(j = 1 … 11)" in " ".join(result.stdout.split())  # causal ran on 12 tokens


@pytest.mark.parametrize(("spec", "message"), [
    ("{dir}/nope.py:Attention", "no such file"),
    ("{path}:NeedsVocab", "needs vocab_size"),
    ("{path}:Raises", "the forward raised RuntimeError"),
    ("{path}:NoSoftmax", "no attention found"),
])
def test_what_cannot_run_exits_2_with_one_line(modules, spec, message):
    result = check(spec.format(dir=modules.parent, path=modules))
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(("spec", "transformers"), [
    ("transformers.models.llama.modeling_llama:LlamaAttention", True),
    ("mypackage.attention:MyAttention", False),
])
def test_a_module_name_instead_of_a_file_says_attnviz_checks_a_files_class(spec, transformers):
    """A module's import name is not only "no such file": the message says that attnviz checks a class in a file,
    and for a transformers layer how — the doc section it names shows the file to write; a file's name that is not
    there gets "no such file" alone."""
    result = check(spec)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stdout == ""
    name = spec.partition(":")[0]
    assert result.stderr.startswith(f"attnviz check: {name}: no such file — attnviz checks a class in a file, "
                                    "path/to/file.py:ClassName, not a module by its import name")
    assert ("a transformers layer needs what its model hands its forward" in result.stderr) == transformers
    if transformers:
        section = re.search(r'docs/check-your-module\.md, "(.+)"\)', result.stderr).group(1)
        assert f"## {section}\n" in (ROOT / "docs" / "check-your-module.md").read_text(encoding="utf-8")
    assert check("nope.py:Attention").stderr == "attnviz check: nope.py: no such file\n"  # a file's name: no more


def test_k_v_groups_that_do_not_divide_the_heads_are_said_before_the_class_is_built(monkeypatch):
    """--num-heads 6 --num-kv-groups 4 reached the module, whose forward raised a shape error of its own."""
    from attnviz import user_code

    built = []
    monkeypatch.setattr(user_code, "_construct", lambda cls, arguments: built.append(cls))
    result = check(f"{USER_MODULES}:NanochatGQA", "--d-in", 48, "--num-heads", 6, "--num-kv-groups", 4)
    assert result.returncode == 2 and result.stdout == "" and built == []
    assert result.stderr == ("attnviz check: 4 K/V groups do not divide 6 heads: each K/V group serves the same "
                             "number of query heads — give --num-kv-groups one of 1, 2, 3, 6 (or --num-heads a "
                             "multiple of 4)\n")


def test_a_syntax_error_exits_2_naming_the_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("class A(\n")
    result = check(f"{path}:A")
    assert result.returncode == 2 and "line 1" in result.stderr and "syntax error" in result.stderr


@pytest.mark.parametrize("seed", [None, 7])
def test_the_weights_are_drawn_after_the_seed(modules, monkeypatch, seed):
    """The app's seed setting (default 123) gives the module's weights; --seed gives the CLI the same ones."""
    import torch

    from attnviz import checks, user_code
    from attnviz.rng import seeded

    built = []
    check_module = checks.check_module
    monkeypatch.setattr(checks, "check_module", lambda module, x, **kw: built.append(module) or check_module(
        module, x, **kw))
    assert check(f"{modules}:Attention", "--d-in", 32, *(["--seed", seed] if seed is not None else [])).returncode == 0
    with seeded(123 if seed is None else seed):
        expected = user_code.build(user_code.load(f"{modules}:Attention"), d_in=32, d_out=None, num_heads=4,
                                   context_length=64, dropout=0.0)
    assert all(torch.equal(value, expected.state_dict()[key]) for key, value in built[0].state_dict().items())


def test_causal_can_be_stated(modules):
    result = check(f"{modules}:Attention", "--d-in", 32, "--no-causal")
    assert result.returncode == 1  # it masks, but was said not to be causal
    table = " ".join(result.stdout.split())  # the evidence column wraps at the terminal's width
    assert "causal skip not checked: causal=False was given (--no-causal)" in table
    assert "mask-convention FAIL causal=False was given (--no-causal), but the module masks: it hides the 28 cells " \
           "above the diagonal (the future)" in table


def test_d_in_is_the_input_width_of_a_module_that_does_not_say_its_own():
    """GPT-2's Conv1D layers give no nn.Linear to read the width off, and the class keeps no width attribute: the
    check runs on --d-in wide input (the width the class was built with), not a refusal."""
    helpers = ROOT / "tests" / "helpers" / "user_modules.py"
    for width in (48, 64):
        flags = ["--d-in", width] if width != 64 else []  # 64: the default --d-in
        result = check(f"{helpers}:GPT2StyleAttention", *flags, "--num-heads", 4)
        assert result.returncode == 0, result.stderr
        assert "input width" not in result.stderr and "matches-reference" in result.stdout


@pytest.mark.parametrize(("spec", "flags"), [
    ("OutProjFirst", []), ("OutProjFirst", ["--d-in", 64]), ("OutProjFirst", ["--d-in", 32]),
    ("EinsumProjections", []), ("EinsumProjections", ["--d-in", 48]),
])
def test_the_checked_input_is_as_wide_as_the_width_typed_or_built(spec, flags):
    """OutProjFirst makes o_proj (128 wide in) before q_proj (hidden_size wide in); EinsumProjections' only
    nn.Linear is its output's (128 wide in): each is checked on an input as wide as --d-in says, or as the class is
    built without it, not on its first Linear's 128, and every rule passes (exit 0)."""
    result = check(f"{ROOT / 'tests' / 'helpers' / 'user_modules.py'}:{spec}", *flags)
    assert result.returncode == 0, result.stderr
    assert "All 9 rules pass" in result.stdout


WIDTH_NOT_TAKEN = textwrap.dedent('''
    from helpers.user_modules import EinsumProjections


    class FixedWidth(EinsumProjections):
        def __init__(self):
            super().__init__()
''')


def test_a_width_attnviz_chose_that_the_forward_refuses_says_which_and_where_from(tmp_path):
    """A class that takes no width argument is checked on the width attnviz reads off it; --d-in typed is the width."""
    path = tmp_path / "fixed.py"
    path.write_text(WIDTH_NOT_TAKEN)
    result = check(f"{path}:FixedWidth")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("attnviz check: the forward raised RuntimeError (user_modules.py, line "), \
        result.stderr  # the forward it inherits
    assert "): einsum(): " in result.stderr, result.stderr
    assert result.stderr.endswith(" — x was (2, 8, 128): the width of W_O, the module's first Linear; if the module "
                                  "takes another width, pass --d-in N\n"), result.stderr
    assert check(f"{path}:FixedWidth", "--d-in", 64).returncode == 0


def test_a_module_built_on_the_meta_device_exits_2_saying_so():
    result = check(f"{ROOT / 'tests' / 'helpers' / 'user_modules.py'}:BuiltOnMeta", "--d-in", 32)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("attnviz check: the module's weights are on the meta device (no values): materialise it "
                             "(module.to_empty(device='cpu') and load weights) before tracing\n")


def test_the_evidence_wraps_between_words_and_never_inside_a_flag_or_a_number():
    evidence = "causal=False was given (--no-causal), but the scores hold -1e+09 where the kv-cache rule expects -inf"
    for width in range(40, 120):
        lines = cli.rule_lines(checks.Check("mask-convention", "fail", evidence), len("mask-convention"), width)
        words = " ".join(line[len("mask-convention") + 8:] for line in lines).split()
        assert words == evidence.split(), width


@pytest.mark.parametrize(("source", "spec", "message"), [
    ("import torch\nraise RuntimeError('no GPU here')\n", "A", "raised RuntimeError on import: no GPU here"),
    ("from torch import nn\n\n\nclass Bad(nn.Module):\n    def __init__(self, d_in):\n"
     "        super().__init__()\n        assert d_in % 3 == 0, 'd_in must be a multiple of 3'\n",
     "Bad", "Bad(d_in=64) failed an assertion (user.py, line 7): d_in must be a multiple of 3"),
    ("from torch import nn\n\n\nclass Mine(nn.Module):\n    pass\n", "Other", "it defines Mine"),
    ("class E(BaseException): pass\nraise E('custom base exception')\n", "A",
     "raised E on import: custom base exception"),
    ("from torch import nn\n\n\nclass E(BaseException): pass\n\n\nclass A(nn.Module):\n"
     "    def __init__(self, d_in=64):\n        super().__init__()\n\n    def forward(self, x):\n"
     "        raise E('x')\n", "A", "the forward raised E (user.py, line 12): x"),
    ("from torch import nn\n\n\nclass A(nn.Module):\n    def __init__(self, d_in=64):\n        super().__init__()\n"
     "\n    def forward(self, x):\n        raise KeyboardInterrupt\n", "A",
     "the forward raised KeyboardInterrupt (user.py, line 9)"),
], ids=["raises", "asserts", "no-such-class", "base-exception-on-import", "base-exception-in-forward",
        "keyboard-interrupt-in-forward"])
def test_an_import_or_constructor_failure_exits_2_with_one_line(tmp_path, source, spec, message):
    path = tmp_path / "user.py"
    path.write_text(source)
    result = check(f"{path}:{spec}")
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.slow
@ctrl_c_reaches
def test_a_real_ctrl_c_during_the_users_code_still_interrupts_the_check(tmp_path):
    """A user's KeyboardInterrupt is their exception (exit 2, above); the one Ctrl+C raises stops the check: "attnviz:
    interrupted", the shell's status for SIGINT."""
    path = tmp_path / "waits.py"
    path.write_text("from torch import nn\n\n\nclass A(nn.Module):\n    def __init__(self, d_in=64):\n"
                    "        super().__init__()\n        print('built', flush=True)\n        while True:\n"
                    "            pass\n")
    process = subprocess.Popen([sys.executable, "-m", "attnviz", "check", f"{path}:A"], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout.readline() == "built\n"  # the constructor's loop runs
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130 and err.strip() == "attnviz: interrupted", err


def run_attnviz(*args):
    return subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_help_names_both_commands():
    result = run_attnviz("--help")
    assert result.returncode == 0 and "check" in result.stdout and "train" in result.stdout


@pytest.mark.parametrize(("command", "options"), [("check", ["--d-in", "--num-heads", "--no-causal"]),
                                                  ("train", ["--out", "--steps", "--seed", "--set", "--quiet"])])
def test_each_command_has_help(command, options):
    """``attnviz COMMAND --help`` through the console script's function (its process: the test above)."""
    result = console([command, "--help"], io.StringIO())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: attnviz {command}")
    assert all(option in result.stdout for option in options)


def help_text(command: str) -> str:
    """A subcommand's ``--help``, its wrapped lines joined with single spaces."""
    spec = ["x.py:X"] if command == "check" else ["--out", "x"]
    return " ".join(cli.parser().parse_args([command, *spec]).command_parser.format_help().split())


def test_check_help_says_a_skip_exits_0_and_what_no_causal_means():
    text = help_text("check")
    assert "exit status: 0 no rule fails (skips included) 1 a rule fails 2 the class cannot be loaded" in text
    assert "--no-causal the module should not mask the future" in text


def test_train_help_names_the_recipes_steps_and_seed():
    """``attnviz train --help`` says how many steps and which seed a run without ``--steps``/``--seed`` trains with:
    the recipe's, TrainConfig's."""
    from attnviz.labs.train import TrainConfig

    text = help_text("train")
    assert f"--steps STEPS training steps (default: the recipe's, {TrainConfig.steps:,})" in text
    assert f"--seed SEED random seed (default: the recipe's, {TrainConfig.seed})" in text


@pytest.mark.parametrize("command", ["check", "train", None])
def test_help_reads_in_80_columns(command, monkeypatch):
    """``--help`` in an 80-column terminal: a description of at most 3 lines, each option's help in at most 3, no line
    wider than the terminal, and examples that are commands attnviz takes."""
    monkeypatch.setenv("COLUMNS", "80")
    main = cli.parser()
    spec = {"check": ["x.py:X"], "train": ["--out", "x"]}
    parser = main if command is None else main.parse_args([command, *spec[command]]).command_parser
    text = parser.format_help()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    description = text.split("\n\n")[1]
    assert not description.startswith(("positional arguments:", "options:")) and len(description.splitlines()) <= 3
    options = text.split("\noptions:\n")[1].split("\n\n")[0]
    entries = re.split(r"\n(?=  -)", options)
    assert len(entries) >= 2 and all(len(entry.splitlines()) <= 3 for entry in entries), options
    examples = [line.split()[1:] for line in text.splitlines() if line.startswith("  attnviz ")]
    assert len(examples) >= (4 if command == "check" else 0)
    for example in examples:
        assert main.parse_args(example).command == command, example


def test_check_helps_size_table_names_spellings_the_checker_fills_and_marks_the_ones_left_out():
    """Each size flag's row names spellings of ``declarations.SPELLINGS`` only, and ends in "…" exactly where it
    leaves some out (``--latent-dim`` listed two of its three names without saying so)."""
    from attnviz.declarations import SPELLINGS

    flags = {"--d-in": "d_in", "--d-out": "d_out", "--num-heads": "num_heads", "--context-length": "context_length",
             "--dropout": "dropout", "--num-kv-groups": "num_kv_groups", "--latent-dim": "latent_dim",
             "--window": "sliding_window_size"}
    text = cli.parser().parse_args(["check", "x.py:X"]).command_parser.format_help()
    rows = {line.split()[0]: line.split(None, 1)[1] for line in text.splitlines()
            if line.startswith("    --") and line.split()[0] in flags}
    assert set(rows) == set(flags), rows
    for flag, names in rows.items():
        listed = [name.strip() for name in names.rstrip(" …").split(",")]
        assert set(listed) <= set(SPELLINGS[flags[flag]]), (flag, listed)
        assert names.endswith("…") == (len(listed) < len(SPELLINGS[flags[flag]])), (flag, names)


def test_train_help_says_set_refuses_steps_and_seed():
    assert "(not steps/seed: use --steps/--seed)" in help_text("train")


def test_help_does_not_import_torch():
    code = "import sys\nfrom attnviz.cli import parser\nparser().format_help()\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize(("args", "message"), [
    ([], "required: {check,train}"),
    (["train"], "the following arguments are required: --out"),
    (["train", "--out", "x", "--steps", "0"], "--steps must be at least 1"),
    (["train", "--out", "x", "--set", "no_such_field=1"], "unknown field"),
    (["train", "--out", "x", "--set", "lr=fast"], "must be JSON"),
    (["check"], "the following arguments are required: path/to/file.py:ClassName"),
    (["check", "x.py:A", "--seed", "-1"], "--seed must be between 0 and 4294967295, got -1"),
    (["check", "x.py:A", "--seed", str(2**32)], "--seed must be between 0 and 4294967295, got 4294967296"),
])
def test_a_bad_command_line_exits_2_with_its_usage(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(args)
    stderr = capsys.readouterr().err
    assert exit_.value.code == 2 and message in stderr and "usage: attnviz" in stderr


def test_the_console_script_is_declared():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, function = project["project"]["scripts"]["attnviz"].partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), function))


def test_python_m_attnviz_check_runs_in_its_own_process(modules):
    failing = check_in_a_process(f"{modules}:Unscaled", "--d-in", 32)
    assert failing.returncode == 1, failing.stderr
    assert "scaling             FAIL" in failing.stdout and "rows-sum-to-one     PASS" in failing.stdout


def in_a_shell(command: str) -> subprocess.CompletedProcess:
    """``command`` run by bash in the repository (``python -m attnviz`` is this checkout's): its status is the
    pipeline's first command's (``pipefail`` keeps it when ``head`` exits 0)."""
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=ROOT,
                          timeout=180)


def said(stderr: str) -> str:
    """``stderr`` without the slow-check notice a loaded machine adds ("… about 5 s (Ctrl-C stops it)")."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.endswith("(Ctrl-C stops it)\n"))


def console(args, stdout) -> subprocess.CompletedProcess:
    """``attnviz ARGS`` through the console script's own function (``cli.console``: what the ``attnviz`` command and
    ``python -m attnviz`` run) in this process, its standard output ``stdout`` (None: started without one): its exit
    status, what ``stdout`` holds if it is a ``StringIO``, and its stderr.  The tests below that start a process
    show what only a process has: the interpreter's own flush at exit, a real pipe, the shell's redirections."""
    err = io.StringIO()
    saved = sys.argv, sys.stdout, sys.stderr
    sys.argv, sys.stdout, sys.stderr = [cli.PROG, *map(str, args)], stdout, err
    try:
        with pytest.raises(SystemExit) as stop:
            cli.console()
    finally:
        sys.argv, sys.stdout, sys.stderr = saved
    out = stdout.getvalue() if isinstance(stdout, io.StringIO) else ""
    return subprocess.CompletedProcess(args, stop.value.code, out, err.getvalue())


def a_pipe_nobody_reads():
    """The write end of a pipe whose reader is gone (``attnviz check … | true``): a write raises BrokenPipeError."""
    read, write = os.pipe()
    os.close(read)
    return open(write, "w")  # noqa: SIM115 -- closed by the test that writes to it


def null_descriptors() -> int:
    """How many of this process's open descriptors point at the null device (Linux's ``/proc/self/fd``)."""
    folder = Path("/proc/self/fd")
    count = 0
    for name in os.listdir(folder):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone once listed
            count += os.readlink(folder / name) == os.devnull
    return count


@pytest.mark.parametrize(("cls", "status"), [("Unscaled", 1), ("Attention", 0)])
def test_a_reader_that_stops_early_keeps_the_checks_exit_status(modules, cls, status):
    """``attnviz check … | head -1`` (a reader that stops after the first line, or is gone before it) exits with the
    check's own status: 1 when a rule fails, 0 when all pass, and no traceback.  A real pipeline for one of them
    (what the interpreter flushes at exit is the process's own); the console script's function on a pipe with no
    reader for each."""
    nulls = null_descriptors()
    stream = a_pipe_nobody_reads()
    try:
        result = console(["check", f"{modules}:{cls}", "--d-in", 32], stream)
    finally:
        with contextlib.suppress(OSError):
            stream.close()
    assert result.returncode == status and said(result.stderr) == "", result.stderr
    assert null_descriptors() == nulls  # what the stream still buffered went to the null device, left open by none
    if cls != "Unscaled":
        return
    python = f"{sys.executable} -m attnviz check {modules}:{cls} --d-in 32"
    result = in_a_shell(f"{python} | head -1")
    assert result.returncode == status, result.stderr
    assert result.stdout == f"{cls} from {modules}\n" and "Traceback" not in result.stderr, result.stderr
    # a reader gone before the first line: the same
    process = subprocess.Popen([*python.split()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.close()
    stderr = process.communicate(timeout=180)[1].decode()
    assert process.returncode == status and "Traceback" not in stderr, stderr


@pytest.mark.parametrize(("cls", "status"), [("Unscaled", 1), ("Attention", 0)])
def test_a_check_with_stdout_closed_keeps_its_exit_status(modules, cls, status):
    """``attnviz check … >&-`` (no standard output at all) exits with the check's own status and says nothing: the
    console script's function started without standard output for each, a real ``>&-`` for one."""
    result = console(["check", f"{modules}:{cls}", "--d-in", 32], None)
    assert result.returncode == status and said(result.stderr) == "", result.stderr
    if cls == "Attention":
        result = in_a_shell(f"{sys.executable} -m attnviz check {modules}:{cls} --d-in 32 >&-")
        assert result.returncode == status and said(result.stderr) == "", result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("cls", ["Unscaled", "Attention"])
def test_output_that_cannot_be_written_is_one_line_and_exit_2(modules, cls):
    """``attnviz check … > /dev/full`` says in one line on stderr that the output cannot be written, and exits 2: the
    console script's function writing to /dev/full for each, a real ``> /dev/full`` for one."""
    with open("/dev/full", "w") as full:
        result = console(["check", f"{modules}:{cls}", "--d-in", 32], full)
    assert result.returncode == 2, result.stderr
    assert said(result.stderr) == "attnviz: cannot write the output: No space left on device\n", result.stderr
    if cls == "Unscaled":
        result = in_a_shell(f"{sys.executable} -m attnviz check {modules}:{cls} --d-in 32 > /dev/full")
        assert result.returncode == 2, result.stderr
        assert said(result.stderr) == "attnviz: cannot write the output: No space left on device\n", result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_output_that_fails_inside_a_forward_that_prints_is_not_the_forwards_error(tmp_path):
    """A forward that prints (and swallows what its print raises, as ``except Exception`` does) when standard output
    cannot be written: the command stops with its one line, not with a check that goes on as if nothing happened."""
    path = tmp_path / "chatty.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Chatty(nn.Module):
            def __init__(self, d_in=16):
                super().__init__()
                self.proj = nn.Linear(d_in, d_in)

            def forward(self, x):
                try:
                    print("forward", tuple(x.shape), flush=True)
                except Exception:
                    pass
                scores = self.proj(x) @ x.transpose(1, 2) / x.shape[-1] ** 0.5  # (b, n, n)
                mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)  # (n, n)
                return torch.softmax(scores.masked_fill(mask, -torch.inf), dim=-1) @ x  # (b, n, d)
    """))
    with open("/dev/full", "w") as full:
        result = console(["check", f"{path}:Chatty", "--d-in", 16], full)
    assert result.returncode == 2, result.stderr
    assert said(result.stderr) == "attnviz: cannot write the output: No space left on device\n", result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_train_with_stdout_closed_or_full_trains_or_says_why_not(tmp_path):
    """``attnviz train … >&-`` trains, writes the checkpoint and exits 0; ``> /dev/full`` says in one line that the
    output cannot be written, and exits 2."""
    train = shlex.join([sys.executable, "-m", "attnviz", "train", "--steps", "2", "--threads", "1", *TINY_TRAINING])
    closed = in_a_shell(f"{train} --out {tmp_path / 'closed'} >&-")
    assert closed.returncode == 0 and closed.stderr == "", closed.stderr
    assert (tmp_path / "closed" / "model.safetensors").exists()
    full = in_a_shell(f"{train} --out {tmp_path / 'full'} > /dev/full")
    assert full.returncode == 2, full.stderr
    assert full.stderr == "attnviz: cannot write the output: No space left on device\n", full.stderr


# ---------------------------------------------------------------- today's attention and the KV cache

USER_MODULES = ROOT / "tests" / "helpers" / "user_modules.py"  # plain nn.Modules, written as a learner writes them


@pytest.mark.parametrize(("cls", "flags", "words"), [
    ("LearnerGQA", ["--num-kv-groups", 2], "the hidden cells are exactly the future"),
    ("LearnerGQA", ["--num-kv-groups", 1], "the hidden cells are exactly the future"),  # multi-query
    ("LearnerMLA", ["--latent-dim", 8], "the hidden cells are exactly the future"),
    ("LearnerSWA", ["--window", 3], "sliding window W = 3"),
    ("LearnerRotaryGQA", ["--num-kv-groups", 2, "--set", "rope_base=500000"], "the hidden cells are exactly"),
    ("LearnerGQAWithSDPA", ["--num-kv-groups", 2, "--set", "rotary=true"], "the hidden cells are exactly"),
    ("LearnerCachedMHA", [], "kv-cache PASS two sequences, each after reset_cache()"),
    # forward(x, use_cache=True): the uncached forwards cached too, and causal failed on the grown cache
    ("CachesByDefault", ["--num-kv-groups", 2], "kv-cache PASS two sequences, each after reset_cache()"),
], ids=["gqa", "mqa", "mla", "swa", "gqa-rotary", "gqa-sdpa-rotary", "cached", "caches-by-default"])
def test_todays_attention_written_by_a_learner_passes(cls, flags, words):
    result = check(f"{USER_MODULES}:{cls}", "--d-in", 32, "--num-heads", 4, *flags)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ALL_PASS in result.stdout and words in " ".join(result.stdout.split())


def test_the_flags_reach_the_constructor():
    """A window of 2 is what the table reports, and a window the module does not have is not."""
    result = check(f"{USER_MODULES}:LearnerSWA", "--d-in", 32, "--window", 2)
    assert result.returncode == 0 and "sliding window W = 2" in result.stdout


@pytest.mark.parametrize(("bug", "words"), [
    ("position-never-advances", "the position never advances"),
    ("reset-forgets-position", "the reset forgets the position"),
    ("keeps-too-little", "the cache keeps too little"),
])
def test_each_cache_bug_fails_the_kv_cache_rule(bug, words):
    result = check(f"{USER_MODULES}:LearnerCachedMHA", "--d-in", 32, "--set", f"bug={bug}")
    assert result.returncode == 1
    assert "kv-cache            FAIL" in result.stdout and words in " ".join(result.stdout.split())


def test_a_forward_that_raises_inside_a_rule_exits_2_naming_the_rule():
    result = check(f"{USER_MODULES}:MyMultiHeadAttention", "--d-in", 32, "--dropout", 0.1,
                   "--set", "bug=dropout-mask-shape")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("attnviz check: the forward raised RuntimeError (user_modules.py, line ")
    assert result.stderr.rstrip().endswith("(while checking dropout-placement)")


def test_a_window_off_by_one_fails_mask_convention():
    result = check(f"{USER_MODULES}:LearnerSWA", "--d-in", 32, "--window", 3, "--set", "bug=window-off-by-one")
    assert result.returncode == 1 and "mask-convention     FAIL" in result.stdout


@pytest.mark.parametrize(("args", "message", "status"), [
    (["--set", "vocab=3"], "LearnerGQA() takes no argument vocab", 2),
    (["--set", "vocab"], "write NAME=VALUE", 2),
    (["--num-kv-groups", 0], "--num-kv-groups must be at least 1", 2),
    (["--num-kv-groups", 3], "3 K/V groups do not divide 4 heads", 2),  # said before the class is built
])
def test_bad_variant_settings_exit_2_with_one_line(args, message, status):
    result = check(f"{USER_MODULES}:LearnerGQA", "--d-in", 32, *args)
    assert result.returncode == status and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("options", "message"), [
    (["--d-in", "0"], "--d-in must be at least 1, got 0"),  # checked before the tracer builds anything
    (["--d-out", "0"], "--d-out must be at least 1, got 0"),
    (["--num-heads", "-1"], "--num-heads must be at least 1, got -1"),
    (["--context-length", "0"], "--context-length must be at least 1, got 0"),
    (["--tokens", "-1"], "--tokens must be at least 1, got -1"),
    (["--tokens", "0"], "--tokens must be at least 1, got 0"),
    (["--dropout", "2"], "--dropout is a probability"),  # refused, not run
    (["--dropout", "nan"], "--dropout is a probability"),
    # AttentionConfig's own limits, checked before the user's class allocates anything
    (["--context-length", "99999999"], f"--context-length must be between 1 and {MAX_CONTEXT_LENGTH}, got 99999999"),
    (["--d-in", str(MAX_DIM + 1)], f"--d-in must be between 1 and {MAX_DIM}, got {MAX_DIM + 1}"),
    (["--d-out", str(MAX_DIM + 1)], f"--d-out must be between 1 and {MAX_DIM}, got {MAX_DIM + 1}"),
    (["--num-heads", str(MAX_HEADS + 1)], f"--num-heads must be between 1 and {MAX_HEADS}, got {MAX_HEADS + 1}"),
    (["--num-kv-groups", str(MAX_HEADS + 1)], f"--num-kv-groups must be between 1 and {MAX_HEADS}"),
    (["--latent-dim", str(MAX_DIM + 1)], f"--latent-dim must be between 1 and {MAX_DIM}"),
    (["--window", str(MAX_CONTEXT_LENGTH + 1)], f"--window must be between 1 and {MAX_CONTEXT_LENGTH}"),
])
def test_a_bad_size_exits_2_with_its_usage(modules, options, message):
    result = check(f"{modules}:Attention", *options)
    assert result.returncode == 2 and message in result.stderr and "usage: attnviz check" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_window_past_the_longest_context_points_to_set_and_a_window_the_check_reaches():
    result = check(f"{USER_MODULES}:LearnerSWA", "--d-in", 32, "--window", 4096)
    assert result.returncode == 2 and f"--window must be between 1 and {MAX_CONTEXT_LENGTH}, got 4096" in result.stderr
    assert "--set sliding_window_size=4096" in result.stderr and "--window 64 or less" in result.stderr


def test_a_wide_window_set_by_name_passes_with_advice_the_cli_can_follow():
    result = check(f"{USER_MODULES}:LearnerSWA", "--d-in", 32, "--set", "sliding_window_size=4096")
    words = " ".join(result.stdout.split())  # the table wraps its lines
    assert result.returncode == 0 and "window of 4096 was not exercised" in words
    assert "check 4098 tokens" not in words.replace(",", "") and "window of 64 or less" in words


@pytest.mark.parametrize(("source", "spec", "message"), [
    ("import sys\nsys.exit(3)\n", "A", "called sys.exit(3) on import"),  # named, not a silent exit 3
    ("import sys\nsys.exit('bye')\n", "A", "called sys.exit('bye') on import"),  # exit 2, not 1 ("a rule fails")
    ("from torch import nn\n\n\nclass Quits(nn.Module):\n    def __init__(self, d_in):\n"
     "        super().__init__()\n        raise SystemExit(0)\n", "Quits", "Quits(d_in=64) called sys.exit(0)"),
])
def test_sys_exit_in_the_users_file_exits_2_naming_it(tmp_path, source, spec, message):
    path = tmp_path / "user.py"
    path.write_text(source)
    result = check(f"{path}:{spec}")
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_sys_exit_in_the_forward_exits_2_naming_it():
    result = check(f"{ROOT / 'tests/helpers/user_modules.py'}:ExitsInForward", "--d-in", 16)
    assert result.returncode == 2, result
    assert "the forward called sys.exit(1)" in result.stderr and result.stdout == ""


def test_a_forward_that_never_returns_exits_2_in_one_line(monkeypatch):
    """A learner's ``while`` loop that never ends: stopped after the limit (lowered here from a minute), one line."""
    # the file's import, the constructor and the width probe run under the limit too: 1.5 s leaves them room on a
    # loaded machine (under 0.5 s the import of the test modules' file was what the limit stopped)
    monkeypatch.setattr(time_limit, "SECONDS", 1.5)
    result = check(f"{USER_MODULES}:EndlessLoop", "--d-in", 16)
    assert result.returncode == 2, result
    assert result.stderr == "attnviz check: EndlessLoop.forward ran for 1.5 s without returning (an endless loop?)\n"
    assert result.stdout == ""
    monkeypatch.setattr(time_limit, "SECONDS", 60.0)
    assert check(f"{USER_MODULES}:MyMultiHeadAttention", "--d-in", 16).returncode == 0  # the next check runs


def test_nan_after_the_attention_exits_2_instead_of_passing():
    result = check(f"{ROOT / 'tests/helpers/user_modules.py'}:NaNAfterAttention", "--d-in", 16, "--context-length", 16)
    assert result.returncode == 2 and "the NaN comes after the attention" in result.stderr


def test_a_float64_module_is_checked_on_its_dtype(tmp_path):
    """A class that converts itself to float64 is checked on float64 input: exit 0, not torch's "expected m1 and m2
    to have the same dtype"."""
    path = tmp_path / "double.py"
    path.write_text(MODULES + "\n\nclass Double(Attention):\n"
                    "    def __init__(self, d_in, d_out, num_heads, context_length):\n"
                    "        super().__init__(d_in, d_out, num_heads, context_length)\n        self.double()\n")
    result = check(f"{path}:Double", "--d-in", 32)
    assert result.returncode == 0, result.stderr


def test_a_folder_is_named_as_a_folder(tmp_path):
    (tmp_path / "attention.py").mkdir()
    result = check(f"{tmp_path / 'attention.py'}:A")
    assert result.returncode == 2 and "is a folder: name the .py file" in result.stderr


@ctrl_c_reaches
def test_an_interrupt_is_one_line_with_status_130(tmp_path, monkeypatch, capsys):
    """Ctrl-C in the user's code (here a SIGINT the test sends the process while the file's import loops) prints no
    traceback.  ``console`` is what the console script and ``python -m attnviz`` run; a real process gets a real
    Ctrl-C in the test of the rules' lines.  A KeyboardInterrupt the file raises itself is its own exception (exit 2,
    one line), and a SIGINT it sends its own process is a call that would end it (``signal.raise_signal``:
    tests/test_exit_guard.py)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    path, looping = tmp_path / "slow.py", tmp_path / "looping"
    path.write_text(f"import pathlib\n\npathlib.Path({str(looping)!r}).touch()\nwhile True:\n    pass\n")
    monkeypatch.setattr(sys, "argv", ["attnviz", "check", f"{path}:A"])
    stop = threading.Event()

    def ctrl_c():  # from outside the user's code, once its import says it loops
        deadline = time.monotonic() + 60
        while not looping.exists() and time.monotonic() < deadline and not stop.wait(0.01):
            pass
        if looping.exists() and not stop.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=ctrl_c, daemon=True)
    sender.start()
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.console()
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped attnviz's console script")
    finally:
        stop.set()
        sender.join()
    stderr = capsys.readouterr().err
    assert exit_.value.code == 130 and stderr == "\nattnviz: interrupted\n"


@pytest.mark.parametrize(("options", "message"), [
    (["--threads", "0"], "--threads must be at least 1, got 0"),  # checked before torch sees it
    (["--seed", "-1"], "--seed must be at least 0, got -1"),  # checked before numpy sees it
    (["--set", "batch_size=0"], "batch_size must be a whole number of at least 1, got 0"),
    (["--set", "lr=-1"], "lr must be a number of at least 0"),  # checked before the optimiser sees it
    (["--set", "n_heads=3"], "emb_dim (128) must be a multiple of n_heads (3)"),
])
def test_a_bad_train_option_exits_2_before_training(tmp_path, options, message, capsys):
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--out", str(out), "--steps", "2", *options])
    stderr = capsys.readouterr().err
    assert exit_.value.code == 2 and message in stderr and "usage: attnviz train" in stderr
    assert not out.exists()  # nothing written


@pytest.mark.parametrize(("options", "message"), [
    (["--set", "repeat_lengths=\"x\""], "repeat_lengths must be a list of whole numbers, got 'x'"),  # TypeError
    (["--set", "repeat_lengths=[0]"],  # ValueError "repeat length T must be ≥ 1"
     "each of repeat_lengths must be from 17 (BOS and x x, |x| = min_repeat (8)) to seq_len (128), got 0"),
    (["--set", "repeat_lengths=[24, 200]"], "to seq_len (128), got 200"),
    (["--set", "seq_len=1"], "seq_len must be at least 17 (BOS and x x, |x| = min_repeat (8)), got 1"),
    (["--set", "seq_len=2"], "seq_len must be at least 17"),
    (["--set", "seq_len=16"], "seq_len must be at least 17"),  # ValueError "high - low < 0" in repeat_batch
    (["--set", "seq_len=4", "--set", "bos=false", "--set", "min_repeat=3"],
     "seq_len must be at least 6 (x x, |x| = min_repeat (3)), got 4"),
    (["--set", "bos={}"], "bos must be true or false, got {}"),  # TypeError
    (["--set", "qkv_bias=\"no\""], "qkv_bias must be true or false, got 'no'"),  # ValueError from gpt.check_config
    (["--set", "lr=Infinity"], "lr must be a finite number, got inf"),  # trained to loss nan and exited 0
    (["--set", "weight_decay=Infinity"], "weight_decay must be a finite number, got inf"),
])
def test_a_train_setting_of_the_wrong_type_or_range_is_a_usage_error(tmp_path, options, message, capsys):
    """A setting of the wrong type or out of range (lr=Infinity included) is a usage error naming it (exit 2): no
    traceback, and no checkpoint written."""
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--out", str(out), "--steps", "2", *options])
    stderr = capsys.readouterr().err
    assert exit_.value.code == 2 and "usage: attnviz train" in stderr and message in stderr, stderr
    assert "Traceback" not in stderr and not out.exists()


def test_train_config_validate_names_what_each_field_must_be():
    from attnviz.labs.train import TrainConfig

    # the least: [BOS] + x x, |x| = min_repeat
    assert TrainConfig(seq_len=3, min_repeat=1, max_repeat=1, repeat_lengths=(3,)).validate().seq_len == 3
    assert TrainConfig(seq_len=17, repeat_lengths=[17]).validate().seq_len == 17
    assert TrainConfig(seq_len=2, bos=False, min_repeat=1, repeat_lengths=[2]).validate().bos is False
    for field, value in (("repeat_lengths", (2.5,)), ("repeat_lengths", (True,)), ("predictable_only", 1),
                         ("tie_embeddings", None), ("drop_rate", float("nan")), ("embedding_std", float("inf"))):
        with pytest.raises(ValueError, match=field):
            TrainConfig(**{field: value}).validate()


@pytest.mark.parametrize(("out", "message"), [
    ("", "--out must name a folder"),  # not the current folder
    ("{file}", "a file is there; name a folder"),  # refused before training
    ("{file}/sub", "cannot make the folder"),
])
def test_a_bad_out_exits_2_before_training(tmp_path, out, message, capsys):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--out", out.format(file=file), "--steps", "2"])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert file.read_text() == "mine"


TINY_TRAINING = ["--set=n_layers=1", "--set=n_heads=2", "--set=emb_dim=16", "--set=context_length=64",
                 "--set=seq_len=48", "--set=batch_size=4", "--set=negatives=32", "--set=min_repeat=4",
                 "--set=max_repeat=20", "--set=repeat_lengths=[24, 48]"]


@pytest.mark.usefixtures("several_torch_threads")
def test_threads_beyond_the_cpus_are_capped_with_a_note_and_one_step_is_one_step(tmp_path, monkeypatch, capsys):
    """--threads 999 on a 2-core machine uses 2 threads and says so on stderr, and the last line says "(1 step, …)",
    not "(1 steps, …)"."""
    import torch

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert cli.main(["train", "--out", str(tmp_path / "m"), "--steps", "1", "--threads", "999", "--quiet",
                     *TINY_TRAINING]) == 0
    captured = capsys.readouterr()
    assert captured.err == "attnviz train: --threads 999 is more than this machine's 2 CPUs: using 2\n"
    assert torch.get_num_threads() == 2
    assert re.fullmatch(rf"wrote {re.escape(str(tmp_path / 'm'))} \(1 step, \d+ s\)\n", captured.out), captured.out


@pytest.mark.usefixtures("several_torch_threads")
def test_the_default_threads_fit_a_one_core_machine_without_a_note(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert cli.main(["train", "--out", str(tmp_path / "m"), "--steps", "2", "--quiet", *TINY_TRAINING]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "(2 steps, " in captured.out
    assert torch.get_num_threads() == 1


def test_train_step_lines_say_about_how_long_is_left(tmp_path, capsys):
    """`attnviz train` prints a loss line every probe_every steps; a line after the first few steps says about how
    long is left, as the Train page's progress bar does, and the last line (nothing left) does not."""
    assert cli.main(["train", "--out", str(tmp_path / "m"), "--steps", "12", "--threads", "1",
                     "--set=probe_every=4", *TINY_TRAINING]) == 0
    lines = capsys.readouterr().out.splitlines()
    steps = {int(line.split()[1]): line for line in lines if line.startswith("step ")}
    assert sorted(steps) == [0, 4, 8, 11]
    assert re.fullmatch(r"step     8  loss \d+\.\d{3}  induction \d\.\d\d  previous-token \d\.\d\d  "
                        r"about \d+ s left", steps[8]), steps[8]
    # 1 and 5 steps done are too few for a pace; after the last step nothing is left
    assert not [step for step in (0, 4, 11) if "left" in steps[step]], lines


def test_the_time_left_leaves_out_the_warm_up_steps():
    """A first step of 13 s (imports, the first probe) then 0.2 s a step: the estimate is the latest pace's."""
    from attnviz.labs.live_train import seconds_left_recent

    steps = list(range(50))
    seconds = [13.0 + 0.2 * step for step in steps]
    assert seconds_left_recent(steps, seconds, 1000) == pytest.approx(0.2 * 950)  # not 13.2 s / 50 steps × 950
    assert seconds_left_recent(steps[:4], seconds[:4], 1000) is None  # too few steps past the warm-up
    assert seconds_left_recent(steps, seconds, 50) is None and seconds_left_recent(steps, seconds, None) is None


def test_version_prints_the_packages_version(capsys):
    import attnviz

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])  # no command needed
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"attnviz {attnviz.__version__}\n"
    assert "version" not in project or project["version"] == attnviz.__version__  # one version, the package's
    assert "version" in project.get("dynamic", ["version"])


def test_train_config_validate_accepts_the_recipe():
    from attnviz.labs.train import TrainConfig

    assert TrainConfig().validate() == TrainConfig()
    with pytest.raises(ValueError, match="seq_len"):
        TrainConfig(seq_len=300).validate()


# ---------------------------------------------------------------- a slow module: how far the check is

@ctrl_c_reaches
def test_each_rules_line_is_printed_as_soon_as_the_rule_is_done_and_ctrl_c_keeps_them(modules):
    """The kv-cache rule's cached forward pauses for a minute: the eight lines before it are on the screen while it
    runs, and Ctrl-C stops it in one line."""
    command = [sys.executable, "-m", "attnviz", "check", f"{modules}:PausesInTheCache", "--d-in", "32"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in iter(process.stdout.readline, "")],
                     daemon=True).start()
    seen = []
    try:
        deadline = time.monotonic() + 45
        while not any(line.startswith("matches-reference") for line in seen):
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))  # queue.Empty: nothing came
        assert process.poll() is None  # still in kv-cache's first cached forward
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        process.kill()
        process.wait()
    stderr = process.stderr.read()
    assert "attnviz: interrupted" in stderr and "Traceback" not in stderr
    rules = [line.split()[0] for line in seen if line[:1].isalpha()]
    assert rules == ["PausesInTheCache", *checks.RULES[:-1]]  # the title, then every rule before kv-cache
    assert all(" PASS " in line or line.startswith("rotary-placement    skip  not rotary") for line in seen
               if line.split()[:1] and line.split()[0] in checks.RULES)


def test_a_slow_check_says_how_long_it_will_take_once_the_pace_is_known(monkeypatch):
    """A module that sleeps 50 ms a forward, with the notice's threshold at 0.1 s: it comes once causal's first three
    forwards are timed, before causal's line; a fast module's check says nothing of the kind."""
    monkeypatch.setattr(checks, "SLOW_CHECK_SECONDS", 0.1)
    result = check(f"{USER_MODULES}:SleepyAttention", "--d-in", 16, "--set", "pause=0.05")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"attnviz check: one forward takes 0\.\d+ s after the traced one and the rules run up to 11 "
                        r"forwards: about \d s in all \(Ctrl-C stops it\)\n", result.stderr), result.stderr
    monkeypatch.setattr(checks, "SLOW_CHECK_SECONDS", 5.0)
    fast = check(f"{USER_MODULES}:SleepyAttention", "--d-in", 16, "--set", "pause=0")
    assert fast.returncode == 0 and fast.stderr == ""


def test_on_a_terminal_a_status_line_names_the_rule_running_and_is_cleared_for_each_result():
    out, err = io.StringIO(), io.StringIO()
    report = cli.CheckReport("MyMultiHeadAttention from my_attention.py", 18, 5.0, out=out, err=err, live=True)
    module = um.MyMultiHeadAttention().eval()
    results = checks.check_module(module, progress=report)
    report.finish(results)
    assert out.getvalue() == f"MyMultiHeadAttention from my_attention.py\n\n{check_table(results)}\n"
    status = err.getvalue()
    assert "\r\x1b[Ktracing the forward: forward 1 of 11" in status
    assert f"\r\x1b[Kcausal ({place('causal')}): forward 2 of 11\r" in status  # no pace yet: no time left
    assert re.search(rf"\r\x1b\[Kcausal \({place('causal')}\): forward 5 of 11, about \d+ s left", status)
    assert f"batch-independence ({place('batch-independence')}): forward 11 of 11" in status
    assert status.endswith("\r\x1b[K")  # cleared


def test_a_flag_the_constructor_does_not_take_is_named_on_stderr_and_the_exit_is_unchanged():
    """--latent-dim, --d-out and --window on nanoGPT's class (which takes none of them) passed without a word."""
    helpers = ROOT / "tests" / "helpers" / "user_modules.py"
    result = check(f"{helpers}:CausalSelfAttention", "--d-in", 32, "--latent-dim", 8, "--d-out", 32, "--window", 3)
    assert result.returncode == check(f"{helpers}:CausalSelfAttention", "--d-in", 32).returncode == 0
    assert result.stderr.splitlines() == [
        "attnviz check: --d-out 32 not used: CausalSelfAttention() takes no d_out argument (d_out, out_dim, "
        "output_dim or out_features)",
        "attnviz check: --latent-dim 8 not used: CausalSelfAttention() takes no latent_dim argument (latent_dim, "
        "kv_lora_rank or kv_latent_dim)",
        "attnviz check: --window 3 not used: CausalSelfAttention() takes no window argument (sliding_window_size, "
        "sliding_window, window_size or attention_window)",
    ]


def test_num_kv_groups_on_a_plain_mha_and_a_flag_set_aside_by_set_are_named():
    helpers = ROOT / "tests" / "helpers" / "user_modules.py"
    result = check(f"{helpers}:TorchMHA", "--d-in", 32, "--num-kv-groups", 2)
    assert result.returncode == 0
    assert result.stderr == ("attnviz check: --num-kv-groups 2 not used: TorchMHA() takes no num_kv_groups argument "
                             "(num_kv_groups, n_kv_groups, num_key_value_heads, n_kv_heads, num_kv_heads or "
                             "n_kv_head)\n")
    result = check(f"{helpers}:CausalSelfAttention", "--d-in", 32, "--num-heads", 8, "--set", "n_head=2")
    assert result.returncode == 0
    assert result.stderr == ("attnviz check: --num-heads 8 not used: --set n_head=2 gives CausalSelfAttention()'s "
                             "n_head\n")


def test_flags_the_constructor_takes_print_nothing(modules):
    result = check(f"{modules}:Attention", "--d-in", 32, "--d-out", 32, "--num-heads", 2, "--dropout", 0.1)
    assert result.returncode == 0 and "not used" not in result.stderr, result.stderr  # (a busy machine: "slow")

# ---------------------------------------------------------------- an engineer's own files: what reaches the constructor

BESIDE = textwrap.dedent('''
    import torch
    from torch import nn


    class Base(nn.Module):
        def __init__(self, d_in=64, num_heads=4, context_length=64, dropout=0.0, bias=True):
            super().__init__()
            assert d_in % num_heads == 0
            self.num_heads, self.head_dim = num_heads, d_in // num_heads
            self.qkv = nn.Linear(d_in, 3 * d_in, bias=bias)
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(-2, -1)) / self.head_dim ** 0.5
            scores = scores.masked_fill(self.mask.bool()[:n, :n], float("-inf"))
            return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, d)
''')

USES_BESIDE = textwrap.dedent('''
    from base_beside import Base


    class Kw(Base):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
''')


@pytest.fixture
def beside(tmp_path, monkeypatch):
    """mine.py importing base_beside.py from its own folder; the check runs from another folder."""
    (tmp_path / "base_beside.py").write_text(BESIDE)
    (tmp_path / "mine.py").write_text(USES_BESIDE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return tmp_path


def test_a_file_that_imports_a_module_beside_it_is_checked_from_another_folder(beside):
    result = check(f"{beside}/mine.py:Base")
    assert result.returncode == 0, result.stderr
    assert ALL_PASS in result.stdout


def built_modules(monkeypatch) -> list:
    """The modules ``attnviz check`` checks, as they are built."""
    built, check_module = [], checks.check_module
    monkeypatch.setattr(checks, "check_module", lambda module, x, **kw: built.append(module) or check_module(
        module, x, **kw))
    return built


def test_a_bias_default_of_the_constructor_wins_and_set_changes_it(beside, monkeypatch):
    """The CLI built nanoGPT-style classes with bias=False, their default True notwithstanding."""
    built = built_modules(monkeypatch)
    assert check(f"{beside}/mine.py:Base", "--d-in", 32).returncode == 0
    assert check(f"{beside}/mine.py:Base", "--d-in", 32, "--set", "bias=false").returncode == 0
    assert built[0].qkv.bias is not None and built[1].qkv.bias is None
    assert "bias only with --set bias=... (the class's own default otherwise)" in help_text("check")

def test_a_kwargs_constructor_gets_the_flags_given_and_says_so(beside, monkeypatch):
    """``Kw(**kwargs)`` gets --d-in 32 --num-heads 2 as d_in=32, num_heads=2, and stderr says so; with no flag
    given, its own defaults and nothing said."""
    built = built_modules(monkeypatch)
    result = check(f"{beside}/mine.py:Kw", "--d-in", 32, "--num-heads", 2)
    assert result.returncode == 0, result.stderr
    assert (built[0].qkv.in_features, built[0].num_heads) == (32, 2)
    assert result.stderr == ("attnviz check: Kw() takes **kwargs: passed d_in=32, num_heads=2 to it (the flags "
                             "given, by attnviz's names; --set NAME=VALUE passes other names)\n")
    result = check(f"{beside}/mine.py:Kw")
    assert result.returncode == 0 and result.stderr == ""  # no flag given: the class's own defaults



def test_a_class_without_a_constructor_is_built_with_none_and_the_flags_say_what_they_did():
    """WeightlessScaled keeps nn.Module's own ``__init__(self, *args, **kwargs)``: it is built with no arguments, not
    as ``WeightlessScaled(d_in=16)`` (which nn.Module refuses), and the note says which flags it did not use and that
    --d-in sizes only the checked input; with no flag given, no note."""
    result = check(f"{USER_MODULES}:WeightlessScaled", "--d-in", 16)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("attnviz check: WeightlessScaled() takes no arguments, so it is built with none: "
                             "--d-in 16 sizes only the checked input\n")
    assert "All 9 rules pass" in result.stdout
    result = check(f"{USER_MODULES}:WeightlessScaled", "--d-in", 16, "--num-heads", 2, "--dropout", 0.1)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("attnviz check: WeightlessScaled() takes no arguments, so it is built with none: "
                             "--num-heads 2, --dropout 0.1 not used; --d-in 16 sizes only the checked input\n")
    result = check(f"{USER_MODULES}:WeightlessScaled")
    assert result.returncode == 0 and result.stderr == ""  # no flag given: nothing to say

def test_a_failed_assert_and_a_file_that_is_not_python_say_so(beside):
    result = check(f"{beside}/mine.py:Base", "--num-heads", 3)
    assert result.returncode == 2
    assert result.stderr == ("attnviz check: Base(num_heads=3) failed an assertion (base_beside.py, line 9): "
                             "assert d_in % num_heads == 0\n")  # d_in=64 and the rest: Base's own defaults
    (beside / "config.json").write_text('{"n_embd": 64, "bias": false}\n')
    result = check(f"{beside}/config.json:X")
    assert result.returncode == 2 and "config.json is not a Python file (JSON)" in result.stderr


@pytest.mark.parametrize(("written", "passed"), [("False", False), ("True", True), ("None", None), ("false", False),
                                                 ("(1, 2)", (1, 2)), ("'text'", "text"), ("fast", "fast")])
def test_set_reads_python_literals_as_the_docs_write_them(written, passed):
    """``--set renormalise=False`` passed the string "False" (true in Python): the check ran another module."""
    assert cli.constructor_overrides([f"x={written}"], cli.parser()) == {"x": passed}


def test_set_false_checks_the_module_asked_for():
    path = Path(um.__file__)
    result = check(f"{path}:MaskAfterSoftmax", "--set", "renormalise=False")
    assert result.returncode == 1 and rules_fail(4) in result.stdout


# ---------------------------------------------------------------- a class's own size defaults

OWN_DEFAULTS = ROOT / "tests" / "helpers" / "own_defaults.py"


def test_a_class_is_built_with_its_own_size_defaults_unless_a_flag_is_typed(monkeypatch):
    """``LlamaGQA(d_in=64, num_heads=8, num_kv_groups=2)`` checked without --num-heads is built with its own 8 heads,
    and the kv-cache rule is told 8 (``sizes``), not attnviz's 4; the flags typed set the sizes they name."""
    built, told = [], []
    check_module = checks.check_module
    monkeypatch.setattr(checks, "check_module", lambda module, x, **kw: built.append(module) or told.append(
        kw["sizes"]) or check_module(module, x, **kw))
    result = check(f"{OWN_DEFAULTS}:LlamaGQA")
    assert result.returncode == 0 and "not used" not in result.stderr, result.stderr  # (a busy machine: "slow")
    assert (built[0].num_heads, built[0].W_key.out_features) == (8, 16)
    assert told[0] == {"d_in": 64, "num_heads": 8, "num_kv_groups": 2}
    assert check(f"{OWN_DEFAULTS}:LlamaGQA", "--num-heads", 4, "--d-in", 32).returncode == 0
    assert (built[1].num_heads, built[1].W_query.in_features, built[1].W_key.out_features) == (4, 32, 16)
    assert told[1] == {"d_in": 32, "num_heads": 4, "num_kv_groups": 2}


def test_the_checked_input_is_as_wide_and_as_long_as_the_class_was_built():
    """A class that says neither its width nor its context is built with its own n_embd=48 and block_size=16, not
    attnviz's 64: the input is 48 wide (``--d-in`` not given) and at most 16 tokens long, and --tokens 20 is cut to
    16 with a note."""
    result = check(f"{OWN_DEFAULTS}:FusedWidth48")
    assert result.returncode == 0, result.stderr
    assert ALL_PASS in result.stdout and "tokens" not in result.stderr
    result = check(f"{OWN_DEFAULTS}:FusedWidth48", "--tokens", 20)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (  # then, on a busy machine, that the check is slow
        "attnviz check: --tokens 20 is more than the context the class was built with, 16 (its own default "
        "block_size=16; --context-length sets another): checking 16 tokens")
    assert check(f"{OWN_DEFAULTS}:FusedWidth48", "--d-in", 32, "--context-length", 8, "--tokens", 8).returncode == 0


def test_check_help_says_a_size_flag_not_given_leaves_the_classs_default():
    text = " ".join(help_text("check").split())
    assert "--d-in N the input's width (default: the class's, else the width its forward's first Linear takes, " \
           "else 64)" in text
    for flag, words in (("--num-heads N", "the class's, else 4"), ("--context-length N", "the class's, else 64"),
                        ("--dropout P", "the class's, else 0"),
                        ("--d-out N", "--d-in when given, else the class's, else d_in")):
        assert f"{flag} default: {words}" in text
    assert "A size flag not given leaves an argument with a default at the class's own default" in text
