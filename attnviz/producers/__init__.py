"""Producers of a Trace: each kind of run is one module with the same two functions.

* ``settle(config) -> (config, notes)``: the config this producer really runs — the sizes it decides itself
  (a checkpoint's width, heads and context) replace the caller's, and each setting it ignores is named in a note;
* ``trace(text, token_ids, notes, config) -> Trace``: the run itself, on tokens already bounded to the settled
  config's context length.

:mod:`attnviz.pipeline` picks the producer with :func:`for_config` and does the rest (text, caching) the same way
for every kind, so pages, figures, the diagram, caching and URL state read a Trace without asking who made it.
Kinds: :mod:`~attnviz.producers.book` (the book's seeded Chapter 3 classes),
:mod:`~attnviz.producers.model_layer` (a layer of a GPT model: checkpoint, bundled or trained in the session) and
:mod:`~attnviz.producers.user_module` (a user's own attention module, listed on the command line).
"""

from __future__ import annotations

from typing import Protocol

from attnviz.config import AttentionConfig
from attnviz.trace import Trace


class Producer(Protocol):
    """What :mod:`attnviz.pipeline` needs of a kind of run (each producer module is one)."""

    def settle(self, config: AttentionConfig) -> tuple[AttentionConfig, list[str]]: ...

    def trace(self, text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace: ...


def for_config(config: AttentionConfig) -> Producer:
    """The producer of ``config``'s kind of run."""
    from attnviz.producers import book, model_layer, user_module

    if config.module is not None:
        return user_module
    return model_layer if config.checkpoint is not None else book
