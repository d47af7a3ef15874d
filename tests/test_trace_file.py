"""A Trace as a file: the NPZ every page offers holds every array and the manifest."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from attnviz import pipeline, trace_file
from attnviz.config import AttentionConfig

CONFIG = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=32, seed=5)
TEXT = "the cat and the hat"


@pytest.fixture(scope="module")
def trace():
    return pipeline.run(TEXT, CONFIG)


def test_trace_npz_round_trips_every_array_and_the_manifest(trace):
    data = np.load(io.BytesIO(trace_file.trace_npz(trace)))
    manifest = json.loads(bytes(data["manifest.json"]).decode("utf-8"))
    assert manifest["config"]["num_heads"] == 4 and manifest["tokens"] == list(trace.tokens)
    assert [tuple(shape) for _, shape in manifest["shapes"]] == [shape for _, shape in trace.shapes]
    for name, array in trace.steps.items():
        assert np.array_equal(data[f"steps/{name}"], array), name
    assert np.array_equal(data["output"], trace.output)
    assert data["token_ids"].tolist() == list(trace.token_ids)
