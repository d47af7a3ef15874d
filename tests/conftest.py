"""Helpers shared by the test modules (import them with ``from conftest import …``).

Plotly figures reach the browser as JSON; AppTest hands that JSON back (``chart.proto.spec``).  NumPy arrays
in it are base64 blobs (``{"dtype", "bdata", "shape"}``), lists otherwise: :func:`decode` reads both.
"""

from __future__ import annotations

import base64
import json

import numpy as np


def decode(array) -> np.ndarray:
    """Plotly's JSON array: a list, or {"dtype", "bdata", "shape"} for NumPy arrays."""
    if isinstance(array, dict):
        data = np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"]))
        shape = [int(s) for s in str(array.get("shape", len(data))).split(",")]
        return data.reshape(shape)
    return np.asarray(array, dtype=float)


def plotly_figures(at) -> list[dict]:
    """Every Plotly figure an AppTest run drew (``st.plotly_chart`` and attnviz's kept chart, ``ui.chart``), in page
    order, as the JSON the browser would get."""
    found: list[dict] = []

    def walk(node) -> None:
        if getattr(node, "type", None) == "plotly_chart":
            found.append(json.loads(node.proto.spec))
        elif getattr(node, "type", None) == "bidi_component" and node.proto.component_name == "attnviz_chart":
            found.append(json.loads(json.loads(node.proto.json)["spec"]))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return found


def random_gpt2(seed: int = 0, *, vocab_size: int = 50257, **sizes):
    """A Hugging Face ``GPT2LMHeadModel`` (eager attention, no dropout) with EVERY LayerNorm and bias randomised:
    Hugging Face initialises them to 1 and 0, which would hide a mapping error (a swapped or untransposed
    tensor).  ``sizes``: GPT2Config's n_layer, n_head, n_embd, n_positions."""
    import torch
    import transformers

    config = transformers.GPT2Config(**sizes, vocab_size=vocab_size, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                param.uniform_(-1.5, 1.5) if name.endswith("bias") else param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.3)
    return model
