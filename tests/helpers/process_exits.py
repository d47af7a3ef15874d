"""A user's files whose code ends the process it runs in — ``os._exit`` left in a script part, ``os.kill`` of its own
process, ``signal.raise_signal`` — on import, in a constructor or in a forward, written where a test lists or loads
them (``path:ClassName``).  Each status and signal is one a test can tell from a clean end: a process that ended
exits 3 (``os._exit(3)``) or by its signal."""

from __future__ import annotations

import textwrap
from pathlib import Path

EXITS_ON_IMPORT = textwrap.dedent('''
    import os

    from torch import nn


    class A(nn.Module):
        def forward(self, x):
            return x


    os._exit(3)  # the end of a script: "done"
''')

ENDS = textwrap.dedent('''
    import os
    import signal
    from os import _exit

    import torch
    from torch import nn


    class Attention(nn.Module):
        """A plain attention layer: its forward is where each subclass below ends the process."""

        def __init__(self, d_in=16):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_in, bias=False)
            self.W_key = nn.Linear(d_in, d_in, bias=False)

        def forward(self, x):
            attn_scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)  # (b, n, n)
            attn_weights = torch.softmax(attn_scores / x.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
            return attn_weights @ x  # (b, n, d_in)


    class ExitsInInit(Attention):
        def __init__(self, d_in=16):
            super().__init__(d_in)
            os._exit(3)


    class KillsItselfInInit(Attention):
        def __init__(self, d_in=16):
            super().__init__(d_in)
            os.kill(os.getpid(), signal.SIGTERM)


    class ExitsInForward(Attention):
        """Binds os._exit at import (from os import _exit) and calls it in its forward."""

        def forward(self, x):
            _exit(3)


    class KillsItselfInForward(Attention):
        def forward(self, x):
            os.kill(os.getpid(), signal.SIGKILL)


    class RaisesSigintInForward(Attention):
        def forward(self, x):
            signal.raise_signal(signal.SIGINT)


    class AbortsInForward(Attention):
        def forward(self, x):
            os.abort()
''')


def write_exits_on_import(folder: Path) -> Path:
    """``script.py`` in ``folder``: a class ``A`` after which the file calls ``os._exit(3)``."""
    path = folder / "script.py"
    path.write_text(EXITS_ON_IMPORT)
    return path


def write_ends(folder: Path) -> Path:
    """``ends.py`` in ``folder``, holding :data:`ENDS`'s classes."""
    path = folder / "ends.py"
    path.write_text(ENDS)
    return path
