"""``attnviz check``'s whole table for a list of checks at once: every rule's row, then the summary line — what the
command's streamed output (``cli.CheckReport``) should add up to."""

from __future__ import annotations

from attnviz import cli


def check_table(checks, width: int | None = None) -> str:
    """The rules as rows (rule, PASS/FAIL/skip, evidence wrapped to ``width``, default the terminal's), then the
    summary."""
    rule_width = max(len(c.rule) for c in checks)
    lines = [line for check in checks for line in cli.rule_lines(check, rule_width, width)]
    return "\n".join([*lines, cli.summary(checks)])
