"""Pitfall lab, the workbench: the sizes the lab's modules take from the sidebar's config (and the notes saying
which the user did not choose), the book's MultiHeadAttention built at them, its inputs, seeded construction and
weight copying.

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
from attnviz.declarations import is_size
from attnviz.rng import seeded
from attnviz.words import amount

BOOK_MHA = variants.get(variants.MHA)  # the registry's record of the class bugs 1–7 change
BOOK_CLASS = f"{BOOK_MHA.cls.__name__} ({BOOK_MHA.section})"  # "MultiHeadAttention (3.6.2)", as the notes name it
MAX_TOKENS = 64  # the lab runs on the first 64 tokens at most (every pitfall runs two modules)
DEFAULT_DROPOUT = 0.1  # GPT_CONFIG_124M's drop_rate, used when the sidebar's p is 0 or does not apply
DEFAULT_WINDOW = 3  # the sliding-window bug's W when the sidebar sets none: a short text already shows it


# --------------------------------------------------------------------------- the lab's set-up

@dataclass(frozen=True)
class LabSetup:
    """The sizes of the lab's modules, from the sidebar's config (see :func:`lab_setup`)."""

    d_in: int
    d_out: int
    num_heads: int
    context_length: int
    dropout: float
    seed: int
    notes: tuple[str, ...] = field(default=())
    num_kv_groups: int = 1  # the grouped-query bug's K/V heads
    sliding_window_size: int = DEFAULT_WINDOW  # the sliding-window bug's W
    kv_groups_note: str | None = None  # why num_kv_groups is not the sidebar's (said with the grouped-query bug)

    @property
    def head_dim(self) -> int:
        return self.d_out // self.num_heads


def lab_heads(d_out: int, wanted: int) -> int:
    """A head count for a single-head variant: ``wanted`` if it divides d_out and is > 1, else the
    divisor > 1 of d_out nearest to it (1 only when d_out is 1) — several heads let bugs 3 and 5 show."""
    if wanted > 1 and d_out % wanted == 0 and wanted <= MAX_HEADS:
        return wanted
    options = [d for d in divisors(d_out) if 1 < d <= MAX_HEADS]
    if not options:
        return 1
    return min(options, key=lambda d: (abs(d - wanted), d))


def lab_setup(config: AttentionConfig, n_tokens: int, wanted_heads: int | None = None,
              shown_in: str = BOOK_CLASS) -> LabSetup:
    """The lab's sizes for ``config``: the config's d_in, d_out, context length and seed.  ``n_tokens``: the run's
    tokens (the trace's, at most the context length: the page's banner counts the text's), said as the Compare page
    says them ("This run has 1,024 tokens; …").

    Single-head variants get a valid head count (:func:`lab_heads` of ``wanted_heads``, the sidebar's
    Heads); the grouped-query bug gets the variant's K/V groups when they let it show (:func:`lab_kv_groups`);
    every choice the user did not make is said in ``notes`` (``shown_in``: the class the notes name, the
    book's MultiHeadAttention unless a bug runs another), the K/V groups' in ``kv_groups_note``.
    """
    notes = []
    if n_tokens > MAX_TOKENS:
        notes.append(f"This run has {n_tokens:,} tokens; the lab uses the first {MAX_TOKENS} for speed.")
    spec = config.spec
    if spec.multi_head:
        num_heads = config.num_heads
        if spec is not BOOK_MHA or shown_in != BOOK_CLASS:
            notes.append(f"The lab runs {shown_in} with the d_out ({config.d_out}) and the "
                         f"{amount(num_heads, 'head')} of {spec.label}.")
    else:
        num_heads = lab_heads(config.d_out, wanted_heads or 1)
        notes.append(f"{spec.label} has a single head; the lab uses {shown_in} with d_out {config.d_out} and "
                     f"{amount(num_heads, 'head')} (head_dim {config.d_out // num_heads})"
                     + (", the only valid count" if num_heads == 1 else "") + ".")
    dropout = config.dropout if config.dropout > 0 else DEFAULT_DROPOUT
    if config.dropout <= 0:
        notes.append(f"Dropout p is {DEFAULT_DROPOUT} (GPT-2's drop_rate): with p = 0, forgetting eval() would be "
                     "harmless.")
    sidebar_groups = config.kv_groups if spec.grouped else None  # GQA's num_kv_groups (or its default), MQA's 1
    num_kv_groups = lab_kv_groups(num_heads, sidebar_groups)
    return LabSetup(d_in=config.d_in, d_out=config.d_out, num_heads=num_heads, context_length=config.context_length,
                    dropout=float(dropout), seed=config.seed, notes=tuple(notes), num_kv_groups=num_kv_groups,
                    sliding_window_size=window if is_size(window := getattr(config, "sliding_window_size", None))
                    else DEFAULT_WINDOW,
                    kv_groups_note=kv_groups_note(config, num_heads, sidebar_groups, num_kv_groups))


def lab_kv_groups(num_heads: int, wanted: int | None) -> int:
    """K/V groups for the grouped-query bug: ``wanted`` when it groups the heads (1 < groups < heads, dividing
    them), else the most groups that still share (groups of 2 for an even count), else 1 (the heads cannot be
    grouped: fewer than 4, or a prime count)."""
    if isinstance(wanted, int) and 1 < wanted < num_heads and num_heads % wanted == 0:
        return wanted
    return max((g for g in range(2, num_heads) if num_heads % g == 0), default=1)


def kv_groups_note(config: AttentionConfig, num_heads: int, sidebar: int | None, groups: int) -> str | None:
    """Why the grouped-query bug runs with ``groups`` K/V groups rather than the sidebar's (``sidebar``; None when
    the variant has none to set), in words; None when it runs the sidebar's."""
    if groups == sidebar:
        return None
    heads = amount(num_heads, "head")
    uses = f"The lab uses {groups} groups of {num_heads // groups}."
    if groups == 1:
        return ("The grouped-query bug needs K/V groups shared by more than one head, and more than one group: "
                f"{heads} cannot be split so. The lab uses 1 K/V group, where the bug has no effect; "
                "choose a head count such as 4, 6 or 8 to see it.")
    if sidebar is None:
        return (f"{config.spec.label} gives each head its own K/V head; the grouped-query bug needs K/V groups shared "
                f"by more than one head. {uses}")
    if config.spec.kv_groups is not None:  # a variant whose K/V heads are fixed (MQA: 1)
        return (f"{config.spec.label} shares {sidebar} K/V head among all {heads}; the grouped-query bug "
                "needs more than one K/V group (with one, repeat and repeat_interleave pair the heads alike). "
                f"{uses}")
    if sidebar == 1:
        return ("The grouped-query bug needs more than one K/V group: with the sidebar's 1 every head shares it, so "
                f"repeat and repeat_interleave pair them alike. {uses}")
    return (f"The grouped-query bug needs K/V groups shared by more than one head: the sidebar's {sidebar} K/V groups "
            f"give each of the {heads} its own, so repeat and repeat_interleave pair them alike. {uses}")


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
