"""A user's own attention module as a producer: the class listed on the command line, built from the settings
and traced (:mod:`attnviz.tracing`) on seeded embeddings at its input width.

``torch.manual_seed(config.seed)`` right before building gives the same weights on every run; a built module is
kept per (label, sizes, dropout, seed) and runs in eval mode unless dropout is asked to run.  A module that
cannot be built, raises, or computes no attention is a ConfigError with the one-line reason, never a traceback.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch

from attnviz import tracing
from attnviz.config import AttentionConfig, ConfigError
from attnviz.producers import book
from attnviz.rng import built_once, seeded
from attnviz.trace import Trace


def settle(config: AttentionConfig) -> tuple[AttentionConfig, list[str]]:
    """The config the module runs: its input width is the module's own when it decides it (a note says so)."""
    module = _built(_module_key(config))
    notes = []
    d_in = tracing.infer_d_in(module)
    if d_in is not None and d_in != config.d_in:
        notes.append(f"Ignored d_in = {config.d_in}: {type(module).__name__} takes inputs {d_in} wide.")
        config = replace(config, d_in=d_in)
    return replace(config, embedding="seeded", device="cpu"), notes


def _module_key(config: AttentionConfig) -> AttentionConfig:
    """What the built module depends on (not the text, the causal switch or the device)."""
    return AttentionConfig(variant=config.variant, d_in=config.d_in, d_out=config.d_out, num_heads=config.num_heads,
                           context_length=config.context_length, dropout=config.dropout, seed=config.seed,
                           module=config.module, train=config.train and config.dropout > 0)


@built_once(maxsize=4)
def _built(key: AttentionConfig) -> torch.nn.Module:
    from attnviz import user_code  # the modules listed on the command line

    try:
        with seeded(key.seed):
            module = user_code.build_listed(key.module, key)
    except user_code.UserCodeError as error:
        raise ConfigError(str(error)) from None
    return module.train(key.train)


def trace(text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace:
    """The Trace of the listed module on these tokens."""
    module = _built(_module_key(config))
    inputs, embeddings = book._embed(token_ids, config, notes)  # (1, n, d_in)
    try:
        with seeded(config.seed) if module.training else contextlib.nullcontext():  # dropout draws: replayable
            return tracing.trace_inputs(module, inputs, text=text, token_ids=token_ids, embeddings=embeddings,
                                        notes=notes, label=config.module, seed=config.seed)
    except tracing.TraceError as error:
        raise ConfigError(f"{config.module}: {error}") from None
