"""A user's file whose code raises a ``BaseException`` that is no ``Exception`` — a class of its own derived from it,
a ``KeyboardInterrupt`` or ``GeneratorExit`` it raises itself — in a constructor, a forward or a reset, and a file
that raises one on import: written where a test lists or loads them (``path:ClassName``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

OWN = textwrap.dedent('''
    from torch import nn


    class Stop(BaseException):
        pass


    class RaisesInInit(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            raise Stop("not on this machine")


    class RaisesInForward(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            self.proj = nn.Linear(d_in, d_in)

        def forward(self, x):
            raise Stop("no forward today")


    class InterruptsItself(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()
            self.proj = nn.Linear(d_in, d_in)

        def forward(self, x):
            raise KeyboardInterrupt


    class EndsAGenerator(nn.Module):
        def __init__(self, d_in=16):
            super().__init__()

        def forward(self, x):
            raise GeneratorExit("closed")

        def reset_cache(self):
            raise Stop("nothing to reset")
''')


def own_line(text: str) -> int:
    """The number of the line of ``own.py`` (:data:`OWN`) that holds ``text``."""
    return next(number for number, line in enumerate(OWN.splitlines(), start=1) if text in line)


RAISES_ON_IMPORT = "class E(BaseException): pass\nraise E('custom base exception')\n"  # names no class: spec ":A"


def write_own(folder: Path) -> Path:
    """``own.py`` in ``folder``, holding :data:`OWN`'s classes."""
    path = folder / "own.py"
    path.write_text(OWN)
    return path


def write_raising_on_import(folder: Path) -> Path:
    """``baseexc.py`` in ``folder``, whose import raises ``E('custom base exception')``, a BaseException."""
    path = folder / "baseexc.py"
    path.write_text(RAISES_ON_IMPORT)
    return path
