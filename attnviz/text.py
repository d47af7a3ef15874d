"""The text a run tokenizes: bounded to ``MAX_CHARS``, valid Unicode, cut to the context length, with notes.

Both the app's runs (:mod:`attnviz.pipeline`) and a user module traced on text (:mod:`attnviz.tracing`) clean
text here, so the same paste gives the same tokens everywhere.
"""

from __future__ import annotations

from attnviz import tokens
from attnviz.config import MAX_CHARS, MAX_CONTEXT_LENGTH, EmptyTextError, InputError


def clean_text(text: str) -> tuple[str, list[str]]:
    """(the text that will be tokenized, notes): bounded to MAX_CHARS, lone surrogates replaced.

    Cheap (no tokenizing) and idempotent: it is the trace cache's key, so a Trace is found again by its
    own ``Trace.text``.  Raises InputError for a non-string and EmptyTextError for blank text."""
    notes = []
    if not isinstance(text, str):
        raise InputError(f"Text must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise EmptyTextError("Type some text to see its attention (the text is empty or only whitespace).")
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS]
        notes.append(f"Only the first {MAX_CHARS:,} characters were tokenized.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
        notes.append("The text contained invalid Unicode (lone surrogates); they were replaced with '?'.")
    return text, notes


def prepare_text(text: str, context_length: int) -> tuple[str, list[int], list[str]]:
    """(text to tokenize, its token ids ≤ context_length, notes); raises EmptyTextError.  A cut at
    ``MAX_CONTEXT_LENGTH`` is attnviz's (a model's context may be longer) and its note says so; a shorter
    ``context_length`` is the run's own (a checkpoint's positions, the book's ``context_length``)."""
    text, notes = clean_text(text)
    token_ids = tokens.encode(text)
    if len(token_ids) > context_length:
        reason = (f"attnviz runs at most {MAX_CONTEXT_LENGTH:,} tokens, GPT-2's context"
                  if context_length >= MAX_CONTEXT_LENGTH else "the context length")
        notes.append(f"The text has {len(token_ids):,} tokens; only the first {context_length:,} are shown "
                     f"({reason}).")
        token_ids = token_ids[:context_length]
    return text, token_ids, notes
