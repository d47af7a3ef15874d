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


def page_elements(at):
    """Every element of an AppTest run's tree, in page order."""
    stack = [at._tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(getattr(node, "children", {}).values())))


def plotly_figures(at) -> list[dict]:
    """Every figure an AppTest run drew with ``st.plotly_chart``, as the JSON the browser gets, in page order."""
    return [json.loads(node.proto.spec) for node in page_elements(at) if getattr(node, "type", None) == "plotly_chart"]


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
