"""A ``window_size`` that is the KV cache's length (the book's optimized MultiHeadAttention) is read as that: mask-
convention does not demand an attention window of it, and kv-cache compares the steps past the cache's length with
the uncached forward of the tokens the cache keeps; a real sliding window (``sliding_window_size``, a ``window_size``
the uncached forward reads, or one the code calls a sliding window — its class's name or docstring, its config's
``sliding_window``, a mask made of it) is still checked as one.  kv-cache's precision follows the cache's own tensors,
not every lower-precision tensor a cached forward writes."""

import gc
import importlib.util
import sys
import weakref

import pytest
import torch
from helpers import user_modules as um
from helpers.source_lines import line_of
from torch import nn

from attnviz import checks, tracing
from attnviz.declarations import declared_window
from attnviz.kv_cache_rule import kv_cache
from attnviz.window_reading import attention_window, cache_length, cache_length_reading, window_said
from attnviz.words import name_words


def built(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


def failing(results: dict[str, checks.Check]) -> set[str]:
    return {rule for rule, check in results.items() if check.status == "fail"}


# ------------------------------------------------------------------ a window_size that sizes the KV cache


@pytest.mark.parametrize("window_size", [3, 4])
def test_a_window_size_shorter_than_the_tokens_that_sizes_the_cache_passes_every_rule(window_size):
    """8 tokens, a cache of 3 or 4: the uncached forward attends to every earlier token, by the class's design."""
    results = verdicts(built(um.CacheLengthMHA, 16, 32, 64, 0.0, 4, window_size=window_size))
    assert failing(results) == set(), results
    mask = results["mask-convention"]
    assert mask.status == "pass" and mask.evidence.startswith("the hidden cells are exactly the future"), mask
    assert mask.evidence == (  # a pass in three lines of a terminal, not a failure's paragraph
        f"the hidden cells are exactly the future; window_size = {window_size} is the length of the module's KV "
        "cache, not an attention window: its code reads it only where the forward caches (a window? name it "
        "sliding_window_size)"), mask
    cache = results["kv-cache"]
    assert cache.status == "pass", cache
    assert (f"from token {window_size} on each cached step is compared with the uncached forward of the last "
            f"{window_size} tokens (what the cache keeps)") in cache.evidence, cache
    assert f"cache_k (1, 4, {window_size}, 8)" in cache.evidence, cache


def test_a_cache_length_class_whose_full_cache_drops_the_wrong_keys_still_fails_kv_cache():
    check = verdicts(built(um.CacheLengthMHA, 16, 32, 64, 0.0, 4, window_size=4, bug="drops-newest"))["kv-cache"]
    assert check.status == "fail", check
    assert check.evidence.startswith("sequence 1, token 4: the cached output differs from the uncached forward of the "
                                     "last 4 tokens (window_size = 4, the cache's length)"), check


class TrimsOneShort(um.WindowSizeTrim):
    """Trims its cache to the last W − 1 tokens after writing the new ones (a rolling window's W − 1, kept before the
    next token) and attends to what it keeps: a full cache's step sees W − 1 keys."""

    def cached(self, keys, values, n):
        keys, values, start = super().cached(keys, values, n)  # (b, h, ≤ W, hd) each
        self.cache_k, self.cache_v = keys[:, :, 1 - self.window_size:], values[:, :, 1 - self.window_size:]  # ≤ W − 1
        return self.cache_k, self.cache_v, start


class ReturnsItsLastTokens(nn.Module):
    """A nanoGPT fork whose caller holds the KV cache: ``forward(x, kv_cache=None) -> (y, present)``, the cache it
    returns cut to the last ``window_size`` tokens; a step attends to the cache it is given and its own tokens."""

    def __init__(self, n_embd=16, n_head=4, window_size=4):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.window_size = n_head, n_embd, window_size

    def forward(self, x, kv_cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if kv_cache is not None:
            k, v = torch.cat([kv_cache[0], k], dim=2), torch.cat([kv_cache[1], v], dim=2)  # (B, nh, past + T, hs)
        present = (k[:, :, -self.window_size:], v[:, :, -self.window_size:])
        return self.attend(q, k, v), present

    def attend(self, q, k, v):
        B, nh, T, hs = q.shape
        past = k.shape[2] - T
        allowed = torch.arange(k.shape[2])[None, :] <= torch.arange(past, past + T)[:, None]  # (T, past + T)
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, nh * hs))


class AttendsToItsLastTokens(ReturnsItsLastTokens):
    """Cuts the keys to the last ``window_size`` once it is given a cache, and returns them: a step attends to at most
    W keys, as the book's optimized class's does once its cache is full."""

    def forward(self, x, kv_cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if kv_cache is not None:
            k = torch.cat([kv_cache[0], k], dim=2)[:, :, -self.window_size:]  # (B, nh, ≤ W, hs)
            v = torch.cat([kv_cache[1], v], dim=2)[:, :, -self.window_size:]  # (B, nh, ≤ W, hs)
        return self.attend(q, k, v), (k, v)


class HandsBackItsLastTokens(ReturnsItsLastTokens):
    """Hugging Face's calling convention: ``forward(x, past_key_value=None, use_cache=False)``, the cache it returns
    under ``use_cache`` cut to the last ``window_size`` tokens and held by the caller, who gives it back; no reset of
    its own."""

    def forward(self, x, past_key_value=None, use_cache=False):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)  # (B, nh, past + T, hs)
            v = torch.cat([past_key_value[1], v], dim=2)  # (B, nh, past + T, hs)
        y = self.attend(q, k, v)  # (B, T, C)
        if use_cache:
            return y, (k[:, :, -self.window_size:], v[:, :, -self.window_size:])  # (B, nh, ≤ W, hs) each
        return y, None


CACHE_LENGTH_CAUSES = [  # (module, the end of kv-cache's failure on 6 tokens: a cache length's words, not a window's)
    (lambda: built(um.CacheLengthMHA, 16, 32, 64, 0.0, 4, window_size=4, bug="sized-by-context"),
     "the step attends over 6 keys where the cache's length (window_size = 4) keeps 4: the cache keeps 2 tokens too "
     "many — once it holds 4 tokens, shift the oldest out before writing the new ones"),
    (lambda: built(um.CacheLengthMHA, 16, 32, 64, 0.0, 4, window_size=5, bug="one-slot-short"),
     "the step attends over only 4 keys where the cache's length (window_size = 5) keeps the last 5 tokens, the "
     "step's own among them: the cache keeps too little — hold the last W = 5 tokens, the new ones included: W "
     "slots, and once they are full shift out only the tokens past W before writing the new ones"),
    (lambda: built(TrimsOneShort, window_size=4),
     "the cache keeps too little: cache_k holds 3 tokens after 4, where a cache of length window_size = 4 keeps the "
     "last 4, the newest among them — hold the last W tokens, the new ones included (trim to the last W after writing "
     "them)"),
    (lambda: built(um.CacheLengthRotary, window_size=4, bug="fill-pointer-angles"),
     "its query for token 4 is the whole sequence's turned by another angle (the same length, another direction): "
     "rotated at position 2, the number of keys the cache holds before the new ones (its fill pointer: a cache of "
     "length window_size = 4, once full, shifts its oldest tokens out and moves the pointer back to W minus the new "
     "tokens), not the token's position 4 — the rotary position offset must not be the cache's fill pointer; take it "
     "from a count of the tokens fed so far, which the cache's length does not cap"),
    pytest.param(  # a kv-cache run beside the cheap reading of ReturnsItsLastTokens's code below
        lambda: built(ReturnsItsLastTokens),
        "the step attends over 6 keys where the cache's length (window_size = 4) keeps 4: the cache keeps 2 tokens too "
        "many — once the cache it is given holds 4 tokens, drop the oldest before appending the new ones (each "
        "forward given the cache the forward before returned as kv_cache)", marks=pytest.mark.slow),
    pytest.param(  # the caller holds the cache with use_cache too: the same words as without it
        lambda: built(HandsBackItsLastTokens),
        "the step attends over 6 keys where the cache's length (window_size = 4) keeps 4: the cache keeps 2 tokens too "
        "many — once the cache it is given holds 4 tokens, drop the oldest before appending the new ones (each "
        "forward given the cache the forward before returned as past_key_value)", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("module", "cause"), CACHE_LENGTH_CAUSES, ids=["keeps-more", "keeps-fewer", "trims-fewer",
                                                                                       "fill-pointer", "caller-held",
                                                                                       "caller-held-use-cache"])
def test_a_cache_length_class_whose_cache_keeps_the_wrong_tokens_is_told_so_in_a_cache_lengths_words(module, cause):
    """The cache allocated context_length long holds every token fed, more than W; one allocated W − 1 long holds too
    few; rotary angles taken from the fill pointer turn the new tokens back once the cache is full.  None of it is a
    mask's or a rolling window's fault."""
    check = kv_cache(module(), torch.randn(2, 6, 16))  # the rule alone, as check_module runs it: no trace first
    assert check.status == "fail", check
    assert check.evidence.endswith(cause), check
    assert "mask" not in check.evidence and "window of W" not in check.evidence, check
    assert "rolling" not in check.evidence and "W − 1" not in check.evidence, check


@pytest.mark.slow  # every rule; test_cache_length_reads_where_the_class_reads_its_window_size reads it quickly
def test_a_caller_held_cache_cut_to_window_size_is_the_caches_length_and_passes_every_rule():
    results = verdicts(built(AttendsToItsLastTokens))
    assert failing(results) == set(), results
    mask = results["mask-convention"]
    assert "window_size = 4 is the length of the module's KV cache, not an attention window" in mask.evidence, mask
    assert "from token 4 on each cached step is compared with the uncached forward of the last 4 tokens" \
        in results["kv-cache"].evidence, results["kv-cache"]


def test_a_cache_length_class_with_rotary_angles_from_a_count_of_the_tokens_passes_kv_cache():
    check = kv_cache(built(um.CacheLengthRotary, window_size=4), torch.randn(2, 6, 16))
    assert check.status == "pass", check


def test_a_cache_length_as_long_as_the_tokens_is_compared_as_before():
    check = verdicts(built(um.CacheLengthMHA, 16, 32, 64, 0.0, 4, window_size=8))["kv-cache"]
    assert check.status == "pass" and "the cache's length" not in check.evidence, check


# ------------------------------------------------------------------ real windows are still windows


def test_a_sliding_window_size_with_a_cache_is_still_an_attention_window():
    """The bonus material's SWA with its KV cache: the window shows, and a window never applied fails."""
    results = verdicts(built(um.LearnerCachedSWA, 16, 32, 16, 0.0, 4, sliding_window_size=4))
    assert failing(results) == set(), results
    assert results["mask-convention"].evidence.startswith("sliding window W = 4"), results["mask-convention"]
    results = verdicts(built(um.LearnerCachedSWA, 16, 32, 16, 0.0, 4, sliding_window_size=4,
                             bug="window-never-applied"))
    check = results["mask-convention"]
    assert check.status == "fail" and "the window is never applied" in check.evidence, check
    assert "KV cache" not in check.evidence


def test_a_window_size_the_uncached_forward_reads_is_an_attention_window():
    module = built(um.WindowSizeSWA, 16, 32, 16, 0.0, 4, window_size=4)
    assert cache_length(module) is None
    results = verdicts(module)
    assert failing(results) == set(), results
    assert results["mask-convention"].evidence.startswith("sliding window W = 4"), results["mask-convention"]
    check = verdicts(built(um.WindowSizeSWA, 16, 32, 16, 0.0, 4, window_size=4,
                           bug="window-never-applied"))["mask-convention"]
    assert check.status == "fail" and "the window is never applied" in check.evidence, check


class NeverReadsWindow(nn.Module):
    """Keeps a window_size and a KV cache, and reads the window nowhere: a window never applied."""

    def __init__(self, d_in=16, num_heads=4, window_size=3):
        super().__init__()
        self.num_heads, self.head_dim, self.window_size = num_heads, d_in // num_heads, window_size
        self.qkv = nn.Linear(d_in, 3 * d_in)
        self.cache = None

    def forward(self, x, use_cache=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, hd)
        if use_cache:
            if self.cache is not None:
                k, v = torch.cat([self.cache[0], k], dim=2), torch.cat([self.cache[1], v], dim=2)  # (b, h, k, hd)
            self.cache = (k, v)
        causal = torch.ones(n, k.shape[2], dtype=torch.bool).tril(k.shape[2] - n)  # (n, k): True takes part
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal)  # (b, h, n, hd)
        return y.transpose(1, 2).reshape(b, n, d)  # (b, n, d)

    def reset_cache(self):
        self.cache = None


def test_a_window_size_read_nowhere_is_a_window_never_applied():
    module = built(NeverReadsWindow)
    assert cache_length(module) is None
    check = verdicts(module)["mask-convention"]
    assert check.status == "fail" and "the window is never applied" in check.evidence, check


class Windowed(nn.Module):
    """Keeps a window_size of 4; each subclass's forward reads it somewhere (what cache_length reads)."""

    def __init__(self, window_size=4):
        super().__init__()
        self.window_size = window_size
        self.cache = None

    def reset_cache(self):
        self.cache = None


class SizesCache(Windowed):
    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache = torch.zeros(x.shape[0], self.window_size, x.shape[-1])  # (b, W, d)
        return x


class CropsInElse(Windowed):
    def forward(self, x, use_cache=False):
        if not use_cache:
            return x
        else:
            return x[:, -self.window_size:]  # (b, ≤ W, d)


class ChecksWithUseCache(Windowed):
    def forward(self, x, use_cache=False):
        if use_cache and self.window_size < x.shape[1]:
            self.cache = x[:, -self.window_size:]  # (b, W, d)
        return x


class ReadsUncached(Windowed):
    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache = x  # (b, n, d)
        return x[:, -self.window_size:]  # (b, ≤ W, d)


class ReadsWhenNotCaching(Windowed):
    def forward(self, x, use_cache=False):
        if not use_cache:
            return x[:, -self.window_size:]  # (b, ≤ W, d)
        return x


class BandFromWindow(SizesCache):
    def __init__(self, window_size=4):
        super().__init__(window_size)
        self.band = torch.ones(8, 8).tril().triu(-window_size)  # (8, 8): a window's band


class SlicesThenMasksCausally(Windowed):
    def forward(self, x, use_cache=False):
        if use_cache:
            x = x[:, -self.window_size:]  # (b, ≤ W, d): the last W tokens
        k = x.shape[1]
        self.future = torch.arange(k)[None, :] > torch.arange(k)[:, None]  # (k, k): the causal mask of what is left
        return x


class ReadsNowhere(Windowed):
    def forward(self, x, use_cache=False):
        return x


class ReturnsEarlyWhenNotCaching(Windowed):
    def forward(self, x, use_cache=False):
        if not use_cache:
            return x
        self.cache = x[:, -self.window_size:]  # (b, ≤ W, d): only where it caches
        return x


class ReturnsEarlyWhenCaching(Windowed):
    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache = x  # (b, n, d)
            return x
        return x[:, -self.window_size:]  # (b, ≤ W, d): only where it does not cache


class CachesUnderAFlag(Windowed):
    def forward(self, x, use_cache=False):
        caching = use_cache and not self.training
        if caching:
            self.cache = x[:, -self.window_size:]  # (b, ≤ W, d)
        return x


class AllocatesTheCacheOnce(Windowed):
    def __init__(self, window_size=4):
        super().__init__(window_size)
        self.register_buffer("cache_k", torch.zeros(1, window_size, 16), persistent=False)  # (1, W, d)

    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache_k[:, :self.window_size] = x[:, -self.window_size:]  # (b, ≤ W, d)
        return x


class BandsWithItInTheConstructor(AllocatesTheCacheOnce):
    def __init__(self, window_size=4):
        super().__init__(window_size)
        self.register_buffer("band", torch.ones(8, 8).tril().triu(-window_size + 1))  # (8, 8): a window's band


class BandsRowByRowWhereItCaches(Windowed):
    def forward(self, x, use_cache=False):
        n = x.shape[1]
        allowed = torch.ones(n, n, dtype=torch.bool).tril()  # (n, n): the future hidden
        if use_cache:
            allowed = torch.zeros(n, n, dtype=torch.bool)  # (n, n)
            for i in range(n):
                allowed[i, max(0, i - self.window_size + 1):i + 1] = True  # query i sees keys i − W + 1 … i
        self.allowed = allowed
        return x


class ZeroesTheFreedSlots(AllocatesTheCacheOnce):
    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache_k[:, -1:] = 0  # (1, 1, d): the slot a shift frees
            self.cache_k[:, :self.window_size] = x[:, -self.window_size:]  # (b, ≤ W, d)
            self.cache_k[:, self.window_size:] = 0  # (1, 0, d)
        return x


class ShiftsInAHelper(Windowed):
    """The book's cache update moved into a method of its own, called where the forward caches."""

    def _shift(self, x):
        return x[:, -self.window_size:]  # (b, ≤ W, d)

    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache = self._shift(x)  # (b, ≤ W, d)
        return x


class HelperForBoth(ShiftsInAHelper):
    def forward(self, x, use_cache=False):
        return self._shift(x)  # (b, ≤ W, d): cached or not


class ShowsItInItsRepr(SizesCache):
    def extra_repr(self):
        return f"window_size={self.window_size}"  # print(module) only: no forward calls it


class PassesItToTheBase(SizesCache):
    def __init__(self, window_size=4):
        super().__init__(window_size=window_size)
        self.label = "cache"


class MasksWithItAndReturnsTheCache(ReturnsItsLastTokens):
    def forward(self, x, kv_cache=None):
        y, present = super().forward(x, kv_cache)
        self.band = torch.arange(x.shape[1])[:, None] - torch.arange(x.shape[1])[None, :] >= self.window_size
        return y, present


class ReadsItForTheOutput(ReturnsItsLastTokens):
    def forward(self, x, kv_cache=None):
        y, present = super().forward(x, kv_cache)
        return y[:, -self.window_size:], present


class SlidingKVCache:
    """Keeps the last window_size tokens, the oldest shifted out: a cache the attention below inherits."""

    def _update_cache(self, x):
        self.cache = x[:, -self.window_size:]  # (b, ≤ W, d)


class InheritsASlidingCache(SlidingKVCache, Windowed):
    def forward(self, x, use_cache=False):
        if use_cache:
            self._update_cache(x)
        return x


class KeepsTheLastTokens(nn.Module):
    """A KV cache module of its own, which the attention calls: it keeps the last window_size tokens."""

    def __init__(self, window_size):
        super().__init__()
        self.window_size = window_size
        self.kept = None

    def update(self, x):
        self.kept = x[:, -self.window_size:]  # (b, ≤ W, d)
        return self.kept


class KeepsItInItsCacheModule(nn.Module):
    def __init__(self, window_size=4):
        super().__init__()
        self.kv_cache = KeepsTheLastTokens(window_size)

    def forward(self, x, use_cache=False):
        if use_cache:
            self.kv_cache.update(x)
        return x

    def reset_cache(self):
        self.kv_cache.kept = None


class MasksWithItsCacheModulesWindow(KeepsItInItsCacheModule):
    def forward(self, x, use_cache=False):
        if use_cache:
            self.kv_cache.update(x)
        n = x.shape[1]
        self.band = torch.arange(n)[:, None] - torch.arange(n)[None, :] >= self.kv_cache.window_size  # (n, n)
        return x


@pytest.mark.parametrize(("cls", "length"), [
    (SizesCache, ("window_size", 4)), (CropsInElse, ("window_size", 4)), (ChecksWithUseCache, ("window_size", 4)),
    (SlicesThenMasksCausally, ("window_size", 4)),
    (ShiftsInAHelper, ("window_size", 4)), (ShowsItInItsRepr, ("window_size", 4)),
    (PassesItToTheBase, ("window_size", 4)), (InheritsASlidingCache, ("window_size", 4)),
    (ReturnsEarlyWhenNotCaching, ("window_size", 4)), (CachesUnderAFlag, ("window_size", 4)),
    (KeepsItInItsCacheModule, ("kv_cache.window_size", 4)), (MasksWithItsCacheModulesWindow, None),
    (AllocatesTheCacheOnce, ("window_size", 4)), (BandsWithItInTheConstructor, None),
    (BandsRowByRowWhereItCaches, None), (ZeroesTheFreedSlots, ("window_size", 4)),
    (ReadsUncached, None), (ReadsWhenNotCaching, None), (BandFromWindow, None), (ReadsNowhere, None),
    (HelperForBoth, None), (ReturnsEarlyWhenCaching, None),
    (ReturnsItsLastTokens, ("window_size", 4)), (AttendsToItsLastTokens, ("window_size", 4)),
    (MasksWithItAndReturnsTheCache, None), (ReadsItForTheOutput, None),
])
def test_cache_length_reads_where_the_class_reads_its_window_size(cls, length):
    assert cache_length(cls()) == length


@pytest.fixture(scope="module")
def causal_attention() -> tracing.Attention:
    """A causal attention traced on 3 tokens: its hidden cells are exactly the future."""
    torch.manual_seed(0)
    module = um.MyMultiHeadAttention(16, 32, 16, 0.0, 4).eval()
    return tracing.combine(tracing.record(module, torch.randn(1, 3, 16)).attentions)


class RollingKVCache(nn.Module):
    """A KV cache module with a forward of its own, which the attention calls: it keeps the last window_size tokens."""

    def __init__(self, window_size):
        super().__init__()
        self.window_size = window_size
        self.kept = None

    def forward(self, x):
        self.kept = x[:, -self.window_size:]  # (b, ≤ W, d)
        return self.kept


class CallsItsCacheModule(KeepsItInItsCacheModule):
    def __init__(self, window_size=4):
        super().__init__()
        self.kv_cache = RollingKVCache(window_size)

    def forward(self, x, use_cache=False):
        if use_cache:
            self.kv_cache(x)
        return x


class CacheModulesPerLayer(um.PlainCachePerLayerMHA):
    """Its caches one per layer in an ``nn.ModuleList`` of cache modules rather than a dict of plain objects."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, window_size=None):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, window_size=window_size)
        self.kv_caches = nn.ModuleList(um.LayerKVCache(window_size or context_length) for _ in range(2))

    def reset_cache(self):
        for cache in self.kv_caches:
            cache.reset()
        self.ptr_current_pos = 0


class PlainCachesByLayerName(um.PlainCachePerLayerMHA):
    """Its plain caches in a dict keyed by the layers' names (``"layer_0"``) rather than their numbers."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, window_size=None):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, window_size=window_size)
        self.kv_caches = {f"layer_{i}": cache for i, cache in self.kv_caches.items()}

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        queries, keys, values = (w(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        start = 0
        if use_cache:
            keys, values = self.kv_caches[f"layer_{self.layer_idx}"].update(keys, values)  # (b, h, ≤ W, hd) each
            start = self.ptr_current_pos
            self.ptr_current_pos += num_tokens
        context_vec = um.causal_context(queries, keys, values, start).transpose(1, 2)  # (b, n, h, hd)
        return self.out_proj(context_vec.reshape(b, num_tokens, self.d_out))  # (b, n, d_out)


class SlidingLastTokens:
    """A plain cache object (no ``nn.Module``) that keeps the last sliding_window tokens."""

    def __init__(self, sliding_window):
        self.sliding_window = sliding_window
        self.kept = None

    def update(self, x):
        self.kept = x[:, -self.sliding_window:]  # (b, ≤ W, d)
        return self.kept


class SlidingLastTokensModule(SlidingLastTokens, nn.Module):
    def __init__(self, sliding_window):
        nn.Module.__init__(self)
        super().__init__(sliding_window)


class HoldsASlidingCache(KeepsItInItsCacheModule):
    def __init__(self, cache):
        nn.Module.__init__(self)
        self.kv_cache = cache(4)


@pytest.mark.parametrize("cache", [SlidingLastTokens, SlidingLastTokensModule], ids=["plain-object", "module"])
def test_a_sliding_window_a_cache_object_keeps_is_read_as_a_cache_modules_is(cache):
    """Hugging Face's sliding-window cache layers keep ``sliding_window``: kept by a plain cache object or a cache
    module, it is the attention's window, not a cache length."""
    module = HoldsASlidingCache(cache)
    assert (declared_window(module), attention_window(module), cache_length(module)) == (4, 4, None)


def held_cache(cls):
    return lambda: cls(16, 16, 16, 0.0, 4, window_size=4)


@pytest.mark.parametrize(("build", "reads"), [
    (SizesCache, "its code reads it only where the forward caches"),
    (KeepsItInItsCacheModule, "only its cache module kv_cache, a KeepsTheLastTokens with no forward of its own, keeps "
                              "it, and the attention's own code never reads it"),
    (CallsItsCacheModule, "only its cache module kv_cache, a RollingKVCache, whose class's name says cache, keeps it, "
                          "and the attention's own code never reads it"),
    (held_cache(um.HeldCacheMHA), "only its cache module kv_cache, a LayerKVCache with no forward of its own, keeps "
                                  "it, and the attention's own code never reads it"),
    (held_cache(um.HeldCacheChecksItsChunk), "only its cache module kv_cache, a LayerKVCache with no forward of its "
                                             "own, keeps it, and the attention's own code reads it only where the "
                                             "forward caches"),
    (held_cache(um.PlainCacheMHA), "only its cache kv_cache, a PlainKVCache with no forward of its own, keeps "
                                   "it, and the attention's own code never reads it"),
    (held_cache(um.PlainCachePerLayerMHA), "only its cache kv_caches[0], a PlainKVCache with no forward of its "
                                           "own, keeps it, and the attention's own code never reads it"),
    (held_cache(CacheModulesPerLayer), "only its cache module kv_caches[0], a LayerKVCache with no forward of its "
                                       "own, keeps it, and the attention's own code never reads it"),
    # a dict's key is spelled as the kv-cache rule spells the tensors it finds (cache["k"])
    (held_cache(PlainCachesByLayerName), 'only its cache kv_caches["layer_0"], a PlainKVCache with no forward of '
                                         "its own, keeps it, and the attention's own code never reads it"),
], ids=["own", "cache-module", "cache-module-named", "held-cache", "held-cache-read", "plain-cache-object",
        "plain-cache-objects-per-layer", "cache-modules-per-layer", "plain-cache-objects-by-name"])
def test_mask_convention_says_who_reads_a_cache_length(build, reads, causal_attention):
    """A window_size only a cache submodule keeps is read by that module, not by the attention: the pass says what it
    read — that no other module keeps it, why the submodule is a cache, whether the attention reads it — not "the
    attention at most where it caches"."""
    name = cache_length(build())[0]
    check = checks.mask_convention(causal_attention, True, cache_length=cache_length_reading(build()))
    assert check == checks.Check("mask-convention", "pass", (
        f"the hidden cells are exactly the future; {name} = 4 is the length of the module's KV cache, not an "
        f"attention window: {reads} (a window? name it sliding_window_size)")), check


@pytest.mark.slow  # a whole check_module run: the slow tier
@pytest.mark.parametrize(("cls", "cache"), [(um.HeldCacheMHA, "cache module kv_cache, a LayerKVCache"),
                                            (um.PlainCacheMHA, "cache kv_cache, a PlainKVCache"),
                                            (um.PlainCachePerLayerMHA, "cache kv_caches[0], a PlainKVCache"),
                                            (PlainCachesByLayerName, 'cache kv_caches["layer_0"], a PlainKVCache')],
                         ids=["module", "plain-object", "plain-objects-per-layer", "plain-objects-by-name"])
def test_attention_holding_its_cache_in_a_cache_object_is_checked_as_the_books_cache_length(cls, cache):
    """The book's class with its cache in a cache object (update, get_seq_length, reset) — an ``nn.Module``, or a
    plain object as the book's and Hugging Face's caches are, alone or one per layer in a dict: its window_size is
    the cache's length, each rule says so plainly, and the cached steps past W match the last W tokens' forward."""
    results = verdicts(built(cls, 16, 16, 16, 0.0, 4, window_size=4), rules=["mask-convention", "kv-cache"])
    assert results["mask-convention"].status == "pass", results
    assert results["mask-convention"].evidence.endswith(
        f"only its {cache} with no forward of its own, keeps it, and the attention's own "
        "code never reads it (a window? name it sliding_window_size)"), results
    assert results["kv-cache"].status == "pass", results
    assert "compared with the uncached forward of the last 4 tokens" in results["kv-cache"].evidence, results


def test_a_plain_cache_object_that_keeps_too_little_still_fails_kv_cache():
    """A plain cache object read as the cache's length: one that keeps two fewer tokens than its window_size fails
    where a cached step sees fewer than the last W, naming the plain object's tensor and what it holds."""
    check = kv_cache(built(um.PlainCacheMHA, 16, 16, 16, 0.0, 4, window_size=4, bug="keeps-too-few"),
                     torch.randn(2, 6, 16))
    assert check.status == "fail", check
    assert check.evidence.startswith("sequence 1, token 3: the cached output differs from the uncached one by"), check
    assert ("the cache keeps too little: kv_cache.keys holds 2 tokens after 4, where a cache of length "
            "kv_cache.window_size = 4 keeps the last 4, the newest among them") in check.evidence, check


# ------------------------------------------------------------------ a window_size the code says is a sliding window


SAID = [
    (um.WindowSizeTrimMasked, {}, lambda: f"line {line_of(um.WindowSizeTrimMasked, 'diff >= hidden_far')} of "
                                          "WindowSizeTrimMasked.forward makes a mask of it: hidden = hidden | (diff >= "
                                          "hidden_far)"),
    (um.WindowSizeTrimBand, {}, lambda: f"line {line_of(um.WindowSizeTrimBand, 'return (diff < 0)')} of "
                                        "WindowSizeTrimBand.band makes a mask of it: return (diff < 0) | (diff >= "
                                        "far)"),
    (um.WindowSizeTrimOwnBand, {}, lambda: f"line {line_of(um.WindowSizeTrimOwnBand, 'return (diff < 0)')} of "
                                           "WindowSizeTrimOwnBand.band makes a mask of it: return (diff < 0) | "
                                           "(diff >= self.window_size)"),
    (um.SlidingWindowMHA, {}, lambda: "the class's name says so: class SlidingWindowMHA (line "
                                      f"{line_of(um.SlidingWindowMHA, 'class')})"),
    (um.SlidingWindowAttentionWithCache, {}, lambda: "the class's name says so: class "
                                                     "SlidingWindowAttentionWithCache (line "
                                                     f"{line_of(um.SlidingWindowAttentionWithCache, 'class')})"),
    (um.DocumentedTrim, {}, lambda: "the docstring of DocumentedTrim says “sliding window attention” (line "
                                    f"{line_of(um.DocumentedTrim, 'Sliding-window')})"),
    (um.WindowSizeTrim, {"cfg": {"sliding_window": 3}}, lambda: "its config declares sliding_window = 3"),
    (um.TrimFromArgument, {}, lambda: "its constructor keeps a sliding window as self.window_size (line "
                                      f"{line_of(um.TrimFromArgument, 'self.window_size = sliding_window')}: "
                                      "self.window_size = sliding_window)"),
]


@pytest.mark.parametrize(("cls", "kwargs", "said"), SAID, ids=["cached-mask", "helper-given-it", "helper",
                                                                "name", "name-with-cache", "docstring", "config",
                                                                "argument"])
def test_a_window_size_read_only_to_cache_is_an_attention_window_where_the_code_says_so(cls, kwargs, said):
    """The cache keeps the last W tokens, as the book's class's does, but the code says the window is an attention
    window: it is no cache length, and what says so is named with its line."""
    module = built(cls, **kwargs)
    assert (cache_length(module), window_said(module)) == (None, said())


def test_a_sliding_window_forgotten_in_the_uncached_mask_fails_mask_convention_naming_the_cached_mask():
    check = verdicts(built(um.WindowSizeTrimMasked), rules=["mask-convention"])["mask-convention"]
    assert check.status == "fail", check
    assert check.evidence.startswith("the hidden cells are exactly the future, but the module's window is 3: query 7 "
                                     "sees keys 0 … 4"), check
    assert check.evidence.endswith("in the uncached forward too — its code reads window_size only where it caches, "
                                   "as the book's optimized MultiHeadAttention reads its KV cache's length, but here "
                                   f"it is an attention window: {SAID[0][2]()}"), check


@pytest.mark.parametrize(("cfg", "length"), [(None, ("window_size", 3)), ({"kv_window_size": 3}, ("window_size", 3)),
                                             ({"sliding_window": 3}, None)])
def test_only_a_configs_sliding_window_makes_it_an_attention_window(cfg, length):
    assert cache_length(built(um.WindowSizeTrim, cfg=cfg)) == length


# (a class's name, its words, whether the causal rule reads it as saying causal, whether it says sliding-window
# attention): the causal rule and the window reading read a name by the same words
NAMES = [
    ("SlidingWindowAttention", ["sliding", "window", "attention"], False, True),
    ("GQAttention", ["gq", "attention"], False, False),
    ("MHA", ["mha"], False, False),
    ("KVCache", ["kv", "cache"], False, False),
    ("SlidingKVCache", ["sliding", "kv", "cache"], False, False),  # a cache's name says nothing of the attention
    ("causalSelfAttention", ["causal", "self", "attention"], True, False),
    ("NonCausalMHA", ["non", "causal", "mha"], False, False),
    ("Llama3Attention", ["llama", "3", "attention"], False, False),
    ("GPT2CausalAttention", ["gpt", "2", "causal", "attention"], True, False),
    ("Qwen2_5SlidingWindowAttention", ["qwen", "2", "5", "sliding", "window", "attention"], False, True),
    ("SWAv2", ["swa", "v", "2"], False, True),
    ("CausalSWAv2", ["causal", "swa", "v", "2"], True, True),
]


@pytest.mark.parametrize(("name", "words", "says_causal", "says_window"), NAMES, ids=[name for name, *_ in NAMES])
def test_the_causal_rule_and_the_window_reading_read_a_class_name_by_the_same_words(name, words, says_causal,
                                                                                     says_window):
    """A window_size read only to cache, in a class whose name alone may say sliding-window attention or causal: the
    causal rule and the window reading split a name into the same words ("SWAv2" is "swa v 2", a sliding window, not
    "sw av 2")."""
    module = built(type(name, (um.WindowSizeTrim,), {}))
    assert name_words(name) == words
    hint = checks.causal_rule(module, torch.zeros(1, 2, 16), torch.zeros(1, 2, 16), causal=False).evidence
    assert (f"yet its name, {name}, says causal" in hint) == says_causal, hint
    assert window_said(module) == (f"the class's name says so: class {name}" if says_window else None)


# ------------------------------------------------------------------ the precision follows the cache


def test_a_float32_cache_beside_a_bfloat16_scratch_tensor_is_compared_at_float32():
    check = verdicts(built(um.LowPrecisionScratch))["kv-cache"]
    assert check.status == "pass", check
    assert "(≤ 1e-05)" in check.evidence and "bfloat16" not in check.evidence, check


def test_a_float32_cached_step_off_by_1e_3_fails_despite_a_bfloat16_scratch_tensor():
    check = verdicts(built(um.LowPrecisionScratch, bug="cached-scale"))["kv-cache"]
    assert check.status == "fail", check
    assert check.evidence.startswith("sequence 1, token 4: the cached output differs from the uncached one by"), check
    assert "bfloat16" not in check.evidence, check


REPLACED = '''
from torch import nn


class SavedAgain(nn.Module):
    def __init__(self, window_size=4):
        super().__init__()
        self.window_size, self.cache = window_size, None

    def forward(self, x, use_cache=False):
        if use_cache:
            self.cache = x[:, -self.window_size:]
        return x

    def reset_cache(self):
        self.cache = None
'''


def test_a_class_whose_code_was_read_is_not_kept_alive_once_its_module_is_gone(tmp_path):
    """A module a user saves and loads anew defines new classes: the reading of the old one's code lets it go."""
    path = tmp_path / "saved_again.py"
    path.write_text(REPLACED)
    spec = importlib.util.spec_from_file_location("saved_again", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["saved_again"] = module  # where Python finds a class's source
    try:
        spec.loader.exec_module(module)
        assert cache_length(module.SavedAgain()) == ("window_size", 4)
        assert window_said(module.SavedAgain()) is None
        kept = weakref.ref(module.SavedAgain)
    finally:
        del sys.modules["saved_again"]
    del module, spec
    gc.collect()
    assert kept() is None
