"""The ``weights`` and ``layer`` settings: which weights this session may pick, the model behind the choice
(loaded once per server), and a page's request to switch to another option (:func:`select_weights`).

A name from the URL or a widget is only compared with the names :func:`attnviz.weights.options` lists
(:func:`choose`): no string from the browser reaches the file system.  Models trained in a session are offered to that
session only, stored server-side under an opaque id (:func:`attnviz.weights.register_session_model`, which the
Train page's worker calls with :func:`session_id`).

Every page reads a model through :func:`load`: a checkpoint that cannot be read — also one deleted, truncated or
replaced on disk after the sidebar listed it — is a CheckpointError that names it by its listed name, says what
happened and what to do (:func:`unreadable`), and holds no path of the server's file system.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from attnviz import weights
from attnviz.models import CheckpointError, GPTModel
from attnviz.words import markdown_escape

WEIGHTS_REQUEST = "_weights_request"  # an option a page picked (select_weights), applied before the sidebar is drawn


def session_id() -> str:
    """This browser session's id (Streamlit's), the key of its trained models."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


_listed_names: dict[str, str] = {}  # ref -> the name it was listed under (kept when it is listed no more)


def options() -> list[weights.Option]:
    """The weights this session may pick: the book's classes, the bundled model, checkpoints, its trained models."""
    listed = weights.options(session_id())
    _listed_names.update((option.ref, option.name) for option in listed if option.ref is not None)
    return listed


def load(ref: str) -> GPTModel:
    """The model behind the Weights ref ``ref``, for a page: a CheckpointError in words with its listed name
    (:func:`unreadable`)."""
    try:
        return weights.load(ref)
    except CheckpointError as exc:
        raise CheckpointError(unreadable(exc, ref)) from None


@contextlib.contextmanager
def said_if_unreadable() -> Iterator[None]:
    """Around a part of a page that reads a model with :func:`load` after the page's run was set up (a fragment's
    rerun, a panel opened later): a checkpoint that cannot be loaded now — changed or deleted on disk since — stops
    that part with the warning in words, where it would have been drawn."""
    try:
        yield
    except CheckpointError as exc:
        st.warning(markdown_escape(str(exc)), icon=":material/back_hand:")


def unreadable(exc: CheckpointError, ref: str) -> str:
    """What a page says when the checkpoint ``ref`` cannot be loaded: its listed name, what happened — it is gone
    from the disk, it changed on disk since it was loaded, or it could not be loaded — the loader's reason and what
    to do; never a path of the server's file system."""
    name = _listed_names.get(ref) or "The checkpoint"
    if not ref.startswith(weights.SESSION_PREFIX) and not os.path.exists(ref):
        return (f"{name} is no longer on the server: it was deleted or moved after attnviz listed it. Put it back, or "
                "pick other weights under Weights.")
    reason = without_paths(_named(str(exc), name, ref))
    if weights.MODELS.has_loaded(ref):
        return (f"{name} changed on disk since attnviz loaded it, and cannot be loaded now: {reason} Until it is "
                "fixed, pick other weights under Weights.")
    return f"{name} could not be loaded: {reason}"


def select_weights(name: str) -> None:
    """Make the listed option ``name`` this session's weights from the next run on (layer 0, causal on;
    :func:`attnviz.ui.state.settings_from_url` applies it): the sidebar's widgets are drawn before a page runs, so
    a page cannot set their values in its own run."""
    st.session_state[WEIGHTS_REQUEST] = name


@dataclass(frozen=True)
class Choice:
    """The current weights: the option, the sizes of its model (None for the book's classes or on error), what
    the page says when the file could not be loaded (:func:`unreadable`)."""

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
            model = load(option.ref)
    except CheckpointError as exc:
        return Choice(option, error=str(exc))
    return Choice(option, sizes=weights.sizes(model))


def _named(message: str, name: str, ref: str) -> str:
    """``message`` with the checkpoint's path on the server (the file, or the folder it is in) put as its listed
    ``name``: the page shows only the name (:mod:`attnviz.models.discovery`)."""
    path, real = Path(ref), Path(os.path.realpath(ref))  # realpath: a link loop is no error
    for shown in sorted({str(path), str(real)}, key=len, reverse=True):
        message = message.replace(shown, name)
    for folder in sorted({str(path.parent), str(real.parent)}, key=len, reverse=True):
        message = message.replace(folder + os.sep, "")  # a file beside it (a config, a shard): by its own name
    return message


_PART = r"[^\s'\"()<>,;:/\\]+"  # a word of a path's part: no space, quote, bracket, comma, colon or separator
# an absolute path (POSIX, from ~, or Windows) of two or more parts — not the // of a URL.  A folder on it may have
# spaces in its name (words joined by single spaces, up to its separator; a sentence never ends inside one); the
# last part ends at a space, a quote, a bracket or a comma
_ABSOLUTE_PATH = re.compile(
    rf"(?<![\w.~])(?<!:/)(?:[A-Za-z]:[\\/]|~?[/\\])(?:{_PART}(?:(?<![.!?]) {_PART})*[/\\])+[^\s'\"()<>,;:/\\]*"
)


def without_paths(message: str) -> str:
    """``message`` with any absolute path left in it (a file the loader named that is not beside the checkpoint)
    cut to its last part."""
    return _ABSOLUTE_PATH.sub(lambda match: Path(match.group(0).replace("\\", "/")).name or "…", message)


def current() -> Choice:
    """The choice the sidebar made in this run."""
    return st.session_state.get("_weights_choice") or Choice(weights.BOOK_OPTION)

