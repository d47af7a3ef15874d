"""Hostile texts the run tests and the page tests share: markup, special tokens, control and invisible characters,
right-to-left overrides, emoji sequences, whitespace runs and a long paste."""

from __future__ import annotations

HOSTILE_TEXTS = {
    "html": "<img src=x onerror=alert(1)><script>alert(2)</script><b>bold</b>",
    "markdown": "# Title **bold** [link](javascript:alert(1)) `code` $x^2$ :red[red]",
    "endoftext": "a<|endoftext|>b<|endoftext|>",
    "other specials": "<|fim_prefix|><|im_start|>user<|im_end|>",
    "control": "nul\x00bell\x07esc\x1b[31mred\x7f",
    "rtl": "abc\u202edcba\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "zero width": "a\u200bb\u200cc\u200dd\ufeffe",
    "emoji": "👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇺🇦",
    "whitespace runs": " \n\n\t\t   x   \r\n",
    "long": "word " * 3000,
}


# A teacher's English, as long as GPT-2's context: its link fits a URL (english_text).
_SENTENCES = ("The teacher opened the lecture with a question. Why does each word look back at the others, and how "
              "much? Attention answers it: a query meets every key, the scores are scaled, masked and normalised, "
              "and the weights mix the values.\n")


def english_text(tokens_wanted: int = 1024) -> str:
    """Plain English of ``tokens_wanted`` GPT-2 tokens (1,024: the full context)."""
    from attnviz import tokens

    ids = tokens.encode(_SENTENCES * (tokens_wanted // 40 + 1))[:tokens_wanted]  # a sentence line: ~50 tokens
    return tokens.decode(ids)
