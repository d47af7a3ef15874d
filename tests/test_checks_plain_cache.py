"""kv-cache reads a cache kept in a plain Python object — no ``nn.Module``, as the book's ``KVCache`` and Hugging
Face's ``DynamicCache`` are — as it reads one kept in the module: the size checks see its tensors (``kv_cache.k``,
a list of (k, v) per layer, a dict of per-layer caches), found by the walk the window readers read
(:func:`attnviz.declarations.held_objects`), so a sliding-window cache that keeps every token fails where its outputs
are right, and one that keeps W passes saying what it holds."""

import pytest
import torch
from torch import nn

from attnviz import declarations
from attnviz.kv_cache_rule import kv_cache

D_IN, D_OUT, HEADS, WINDOW, TOKENS = 16, 32, 4, 4, 8


class KVCache:
    """One layer's cache as a plain object: its keys and values as ``k`` and ``v`` (b, h, kept, hd)."""

    def __init__(self):
        self.k = self.v = None

    def reset(self):
        self.k = self.v = None


class PerLayerCache:
    """Every layer's cache as a plain object: a list of (keys, values) per layer, read and written by layer index."""

    def __init__(self, n_layers):
        self.cache = [None] * n_layers

    def read(self, layer):
        return self.cache[layer]

    def write(self, layer, keys, values):
        self.cache[layer] = (keys, values)

    def reset(self):
        self.cache = [None] * len(self.cache)


class SlidingWindowAttention(nn.Module):
    """Multi-head attention over a sliding window of ``sliding_window_size`` keys (query i sees keys i − W + 1 … i),
    its KV cache in a plain object: ``store="object"`` a :class:`KVCache` (``self.kv_cache.k``), ``"per-layer-list"``
    a :class:`PerLayerCache` (``self.kv_cache.cache[0]``), ``"dict"`` one :class:`KVCache` per layer in a dict
    (``self.caches["layer_0"]``).  ``keep``: how many of the latest tokens the cache keeps after each forward — W, or
    None for every token, or fewer (a bug); the mask hides the far keys either way."""

    def __init__(self, store="object", keep=WINDOW, sliding_window_size=WINDOW, layer_idx=0):
        super().__init__()
        self.num_heads, self.head_dim, self.d_out = HEADS, D_OUT // HEADS, D_OUT
        self.sliding_window_size, self.keep, self.layer_idx, self.store = sliding_window_size, keep, layer_idx, store
        self.W_query = nn.Linear(D_IN, D_OUT, bias=False)
        self.W_key = nn.Linear(D_IN, D_OUT, bias=False)
        self.W_value = nn.Linear(D_IN, D_OUT, bias=False)
        self.out_proj = nn.Linear(D_OUT, D_OUT)
        if store == "dict":
            self.caches = {f"layer_{i}": KVCache() for i in range(2)}
        else:
            self.kv_cache = KVCache() if store == "object" else PerLayerCache(2)
        self.position = 0

    def _cached(self):
        if self.store == "dict":
            cache = self.caches[f"layer_{self.layer_idx}"]
            return None if cache.k is None else (cache.k, cache.v)
        if self.store == "object":
            return None if self.kv_cache.k is None else (self.kv_cache.k, self.kv_cache.v)
        return self.kv_cache.read(self.layer_idx)

    def _write(self, keys, values):
        if self.store == "per-layer-list":
            self.kv_cache.write(self.layer_idx, keys, values)
            return
        cache = self.caches[f"layer_{self.layer_idx}"] if self.store == "dict" else self.kv_cache
        cache.k, cache.v = keys, values

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        queries, keys, values = (w(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                                 for w in (self.W_query, self.W_key, self.W_value))  # (b, h, n, hd) each
        first = 0  # the position of the first query
        if use_cache:
            first = self.position
            if (cached := self._cached()) is not None:
                keys = torch.cat([cached[0], keys], dim=2)  # (b, h, kept + n, hd)
                values = torch.cat([cached[1], values], dim=2)  # (b, h, kept + n, hd)
            kept = keys.shape[2] if self.keep is None else self.keep
            self._write(keys[:, :, -kept:], values[:, :, -kept:])  # (b, h, ≤ kept, hd) each
            self.position += n
        query_pos = torch.arange(first, first + n)[:, None]  # (n, 1)
        key_pos = torch.arange(first + n - keys.shape[2], first + n)[None, :]  # (1, s): the keys' positions
        behind = query_pos - key_pos  # (n, s): how far each key is behind each query
        hidden = (behind < 0) | (behind >= self.sliding_window_size)  # (n, s): the future, and W or more behind
        attn_scores = (queries @ keys.transpose(2, 3)).masked_fill(hidden, -torch.inf)  # (b, h, n, s)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)  # (b, h, n, s)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, self.d_out)  # (b, n, d_out)
        return self.out_proj(context_vec)  # (b, n, d_out)

    def reset_cache(self):
        for cache in (self.caches.values() if self.store == "dict" else [self.kv_cache]):
            cache.reset()
        self.position = 0


def built(**kwargs) -> SlidingWindowAttention:
    torch.manual_seed(0)
    return SlidingWindowAttention(**kwargs).eval()


def checked(module):
    torch.manual_seed(1)
    return kv_cache(module, torch.randn(2, TOKENS, D_IN))


# store -> the paths of the cache's keys and values, as code indexes them
CACHED = {"object": ("kv_cache.k", "kv_cache.v"),
          "per-layer-list": ("kv_cache.cache[0][0]", "kv_cache.cache[0][1]"),
          "dict": ('caches["layer_0"].k', 'caches["layer_0"].v')}
STORES = list(CACHED)
RULE_STORES = ["object", *(pytest.param(store, marks=pytest.mark.slow) for store in STORES[1:])]  # one in the quick
# tier: the walk's test reads every store's paths
PER_TOKEN = 2 * D_OUT  # a token's key and value: num_heads × head_dim elements each
PER_TOKEN_BYTES = 4 * PER_TOKEN  # float32


@pytest.mark.parametrize("store", STORES)
def test_the_one_walk_finds_a_plain_caches_tensors_and_its_holders(store):
    """The window readers and the kv-cache rule read one walk: the plain cache objects are holders, and the tensors
    inside them are found under the same paths, the layer without a token holding none."""
    module = built(store=store)
    with torch.no_grad():
        module(torch.randn(1, 4, D_IN), use_cache=True)
    held = declarations.held_objects(module)
    tensors = {path for path, value in held.items() if isinstance(value, torch.Tensor)}
    assert tensors == set(CACHED[store]), held
    holders = {"object": ["", "kv_cache"], "per-layer-list": ["", "kv_cache"],
               "dict": ["", 'caches["layer_0"]', 'caches["layer_1"]']}[store]
    layers = ("W_query", "W_key", "W_value", "out_proj")
    assert [path for path in declarations.window_holders(module) if path not in layers] == holders


@pytest.mark.parametrize("store", RULE_STORES)
def test_a_sliding_window_cache_that_keeps_w_passes_saying_what_it_holds(store):
    """Keeping the last W tokens: a pass that says what the cache holds after the text — tokens, elements and bytes
    each, and each tensor's shape."""
    check = checked(built(store=store))
    k, v = CACHED[store]
    holds = (f"{WINDOW} tokens of {PER_TOKEN} elements ({PER_TOKEN_BYTES} bytes) each: {k} (1, {HEADS}, {WINDOW}, "
             f"{D_OUT // HEADS}), {v} (1, {HEADS}, {WINDOW}, {D_OUT // HEADS})")
    assert check.status == "pass" and check.evidence.endswith(f"; after {TOKENS} tokens the cache holds {holds}"), check


@pytest.mark.parametrize("store", RULE_STORES)
def test_a_sliding_window_cache_that_keeps_every_token_fails_though_its_outputs_are_right(store):
    """The mask hides the far keys, so every output is right, but the cache grows with the whole text where W
    entries suffice: the waste sliding-window attention exists to save fails kv-cache."""
    check = checked(built(store=store, keep=None))
    k, _ = CACHED[store]
    assert check.status == "fail", check
    assert "give the uncached outputs (≤ 1e-05)" in check.evidence, check
    assert f"but the cache keeps more than the window needs: {k} holds {TOKENS} tokens after {TOKENS}" in \
        check.evidence, check
    assert (f"a window of W = {WINDOW} needs only the last {WINDOW} — the cache's {TOKENS * PER_TOKEN_BYTES:,} bytes "
            f"grow by {PER_TOKEN_BYTES:,} with every token, where the last {WINDOW} take {WINDOW * PER_TOKEN_BYTES:,}: "
            "drop the older keys and values") in check.evidence, check


@pytest.mark.parametrize("store", RULE_STORES)
def test_a_sliding_window_cache_that_keeps_too_little_names_the_plain_caches_tensor(store):
    """Keeping W − 2: a step misses keys its window shows, and the cause names the tensor, what it holds and what a
    window of W needs."""
    check = checked(built(store=store, keep=WINDOW - 2))
    k, _ = CACHED[store]
    assert check.status == "fail", check
    assert (f"the cache keeps too little: {k} holds {WINDOW - 2} tokens after ") in check.evidence, check
    assert f"where a window of W = {WINDOW} needs the last {WINDOW - 1} before the next token" in check.evidence, check
