"""A Trace as a file: :func:`trace_npz` writes one as an NPZ (every array plus ``manifest.json``), the download every
page offers.

The manifest (``"format": "attnviz trace v1"``) holds the config, text, tokens, shapes, device and notes; the
arrays are ``steps/<stage>``, ``embeddings/<name>``, ``output`` and ``token_ids``.
"""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np

from attnviz.trace import Trace


def _public_config(trace: Trace) -> dict:
    """The config as a downloaded file may show it: a checkpoint by its file or folder name only (the server's
    directories and a session model's private reference never leave the server)."""
    config = dataclasses.asdict(trace.config)
    if config.get("checkpoint"):
        ref = str(config["checkpoint"])
        if ref.startswith("session:"):
            config["checkpoint"] = "session model"
        else:
            config["checkpoint"] = ref.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return config


def manifest(trace: Trace) -> dict:
    return {
        "format": "attnviz trace v1",
        "config": _public_config(trace),
        "text": trace.text,
        "tokens": list(trace.tokens),
        "token_ids": list(trace.token_ids),
        "shapes": [[stage, list(shape)] for stage, shape in trace.shapes],
        "device": trace.device,
        "notes": list(trace.notes),
        "arrays": {name: list(array.shape) for name, array in _arrays(trace).items()},
    }


def _arrays(trace: Trace) -> dict[str, np.ndarray]:
    arrays = {f"steps/{name}": array for name, array in trace.steps.items()}
    arrays.update({f"embeddings/{name}": array for name, array in trace.embeddings.items()})
    arrays["output"] = trace.output
    arrays["token_ids"] = np.asarray(trace.token_ids, dtype=np.int64)
    return arrays


def trace_npz(trace: Trace) -> bytes:
    """Every array of the Trace plus ``manifest.json`` (config, tokens, shapes) in one NPZ file.

    Read it back with ``np.load(f)``; ``json.loads(bytes(data["manifest.json"]))`` gives the manifest.
    """
    buffer = io.BytesIO()
    payload = json.dumps(manifest(trace), ensure_ascii=False).encode("utf-8")
    np.savez_compressed(buffer, **_arrays(trace), **{"manifest.json": np.frombuffer(payload, dtype=np.uint8)})
    return buffer.getvalue()
