"""``attnviz check``'s whole table for a list of checks at once: every rule's row, then the summary line — what the
command's streamed output (``cli.CheckReport``) should add up to — and the counts of rules the summaries and status
lines say, from ``checks.RULES``: a new rule changes no test that counts them."""

from __future__ import annotations

import contextlib
import io
import re

from attnviz import cli
from attnviz.checks import RULES

RULE_COUNT = len(RULES)
ALL_PASS = f"All {RULE_COUNT} rules pass or do not apply."  # the summary of a check every rule passes or skips


def rules_fail(failed: int) -> str:
    """The summary of a whole check ``failed`` rules fail: "1 of 9 rules fail."."""
    return f"{failed} of {RULE_COUNT} rules fail."


def place(rule: str) -> str:
    """Where ``rule`` comes in a whole check, as its status line says it: "2 of 9" for causal."""
    return f"{RULES.index(rule) + 1} of {RULE_COUNT}"


def check_table(checks, width: int | None = None) -> str:
    """The rules as rows (rule, PASS/FAIL/skip, evidence wrapped to ``width``, default the terminal's), then the
    summary."""
    rule_width = max(len(c.rule) for c in checks)
    lines = [line for check in checks for line in cli.rule_lines(check, rule_width, width)]
    return "\n".join([*lines, cli.summary(checks)])


def printed_results(printed: str) -> dict[str, str]:
    """The verdicts of ``attnviz check``'s printed table, {rule: "pass", "fail" or "skip"}: as the Check panel's table
    gives them (``helpers.apptest.check_panel_results``)."""
    return {rule: result.lower() for rule, result in re.findall(r"^(\S+)\s+(PASS|FAIL|skip)\b", printed, re.M)}


def cli_table(*args) -> tuple[int, str]:
    """``attnviz check ARGS`` in this process: its exit status and its table, the evidence column's wrapping undone."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = cli.main(["check", *map(str, args)])
    return status, " ".join(out.getvalue().split())
