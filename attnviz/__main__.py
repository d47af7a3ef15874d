"""``python -m attnviz``: the ``attnviz`` command line (see :mod:`attnviz.cli`)."""

from attnviz.cli import console

if __name__ == "__main__":
    console()
