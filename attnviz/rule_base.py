"""Holds what every rule of :mod:`attnviz.checks` returns and shares.

* a rule's verdict (:class:`Check`);
* the tolerance outputs are compared to;
* the module's output for an input;
* K or V per query head, as the rules compare them;
* the lowest precision among tensors a module made, whose rounding a comparison allows for;
* the verdict of a rule that compares outputs on a module whose output is not finite (:class:`NotFinite`);
* the layers of a model that computed one of its attentions (:func:`layers_computing`), which each rule holds that
  attention to.

It sits below the checker and the rule families it keeps in modules of their own (:mod:`attnviz.rotary_rule`,
:mod:`attnviz.kv_cache_rule`), so they share these without importing one another in a circle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from attnviz import code_places, tracing

TOLERANCE = 1e-5


def lowest_precision(tensors, than: torch.dtype = torch.float32) -> torch.dtype | None:
    """The floating dtype of the lowest precision (largest machine epsilon) among ``tensors`` that is lower than
    ``than``'s — bfloat16 among float32 tensors —; None when none is."""
    lower = [tensor.dtype for tensor in tensors if isinstance(tensor, torch.Tensor) and tensor.is_floating_point()
             and torch.finfo(tensor.dtype).eps > torch.finfo(than).eps]
    return max(lower, key=lambda dtype: torch.finfo(dtype).eps, default=None)


@dataclass(frozen=True)
class Check:
    """One rule's verdict on a module."""

    rule: str
    status: str  # "pass", "fail" or "skip"
    evidence: str

    @property
    def passed(self) -> bool:
        """Not failed: True for a skip (not checked) too, as exit status 0 is; a checked pass: status == "pass"."""
        return self.status != "fail"


@dataclass(frozen=True)
class NotFinite:
    """Why a rule that compares the module's outputs cannot check it: its output holds NaN or ∞, which equals nothing,
    so no change to it can be seen — not a pass.  ``words``: where the output is not finite and where the forward first
    made a value that is not (:func:`attnviz.checks.not_finite_output`); ``named_by``: the rule of this check that fails
    for that (then the verdict is a skip pointing to it), None when none of the rules checked does (then a fail, so
    that the check never passes such a module); ``inputs``: the first value that is not finite is in Q, K or V, so a
    reference computed from them is not finite either."""

    words: str
    named_by: str | None = None
    inputs: bool = False

    def verdict(self, rule: str) -> Check:
        """``rule``'s verdict: not checked, in a learner's words."""
        if self.named_by is None:
            return Check(rule, "fail", f"cannot be checked: {self.words} — fix that, then check again")
        return Check(rule, "skip", f"not checked: {self.words} — fix that (see {self.named_by}), then check again")


def per_query_head(tensor: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Keys or values (b, g, n, d) as float32 per query head (b, h, n, d): K/V head h ÷ (h ÷ g) for query head h, as
    ``repeat_interleave`` pairs them (the Trace keeps grouped-query K/V heads as few as the module has them), a
    batch of 1 expanded to the queries'."""
    tensor = tensor.float()
    heads, groups = queries.shape[1], tensor.shape[1]
    if groups != heads and groups and heads % groups == 0:
        tensor = tensor.repeat_interleave(heads // groups, dim=1)  # (b, g, n, d) -> (b, h, n, d)
    if tensor.shape[0] == 1 and queries.shape[0] > 1:
        tensor = tensor.expand(queries.shape[0], *tensor.shape[1:])  # (1, h, n, d) -> (b, h, n, d)
    return tensor


def module_output(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The module's output for ``x`` (:func:`attnviz.tracing.forward_output`: a forward that raises is a TraceError)."""
    return tracing.forward_output(module, x).detach()


def op_line(recording: tracing.Recording, attention: tracing.Attention) -> tuple[str, int] | None:
    """(file, line) of the op that computed ``attention``'s weights; None when it is not known."""
    if not 0 <= attention.op_index < len(recording.ops):
        return None
    op = recording.ops[attention.op_index]
    return None if op.line is None or op.filename is None else (op.filename, op.line)


def layers_computing(module: nn.Module, recording: tracing.Recording,
                     attention: tracing.Attention) -> list[nn.Module]:
    """The module's own submodules (itself included) that computed ``attention``: those whose class's forward holds the
    line that computed its weights, else those whose class has a method of its own — not torch's — that holds it (an
    ``attend`` or ``_attn`` its forward calls), the method as the class resolves it, so a subclass that overrides it
    does not hold its parent's; every layer of the class that did; [] when the line is not known or in no method."""
    line = op_line(recording, attention)
    if line is None:
        return []
    filename, number = os.path.abspath(line[0]), line[1]
    subs = list(module.modules())
    return ([sub for sub in subs if code_places.holds(type(sub).forward, filename, number)]
            or [sub for sub in subs if code_places.method_holding(type(sub), filename, number, inherited=True)])
