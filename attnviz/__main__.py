"""``python -m attnviz``: the command line (see :mod:`attnviz.cli`)."""

import sys

from attnviz.cli import main

sys.exit(main())
