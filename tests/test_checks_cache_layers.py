"""kv-cache reads a model of several attention layers layer by layer: a cached step that differs is named by the layer
whose step shows why ("attention 2 of 2 on line N: …"), held to that layer's own window, position counter and rotary;
each layer's cache is held to its own sizes, and a cache the caller holds to each layer's window; a block that wraps
one attention is held to the wrapped attention's window; layers that keep their own cache lengths (the book's
``window_size``) are each read with their own; a reset that keeps one layer's cache names that layer."""

import pytest
import torch
from helpers import user_modules as um
from helpers.source_lines import line_of

from attnviz import checks

MHA_LINE = line_of(um.LearnerCachedMHA.forward, "torch.softmax")  # the cached MultiHeadAttention's softmax
GQA_LINE = line_of(um.LearnerCachedGQA.forward, "torch.softmax")
SWA_LINE = line_of(um.LearnerCachedSWA.forward, "torch.softmax")
ROLLING_LINE = line_of(um.RollingWindowCache.forward, "s.softmax(-1)")
PAST_LINE = line_of(um.PastArgument.attend, "scaled_dot_product_attention")


def kv_verdict(module) -> checks.Check:
    return checks.check_module(module, rules=["kv-cache"])[0]


def mha(bug=None):
    return um.LearnerCachedMHA(16, 16, 16, 0.0, 4, bug=bug)  # 4 heads of 4


def gqa(bug=None, rotary=False):
    return um.LearnerCachedGQA(16, 16, 16, 0.0, 4, num_kv_groups=2, rotary=rotary, bug=bug)  # 2 K/V heads of 4


def swa(bug=None):
    return um.LearnerCachedSWA(16, 16, 16, 0.0, 2, sliding_window_size=3, bug=bug)


PLAN = ("two sequences, each after reset_kv_cache(): a prefill of 4 tokens, then 2 tokens one by one and the last 2 in "
        "one forward (a chunk after the cache), give the uncached outputs (≤ 1e-05)")
PAST_PLAN = ("two sequences: a prefill of 4 tokens, then 2 tokens one by one and the last 2 in one forward (a chunk "
             "after the cache), each given the cache the forward before returned (past_key_values), give the uncached "
             "outputs (≤ 1e-05)")
NEW_TOKENS_MASK = ("the mask is built for the new tokens alone: it treats token 4 as position 0, so it sees only key 0 "
                   "of the 5 the cache holds; take the mask's rows from the position the step starts at (4) and as "
                   "many columns as the cache holds")


@pytest.mark.parametrize(("layers", "step", "cause"), [
    (lambda: (mha(), mha("appends-twice")), "token 4",
     f"attention 2 of 2 on line {MHA_LINE}: the cache holds tokens more than once: layers[1].cache_k holds 9 tokens "
     "after 5, and 2 tokens after the first alone — add each forward's keys and values once"),
    (lambda: (swa(), mha("keeps-too-little")), "tokens 0 … 3 (the prefill)",
     f"attention 2 of 2 on line {MHA_LINE}: the cache keeps too little: layers[1].cache_k holds 3 tokens after 4 — "
     "every earlier token's keys and values must stay"),
    (lambda: (mha("mask-for-new-tokens"), mha()), "token 4", f"attention 1 of 2 on line {MHA_LINE}: {NEW_TOKENS_MASK}"),
    (lambda: (gqa(rotary=True), gqa("no-offset", rotary=True)), "token 4",
     f"attention 2 of 2 on line {GQA_LINE}: the step hides the right keys, but its query for token 4 is the whole "
     "sequence's turned by another angle (the same length, another direction): the new queries and keys are rotated "
     "at the wrong position — rotate them at offset start_pos = 4 (the tokens already cached)"),
    (lambda: (mha(), swa("cached-mask-no-window")), "tokens 0 … 3 (the prefill)",
     f"attention 2 of 2 on line {SWA_LINE}: the cached step's mask does not apply the window: the cache holds all 4 "
     "tokens fed, and query 3 sees 4 keys where a window of W = 3 allows 3 — hide the keys W or more behind "
     "(diff >= W) in the cached forwards' mask too, as the uncached one does"),
    (lambda: (mha(), um.RollingWindowCache(16, 4, sliding_window=3, bug="keeps-window")), "token 4",
     f"attention 2 of 2 on line {ROLLING_LINE}: the step attends over 4 keys where a window of W = 3 allows 3: the "
     "cache keeps one token too many — keep the last W − 1 = 2 before appending the new token (or the last W = 3 "
     "after it)"),
    (lambda: (mha(), mha("position-never-advances")), "token 4",
     f"attention 2 of 2 on line {MHA_LINE}: the position never advances: ptr_current_pos is still 0 after 5 tokens, so "
     "the mask (or the rotary angles) treat a later token as position 0; add the new tokens' count after each cached "
     "forward"),
], ids=["appends-twice", "full-keeps-too-little-beside-window", "first-layer-mask", "rotary-no-offset",
        "window-mask-beside-full", "rolling-window-keeps-one-too-many", "position-never-advances"])
def test_kv_cache_names_the_layer_whose_cached_step_is_wrong(layers, step, cause):
    """One layer of two has a cache bug: the failure names that layer, held to its own window (a full layer beside a
    window layer must keep every token; a window layer's mask and rolling cache are its own), position counter and
    rotary — where it read the first attention, or the model as one, and said the step "does not compute what the
    whole sequence computes" or blamed the full layer beside it for a window its mask does not apply."""
    torch.manual_seed(0)
    check = kv_verdict(um.CachedLayers(*layers()).eval())
    assert check.status == "fail" and check.evidence.startswith(f"sequence 1, {step}: the cached output differs from "
                                                                "the uncached one by "), check
    assert check.evidence.endswith(f" — {cause}"), check


KEEPS = ("attention {n} of 2 on line {line}: after reset_kv_cache() the next sequence still attends over the last "
         "one's keys in this layer: empty layers[{i}].cache_k/layers[{i}].cache_v in the reset "
         "(layers[{i}].reset_cache())")
RESETS_NOTHING = ("attention {n} of 2 on line {line}: reset_kv_cache() resets nothing in this layer: the second "
                  "sequence starts at ptr_current_pos = 8, not 0, and still attends over the first one's keys "
                  "(layers[{i}].cache_k/layers[{i}].cache_v keep them) — in the reset (layers[{i}].reset_cache()), "
                  "empty layers[{i}].cache_k/layers[{i}].cache_v and set ptr_current_pos back to 0")


@pytest.mark.parametrize(("layers", "cause"), [
    (lambda: (mha(), mha("reset-keeps-cache")), KEEPS.format(n=2, i=1, line=MHA_LINE)),
    (lambda: (mha("reset-keeps-cache"), mha()), KEEPS.format(n=1, i=0, line=MHA_LINE)),
    (lambda: (mha(), mha("never-resets")), RESETS_NOTHING.format(n=2, i=1, line=MHA_LINE)),
], ids=["second-keeps-its-cache", "first-keeps-its-cache", "second-never-resets"])
def test_kv_cache_names_the_layer_whose_cache_the_reset_keeps(layers, cause):
    """The model's reset_kv_cache() leaves one layer's cache (and perhaps its position) as the first sequence left it:
    the failure names that layer as every other layer's failure does, "attention 2 of 2 on line N", and reads that
    layer's own position counter — where it named the tensors alone and read only the model's ints."""
    torch.manual_seed(0)
    check = kv_verdict(um.CachedLayers(*layers()).eval())
    assert check.status == "fail" and check.evidence.startswith("sequence 2, tokens 0 … 3 (the prefill): the cached "
                                                                "output differs from the uncached one by "), check
    assert check.evidence.endswith(f" — {cause}"), check


def test_kv_cache_fails_a_layers_position_counter_that_runs_ahead_of_the_tokens():
    """The second layer's counter is one ahead after the prefill: on 4 tokens (no chunk) every output is right, as a
    later row of its causal mask still shows every cached key — failed, naming the layer, as for a model of one
    attention (it passed, the model's own attributes keeping no counter)."""
    torch.manual_seed(0)
    module = um.CachedLayers(mha(), mha("one-ahead")).eval()
    (check,) = checks.check_module(module, torch.randn(2, 4, 16), rules=["kv-cache"])  # (b, n, d_in)
    assert check == checks.Check("kv-cache", "fail", (
        f"attention 2 of 2 on line {MHA_LINE}: the cached outputs agree with the uncached ones, but the position runs "
        "ahead of the tokens: ptr_current_pos is 3 after 2 tokens of sequence 1, where it should be 2, so the next "
        "token is treated as position 3, not 2 (the outputs agree only because a later row of the causal mask still "
        "shows every cached key; the position reaches the mask's end before the tokens do) — add exactly the new "
        "tokens' count (x.shape[1]) after each cached forward"))


def test_kv_cache_names_the_layer_whose_step_a_caller_held_cache_gets_wrong():
    """The caller holds each layer's cache (GPT-2's legacy tuple): the second layer's mask ignores the cached tokens."""
    torch.manual_seed(0)
    check = kv_verdict(um.PastLayers(um.PastArgument(), um.PastArgument(bug="mask-ignores-past")).eval())
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: "), check
    assert check.evidence.endswith(f" — attention 2 of 2 on line {PAST_LINE}: {NEW_TOKENS_MASK} (each forward given "
                                   "the cache the forward before returned as past_key_values)"), check


GQA_CACHE = "layers[{0}].cache_k (1, 2, 8, 4), layers[{0}].cache_v (1, 2, 8, 4)"  # (b, g, tokens, hd)
REPEATED = ("but attention 2 of 2 on line {line}: layers[1].cache_k and layers[1].cache_v hold num_heads = 4 heads "
            "where num_kv_groups = 2 K/V heads are declared (32 elements per token, where 2 K/V heads need 16) — cache "
            "the keys and values before repeat_interleave, and repeat them after reading the cache")


@pytest.mark.parametrize(("layers", "verdict_words"), [
    (lambda: (gqa(), mha()), ("pass", f"{PLAN}; after 8 tokens the cache holds 8 tokens of 48 elements (192 bytes) "
                                      f"each: {GQA_CACHE.format(0)}, layers[1].cache_k (1, 8, 4, 4), layers[1].cache_v "
                                      "(1, 8, 4, 4)")),
    (lambda: (mha(), gqa("caches-repeated")), ("fail", f"{PLAN}, {REPEATED.format(line=GQA_LINE)}")),
], ids=["grouped-then-full-heads", "full-heads-then-repeated"])
def test_kv_cache_holds_each_layers_cache_to_its_own_sizes(layers, verdict_words):
    """A grouped-query layer beside a layer of full heads: each layer's cache is held to its own K/V heads — the full
    layer's 4 heads are no waste (it was failed as repeated heads, held to the GQA layer's 2 K/V heads), and a GQA
    layer that caches its repeated heads is named, not the full layer beside it."""
    torch.manual_seed(0)
    assert kv_verdict(um.CachedLayers(*layers()).eval()) == checks.Check("kv-cache", *verdict_words)


PAST_KEEPS_ALL = (f"{PAST_PLAN}, but a window layer's cache keeps more than its window needs: past_key_values[1][0] "
                  "holds 8 tokens after 8, and its layer, layers[1], has a window of W = 3, so it needs only the last "
                  "3 — its cache's 2,048 bytes grow by 256 with every token, where the last 3 take 768: drop that "
                  "layer's older keys and values after each forward (keep the last W); the full-attention layer "
                  "layers[0] rightly keeps every token")


@pytest.mark.parametrize(("layers", "verdict_words"), [
    (lambda: (um.PastArgument(), um.PastWindow(sliding_window_size=3)),
     ("pass", f"{PAST_PLAN}; after 8 tokens each layer's cache holds what its attention needs — layers[0] (full "
              "attention): 8 tokens; layers[1] (a window of W = 3): 3 tokens — past_key_values[0][0] (1, 4, 8, 8), "
              "past_key_values[0][1] (1, 4, 8, 8), past_key_values[1][0] (1, 4, 3, 8), past_key_values[1][1] "
              "(1, 4, 3, 8)")),
    (lambda: (um.PastWindow(), um.PastWindow(sliding_window_size=3, keeps_all=True)), ("fail", PAST_KEEPS_ALL)),
], ids=["plain-then-window", "full-then-window-keeps-all"])
def test_kv_cache_holds_each_entry_of_a_caller_held_cache_to_its_layers_window(layers, verdict_words):
    """The caller holds one (k, v) per layer: each entry is held to its own layer's window — the plain layer's entry
    keeps every token and passes (it was held to the window layer's W and failed), and a window layer whose entry
    keeps every token fails, named (it passed where the layers disagreed, the model declaring no one window)."""
    torch.manual_seed(0)
    assert kv_verdict(um.PastLayers(*layers()).eval()) == checks.Check("kv-cache", *verdict_words)


WRAPPED_PLAN = PLAN.replace("reset_kv_cache()", "reset_cache()")


@pytest.mark.parametrize(("bug", "verdict_words"), [
    (None, ("pass", f"{WRAPPED_PLAN}; after 8 tokens the cache holds 3 tokens of 32 elements (128 bytes) each: "
                    "attn.cache_k (1, 2, 3, 8), attn.cache_v (1, 2, 3, 8)")),
    ("keeps-all", ("fail", f"{WRAPPED_PLAN}, but the cache keeps more than the window needs: attn.cache_k holds 8 "
                           "tokens after 8, and a window of W = 3 needs only the last 3 — the cache's 1,024 bytes grow "
                           "by 128 with every token, where the last 3 take 384: drop the older keys and values after "
                           "each forward (keep the last W)")),
])
def test_kv_cache_holds_a_wrapped_attentions_cache_to_its_window(bug, verdict_words):
    """A block that wraps one sliding-window attention and declares nothing itself: its cache is held to the wrapped
    attention's W = 3, not to a window of its own or none."""
    torch.manual_seed(0)
    assert kv_verdict(um.WrapsCachedAttention(swa(bug)).eval()) == checks.Check("kv-cache", *verdict_words)


def cache_length_mha(window_size, bug=None):
    return um.CacheLengthMHA(16, 16, 16, 0.0, 4, window_size=window_size, bug=bug)  # the book's optimized class


LENGTHS_PLAN = ("two sequences, each after reset_kv_cache(): a prefill of {prefill} tokens, then {one_by_one} tokens "
                "one by one and the last 2 in one forward (a chunk after the cache), give the uncached outputs "
                "(≤ 1e-05) up to token {last}; {lengths}, so from token "
                "{shortest} on the model's cached outputs are not compared with its uncached ones: a layer whose cache "
                "is full drops its oldest tokens by the class's design, so its later tokens see fewer keys than the "
                "whole sequence's, and the layers after it read what it makes of them")


@pytest.mark.parametrize(("layers", "words"), [
    (lambda: (cache_length_mha(3), cache_length_mha(5)),
     LENGTHS_PLAN.format(prefill=3, one_by_one=3, last=2, shortest=3, lengths="layers[0].window_size = 3 and "
                         "layers[1].window_size = 5 are those layers' KV cache lengths (mask-convention: not "
                         "attention windows)")),
    (lambda: (mha(), cache_length_mha(6)),
     LENGTHS_PLAN.format(prefill=4, one_by_one=2, last=5, shortest=6,
                         lengths="layers[1].window_size = 6 is that layer's KV cache length (mask-convention: "
                         "not an attention window)")),
], ids=["two-lengths", "full-then-length"])
def test_kv_cache_reads_each_layers_own_cache_length(layers, words):
    """Layers of the book's optimized class, each with its own ``window_size`` (its KV cache's length): the prefill
    fits the shortest cache, and the cached steps are compared with the uncached outputs until a cache is full — where
    the model's own length was read (none) and its layer raised "the chunk is longer than the KV cache" on a prefill
    longer than its cache, or its full cache's steps were failed against the whole sequence, and a full layer beside
    it was failed for keeping more than that layer's cache length."""
    torch.manual_seed(0)
    check = kv_verdict(um.CachedLayers(*layers()).eval())
    assert check.status == "pass" and check.evidence.startswith(words), check


def test_kv_cache_still_fails_a_layers_step_before_the_shortest_cache_is_full():
    """The layer beside one whose cache is 6 long builds its mask for the new tokens alone: token 4 is compared, and
    the layer is named."""
    torch.manual_seed(0)
    check = kv_verdict(um.CachedLayers(cache_length_mha(6), mha("mask-for-new-tokens")).eval())
    assert check.status == "fail" and check.evidence.startswith("sequence 1, token 4: "), check
    assert check.evidence.endswith(f" — attention 2 of 2 on line {MHA_LINE}: {NEW_TOKENS_MASK}"), check
