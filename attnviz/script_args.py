"""The app's own command-line flags: ``streamlit run app.py -- --checkpoint PATH --module path.py:Class``."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def flag_values(flag: str, argv: Sequence[str] | None = None) -> list[str]:
    """``FLAG VALUE`` / ``FLAG=VALUE`` values (repeatable) from ``argv`` (default ``sys.argv[1:]``).

    With a ``--`` in ``argv`` only what follows it counts (``streamlit run app.py -- --checkpoint PATH`` hands the
    script what follows ``--``).  Other arguments are ignored; a flag without a value is skipped.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        args = args[args.index("--") + 1:]
    values = []
    for position, arg in enumerate(args):
        if arg == flag and position + 1 < len(args) and not args[position + 1].startswith("--"):
            values.append(args[position + 1])
        elif arg.startswith(flag + "=") and len(arg) > len(flag) + 1:
            values.append(arg[len(flag) + 1:])
    return values
