"""kv-cache names the cause the evidence shows — a window cache one token too long, a position counted twice, every
tensor that grows with the tokens in the PASS line, a reset that keeps a rotary module's position — and the
half-precision words name what really ran in low precision: SDPA's inputs, a softmax on scores cast to float16, a
float16 module refused for a float32 copy that checks the computation, not its precision."""

import math

import pytest
import torch
from helpers import user_modules as um
from torch import nn

from attnviz import checks, tracing
from attnviz.kv_cache_rule import kv_cache


def built(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs).eval()


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module)}


# ------------------------------------------------------------------ a rolling window cache


def test_kv_cache_passes_a_rolling_window_cache_that_keeps_w_minus_one_keys():
    """Mistral's rolling cache keeps W − 1 keys: the step adds its own and sees W."""
    results = verdicts(built(um.RollingWindowCache))
    assert [rule for rule, check in results.items() if check.status == "fail"] == []
    assert results["kv-cache"].status == "pass" and results["kv-cache"].evidence.endswith(
        "; after 8 tokens the cache holds 2 tokens of 128 elements (512 bytes) each: cache_k (1, 4, 2, 16), "
        "cache_v (1, 4, 2, 16)"), results["kv-cache"]


def test_kv_cache_names_a_rolling_window_cache_that_keeps_one_key_too_many():
    """Keeping W keys, the step sees W + 1: the cache keeps one too many, not too few."""
    check = verdicts(built(um.RollingWindowCache, bug="keeps-window"))["kv-cache"]
    assert check.status == "fail" and "too little" not in check.evidence, check
    assert check.evidence.startswith("sequence 1, token 4: the cached output differs from the uncached one by"), check
    assert check.evidence.endswith(
        "the step attends over 4 keys where a window of W = 3 allows 3: the cache keeps one token too many — keep "
        "the last W − 1 = 2 before appending the new token (or the last W = 3 after it)"), check


def test_kv_cache_still_names_a_rolling_window_cache_that_keeps_too_few():
    check = verdicts(built(um.RollingWindowCache, bug="keeps-window-minus-two"))["kv-cache"]
    assert check.status == "fail" and check.evidence.endswith(
        "the step attends over only 2 keys where a window of W = 3 needs 3: the cache keeps too little — keep the "
        "last W − 1 = 2 before appending the new token (or the last W = 3 after it)"), check


def test_kv_cache_names_a_window_cache_a_chunk_attends_over_after_trimming_it():
    """One token at a time, the last W keys are the window's; a chunk of 2 needs W − 1 before its first query."""
    module = built(um.LearnerCachedSWA, d_in=16, d_out=16, context_length=16, dropout=0.0, num_heads=4,
                   sliding_window_size=3, bug="attends-the-trimmed-cache")
    check = kv_cache(module, torch.randn(2, 6, 16))  # the rule alone, as check_module runs it: no trace first
    assert check.status == "fail", check
    assert check.evidence.startswith("sequence 1, tokens 4 … 5 (a chunk of 2 after 4 tokens cached)"), check
    assert check.evidence.endswith(
        "the chunk's first query (token 4) sees only 2 keys where a window of W = 3 shows it 3: the step attends over "
        "the last 3 keys, what the cache keeps after the step, and a chunk of 2 needs the W − 1 = 2 keys before it as "
        "well as its own — attend over the cached keys and the new ones (the last W − 1 + 2 = 4), and trim the cache "
        "after the step"), check


# ------------------------------------------------------------------ a position counted twice


def test_kv_cache_names_a_position_counter_that_counts_each_token_twice():
    """Meta's preallocated cache read up to start_pos: a start_pos advanced twice reads empty slots, not tokens held
    twice."""
    check = verdicts(built(um.MetaStyleCache, bug="advances-twice"))["kv-cache"]
    assert check.status == "fail" and "more than once" not in check.evidence, check
    assert check.evidence.endswith(
        "the position counts each token twice: start_pos is 8 after 4 tokens, where it should be 4, and moves by 2 "
        "for 1 token, so the step treats token 4 as position 8 — add the new tokens' count (x.shape[1]) once per "
        "cached forward"), check
    assert verdicts(built(um.MetaStyleCache))["kv-cache"].status == "pass"


class FilledUpTo(nn.Module):
    """A cache allocated once, read up to ``filled`` — a counter under a name of its own — which each cached forward
    moves on twice: after the write, and again at its end."""

    def __init__(self, d_in=32, num_heads=4, context_length=32):
        super().__init__()
        self.h, self.hd = num_heads, d_in // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_in, bias=False)
        self.register_buffer("k_slots", torch.zeros(1, num_heads, context_length, self.hd))  # (1, h, ctx, hd)
        self.register_buffer("v_slots", torch.zeros(1, num_heads, context_length, self.hd))  # (1, h, ctx, hd)
        self.filled = 0

    def reset_cache(self):
        self.k_slots.zero_()
        self.v_slots.zero_()
        self.filled = 0

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)  # (b, h, n, hd) each
        if use_cache:
            self.k_slots[:, :, self.filled:self.filled + n] = k
            self.v_slots[:, :, self.filled:self.filled + n] = v
            self.filled += n
            k, v = self.k_slots[:, :, :self.filled], self.v_slots[:, :, :self.filled]  # (1, h, nk, hd) each
        nk = k.shape[2]
        hidden = torch.arange(nk)[None, :] > torch.arange(nk - n, nk)[:, None]  # (n, nk)
        s = (q @ k.transpose(-1, -2) / math.sqrt(self.hd)).masked_fill(hidden, float("-inf"))  # (b, h, n, nk)
        if use_cache:
            self.filled += n  # the bug: moved on a second time
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)  # (b, n, d)


def test_kv_cache_names_the_empty_slots_of_a_cache_read_past_its_tokens():
    """Without a counter under a usual name, the step's keys show it: 4 of the 9 it attends over are all zeros."""
    check = verdicts(built(FilledUpTo))["kv-cache"]
    assert check.status == "fail" and check.evidence.endswith(
        "the step attends over 9 keys after 5 tokens, and 4 of them are all zeros: cache slots no token was written "
        "to — the position it reads the cache up to runs ahead of the tokens fed; it must count them"), check


# ------------------------------------------------------------------ what the PASS line counts


def test_kv_cache_pass_counts_every_cache_tensor_that_grows_not_only_those_the_reset_empties():
    """The reset empties k_cache alone; the forward starts a new cache when k_cache is None, so v_cache is replaced
    too and the module is right — and v_cache holds as much as k_cache."""
    check = verdicts(built(um.LlamaCache, bug="reset-clears-k-only"))["kv-cache"]
    assert check.status == "pass" and check.evidence.endswith(
        "; after 8 tokens the cache holds 8 tokens of 64 elements (256 bytes) each: k_cache (1, 2, 8, 16), "
        "v_cache (1, 2, 8, 16)"), check


# ------------------------------------------------------------------ a reset that keeps the position


def test_kv_cache_names_a_reset_that_keeps_a_rotary_modules_position_in_words_true_of_it():
    """The mask comes from the cache's length and rotary scores depend only on i − j: the second sequence's outputs
    agree though it starts at pos = 8."""
    check = verdicts(built(um.LlamaCache, bug="reset-forgets-position"))["kv-cache"]
    assert check.status == "fail", check
    assert check.evidence.startswith(
        "the cached outputs agree with the uncached ones, but the reset forgets the position: pos is 12 after 4 "
        "tokens of sequence 2, where it should be 4 (the reset left it at 8; "), check
    assert "rotary scores depend only on the distance i − j" in check.evidence, check
    assert "a later row of the causal mask" not in check.evidence, check
    assert check.evidence.endswith("— set it back to 0 in the reset"), check


def test_kv_cache_says_why_a_counter_ahead_of_a_masked_cache_agrees():
    """The book's mask buffer sliced at a counter one ahead: a later row of the causal mask still shows every key to
    one token a step (on 4 tokens kv-cache feeds no chunk, whose second query would see a key too many)."""
    torch.manual_seed(0)
    module = um.LearnerCachedMHA(32, 32, 16, 0.0, 4, bug="one-ahead").eval()
    (check,) = checks.check_module(module, torch.randn(2, 4, 32), rules=["kv-cache"])  # (b, n, d_in)
    assert check.status == "fail" and "ptr_current_pos is 3 after 2 tokens of sequence 1, where it should be 2" \
        in check.evidence, check
    assert "a later row of the causal mask still shows every cached key" in check.evidence, check
    assert "rotary" not in check.evidence, check
    assert check.evidence.endswith("add exactly the new tokens' count (x.shape[1]) after each cached forward"), check


# ------------------------------------------------------------------ half precision


def test_a_bfloat16_sdpa_is_not_named_a_bfloat16_softmax():
    """SDPA computes its softmax in float32 whatever its inputs: the rows sum to 1, and the context matches the
    reference to bfloat16's rounding of its inputs, said as such."""
    results = verdicts(built(um.BFloat16SDPA))
    assert results["rows-sum-to-one"].status == "pass", results["rows-sum-to-one"]
    reference = results["matches-reference"]
    assert reference.status == "pass" and "the attention runs on bfloat16 Q, K and V" in reference.evidence, reference
    assert not [check for check in results.values() if "softmax runs in" in check.evidence or "upcast" in
                check.evidence]


def test_a_bfloat16_sdpa_with_a_wrong_scale_still_fails_matches_reference():
    check = verdicts(built(um.BFloat16SDPA, scale=1.0))["matches-reference"]
    assert check.status == "fail" and "the attention runs on bfloat16 Q, K and V" in check.evidence, check
    assert "softmax runs in" not in check.evidence


def test_scaling_and_matches_reference_read_through_scores_cast_to_float16():
    results = verdicts(built(um.HalfScoresSoftmax))
    assert results["scaling"].status == "pass", results["scaling"]
    assert "the softmax runs in float16" in results["rows-sum-to-one"].evidence
    assert results["matches-reference"].status != "skip", results["matches-reference"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_module_is_refused_with_what_a_float32_copy_does_not_check(dtype):
    module = um.CausalSelfAttention(n_embd=16, n_head=4, flash=False).to(dtype)
    with pytest.raises(tracing.TraceError) as caught:
        checks.check_module(module)
    message = str(caught.value)
    assert "copy.deepcopy(module).float()" in message
    assert "checks the computation, not its precision" in message
    overflow = "a score above 65,504 overflows to ∞"
    assert (overflow in message) == (dtype == torch.float16), message
