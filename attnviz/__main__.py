"""``python -m attnviz``: the command line (see :mod:`attnviz.cli`)."""

import sys

from attnviz.cli import main

if __name__ == "__main__":
    sys.exit(main())
