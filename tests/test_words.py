"""Counts in words: singular for one, whatever the noun."""

from attnviz.words import amount, listed, plural


def test_amount_is_singular_for_one_only():
    assert [amount(n, "head") for n in (0, 1, 2, 12)] == ["0 heads", "1 head", "2 heads", "12 heads"]
    assert amount(1, "K/V group") == "1 K/V group"
    assert amount(4, "K/V group") == "4 K/V groups"


def test_listed_is_singular_for_one_item_only():
    assert listed("position", [3]) == "position 3"
    assert listed("query row", [0, 1]) == "query rows 0, 1"
    assert listed("position", list(range(30)), limit=3) == "positions 0, 1, 2, … (30 positions)"
    assert listed("position", list(range(3)), limit=3) == "positions 0, 1, 2"


def test_a_noun_with_its_own_plural_takes_it_for_any_count_but_one():
    assert [amount(n, "query", "queries") for n in (0, 1, 2)] == ["0 queries", "1 query", "2 queries"]
    assert plural(1, "query", "queries") == "query"
    assert plural(3, "key", "keys") == "keys"


def test_amount_writes_a_count_as_every_page_writes_numbers():
    """A count groups its thousands ("1,024 tokens"), as every other number on the pages does."""
    assert amount(1024, "token") == "1,024 tokens"
    assert amount(131072, "position") == "131,072 positions"
