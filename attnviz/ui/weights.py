"""The ``weights`` and ``layer`` settings: which weights this session may pick, the model behind the choice
(loaded once per server), and a page's request to switch to another option (:func:`select_weights`).

A name from the URL or a widget is only compared with the names :func:`attnviz.weights.options` lists
(:func:`choose`): no string from the browser reaches the file system.  Models trained in a session are offered to that
session only, stored server-side under an opaque id (:func:`attnviz.weights.register_session_model`, which the
Train page's worker calls with :func:`session_id`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from attnviz import weights
from attnviz.models import CheckpointError

WEIGHTS_REQUEST = "_weights_request"  # an option a page picked (select_weights), applied before the sidebar is drawn


def session_id() -> str:
    """This browser session's id (Streamlit's), the key of its trained models."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


def options() -> list[weights.Option]:
    """The weights this session may pick: the book's classes, the bundled model, checkpoints, its trained models."""
    return weights.options(session_id())


def select_weights(name: str) -> None:
    """Make the listed option ``name`` this session's weights from the next run on (layer 0, causal on;
    :func:`attnviz.ui.state.settings_from_url` applies it): the sidebar's widgets are drawn before a page runs, so
    a page cannot set their values in its own run."""
    st.session_state[WEIGHTS_REQUEST] = name


@dataclass(frozen=True)
class Choice:
    """The current weights: the option, the sizes of its model (None for the book's classes or on error), the
    loader's message when the file could not be loaded."""

    option: weights.Option
    sizes: weights.ModelSizes | None = None
    error: str | None = None

    @property
    def checkpoint(self) -> bool:
        return self.option.is_checkpoint


def choose(listed: list[weights.Option], name: str) -> Choice:
    """Load the model behind ``name`` (one of ``listed``); a CheckpointError becomes ``Choice.error``."""
    option = next((o for o in listed if o.name == name), weights.BOOK_OPTION)
    if not option.is_checkpoint:
        return Choice(option)
    try:
        with st.spinner(f"Loading {option.name}…"):
            model = weights.load(option.ref)
    except CheckpointError as exc:
        return Choice(option, error=_named(str(exc), option))
    return Choice(option, sizes=weights.sizes(model))


def _named(message: str, option: weights.Option) -> str:
    """``message`` with the checkpoint's path on the server (the file, or the folder it is in) put as its listed
    name: the page shows only the name (:mod:`attnviz.models.discovery`)."""
    path = Path(option.ref)
    for shown in sorted({str(path), str(path.resolve())}, key=len, reverse=True):
        message = message.replace(shown, option.name)
    for folder in sorted({str(path.parent), str(path.resolve().parent)}, key=len, reverse=True):
        message = message.replace(folder + os.sep, "")  # a file beside it (a config, a shard): by its own name
    return message


def current() -> Choice:
    """The choice the sidebar made in this run."""
    return st.session_state.get("_weights_choice") or Choice(weights.BOOK_OPTION)

