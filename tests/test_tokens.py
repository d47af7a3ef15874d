"""attnviz.tokens: the offline GPT-2 encoding, display pieces and character offsets."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz import tokens

# Chapter 2 (2.5, byte pair encoding) prints these ids for this text.
BOOK_CH2_TEXT = "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace."
BOOK_CH2_IDS = [15496, 11, 466, 345, 588, 8887, 30, 220, 50256, 554,
                262, 4252, 18250, 8812, 2114, 286, 617, 34680, 27271, 13]
JOURNEY_TEXT = "Your journey starts with one step"
JOURNEY_IDS = [7120, 7002, 4940, 351, 530, 2239]


def tokens_of(text: str) -> list[tokens.Token]:
    """The tokens a run of ``text`` shows (``Trace.token_details``): its ids' pieces, offsets into ``text``."""
    return tokens.pieces(tokens.encode(text))


# --- the encoding ---------------------------------------------------------------------------------


def test_encoding_is_gpt2_sized():
    enc = tokens.get_encoding()
    assert enc.n_vocab == 50257
    assert enc.eot_token == 50256
    assert enc.encode_single_token(tokens.ENDOFTEXT) == tokens.ENDOFTEXT_ID == 50256


def test_book_chapter2_ids():
    assert tokens.encode(BOOK_CH2_TEXT) == BOOK_CH2_IDS
    assert tokens.decode(BOOK_CH2_IDS) == BOOK_CH2_TEXT


def test_journey_sentence_is_one_token_per_word():
    assert tokens.encode(JOURNEY_TEXT) == JOURNEY_IDS
    assert [t.piece for t in tokens_of(JOURNEY_TEXT)] == ["Your", "·journey", "·starts", "·with", "·one", "·step"]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_decode_encode_round_trip(text):
    assert tokens.decode(tokens.encode(text)) == text


@pytest.mark.parametrize(
    "text", ["<|endoftext|>", "a<|endoftext|>b", BOOK_CH2_TEXT, "<|endoftext|><|endoftext|>", "<|endoftext"]
)
def test_endoftext_in_text_does_not_raise_and_is_special(text):
    toks = tokens_of(text)
    special = [t for t in toks if t.special]
    assert [t.id for t in special] == [50256] * text.count("<|endoftext|>")
    assert all(t.piece == "<|endoftext|>" for t in special)
    assert all(text[t.start : t.end] == "<|endoftext|>" for t in special)
    assert not any(t.special for t in toks if t.id != 50256)
    assert tokens.decode([t.id for t in toks]) == text


# --- display pieces -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        (" journey", "·journey"),
        ("\n", "\\n"),
        ("\t", "\\t"),
        ("\r", "\\r"),
        ("\x00", "\\x00"),
        ("\u200b", "\\u200b"),  # zero-width space: one GPT-2 token (9525)
        ("€", "€"),  # a valid multi-byte token shows as itself
    ],
)
def test_single_token_display_piece(text, piece):
    toks = tokens_of(text)
    assert len(toks) == 1
    assert toks[0].piece == piece
    assert (toks[0].start, toks[0].end) == (0, len(text))


def _split_character_token_ids() -> tuple[str, list[int]]:
    """An emoji whose UTF-8 bytes GPT-2 splits across tokens, none valid UTF-8 alone."""
    enc = tokens.get_encoding()
    for char in "😀🤗🦙💡":
        ids = tokens.encode(char)
        chunks = [enc.decode_single_token_bytes(i) for i in ids]
        if len(ids) > 1 and all(_invalid_utf8(chunk) for chunk in chunks):
            return char, ids
    raise AssertionError("no split emoji found; GPT-2 should split 4-byte emoji")


def _invalid_utf8(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_token_bytes_invalid_alone_show_as_hex_bytes():
    char, ids = _split_character_token_ids()
    enc = tokens.get_encoding()
    chunks = [enc.decode_single_token_bytes(i) for i in ids]
    shown = [t.piece for t in tokens.pieces(ids)]
    expected = ["".join(f"<0x{byte:02X}>" for byte in chunk) for chunk in chunks]
    assert shown == expected
    assert all("\ufffd" not in piece for piece in shown)
    assert "".join(shown) == "".join(f"<0x{byte:02X}>" for byte in char.encode("utf-8"))


def test_emoji_pieces_known_example():
    # 😀 = F0 9F 98 80, split by GPT-2 as [47249 = F0 9F 98, 222 = 80]
    assert tokens.encode("😀") == [47249, 222]
    assert [t.piece for t in tokens_of("😀")] == ["<0xF0><0x9F><0x98>", "<0x80>"]


def test_a_space_before_an_emojis_first_bytes_shows_as_a_dot():
    """GPT-2 merges a space with an emoji's first bytes (" \xF0\x9F"): the space is "·" as everywhere else, only the
    bytes of no whole character are hex."""
    assert tokens.encode(" 🤖") == [12520, 97, 244]
    assert [t.piece for t in tokens_of(" 🤖")] == ["·<0xF0><0x9F>", "<0xA4>", "<0x96>"]
    assert tokens.display_piece(b"\xc3\xa9\xe2\x82") == "é<0xE2><0x82>"  # a whole é, then a € begun


def test_vocabulary_never_shows_replacement_for_invalid_bytes():
    enc = tokens.get_encoding()
    for token_id in range(256, 2256):  # a slice of merged tokens plus ...
        chunk = enc.decode_single_token_bytes(token_id)
        if _invalid_utf8(chunk):
            assert "\ufffd" not in tokens.display_piece(chunk)
    for byte in range(256):  # ... every single byte
        piece = tokens.display_piece(bytes([byte]))
        assert "\ufffd" not in piece
        if byte >= 0x80:  # never valid UTF-8 on its own
            assert piece == f"<0x{byte:02X}>"


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\u200b", "\u200f", "\u202e", "\u2028", "\ufeff"])
def test_invisible_characters_are_escaped_unambiguously(char):
    piece = tokens.display_piece(char.encode("utf-8"))
    assert piece.startswith("\\")
    assert codecs.decode(piece, "unicode_escape") == char


@pytest.mark.parametrize("char", ["\U000e0001", "\U000f0000"])
def test_invisible_astral_characters_are_escaped_unambiguously(char):
    piece = tokens.display_piece(char.encode("utf-8"))
    assert codecs.decode(piece, "unicode_escape") == char


# --- character offsets ----------------------------------------------------------------------------


def _check_offsets(text: str, toks: list[tokens.Token]) -> None:
    starts = [t.start for t in toks]
    assert starts == sorted(starts)
    assert all(0 <= t.start <= t.end <= len(text) for t in toks)
    assert "".join(text[t.start : t.end] for t in toks) == text
    enc = tokens.get_encoding()
    chunks = [enc.decode_single_token_bytes(t.id) for t in toks]
    if not any(_invalid_utf8(chunk) for chunk in chunks):  # tokens align with characters
        assert [text[t.start : t.end] for t in toks] == [chunk.decode("utf-8") for chunk in chunks]


def _spans_by_last_byte(text: str, toks: list[tokens.Token]) -> list[str]:
    """Each token's characters: those whose last UTF-8 byte lies in that token."""
    enc = tokens.get_encoding()
    token_ends, end = [], 0
    for t in toks:
        end += len(enc.decode_single_token_bytes(t.id))
        token_ends.append(end)  # byte offset one past the token
    spans, byte_end, owner = [""] * len(toks), 0, 0
    for char in text:
        byte_end += len(char.encode("utf-8"))
        while token_ends[owner] < byte_end:
            owner += 1
        spans[owner] += char
    return spans


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_offsets_reconstruct_random_text(text):
    toks = tokens_of(text)
    _check_offsets(text, toks)
    assert [text[t.start : t.end] for t in toks] == _spans_by_last_byte(text, toks)


@pytest.mark.parametrize(
    "text", [JOURNEY_TEXT, BOOK_CH2_TEXT, "日本語のテキスト", "naïve café 😀🤗 €5", "a\n\tb\x00\u200bc", " " * 7 + "x"]
)
def test_offsets_examples(text):
    _check_offsets(text, tokens_of(text))


def test_journey_offsets_exact():
    assert [(t.start, t.end) for t in tokens_of(JOURNEY_TEXT)] == [
        (0, 4), (4, 12), (12, 19), (19, 24), (24, 28), (28, 33)
    ]


@pytest.mark.parametrize(
    ("text", "offsets"),
    [("😀", [(0, 0), (0, 1)]), ("日本語", [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 3)])],
)
def test_a_split_character_belongs_to_the_token_that_completes_it(text, offsets):
    toks = tokens_of(text)
    assert [(t.start, t.end) for t in toks] == offsets
    assert [text[t.start : t.end] for t in toks] == _spans_by_last_byte(text, toks)


def test_split_character_offsets_give_the_whole_character_to_one_token():
    toks = tokens_of("a😀b")
    assert [t.id for t in toks] == tokens.encode("a😀b")
    spans = ["a😀b"[t.start : t.end] for t in toks]
    assert "".join(spans) == "a😀b"
    assert spans.count("😀") == 1


@pytest.mark.parametrize(("text", "labels"), [
    ("Your journey", ["chars 0–3", "chars 4–11"]),
    ("I 🤖!", ["char 0", "char 1 and part of “🤖” (char 2)", "part of “🤖” (char 2)", "part of “🤖” (char 2)",
              "char 3"]),
    ("😀", ["part of “😀” (char 0)", "part of “😀” (char 0)"]),
    ("a<|endoftext|>b", ["char 0", "chars 1–13", "char 14"]),
])
def test_span_labels_say_which_character_a_split_token_is_part_of(text, labels):
    """No empty span for a token holding only bytes of a character split over tokens: the table says which
    character it is part of.  Characters are counted from 0 and a span names its first and last character, both
    held: "I" is char 0 (the half-open "0–1" read as two characters, and "chars 7–8" as two for one emoji)."""
    assert tokens.span_labels(tokens.encode(text)) == labels


def test_pieces_offsets_index_into_decoded_text():
    ids = tokens.encode(BOOK_CH2_TEXT)
    toks = tokens.pieces(ids)
    assert [t.id for t in toks] == ids
    _check_offsets(tokens.decode(ids), toks)


# --- the ranks file -------------------------------------------------------------------------------


def test_load_ranks_reads_the_shipped_file():
    ranks = tokens.load_ranks()
    assert len(ranks) == 50256
    assert ranks[b"!"] == 0
    assert ranks[b" journey"] == 7002
    assert sorted(ranks.values()) == list(range(50256))


def test_tampered_ranks_file_raises(tmp_path):
    contents = tokens.RANKS_PATH.read_bytes()
    tampered = tmp_path / "gpt2.tiktoken"
    tampered.write_bytes(contents.replace(b" 7002\n", b" 7003\n", 1))
    assert tampered.read_bytes() != contents
    with pytest.raises(tokens.RanksFileError, match="corrupt"):
        tokens.load_ranks(tampered)


def test_truncated_ranks_file_raises(tmp_path):
    truncated = tmp_path / "gpt2.tiktoken"
    truncated.write_bytes(tokens.RANKS_PATH.read_bytes()[:-100])
    with pytest.raises(tokens.RanksFileError, match="corrupt"):
        tokens.load_ranks(truncated)


def test_missing_ranks_file_raises(tmp_path):
    missing = tmp_path / "nowhere" / "gpt2.tiktoken"
    with pytest.raises(tokens.RanksFileError, match="not found"):
        tokens.load_ranks(missing)


def test_ranks_file_error_is_runtime_error():
    assert issubclass(tokens.RanksFileError, RuntimeError)


def test_counted_says_one_token_and_many_tokens():
    assert [tokens.counted(n) for n in (0, 1, 2, 1024)] == ["0 tokens", "1 token", "2 tokens", "1,024 tokens"]
