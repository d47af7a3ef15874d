"""kv-cache feeds a chunk of 2 tokens after a non-empty cache: a mask that does not account for the cached keys
(SDPA's is_causal, aligned to the top-left) fails in words that say so; right modules pass, and a module that takes
one token per cached step (its forward raises on more) has the chunk skipped in words, not failed."""

from pathlib import Path

import torch
from helpers import user_modules as um

from attnviz import checks, kv_cache_rule


def kv_cache(module) -> checks.Check:
    (check,) = checks.check_module(module.eval(), rules=["kv-cache"])
    return check


def built(**kwargs):
    torch.manual_seed(0)
    return um.SDPACache(**kwargs)


def test_the_steps_end_with_a_chunk_after_a_non_empty_cache():
    assert kv_cache_rule.kv_steps(8, kv_cache_rule.kv_prefill(8)) == [(0, 4), (4, 5), (5, 6), (6, 8)]
    assert kv_cache_rule.kv_steps(8, 4, chunk=False) == [(0, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
    assert kv_cache_rule.kv_steps(4, 2) == [(0, 2), (2, 3), (3, 4)]  # one token alone first: no room for a chunk


def test_is_causal_over_the_cache_fails_on_the_chunk_naming_the_top_left_mask():
    check = kv_cache(built(mask="is_causal"))
    assert check.status == "fail", check
    assert check.evidence.startswith("sequence 1, tokens 6 … 7 (a chunk of 2 after 6 tokens cached): the cached "
                                     "output differs from the uncached one by "), check
    assert ("the mask is is_causal=True, which SDPA aligns to the top-left: over the 8 keys the cache holds query 6 "
            "sees key 0 only, query 7 keys 0 … 1, as if the step started at position 0" in check.evidence), check
    assert check.evidence.endswith("after a cache pass an explicit attn_mask whose rows start at the cached tokens' "
                                   "count (query 6 sees keys 0 … 6), or offset the mask by it"), check


def test_an_explicit_mask_offset_by_the_cache_passes_the_chunk():
    check = kv_cache(built(mask="explicit"))
    assert check.status == "pass", check
    assert check.evidence.startswith("two sequences, each after reset_cache(): a prefill of 4 tokens, then 2 tokens "
                                     "one by one and the last 2 in one forward (a chunk after the cache), give the "
                                     "uncached outputs"), check


def test_a_module_that_takes_one_token_per_cached_step_skips_the_chunk_in_words():
    check = kv_cache(built(mask="is_causal", one_token=True))  # is_causal is right for a prefill and for one token
    assert check.status == "pass", check
    assert check.evidence.startswith("two sequences, each after reset_cache(): a prefill of 4 tokens, then 4 tokens "
                                     "one by one, give the uncached outputs"), check
    line = next(number for number, text in enumerate(Path(um.__file__).read_text().splitlines(), start=1)
                if "decode one token at a time after the prefill" in text)
    assert ("(≤ 1e-05) — a chunk of 2 after the cache not checked: a cached forward raised ValueError "
            f"(user_modules.py, line {line}): decode one token at a time after the prefill, got 2 — right if the "
            "module takes one token per cached step; if not, its mask (or positions) does not count the cached keys: "
            "slice it from the cached tokens' count; after 8 tokens the cache holds" in check.evidence), check


def test_the_pass_and_the_failure_reach_the_whole_check():
    failed = {c.rule for c in checks.check_module(built(mask="is_causal").eval()) if c.status == "fail"}
    assert failed == {"kv-cache"}
    assert all(c.status != "fail" for c in checks.check_module(built(mask="explicit").eval()))


def rolling(bug=None):
    torch.manual_seed(0)
    return um.RollingRotaryCache(bug=bug)


def test_a_rolling_window_cache_whose_rotary_offset_is_its_length_names_the_offset_not_the_cache():
    """The cache keeps W − 1 = 2 keys: right for a window of 3.  The rotary offset taken from the cache's length is
    2 at token 4, where the position is 4."""
    check = kv_cache(rolling("offset-from-cache-length"))
    assert check.status == "fail", check
    assert "the cache keeps too little" not in check.evidence, check
    assert check.evidence.startswith("sequence 1, token 4: the cached output differs from the uncached one by "), check
    assert check.evidence.endswith(
        "its query for token 4 is the whole sequence's turned by another angle (the same length, another direction): "
        "rotated at position 2, the number of keys the cache holds (a rolling window of W = 3 keeps at most W − 1 = "
        "2), not the token's position 4 — the rotary position offset is the cache's length, capped at W − 1; take it "
        "from a count of the tokens fed so far (a position counter the window does not cap)"), check


def test_a_rolling_window_cache_rotated_at_its_position_passes():
    check = kv_cache(rolling())
    assert check.status == "pass", check
    assert check.evidence.endswith("after 8 tokens the cache holds 2 tokens of 64 elements (256 bytes) each: k_cache "
                                   "(1, 4, 2, 8), v_cache (1, 4, 2, 8)"), check


class MaskSlicedForTheNewTokens(torch.nn.Module):
    """A cached causal module whose mask is sliced for the new tokens alone, ``mask[:n, :n]``: right for a prefill
    and for one token a step (a 1 × 1 mask hides nothing), no shape for a chunk after the cache."""

    def __init__(self, d_in=8, context_length=16):
        super().__init__()
        self.W_query = torch.nn.Linear(d_in, d_in, bias=False)
        self.W_key = torch.nn.Linear(d_in, d_in, bias=False)
        self.W_value = torch.nn.Linear(d_in, d_in, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.cache_k = self.cache_v = None

    def reset_cache(self):
        self.cache_k = self.cache_v = None

    def forward(self, x, use_cache=False):
        n = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
        if use_cache:
            if self.cache_k is not None:
                keys = torch.cat([self.cache_k, keys], dim=1)  # (b, cached + n, d)
                values = torch.cat([self.cache_v, values], dim=1)  # (b, cached + n, d)
            self.cache_k, self.cache_v = keys, values
        attn_scores = queries @ keys.transpose(1, 2)  # (b, n, cached + n)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:n, :n], -torch.inf)  # the bug: not offset by the cache
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, cached + n)
        return attn_weights @ values  # (b, n, d)


def test_a_chunk_that_raises_names_the_mask_sliced_for_the_new_tokens_as_a_possible_cause():
    torch.manual_seed(0)
    check = kv_cache(MaskSlicedForTheNewTokens())
    assert check.status == "pass", check
    assert ("right if the module takes one token per cached step; if not, its mask (or positions) does not count the "
            "cached keys: slice it from the cached tokens' count" in check.evidence), check
