"""Pitfall lab, the bugs: seven classic attention bugs, each one line away from the book's MultiHeadAttention.

A bug is a subclass of :class:`~attnviz.attention.MultiHeadAttention` whose ``forward`` (or ``__init__``)
is the book's own method with one line replaced: :func:`one_line_changed` reads the method's source
(``inspect.getsource``), swaps the line and compiles the result in the book module's namespace.  Nothing
of the forward is copied here, so a change to the book's class reaches every bug (and a change to a
line a bug replaces fails at import, naming the line).  ``inspect.getsource`` of a bug's method gives
its real source: the book's method with the one line changed (tested with a diff).

"model.eval() forgotten" is no class: :func:`forgot_eval` leaves the book's module in training mode.

Pure torch: no figures, no Streamlit.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import types
from collections.abc import Callable

from torch import nn

from attnviz.attention import MultiHeadAttention


def code_of(line: str) -> str | None:
    """A line's statement without its comment or spacing (``ast.unparse``), None if it is not a whole
    statement (``if self.causal:``, a blank line)."""
    try:
        return ast.unparse(ast.parse(line.strip()))
    except SyntaxError:
        return None


def one_line_changed(method: Callable, book_line: str, buggy_line: str) -> Callable:
    """``method`` of the book's class with the one line whose code is ``book_line`` replaced by ``buggy_line``.

    ``book_line`` is matched by its code (comments and spacing ignored) and must occur exactly once.  The
    new function runs in the book module's globals with the book's closure (so ``super()`` means what it
    means in the book's class); its source is registered with :mod:`linecache` so ``inspect.getsource``
    and tracebacks show the changed line.
    """
    lines = inspect.getsource(method).splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if code_of(line) == code_of(book_line)]
    if len(hits) != 1:
        raise ValueError(f"{method.__qualname__} has {len(hits)} lines {book_line!r}; a bug replaces exactly one.")
    (index,) = hits
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    lines[index] = f"{indent}{buggy_line}\n"

    owner = method.__qualname__.rsplit(".", 1)[0]
    source = [f"class {owner}:  # {method.__qualname__} with one line changed\n", *lines]
    filename = f"<attnviz.labs.pitfalls.bugs: {method.__qualname__} with {buggy_line.split('  #')[0]!r}>"
    linecache.cache[filename] = (len("".join(source)), None, source, filename)  # mtime None: never evicted
    namespace: dict = {}
    # the book's own source, one line changed
    exec(compile("".join(source), filename, "exec"), method.__globals__, namespace)
    compiled = vars(namespace[owner])[method.__name__]
    if compiled.__code__.co_freevars != method.__code__.co_freevars:
        raise ValueError(f"{buggy_line!r} changes which names {method.__qualname__} closes over.")
    changed = types.FunctionType(compiled.__code__, method.__globals__, method.__name__, compiled.__defaults__,
                                 method.__closure__)  # the book's __class__ cell: super() skips the book's class
    changed.__kwdefaults__ = compiled.__kwdefaults__
    changed.__annotations__ = compiled.__annotations__
    changed.__doc__ = method.__doc__
    changed.__module__ = __name__
    return changed


class MaskedFillWithoutUnderscore(MultiHeadAttention):
    """(1) ``masked_fill`` returns a masked copy that nobody keeps: the scores are never masked."""

    forward = one_line_changed(
        MultiHeadAttention.forward,
        "attn_scores.masked_fill_(mask_bool, -torch.inf)",
        "attn_scores.masked_fill(mask_bool, -torch.inf)  # BUG: a new (b, h, n, n) tensor, thrown away",
    )


class SoftmaxOverWrongDim(MultiHeadAttention):
    """(2) softmax over the queries (dim=-2): columns sum to 1, rows don't."""

    forward = one_line_changed(
        MultiHeadAttention.forward,
        "attn_weights = torch.softmax(attn_scores, dim=-1)",
        "attn_weights = torch.softmax(attn_scores, dim=-2)  # BUG: (b, h, n, n), each *column* sums to 1",
    )


class ScaleByDOut(MultiHeadAttention):
    """(3) ÷√d_out (the whole width, or a stale ``d_k`` from an earlier cell) instead of ÷√head_dim."""

    forward = one_line_changed(
        MultiHeadAttention.forward,
        "attn_scores = attn_scores / keys.shape[-1] ** 0.5",
        "attn_scores = attn_scores / self.d_out ** 0.5  # BUG: ÷√d_out -> (b, h, n, n)",
    )


class MaskIncludesDiagonal(MultiHeadAttention):
    """(4) ``triu(..., diagonal=0)`` masks the diagonal too: token 0 can see nothing at all."""

    __init__ = one_line_changed(
        MultiHeadAttention.__init__,
        'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))',
        'self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=0))'
        "  # BUG: (ctx, ctx), the diagonal masked too",
    )


class ViewWithoutContiguous(MultiHeadAttention):
    """(5) ``.view`` on the transposed context: its memory is not laid out as (b, n, d_out)."""

    forward = one_line_changed(
        MultiHeadAttention.forward,
        "context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)",
        "context_vec = context_vec.view(b, num_tokens, self.d_out)  # BUG: no .contiguous() -> (b, n, d_out) or error",
    )


class MaskNotSliced(MultiHeadAttention):
    """(7) the whole (context_length, context_length) mask on an (n, n) score matrix."""

    forward = one_line_changed(
        MultiHeadAttention.forward,
        "mask_bool = self.mask.bool()[:num_tokens, :num_tokens]",
        "mask_bool = self.mask.bool()  # BUG: (ctx, ctx), not sliced to (n, n)",
    )


def forgot_eval(module: nn.Module) -> nn.Module:
    """(6) The caller never runs ``module.eval()``: a new module is in training mode, dropout active."""
    return module.train()

