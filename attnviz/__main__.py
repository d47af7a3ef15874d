"""``python -m attnviz``: the command line (see :mod:`attnviz.cli`)."""

import os
import sys

from attnviz.cli import main

if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader (say `| head`) stopped early: no traceback, quiet exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    sys.exit(status)
