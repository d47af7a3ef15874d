"""The command line: ``python -m attnviz check path/to/file.py:ClassName`` checks a user's attention module.

Exit status: 0 when every rule passes, 1 when a rule fails, 2 when the module cannot be loaded, built or run
(a one-line message on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap

from attnviz import user_code
from attnviz.tracing import TraceError

OK, FAILED, UNUSABLE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attnviz",
                                     description="attnviz: look inside GPT-style attention.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser("check", help="check your own attention module against the rules of attention",
                                description="Build your module, run it on a seeded input and check it: "
                                            "exit 0 all rules pass, 1 a rule fails, 2 it cannot load, build or run.")
    check.add_argument("spec", metavar="path/to/file.py:ClassName", help="the file and the class in it")
    check.add_argument("--d-in", type=int, default=user_code.DEFAULTS["d_in"], help="input width (default 64)")
    check.add_argument("--d-out", type=int, default=user_code.DEFAULTS["d_out"], help="output width (default 64)")
    check.add_argument("--num-heads", type=int, default=user_code.DEFAULTS["num_heads"], help="heads (default 4)")
    check.add_argument("--context-length", type=int, default=user_code.DEFAULTS["context_length"],
                       help="context length (default 64)")
    check.add_argument("--dropout", type=float, default=user_code.DEFAULTS["dropout"], help="dropout (default 0)")
    check.add_argument("--causal", action=argparse.BooleanOptionalAction, default=None,
                       help="expect a causal mask (default: decide from the module)")
    return parser


def _table(checks, width: int) -> str:
    rows = [(c.rule, {"pass": "PASS", "fail": "FAIL"}.get(c.status, c.status), str(c.evidence)) for c in checks]
    rule_w = max([len("rule")] + [len(r[0]) for r in rows])
    status_w = len("status")
    evidence_w = max(20, width - rule_w - status_w - 4)
    lines = [f"{'rule':<{rule_w}}  {'status':<{status_w}}  evidence", f"{'-' * rule_w}  {'-' * status_w}  {'-' * 8}"]
    for rule, status, evidence in rows:
        wrapped = textwrap.wrap(" ".join(evidence.split()), evidence_w) or [""]
        lines.append(f"{rule:<{rule_w}}  {status:<{status_w}}  {wrapped[0]}")
        lines += [f"{'':<{rule_w}}  {'':<{status_w}}  {more}" for more in wrapped[1:]]
    return "\n".join(lines)


def _fail(message: str) -> int:
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    return UNUSABLE


def check(args: argparse.Namespace) -> int:
    """Load, build and check the module; print the table; return the exit status."""
    try:
        from attnviz.checks import check_module

        cls = user_code.load(args.spec)
        module = user_code.build(cls, d_in=args.d_in, d_out=args.d_out, num_heads=args.num_heads,
                                 context_length=args.context_length, dropout=args.dropout)
        module.eval()
        checks = check_module(module, causal=args.causal)
    except (user_code.UserCodeError, TraceError) as error:
        return _fail(error)
    except Exception as error:  # noqa: BLE001 - the user's forward failing is one line, not a traceback
        return _fail(f"running {args.spec} raised {user_code._one_line(error)}")
    print(_table(checks, shutil.get_terminal_size((100, 24)).columns))
    return OK if all(c.status != "fail" for c in checks) else FAILED


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args)
    parser.print_help()
    return OK
