"""GPT-2 byte-pair encoding that works offline, plus readable token pieces.

``tiktoken.get_encoding("gpt2")`` downloads its vocabulary at run time; attnviz ships the same
ranks file (OpenAI's ``r50k_base.tiktoken``, identical to ``gpt2.tiktoken`` in openai-whisper,
MIT licence) as package data and builds the ``tiktoken.Encoding`` from it.
"""

from __future__ import annotations

import base64
import bisect
import functools
import hashlib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from attnviz.words import amount

RANKS_PATH = Path(__file__).parent / "assets" / "gpt2.tiktoken"
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
ENDOFTEXT = "<|endoftext|>"
ENDOFTEXT_ID = 50256
N_VOCAB = 50257
# tiktoken's own r50k_base / gpt2 pre-tokenizer pattern (tiktoken_ext.openai_public.r50k_pat_str).
R50K_PAT_STR = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)


class RanksFileError(RuntimeError):
    """The shipped GPT-2 ranks file is missing or corrupt."""


def counted(n: int) -> str:
    """``n`` tokens in words: "1 token", "6 tokens"."""
    return amount(n, "token")


def load_ranks(path: Path = RANKS_PATH, expected_sha256: str = RANKS_SHA256) -> dict[bytes, int]:
    """Read a ``.tiktoken`` ranks file (``base64(token) rank`` per line) after checking its hash."""
    try:
        contents = path.read_bytes()
    except OSError as exc:
        raise RanksFileError(
            f"GPT-2 vocabulary file not found at {path}. Reinstall attnviz (it ships the file)."
        ) from exc
    digest = hashlib.sha256(contents).hexdigest()
    if digest != expected_sha256:
        raise RanksFileError(
            f"GPT-2 vocabulary file {path} is corrupt: sha256 {digest}, expected {expected_sha256}. "
            "Restore it from git or from openai-whisper==20250625 (whisper/assets/gpt2.tiktoken)."
        )
    ranks = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.lru_cache(maxsize=1)
def get_encoding() -> tiktoken.Encoding:
    """The GPT-2 encoding (50257 ids, ``<|endoftext|>`` = 50256), built offline."""
    return tiktoken.Encoding(
        name="gpt2",
        explicit_n_vocab=N_VOCAB,
        pat_str=R50K_PAT_STR,
        mergeable_ranks=load_ranks(),
        special_tokens={ENDOFTEXT: ENDOFTEXT_ID},
    )


def encode(text: str) -> list[int]:
    """Token ids of ``text``; a literal ``<|endoftext|>`` becomes the special token 50256."""
    return get_encoding().encode(text, allowed_special={ENDOFTEXT}, disallowed_special=())


def decode(token_ids: list[int]) -> str:
    return get_encoding().decode(token_ids)


_VISIBLE = {" ": "·", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _visible_char(char: str) -> str:
    if char in _VISIBLE:
        return _VISIBLE[char]
    if unicodedata.category(char) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"}:  # Zs: e.g. NBSP
        code = ord(char)
        if code < 0x100:
            return f"\\x{code:02x}"
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return char


@functools.lru_cache(maxsize=1 << 16)  # a 1024-token text repeats its tokens: each piece is made once
def display_piece(token_bytes: bytes) -> str:
    """What a learner should see for one token: spaces as ``·``, ``\\n``/``\\t`` and other invisible characters
    escaped, and each byte that is not part of a whole UTF-8 character in the token as ``<0xE2>`` (a space before
    an emoji's first bytes: ``·<0xF0><0x9F>``)."""
    text = token_bytes.decode("utf-8", errors="surrogateescape")  # a byte of no whole character: U+DC80 … U+DCFF
    return "".join(f"<0x{ord(char) - 0xDC00:02X}>" if 0xDC80 <= ord(char) <= 0xDCFF else _visible_char(char)
                   for char in text)


@dataclass(frozen=True)
class Token:
    id: int
    piece: str  # display piece, e.g. "·journey" or "<0xE2>"
    start: int  # character offset into the typed text
    end: int  # character offset one past the token's last character
    special: bool


def pieces(token_ids: list[int]) -> list[Token]:
    """Tokens for given ids (offsets index into ``decode(token_ids)``: the text they were encoded from)."""
    token_bytes = get_encoding().decode_tokens_bytes(token_ids)
    return _tokens_from_bytes(token_ids, token_bytes)


@functools.lru_cache(maxsize=1 << 16)
def _characters(chunk: bytes) -> int:
    """Characters a token's bytes start (every byte but a UTF-8 continuation byte)."""
    return sum(1 for byte in chunk if not 0x80 <= byte < 0xC0)


def _tokens_from_bytes(token_ids, token_bytes) -> list[Token]:
    starts, position = [], 0
    for chunk in token_bytes:
        # a token that starts inside a multi-byte character belongs to that character
        starts.append(max(0, position - (bool(chunk) and 0x80 <= chunk[0] < 0xC0)))
        position += _characters(chunk)
    ends = [max(start, nxt) for start, nxt in zip(starts, starts[1:] + [position])]
    return [
        Token(
            id=token_id,
            piece=display_piece(chunk),
            start=start,
            end=end,
            special=token_id == ENDOFTEXT_ID,
        )
        for token_id, chunk, start, end in zip(token_ids, token_bytes, starts, ends)
    ]


def _continues(byte: int) -> bool:
    """A UTF-8 continuation byte: it carries on the character an earlier byte started."""
    return 0x80 <= byte < 0xC0


SPAN_HELP = ("The characters of the text this token holds, counted from 0, the first and the last both included "
             "(\"chars 1–5\": five characters). A character whose bytes several tokens share, such as an emoji, is "
             "\"part of\" it in each.")


def _chars(first: int, last: int) -> str:
    """Characters ``first`` … ``last``, both included, in words: "char 3", "chars 1–5"."""
    return f"char {first}" if first == last else f"chars {first}–{last}"


def span_labels(token_ids: list[int]) -> list[str]:
    """Each token's characters in words for the token table, as character positions in ``decode(token_ids)``,
    counted from 0, the first and the last both held (:data:`SPAN_HELP`): "char 0" for one character, "chars 1–5"
    for several, "part of “🙂” (char 7)" for a character whose bytes it shares with a neighbouring token
    ("char 6 and part of “🙂” (char 7)": a space, then an emoji's first bytes)."""
    token_bytes = get_encoding().decode_tokens_bytes(token_ids)
    data = b"".join(token_bytes)
    starts = [at for at, byte in enumerate(data) if not _continues(byte)]  # the byte each character starts at
    starts = starts if starts and starts[0] == 0 else [0, *starts]  # bytes before any start: one character

    def part_of(index: int) -> str:
        end = starts[index + 1] if index + 1 < len(starts) else len(data)
        return f"part of “{display_piece(data[starts[index]:end])}” ({_chars(index, index)})"

    labels, first = [], 0
    for chunk in token_bytes:
        last = first + len(chunk)  # the token's bytes are data[first:last]
        lo, hi = bisect.bisect_right(starts, first) - 1, bisect.bisect_right(starts, last - 1) - 1  # its characters
        split_start = 0 < first < len(data) and _continues(data[first])  # its first character began earlier
        split_end = last < len(data) and _continues(data[last])  # its last character goes on in a later token
        whole = range(lo + split_start, hi + 1 - split_end)  # the characters it holds every byte of
        parts = [part_of(lo)] if split_start or (split_end and lo == hi) else []
        parts += [_chars(whole.start, whole.stop - 1)] if whole else []
        parts += [part_of(hi)] if split_end and hi != lo else []
        labels.append(" and ".join(parts))
        first = last
    return labels
