"""Checks that the soft-cap a module's scores get and the attention sinks its softmax runs over are the ones it
declares: the words ``matches-reference`` (:mod:`attnviz.checks`) fails a module with when the cap its scaled scores
reach the softmax with differs from :func:`attnviz.declarations.declared_softcap`'s (or a tanh of the scores that is
not the declared cap · tanh(s / cap) hides Q @ Kᵀ from the tracer: :func:`unread_softcap`), or the sink logits beside
its scores differ from :func:`attnviz.declarations.declared_sinks`'.
"""

from __future__ import annotations

import math

import torch

from attnviz import tracing
from attnviz.declarations import DeclaredCap, DeclaredSinks
from attnviz.rule_base import TOLERANCE

SINK_WORDS = ("an attention sink: the softmax runs over the keys and one more column, a learned logit per head, "
              "and the module drops that column after it (GPT-OSS)")


def softcap_mismatch(attention: tracing.Attention, cap: DeclaredCap | None) -> str | None:
    """Words for scaled scores soft-capped otherwise than the module declares (``cap``) — with another cap, or not at
    all (the walk from the softmax back to Q @ Kᵀ met no cap · tanh(s / cap)); None when they agree, when the module
    declares none, or when the scores' path was not read."""
    if cap is None or attention.queries is None or attention.scale is None:
        return None
    applied = attention.softcap
    if applied is not None and math.isclose(applied, cap.cap, rel_tol=1e-4):
        return None
    if applied is None:
        return (f"the module declares a soft-cap of its scores, {cap.words} (Gemma 2's attn_logit_softcapping), but "
                "its scaled scores reach the softmax uncapped (no cap · tanh(s / cap) between the scale and the "
                f"softmax): apply s → {cap.cap:g} · tanh(s / {cap.cap:g}) to the scaled scores before the mask")
    return (f"the module soft-caps its scaled scores at {applied:g} · tanh(s / {applied:g}), but it declares a cap "
            f"of {cap.cap:g} — {cap.words}: cap with {cap.cap:g} · tanh(s / {cap.cap:g}), not {applied:g}")


def unread_softcap(recording: tracing.Recording, attention: tracing.Attention, cap: DeclaredCap | None,
                   own_file: str | None) -> str | None:
    """Words for a module that declares a soft-cap (``cap``) whose walk from the softmax back to Q @ Kᵀ stopped at a
    tanh of the scores: that tanh is not cap · tanh(s / cap) of the scaled scores s (``cap · tanh(s)``, the division
    left out, or a cap the scale comes after), so the scores the softmax gets are not the ones the module declares;
    ``own_file``: the module's file, whose lines are named without it.  None when the module declares no cap, its Q
    and K were found, or no tanh of the scores' shape comes before the softmax."""
    if cap is None or attention.queries is not None:
        return None
    shape = tuple(attention.weights.shape[-2:])  # (nq, nk)
    tanhs = [op for op in recording.ops[:attention.op_index] if op.name in ("tanh", "tanh_") and op.shape[-2:] == shape]
    if not tanhs:
        return None
    c = cap.cap
    return (f"the module declares a soft-cap, {cap.words}, but the tanh{tracing.op_place(tanhs[-1], own_file)} "
            f"before the softmax is not {c:g} · tanh(s / {c:g}) of the scaled scores s: divide s by {c:g} inside the "
            f"tanh and multiply by {c:g} after it — {c:g} · tanh(s) turns a score of 1 into {c * math.tanh(1.0):.3g}")


def sinks_mismatch(attention: tracing.Attention, sinks: DeclaredSinks | None) -> str | None:
    """Words for sink logits the softmax got otherwise than the module keeps them (``sinks``: one per query head,
    GPT-OSS's ``self.sinks``): no sink column (the logits perhaps added to every score, which the softmax cancels), a
    column that changes along the queries or items, one logit for every head, the heads' logits in another order, or
    other numbers; None when each head's column is its own logit, when the module keeps none, or when the column
    could not be identified (matches-reference then skips, saying so)."""
    if sinks is None or attention.queries is None:
        return None
    logits, name = sinks.logits, sinks.words  # (h,)
    heads = logits.numel()
    tolerance = TOLERANCE * max(1.0, logits.abs().max().item())
    if attention.sinks is None:
        if attention.sink_weights is not None:
            return None
        added = _sinks_added(attention, logits)
        return (f"the module keeps attention sinks' logits, {name}, one per query head ({SINK_WORDS}), but its "
                "softmax runs over the keys alone"
                + (" — it adds them to every score of a row instead (head h's scores + sinks[h]), a constant per row "
                   "that the softmax cancels: the sinks change no weight" if added else "")
                + f": concatenate them beside the scores, torch.cat([scores, {name}.reshape(1, -1, 1, 1).expand(b, -1, "
                  "n, 1)], dim=-1), and drop their column after the softmax")
    column = attention.sinks.float()  # (b, h, nq, 1)
    if column.shape[1] != heads:
        return None
    first = column[:1, :, :1]  # (1, h, 1, 1): each head's logit at the first query of the first item
    apart = (column - first).abs()  # (b, h, nq, 1)
    if apart.max().item() > tolerance:
        item, head, query, _ = (int(i) for i in (apart == apart.max()).nonzero()[0])
        there, elsewhere = column[0, head, 0, 0].item(), column[item, head, query, 0].item()
        return (f"the sink column is not one logit per head: in head {head} it holds {there:.4g} at query 0 of item 0 "
                f"but {elsewhere:.4g} at query {query} of item {item} — give every query of head h the same {name}[h], "
                f"{name}.reshape(1, -1, 1, 1).expand(b, -1, n, 1)")
    given = first.flatten()  # (h,)
    if (given - logits).abs().max().item() <= tolerance:
        return None
    shown = ", ".join(f"{value:.3g}" for value in logits[:4].tolist()) + (", …" if heads > 4 else "")
    if heads > 1 and (given - given[0]).abs().max().item() <= tolerance:
        return (f"every head's sink column holds the same logit, {given[0].item():.4g}, but {name} holds one per "
                f"head ({shown}): give query head h its own {name}[h], {name}.reshape(1, -1, 1, 1)")
    source = [int((logits - given[head]).abs().argmin()) for head in range(heads)]  # whose logit each head got
    head = next(head for head in range(heads) if abs(given[head].item() - logits[head].item()) > tolerance)
    if all(abs(given[h].item() - logits[source[h]].item()) <= tolerance for h in range(heads)):
        return (f"the sink logits go to other heads than their own: query head {head}'s sink column holds "
                f"{name}[{source[head]}] ({given[head].item():.4g}), not {name}[{head}] ({logits[head].item():.4g}) "
                f"— head h should get {name}[h], {name}.reshape(1, -1, 1, 1) in the query heads' order")
    return (f"query head {head}'s sink column holds {given[head].item():.4g}, but {name}[{head}] is "
            f"{logits[head].item():.4g}: concatenate the module's own sink logits beside the scores, unchanged")


def _sinks_added(attention: tracing.Attention, logits: torch.Tensor) -> bool:
    """Whether what the module adds to its scaled scores is, on every cell it shows, its head's sink logit
    (``logits`` (h,)): the sinks added to every score instead of beside them."""
    if attention.scaled is None or attention.scaled.shape[1] != logits.numel():
        return False
    visible = ~attention.masked_cells()  # (b, h, nq, nk)
    added = attention.masked.float() - attention.scaled.float()  # (b, h, nq, nk)
    expected = logits.reshape(1, -1, 1, 1).expand_as(added)  # (b, h, nq, nk)
    tolerance = 1e-4 * max(1.0, attention.scaled.float().abs().max().item())
    return bool(visible.any()) and (added - expected)[visible].abs().max().item() <= tolerance
