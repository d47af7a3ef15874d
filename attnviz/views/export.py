"""Downloads of a view: one head's weights as CSV (pure).  The whole Trace as a file is :mod:`attnviz.trace_file`'s."""

from __future__ import annotations

import csv
import io

from attnviz.trace import Trace


def weights_csv(trace: Trace, head: int, stage: str = "weights") -> bytes:
    """One head's (n, n) map as CSV: a header row of key tokens, one row per query token."""
    matrix = trace.attention_map(stage, head)
    labels = [f"{i}: {piece}" for i, piece in enumerate(trace.tokens)]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([f"query \\ key ({stage}, head {head})", *labels])
    for label, row in zip(labels, matrix):
        writer.writerow([label, *(f"{value:.7g}" for value in row)])
    return buffer.getvalue().encode("utf-8")
