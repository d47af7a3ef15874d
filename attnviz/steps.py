"""What each step of attention does, in words and tables: the Steps page's text, without Streamlit.

Pure functions of a Trace or an AttentionConfig: the sentence that says what a stage does, the line of
the running source that does it, why dropout did nothing, and the query/key/context tables (pandas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.pipeline import AttentionConfig


def dropout_off_reason(config: AttentionConfig, short: bool = False) -> str:
    """Why the dropout stage does nothing in this run: the Steps page's sentence, or (``short``) the
    shape diagram's label."""
    if not config.spec.dropout:
        return "no dropout in this class" if short else "This variant has no dropout in the book: dropped = weights."
    if not config.train:
        return "dropout off (eval)" if short else (
            "Dropout is off (eval mode): dropped = weights. Turn on 'Dropout active' in the sidebar.")
    return "dropout off (p = 0)" if short else "Dropout p is 0: dropped = weights."
