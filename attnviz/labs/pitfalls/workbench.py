"""Pitfall lab, the workbench: the MultiHeadAttention the lab builds from the sidebar's config, its inputs,
seeded construction and weight copying.

Pure torch: no figures, no Streamlit.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from attnviz import variants
from attnviz.attention import MultiHeadAttention
from attnviz.config import MAX_HEADS, AttentionConfig, divisors
from attnviz.rng import seeded

BOOK_MHA = variants.get(variants.MHA)  # the registry's record of the class every bug changes
MAX_TOKENS = 64  # the lab runs on the first 64 tokens at most (every pitfall runs two modules)
DEFAULT_DROPOUT = 0.1  # GPT_CONFIG_124M's drop_rate, used when the sidebar's p is 0 or does not apply
DEFAULT_WINDOW = 3  # the sliding-window bug's W when the sidebar sets none: a short text already shows it


# --------------------------------------------------------------------------- the lab's set-up

@dataclass(frozen=True)
class LabSetup:
    """The MultiHeadAttention the lab builds from the sidebar's config (see :func:`lab_setup`)."""

    d_in: int
    d_out: int
    num_heads: int
    context_length: int
    dropout: float
    seed: int
    notes: tuple[str, ...] = field(default=())
    num_kv_groups: int = 1  # the grouped-query bug's K/V heads
    sliding_window_size: int = DEFAULT_WINDOW  # the sliding-window bug's W

    @property
    def head_dim(self) -> int:
        return self.d_out // self.num_heads

    def describe(self) -> str:
        return (f"MultiHeadAttention(d_in={self.d_in}, d_out={self.d_out}, context_length={self.context_length}, "
                f"dropout={self.dropout:g}, num_heads={self.num_heads}) · head_dim {self.head_dim} · "
                f"seed {self.seed}")


def lab_heads(d_out: int, wanted: int) -> int:
    """A head count for a single-head variant: ``wanted`` if it divides d_out and is > 1, else the
    divisor > 1 of d_out nearest to it (1 only when d_out is 1) — several heads let bugs 3 and 5 show."""
    if wanted > 1 and d_out % wanted == 0 and wanted <= MAX_HEADS:
        return wanted
    options = [d for d in divisors(d_out) if 1 < d <= MAX_HEADS]
    if not options:
        return 1
    return min(options, key=lambda d: (abs(d - wanted), d))


def lab_setup(config: AttentionConfig, n_tokens: int, wanted_heads: int | None = None) -> LabSetup:
    """The lab's module for ``config``: the book's MultiHeadAttention with the config's sizes and seed.

    Single-head variants get a valid head count (:func:`lab_heads` of ``wanted_heads``, the sidebar's
    Heads); every choice the user did not make is said in ``notes``.
    """
    notes = []
    if n_tokens > MAX_TOKENS:
        notes.append(f"The text has {n_tokens} tokens; the lab uses the first {MAX_TOKENS} for speed.")
    spec = config.spec
    shown_in = f"{BOOK_MHA.cls.__name__} ({BOOK_MHA.section})"  # "MultiHeadAttention (3.6.2)"
    if spec.multi_head:
        num_heads = config.num_heads
        if spec is not BOOK_MHA:
            notes.append(f"The bugs are shown in {shown_in}, with the d_out ({config.d_out}) and the {num_heads} heads "
                         f"of {spec.label}.")
    else:
        num_heads = lab_heads(config.d_out, wanted_heads or 1)
        notes.append(f"{spec.label} has a single head; the lab uses {shown_in} with d_out {config.d_out} and "
                     f"{num_heads} heads (head_dim {config.d_out // num_heads})"
                     + (", the only valid count" if num_heads == 1 else "") + ".")
    dropout = config.dropout if config.dropout > 0 else DEFAULT_DROPOUT
    if config.dropout <= 0:
        notes.append(f"Dropout p is {DEFAULT_DROPOUT} (GPT-2's drop_rate): with p = 0, forgetting eval() would be "
                     "harmless.")
    return LabSetup(d_in=config.d_in, d_out=config.d_out, num_heads=num_heads, context_length=config.context_length,
                    dropout=float(dropout), seed=config.seed, notes=tuple(notes),
                    num_kv_groups=lab_kv_groups(num_heads, getattr(config, "num_kv_groups", None)),
                    sliding_window_size=_positive(getattr(config, "sliding_window_size", None)) or DEFAULT_WINDOW)


def lab_kv_groups(num_heads: int, wanted: int | None) -> int:
    """K/V groups for the grouped-query bug: ``wanted`` when it groups the heads (1 < groups < heads, dividing
    them), else half the heads (two query heads per group), else 1 (too few heads to group)."""
    if isinstance(wanted, int) and 1 < wanted < num_heads and num_heads % wanted == 0:
        return wanted
    return num_heads // 2 if num_heads >= 4 and num_heads % 2 == 0 else 1


def _positive(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def lab_inputs(input_embeddings: np.ndarray) -> torch.Tensor:
    """The trace's (n, d_in) input embeddings -> (1, min(n, 64), d_in) float32 tensor."""
    values = np.asarray(input_embeddings, dtype=np.float32)[:MAX_TOKENS]  # (n, d_in) -> (≤64, d_in)
    return torch.from_numpy(values.copy()).unsqueeze(0)  # (1, n, d_in)


def lab_tokens(tokens) -> tuple[str, ...]:
    """The trace's tokens the lab runs on: the first :data:`MAX_TOKENS`."""
    return tuple(tokens[:MAX_TOKENS])


def forward_rng(module: nn.Module, seed: int | None) -> contextlib.AbstractContextManager:
    """The RNG section a forward of ``module`` needs: :func:`seeded` (``seed``, or ``None`` to continue
    the stream) when its dropout draws (training mode); none in eval mode, which draws nothing and must not
    serialise the sessions."""
    return seeded(seed) if module.training else contextlib.nullcontext()


def build_correct(setup: LabSetup, causal: bool = True) -> MultiHeadAttention:
    """The book's MultiHeadAttention, seeded like the pipeline (same weights as the trace's ``mha``), eval mode."""
    with seeded(setup.seed):  # the book's parameter-creation order needs the global seed
        module = MultiHeadAttention(setup.d_in, setup.d_out, setup.context_length, setup.dropout, setup.num_heads,
                                    causal=causal)
    return module.eval()


def copy_weights(source: nn.Module, target: nn.Module) -> nn.Module:
    """``target`` with ``source``'s parameters (the mask buffer is each class's own: bug 4 lives there)."""
    state = {name: value for name, value in source.state_dict().items() if name != "mask"}
    missing, unexpected = target.load_state_dict(state, strict=False)
    assert missing == ["mask"] and not unexpected, (missing, unexpected)
    return target
