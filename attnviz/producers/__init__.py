"""Producers of a Trace: each kind of run is one module with the same three functions.

* ``settle(config) -> (config, notes)``: the config this producer really runs — the sizes it decides itself
  (a checkpoint's width, heads and context) replace the caller's, and each setting it ignores is named in a note;
* ``trace(text, token_ids, notes, config) -> Trace``: the run itself, on tokens already bounded to the settled
  config's context length;
* ``prepare(config) -> None``: what the first run of ``config`` needs, built ahead (the server's warm-up), so that
  run finds it built.

:mod:`attnviz.pipeline` picks the producer with :func:`for_config`, the one place that tells the kinds apart, and
does the rest (text, caching, the warm-up) the same way for every kind, so pages, figures, the diagram, caching and
URL state read a Trace without asking who made it.
Kinds: :mod:`~attnviz.producers.book` (the book's seeded Chapter 3 classes),
:mod:`~attnviz.producers.model_layer` (a layer of a GPT model: checkpoint, bundled or trained in the session) and
:mod:`~attnviz.producers.user_module` (a user's own attention module, listed on the command line).
"""

from __future__ import annotations

from typing import Protocol

from attnviz.config import AttentionConfig, saved_name_refused
from attnviz.trace import Trace


class Producer(Protocol):
    """What :mod:`attnviz.pipeline` needs of a kind of run (each producer module is one)."""

    def settle(self, config: AttentionConfig) -> tuple[AttentionConfig, list[str]]: ...

    def trace(self, text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace: ...

    def prepare(self, config: AttentionConfig) -> None: ...


def for_config(config: AttentionConfig) -> Producer:
    """The producer of ``config``'s kind of run; only its module is imported (a user's module's brings
    :mod:`attnviz.tracing`, a checkpoint's the models).  A ConfigError for a checkpoint or module a trace file named
    (:class:`attnviz.config.SavedName`): nothing is loaded or imported for it."""
    refused = saved_name_refused(config)
    if refused is not None:
        raise refused
    if config.module is not None:
        from attnviz.producers import user_module

        return user_module
    if config.checkpoint is not None:
        from attnviz.producers import model_layer

        return model_layer
    from attnviz.producers import book

    return book
