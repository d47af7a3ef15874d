"""The number of the line of a test's or a helper's class or function that holds a text, as the page and the checker
name it: read as the file's text from where ``class <name>`` or the function starts (inspect.getsourcelines parses
the whole file to find a class)."""

from __future__ import annotations

import inspect
import linecache
import re


def line_and_code(obj, text: str) -> tuple[int, str]:
    """(the number in its file of the first line at or after the start of ``obj`` — a class, a function or a method —
    that holds ``text``, that line stripped)."""
    path = inspect.getsourcefile(obj)
    lines = linecache.getlines(path)
    if inspect.isclass(obj):
        statement = re.compile(rf"\s*class\s+{re.escape(obj.__name__)}\b")
        start = next(index for index, line in enumerate(lines) if statement.match(line))
    else:
        start = inspect.unwrap(obj).__code__.co_firstlineno - 1
    index = next(index for index in range(start, len(lines)) if text in lines[index])
    return index + 1, lines[index].strip()


def line_of(obj, text: str) -> int:
    """The number in its file of the first line at or after the start of ``obj`` that holds ``text``."""
    return line_and_code(obj, text)[0]
