"""Counts in words: a number and its noun, singular for one ("1 head", "12 heads", "1 K/V group")."""

from __future__ import annotations


def amount(count: int, noun: str) -> str:
    """``count`` of ``noun`` in words, singular for one: "1 head", "4 heads", "1 K/V group"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
