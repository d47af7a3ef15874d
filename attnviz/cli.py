"""``python -m attnviz check path/to/file.py:ClassName``: check_module's rules on a user's class, as a table.

Exit status: 0 every rule passes (or does not apply), 1 a rule fails, 2 the file or class cannot be loaded,
built or run (one line on stderr, no traceback) — so a learner can put it in their own CI.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m attnviz", description="See and check attention modules.")
    commands = main.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "check", help="check an attention class by rule",
        description="Build the class with these sizes (constructor arguments matched by name: d_in/embed_dim/"
                    "n_embd, d_out, num_heads/n_head, context_length/block_size, dropout) and run every rule.")
    check.add_argument("spec", metavar="path/to/file.py:ClassName")
    check.add_argument("--d-in", type=int, default=64)
    check.add_argument("--d-out", type=int, default=None, help="default: d_in")
    check.add_argument("--num-heads", type=int, default=4)
    check.add_argument("--context-length", type=int, default=64)
    check.add_argument("--dropout", type=float, default=0.0)
    check.add_argument("--tokens", type=int, default=8, help="tokens in the checked input (default 8)")
    causal = check.add_mutually_exclusive_group()
    causal.add_argument("--causal", dest="causal", action="store_const", const=True, default=None,
                        help="the module should mask the future (default: inferred)")
    causal.add_argument("--no-causal", dest="causal", action="store_const", const=False)
    return main


def table(checks, width: int | None = None) -> str:
    """The rules as rows: rule, PASS/FAIL/skip, evidence wrapped to the terminal."""
    width = width or shutil.get_terminal_size((100, 20)).columns
    rule_width = max(len(c.rule) for c in checks)
    indent = rule_width + 2 + 4 + 2
    lines = []
    for check in checks:
        status = {"pass": "PASS", "fail": "FAIL", "skip": "skip"}[check.status]
        wrapped = textwrap.wrap(check.evidence, max(30, width - indent)) or [""]
        lines.append(f"{check.rule:<{rule_width}}  {status}  {wrapped[0]}")
        lines += [" " * indent + more for more in wrapped[1:]]
    failed = sum(c.status == "fail" for c in checks)
    lines.append(f"\n{failed} of {len(checks)} rules fail." if failed else f"\nAll {len(checks)} rules pass or do not apply.")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    from attnviz import checks, tracing, user_code  # torch: only once the arguments are good

    try:
        cls = user_code.load(args.spec)
        module = user_code.build(cls, d_in=args.d_in, d_out=args.d_out, num_heads=args.num_heads,
                                 context_length=args.context_length, dropout=args.dropout).eval()
        d_in = tracing.infer_d_in(module) or args.d_in
        x = checks.default_input(module, n=min(args.tokens, args.context_length)) if d_in else None
        results = checks.check_module(module, x, causal=args.causal)
    except (user_code.UserCodeError, tracing.TraceError) as error:
        print(f"attnviz check: {error}", file=sys.stderr)
        return 2
    print(f"{cls.__name__} from {args.spec.rpartition(':')[0]}\n")
    print(table(results))
    return 1 if any(c.status == "fail" for c in results) else 0
