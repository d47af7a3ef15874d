"""The KV cache of a GPT whose layers follow the book's sliding-window schedule, written out independently of attnviz
(the reference the tests compare ``attnviz.kv_cache_bytes`` and the Generate page with)."""


def scheduled_window_bytes(n: int, window: int, emb_dim: int, n_heads: int, n_layers: int, stride: int, *,
                           kv_heads: int | None = None, batch: int = 1, bytes_per_elem: int = 4) -> int:
    """Bytes of K and V after ``n`` tokens: ``stride`` window layers then one full layer, repeated from layer 0 (the
    book's ``sliding_window_stride``; rasbt's estimator calls the same layout ``swa_ratio="stride:1"``).  A window
    layer keeps the last ``min(n, window)`` tokens, a full layer all ``n``; each token's K and V are ``kv_heads`` ×
    ``emb_dim // n_heads`` elements."""
    head_dim = emb_dim // n_heads
    total = 0
    for layer in range(n_layers):
        kept = min(n, window) if layer % (stride + 1) < stride else n  # tokens this layer's cache holds
        total += 2 * batch * (kv_heads or n_heads) * kept * head_dim * bytes_per_elem  # K and V
    return total
