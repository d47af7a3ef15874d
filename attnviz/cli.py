"""The ``attnviz`` command line: one parser, one subcommand per job.

* ``attnviz check path/to/file.py:ClassName`` runs check_module's rules on a user's class and prints a table, a
  rule's line as soon as the rule is done (a check that will take long says so on stderr first; on a terminal a
  status line on stderr names the rule running).  The class is built after ``torch.manual_seed(123)`` (the app's
  default seed; ``--seed`` gives another), so the table is the same on every run.  Exit status: 0 no rule fails
  (skips included), 1 a rule fails, 2 the file or class cannot be loaded, built or run (one line on stderr, no
  traceback) — so a learner can put it in their own CI.
* ``attnviz train --out DIR`` trains a small ``GPTModel`` (:mod:`attnviz.labs.train`), printing each probe's loss
  and head scores with the time left as the Train page estimates it, and writes a checkpoint that
  ``attnviz.models.load_checkpoint`` and the app's Weights menu read.

``python -m attnviz …`` is the same command; ``--version`` prints the package's version.  A reader that stops early
(``| head``) or a closed standard output stops only the printing, not the command or its exit status; an output that
cannot be written (a full disk) is one line on stderr and exit 2 (:class:`Output`).  Arguments are parsed
before torch is imported, so ``--help`` and a mistyped option answer at once; sizes are then held to
``AttentionConfig``'s limits (:mod:`attnviz.config`), a usage error like any other bad argument.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import shutil
import sys
import textwrap
import time

from attnviz import __version__, time_limit
from attnviz.words import amount

PROG = "attnviz"
DEFAULT_D_IN = DEFAULT_CONTEXT_LENGTH = 64  # attnviz check's sizes when --d-in / --context-length are not given
# TrainConfig's steps and seed, which --help names without importing torch (tests/test_cli.py holds them equal)
RECIPE_STEPS, RECIPE_SEED = 4000, 0
DEFAULT_THREADS = 2  # attnviz train's torch threads when --threads is not given (fewer on a one-CPU machine)


def parser() -> argparse.ArgumentParser:
    """The whole command line: ``check`` and ``train`` as subcommands of one parser."""
    main = argparse.ArgumentParser(prog=PROG, description="See, check and train attention modules.")
    main.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = main.add_subparsers(dest="command", required=True, metavar="{check,train}")
    add_check_command(commands)
    add_train_command(commands)
    return main


CHECK_EPILOG = """\
examples:
  attnviz check my_attention.py:MultiHeadAttention
      the class with its own defaults, and attnviz's sizes for required ones
  attnviz check my_attention.py:MultiHeadAttention --d-in 32 --num-heads 4
      other sizes
  attnviz check my_attention.py:MultiHeadAttention --dropout 0.1
      dropout that drops something: the check sees where it acts
  attnviz check model.py:CausalSelfAttention --set bias=false
      any other constructor argument, by its own name
  attnviz check gqa.py:GroupedQueryAttention --num-kv-groups 2
      a variant's size: grouped-query attention with 2 K/V heads

sizes:
  Each size flag fills the constructor argument with one of its names:
    --d-in            d_in, embed_dim, n_embd, d_model …
    --d-out           d_out, out_dim …
    --num-heads       num_heads, n_head, n_heads …
    --context-length  context_length, block_size …
    --dropout         dropout, attn_pdrop …
    --num-kv-groups   num_kv_groups, num_key_value_heads, n_kv_heads …
    --latent-dim      latent_dim, kv_lora_rank, kv_latent_dim
    --window          sliding_window_size, sliding_window, window_size …
  A size flag not given leaves an argument with a default at the class's own
  default, and gives a required one attnviz's (the defaults above).
  bias/qkv_bias only with --set bias=... (the class's own default otherwise).
  The weights are drawn after torch.manual_seed(--seed, default 123).

config objects and **kwargs:
  A config/cfg parameter, alone or first (Hugging Face's (config,
  layer_idx=None)), gets an object with every spelling of a size as an
  attribute (n_embd, n_head, block_size …, Hugging Face's hidden_size,
  num_attention_heads, max_position_embeddings …), head_dim, and a variant
  size's spellings, n_kv_head, n_kv_heads, kv_lora_rank, sliding_window …,
  when the flag or --set gives them; --set sets those, or a name its
  constructor reads (rope_theta …); --set layer_idx=0 sets an argument.
  A constructor with **kwargs also gets the size flags given that none of
  its parameters names, by attnviz's names: d_in=32, num_heads=2 …

exit status:
  0  no rule fails (skips included)
  1  a rule fails
  2  the class cannot be loaded, built or run
"""


def add_check_command(commands) -> argparse.ArgumentParser:
    """``attnviz check``: build a user's class with these sizes and run every rule."""
    check = commands.add_parser(
        "check", help="check an attention class by rule", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build an attention class with the sizes below and run every rule of attnviz's\n"
                    "checker on a seeded input: a line per rule, PASS, FAIL or skip, and why.",
        epilog=CHECK_EPILOG)
    check.add_argument("spec", metavar="path/to/file.py:ClassName", help="the file and the class in it to check")
    # None: not given, so a constructor's own default wins (user_code.own_defaults); flag_notes reads them too
    check.add_argument("--d-in", type=int, default=None, metavar="N",
                       help=f"the input's width (default: the class's, else the width its forward's first Linear "
                            f"takes, else {DEFAULT_D_IN})")
    check.add_argument("--d-out", type=int, default=None, metavar="N",
                       help="default: --d-in when given, else the class's, else d_in")
    check.add_argument("--num-heads", type=int, default=None, metavar="N", help="default: the class's, else 4")
    check.add_argument("--context-length", type=int, default=None, metavar="N",
                       help=f"default: the class's, else {DEFAULT_CONTEXT_LENGTH}")
    check.add_argument("--dropout", type=float, default=None, metavar="P",
                       help="default: the class's, else 0 (which drops nothing)")
    check.add_argument("--seed", type=int, default=None, metavar="N",
                       help="the seed the weights are drawn after (default 123)")
    check.add_argument("--num-kv-groups", type=int, default=None, metavar="N",
                       help="grouped-query attention: K/V heads (1: multi-query)")
    check.add_argument("--latent-dim", type=int, default=None, metavar="N",
                       help="multi-head latent attention: the latent's width")
    check.add_argument("--window", type=int, default=None, dest="sliding_window_size", metavar="W",
                       help="sliding window: the keys a query sees, itself too")
    check.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="overrides",
                       help="a constructor argument by its own name, as JSON or a Python literal (true, False, 3, "
                            "[1, 2]; else text); repeatable")
    check.add_argument("--tokens", type=int, default=8, metavar="N", help="tokens in the checked input (default 8)")
    causal = check.add_mutually_exclusive_group()
    causal.add_argument("--causal", dest="causal", action="store_const", const=True, default=None,
                        help="the module should mask the future (default: inferred)")
    causal.add_argument("--no-causal", dest="causal", action="store_const", const=False,
                        help="the module should not mask the future")
    check.set_defaults(run=run_check, command_parser=check)
    return check


def add_train_command(commands) -> argparse.ArgumentParser:
    """``attnviz train``: train a small GPTModel with the bundled model's recipe and save it."""
    train = commands.add_parser(
        "train", help="train a small GPTModel and save a checkpoint",
        description="Train the book's GPTModel with the recipe that forms an induction head "
                    "(attnviz.labs.train.TrainConfig), then write model.safetensors, config.json and training.json.")
    train.add_argument("--out", required=True,
                       help="directory to write (model.safetensors, config.json, training.json)")
    train.add_argument("--steps", type=int, default=None,
                       help=f"training steps (default: the recipe's, {RECIPE_STEPS:,})")
    train.add_argument("--seed", type=int, default=None, help=f"random seed (default: the recipe's, {RECIPE_SEED})")
    train.add_argument("--threads", type=int, default=None,
                       help=f"torch threads, at most the machine's CPUs (default {DEFAULT_THREADS})")
    train.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a TrainConfig field (JSON value), e.g. --set batch_size=32 --set lr=0.003 "
                            "(not steps/seed: use --steps/--seed)")
    train.add_argument("--quiet", action="store_true", help="print only the final line")
    train.set_defaults(run=run_train, command_parser=train)
    return train


def rule_lines(check, rule_width: int, width: int | None = None) -> list[str]:
    """One rule's row: its id, PASS/FAIL/skip and the evidence wrapped to ``width`` (default: the terminal's)."""
    width = width or shutil.get_terminal_size((100, 20)).columns
    indent = rule_width + 2 + 4 + 2
    status = {"pass": "PASS", "fail": "FAIL", "skip": "skip"}[check.status]
    # a line breaks between words only: a flag (--no-causal), a rule (kv-cache) or a number (-1e+09) stays whole
    wrapped = textwrap.wrap(check.evidence, max(30, width - indent), break_on_hyphens=False) or [""]
    return [f"{check.rule:<{rule_width}}  {status}  {wrapped[0]}", *(" " * indent + more for more in wrapped[1:])]


def summary(checks) -> str:
    failed = sum(c.status == "fail" for c in checks)
    total = len(checks)
    return f"\n{failed} of {total} rules fail." if failed else f"\nAll {total} rules pass or do not apply."


class CheckReport:
    """``check_module``'s progress callback for the terminal: the title, then each rule's line as the rule is done
    (stdout, flushed); a check expected to take ``SLOW_CHECK_SECONDS`` or more says so once on stderr as soon as the
    pace is known (``Progress.pace``: the first ``PACED_FORWARDS`` of the rules' forwards, not the traced forward,
    which records every tensor); with ``live`` (stderr is a terminal) a status line on stderr names the rule running,
    rewritten in place and cleared before each rule's line.  ``causal``: ``--causal`` (True) or ``--no-causal``
    (False) given, which the evidence names after check_module's own words ("causal=False was given
    (--no-causal)")."""

    def __init__(self, title: str, rule_width: int, slow_seconds: float, *, out=None, err=None,
                 live: bool | None = None, causal: bool | None = None):
        self.title, self.rule_width, self.slow_seconds = title, rule_width, slow_seconds
        self.causal = causal
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.live = self.err.isatty() if live is None else live
        self.started = self.warned = self.status_shown = False

    def __call__(self, progress) -> None:
        left = progress.seconds_left
        if left is not None and not self.warned:
            self.warned = True
            notice = progress.slow_notice(threshold=self.slow_seconds)
            if notice is not None:
                self.clear()
                print(f"{PROG} check: {notice} (Ctrl-C stops it)", file=self.err, flush=True)
        if progress.check is not None:
            self.clear()
            if not self.started:
                print(f"{self.title}\n", file=self.out)
                self.started = True
            print("\n".join(rule_lines(self.with_flag(progress.check), self.rule_width)), file=self.out, flush=True)
        elif self.live:
            where = (f"{progress.rule} ({progress.rules_done + 1} of {progress.rules_total})" if progress.rule
                     else "tracing the forward")
            from attnviz.checks import duration  # imported already: check_module is calling

            when = f", about {duration(left)} left" if left is not None else ""
            self.err.write(f"\r\033[K{where}: forward {progress.forwards + 1} of {progress.forwards_planned}{when}")
            self.err.flush()
            self.status_shown = True

    def with_flag(self, check):
        """``check`` with the flag the causal argument came from named after it."""
        if self.causal is None:
            return check
        from dataclasses import replace

        from attnviz.checks import causal_given  # imported already: check_module is calling

        given = causal_given(self.causal)
        flag = "--causal" if self.causal else "--no-causal"
        return replace(check, evidence=check.evidence.replace(given, f"{given} ({flag})"))

    def clear(self) -> None:
        """Erase the status line (before anything else is printed)."""
        if self.status_shown:
            self.err.write("\r\033[K")
            self.err.flush()
            self.status_shown = False

    def finish(self, checks) -> None:
        self.clear()
        print(summary(checks), file=self.out, flush=True)


# after "--window must be between 1 and 1024, got 4096": what builds the class with it, and what checks its mask
WIDER_WINDOW = (": set the constructor's own argument, --set sliding_window_size={0} (or sliding_window={0}, its "
                "name for it), to build it with that window; the checked tokens never reach a key that far behind, "
                "so --window 64 or less checks the same masking code")


def run_check(args, parser: argparse.ArgumentParser) -> int:
    """Load, build and check the class; print the table; 0 pass, 1 a rule fails, 2 cannot run."""
    overrides = constructor_overrides(args.overrides, parser)
    for flag, value in (("--d-in", args.d_in), ("--d-out", args.d_out), ("--num-heads", args.num_heads),
                        ("--context-length", args.context_length), ("--tokens", args.tokens),
                        ("--num-kv-groups", args.num_kv_groups), ("--latent-dim", args.latent_dim),
                        ("--window", args.sliding_window_size)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    if args.dropout is not None and not 0 <= args.dropout < 1:  # NaN fails too
        parser.error(f"--dropout is a probability: a number from 0 up to (not including) 1, got {args.dropout}")
    from attnviz.config import MAX_CONTEXT_LENGTH, MAX_DIM, MAX_HEADS, MAX_SEED, AttentionConfig  # torch: parsed

    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed must be between 0 and {MAX_SEED}, got {args.seed}")

    # AttentionConfig's limits (--tokens is held to --context-length by checked_tokens)
    for flag, value, high in (("--d-in", args.d_in, MAX_DIM), ("--d-out", args.d_out, MAX_DIM),
                              ("--num-heads", args.num_heads, MAX_HEADS),
                              ("--context-length", args.context_length, MAX_CONTEXT_LENGTH),
                              ("--num-kv-groups", args.num_kv_groups, MAX_HEADS),
                              ("--latent-dim", args.latent_dim, MAX_DIM),
                              ("--window", args.sliding_window_size, MAX_CONTEXT_LENGTH)):
        if value is not None and value > high:
            wider = WIDER_WINDOW.format(value) if flag == "--window" else ""
            parser.error(f"{flag} must be between 1 and {high}, got {value}{wider}")
    from attnviz import checks, tracing, user_code  # torch: only once the arguments are good
    from attnviz.rng import seeded

    try:
        cls = user_code.load(args.spec)
        for line in flag_notes(args, cls, overrides):
            print(f"{PROG} check: {line}", file=sys.stderr)
        # the weights drawn after torch.manual_seed(--seed, default 123: the app's): the same table on every run
        with seeded(AttentionConfig.seed if args.seed is None else args.seed):
            settings = dict(d_in=args.d_in, d_out=args.d_out, num_heads=args.num_heads,
                            context_length=args.context_length, dropout=args.dropout,
                            num_kv_groups=args.num_kv_groups, latent_dim=args.latent_dim,
                            sliding_window_size=args.sliding_window_size)
            # what it is built with, its own defaults included: the kv-cache rule's sizes where the module keeps them
            # under other names, and the input's width and length where it does not say them
            arguments = user_code.constructor_arguments(cls, overrides, **settings)
            sizes = user_code.sizes_taken(arguments, cls)
            require_whole_groups(sizes)
            module = user_code.build(cls, overrides, **settings).eval()
            context_length, why = built_context(args.context_length, cls, arguments, sizes)
            tokens = checked_tokens(args.tokens, context_length, tracing.module_context(module), why)
            d_in, width = checked_width(args.d_in, sizes, module)
            x = checks.default_input(module, n=tokens, d_in=d_in)  # (2, tokens, d_in)
            report = CheckReport(f"{cls.__name__} from {args.spec.rpartition(':')[0]}",
                                 max(len(rule) for rule in checks.RULES), checks.SLOW_CHECK_SECONDS,
                                 causal=args.causal)
            try:
                with tracing.saying_width(x, width, how="pass --d-in N"):
                    results = checks.check_module(module, x, causal=args.causal, progress=report, sizes=sizes)
            finally:
                report.clear()  # the status line, before an error or an interrupt is printed
    except (user_code.UserCodeError, tracing.TraceError) as error:
        print(f"{PROG} check: {error}", file=sys.stderr)
        return 2
    report.finish(results)
    return 1 if any(c.status == "fail" for c in results) else 0


# the flags that only size the constructor's arguments, by setting (--d-in also sizes the input, --context-length
# caps the tokens: they always do something)
CONSTRUCTOR_FLAGS = {"d_out": "--d-out", "num_heads": "--num-heads", "dropout": "--dropout",
                     "num_kv_groups": "--num-kv-groups", "latent_dim": "--latent-dim",
                     "sliding_window_size": "--window"}


SIZE_SETTINGS = ("d_in", "d_out", "num_heads", "context_length", "dropout", "num_kv_groups", "latent_dim",
                 "sliding_window_size")  # the settings of the size flags, as user_code names them


def flag_notes(args, cls, overrides: dict) -> list[str]:
    """What became of the size flags given, where it is not plain: one line for those a ``**kwargs`` constructor gets
    by attnviz's names (``Kw() takes **kwargs: passed d_in=32, num_heads=2 to it …``), and one for each constructor
    flag that the class takes no argument for (``--window 3 not used: CausalSelfAttention() takes no window argument
    (sliding_window_size, …)``) or whose argument ``--set`` gives; for a class built with no arguments, one line for
    every flag given (:func:`_no_arguments_note`)."""
    from attnviz import declarations, user_code

    lines = []
    sizes = {setting: getattr(args, setting) for setting in SIZE_SETTINGS if getattr(args, setting) is not None}
    if user_code.takes_no_arguments(cls):
        return _no_arguments_note(cls, sizes)
    passed = user_code.kwargs_settings(cls, sizes, overrides)
    if passed:
        words = ", ".join(f"{setting}={sizes[setting]!r}" for setting in passed)
        lines.append(f"{cls.__name__}() takes **kwargs: passed {words} to it (the flags given, by attnviz's names; "
                     "--set NAME=VALUE passes other names)")
    given = {setting: getattr(args, setting) for setting in CONSTRUCTOR_FLAGS if getattr(args, setting) is not None}
    for setting, overridden in user_code.settings_not_taken(cls, given, overrides).items():
        flag = CONSTRUCTOR_FLAGS[setting]
        if overridden is not None:
            lines.append(f"{flag} {given[setting]:g} not used: --set {overridden}={json.dumps(overrides[overridden])} "
                         f"gives {cls.__name__}()'s {overridden}")
            continue
        spellings = declarations.SPELLINGS[setting]
        names = f"{', '.join(spellings[:-1])} or {spellings[-1]}" if len(spellings) > 1 else spellings[0]
        word = flag.removeprefix("--").replace("-", "_")  # --window: "window"
        lines.append(f"{flag} {given[setting]:g} not used: {cls.__name__}() takes no {word} argument ({names})")
    return lines


def _no_arguments_note(cls, sizes: dict) -> list[str]:
    """flag_notes' one line for a class built with no arguments (``user_code.takes_no_arguments``: a weightless
    attention that keeps nn.Module's own constructor) when size flags are given: the constructor's flags are not used,
    --d-in sizes only the checked input (--context-length only caps --tokens: nothing to say)."""
    flags = {setting: CONSTRUCTOR_FLAGS[setting] for setting in CONSTRUCTOR_FLAGS if setting in sizes}
    said = [f"{', '.join(f'{flag} {sizes[setting]:g}' for setting, flag in flags.items())} not used"] if flags else []
    if "d_in" in sizes:
        said.append(f"--d-in {sizes['d_in']} sizes only the checked input")
    if not said:
        return []
    return [f"{cls.__name__}() takes no arguments, so it is built with none: {'; '.join(said)}"]


def require_whole_groups(sizes: dict) -> None:
    """UserCodeError, before the class is built, when the K/V groups it would be built with do not divide its heads
    (``--num-heads 6 --num-kv-groups 4``): each K/V head serves the same number of query heads, and the class's own
    error would be a shape error deep in its forward or constructor."""
    from attnviz import user_code
    from attnviz.config import divisors

    heads, groups = sizes.get("num_heads"), sizes.get("num_kv_groups")
    if heads is None or groups is None or heads % groups == 0:
        return
    raise user_code.UserCodeError(
        f"{amount(groups, 'K/V group')} do not divide {amount(heads, 'head')}: each K/V group serves the same "
        f"number of query heads — give --num-kv-groups one of {', '.join(map(str, divisors(heads)))} "
        f"(or --num-heads a multiple of {groups})")


def checked_width(typed: int | None, sizes: dict, module):
    """The checked input's width, and where attnviz read it when it chose it (``tracing.InputWidth``, said when the
    forward refuses it; None: typed): ``--d-in`` when typed; else the width the class was built with (``sizes``:
    ``user_code.sizes_taken``, its own default included); else the module's input width
    (``tracing.input_width``); else ``DEFAULT_D_IN``."""
    from attnviz import tracing

    if typed is not None:
        return typed, None
    if "d_in" in sizes:
        return sizes["d_in"], tracing.InputWidth(sizes["d_in"], "the width the class was built with")
    found = tracing.input_width(module)
    if found is not None:
        return found.width, found
    return DEFAULT_D_IN, tracing.InputWidth(DEFAULT_D_IN, f"--d-in's default, {DEFAULT_D_IN}")


def built_context(typed: int | None, cls, arguments: dict, sizes: dict) -> tuple[int, str]:
    """The context the check holds ``--tokens`` to, and its words: ``--context-length`` when typed; else the class's
    own default context when it kept it (``FusedWidth48(block_size=16)``: attnviz passed none); else the flag's
    default, ``DEFAULT_CONTEXT_LENGTH``.  ``arguments``: what the class was called with; ``sizes``: what it was built
    with (``user_code.sizes_taken``)."""
    from attnviz import user_code

    if typed is not None:
        return typed, f"--context-length {typed}"
    own = user_code.own_defaults(cls).get("context_length")
    if own is not None and own.name not in arguments and sizes.get("context_length") == own.default:
        return own.default, (f"the context the class was built with, {own.default} (its own default "
                             f"{own.name}={own.default}; --context-length sets another)")
    return DEFAULT_CONTEXT_LENGTH, f"--context-length {DEFAULT_CONTEXT_LENGTH}"


def checked_tokens(tokens: int, context_length: int, module_context: tuple[int, str] | None,
                   why: str | None = None) -> int:
    """How many tokens the check runs on: ``--tokens``, at most ``context_length`` (``why``: its words, default
    ``--context-length N``) and the context the module says it has (``tracing.module_context``); a one-line note on
    stderr when that is fewer than asked for."""
    cap, why = context_length, why or f"--context-length {context_length}"
    if module_context is not None and module_context[0] < cap:
        cap, why = module_context[0], f"the module's context, {module_context[0]} ({module_context[1]})"
    if tokens <= cap:
        return tokens
    print(f"{PROG} check: --tokens {tokens} is more than {why}: checking {cap} tokens", file=sys.stderr)
    return cap


def constructor_overrides(items: list[str], parser: argparse.ArgumentParser) -> dict:
    """``--set NAME=VALUE`` items -> {NAME: VALUE}: a JSON value (500000, true, null, "text", [1, 2]), else a
    Python literal (True, False, None, (1, 2): the spelling the docs' Python uses), else the text as it is."""
    overrides = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name.isidentifier():
            parser.error(f"--set {item!r}: write NAME=VALUE, NAME a constructor argument")
        try:
            overrides[name] = json.loads(value)
        except ValueError:
            overrides[name] = _python_literal(value)
    return overrides


def _python_literal(text: str):
    """``text`` read as a Python literal (``ast.literal_eval``: no code runs), else ``text`` itself — so
    ``--set renormalise=False`` passes False, not the string "False", which Python reads as true."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def run_train(args, parser: argparse.ArgumentParser) -> int:
    """Train with the recipe and the overrides, evaluate every head on held-out data, save; 0 when written."""
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed must be at least 0, got {args.seed}")
    threads = train_threads(args.threads, parser)
    import torch

    from attnviz.labs import train as training  # torch: only once the arguments are good
    from attnviz.labs.live_train import seconds_left_recent  # the Train page's estimate of the time left

    fields = training.TrainConfig.__dataclass_fields__
    settable = [name for name in fields if name not in ("steps", "seed")]
    overrides = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in settable:
            parser.error(f"--set {item!r}: unknown field (one of {', '.join(settable)})")
        try:
            overrides[name] = json.loads(value)
        except json.JSONDecodeError:
            parser.error(f"--set {item!r}: the value must be JSON (numbers, true/false, [lists])")
    for name in ("steps", "seed"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    torch.set_num_threads(threads)
    try:
        cfg = training.TrainConfig(**overrides).validate()
    except ValueError as error:
        parser.error(f"--set: {error}")
    out = output_folder(args.out, parser)  # before training, so a bad folder costs no run

    steps_done, seconds = [], []  # every step and the time at its end: the pace of the latest steps

    def report(step, loss, scores):
        steps_done.append(step)
        seconds.append(time.perf_counter() - start)
        if scores is not None and not args.quiet:
            line = (f"step {step:5d}  loss {loss:.3f}  induction {scores['induction'].max():.2f}  "
                    f"previous-token {scores['previous_token'].max():.2f}")
            left = seconds_left_recent(steps_done, seconds, cfg.steps)
            print(line if left is None else f"{line}  about {left:.0f} s left", flush=True)

    start = time.perf_counter()
    try:
        model, history = training.train(cfg, on_step=report)
    except MemoryError:
        print(f"{PROG} train: out of memory: make batch_size, seq_len or emb_dim smaller (--set)", file=sys.stderr)
        return 2
    scores = training.evaluate(model, seed=training.EVAL_SEED)  # held-out text and fresh repeats, every head
    final = {name: value.round(4).tolist() for name, value in scores.items()}
    final["evaluation"] = f"attnviz.labs.train.evaluate(model, seed={training.EVAL_SEED})"
    out = training.save(model, out, training.run_metadata(cfg, history, final))
    print(f"wrote {out} ({amount(len(history.steps), 'step')}, {history.seconds:.0f} s)")
    return 0


def train_threads(asked: int | None, parser: argparse.ArgumentParser) -> int:
    """The torch threads ``attnviz train`` uses: ``--threads`` (parser.error below 1), at most the machine's CPUs —
    more only slows training down, so a larger number is capped with a one-line note on stderr; without the option,
    ``DEFAULT_THREADS`` or the CPUs if fewer."""
    cpus = os.cpu_count()
    if asked is None:
        return min(DEFAULT_THREADS, cpus or DEFAULT_THREADS)
    if asked < 1:
        parser.error(f"--threads must be at least 1, got {asked}")
    if cpus is not None and asked > cpus:
        print(f"{PROG} train: --threads {asked} is more than this machine's {amount(cpus, 'CPU')}: using {cpus}",
              file=sys.stderr)
        return cpus
    return asked


def output_folder(text: str, parser: argparse.ArgumentParser):
    """``--out`` as a folder that exists and can be written, made before training so a bad one costs no run;
    parser.error for an empty name, a file, or a folder that cannot be made or written."""
    from pathlib import Path

    if not text.strip():
        parser.error("--out must name a folder to write the checkpoint to")
    out = Path(text).expanduser()
    if out.exists() and not out.is_dir():
        parser.error(f"--out {text}: a file is there; name a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--out {text}: cannot make the folder: {error.strerror or error}")
    if not os.access(out, os.W_OK | os.X_OK):
        parser.error(f"--out {text}: the folder cannot be written")
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run the subcommand; its exit status."""
    args = parser().parse_args(argv)
    return args.run(args, args.command_parser)  # the subcommand's parser: its errors print its own usage


class OutputError(time_limit.StopCall):
    """Standard output cannot be written (a full disk, an I/O error): the command stops (:class:`Output`).  One of
    attnviz's own stops: a user's forward that prints when it happens does not take it for its own exception (an
    ``except Exception`` passes it; :func:`attnviz.time_limit.call` lets it through)."""


class Output:
    """``sys.stdout`` (and ``sys.stderr``) for the console script.  A reader that stops early (``| head -1``: a broken
    pipe) or no stream at all (``>&-``) only stops the printing: the rest is discarded and the command runs on to its
    own exit status, so ``attnviz check … | head`` still exits 1 when a rule fails.  Any other write error on
    standard output (``> /dev/full``) raises :class:`OutputError`, which the console script turns into one line on
    stderr and exit 2; on stderr (``stops=False``) it only stops stderr's printing, there being nowhere to say it.
    Python's own tools offer nothing to copy here: ``python -m json.tool`` exits 32 (EPIPE) on a broken pipe and
    prints a traceback on a full disk."""

    def __init__(self, stream, *, stops: bool = True):
        self.stream = stream  # None: started with the stream closed
        self.stops = stops
        self.discarding = stream is None

    def write(self, text: str) -> int:
        if not self.discarding:
            self._do(self.stream.write, text)
        return len(text)

    def flush(self) -> None:
        if not self.discarding:
            self._do(self.stream.flush)

    def isatty(self) -> bool:
        return not self.discarding and self.stream.isatty()

    def __getattr__(self, name):  # encoding, fileno …: the stream's own
        return getattr(self.stream, name)

    def _do(self, action, *args) -> None:
        try:
            action(*args)
        except BrokenPipeError:
            self._discard()
        except OSError as error:
            self._discard()
            if self.stops:
                raise OutputError(error.strerror or str(error)) from None

    def _discard(self) -> None:
        """Print nothing more; what the stream still buffers goes to the null device (Python's flush at exit)."""
        self.discarding = True
        with contextlib.suppress(OSError, ValueError):  # no descriptor to point elsewhere
            descriptor = self.stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, descriptor)
            finally:
                if null != descriptor:  # the stream's own descriptor, closed before: it is the null device now
                    os.close(null)


def console() -> None:
    """The ``attnviz`` console script: ``main`` writing through :class:`Output` — a reader that stops early
    (``| head``) or a closed standard output keeps the command's exit status; an output that cannot be written is
    one line on stderr and exit 2; Ctrl-C is one line and 130."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Output(sys.stdout), Output(sys.stderr, stops=False)
    try:
        status = main()
        sys.stdout.flush()
    except OutputError as error:
        print(f"{PROG}: cannot write the output: {error}", file=sys.stderr, flush=True)
        status = 2
    except KeyboardInterrupt:  # Ctrl-C (a forward that never returns): one line, the shell's status for SIGINT
        print(f"\n{PROG}: interrupted", file=sys.stderr, flush=True)
        status = 130
    finally:
        sys.stdout, sys.stderr = streams
    sys.exit(status)
