"""kv-cache finds a module's cache by what it holds, not by its name: the tensors a cached forward changes, the reset
empties, and that hold the tokens — under any attribute, in a tuple or a dict — and measures a cache the caller
holds from what the forward returns."""

import pytest
import torch
from helpers import named_caches as nc
from helpers import user_modules as um
from torch.overrides import TorchFunctionMode

from attnviz import checks, kv_cache_rule

DROP = "drop the older keys and values after each forward (keep the last W)"
PER_TOKEN_BYTES = 2 * 32 * 4  # a token's key and value, d_out = 32 elements each, 4 bytes an element
GROWS = (f"the cache's {8 * PER_TOKEN_BYTES:,} bytes grow by {PER_TOKEN_BYTES} with every token, where the last 3 take "
         f"{3 * PER_TOKEN_BYTES}")  # 8 tokens held, a window of 3


def built(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**kwargs).eval()


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module)}


@pytest.mark.parametrize(("module", "holds"), [
    (lambda: built(nc.WindowKV), "3 tokens of 64 elements (256 bytes) each: k (1, 4, 3, 8), v (1, 4, 3, 8)"),
    (lambda: built(nc.DictCacheWindow),
     '3 tokens of 64 elements (256 bytes) each: cache["k"] (1, 4, 3, 8), cache["v"] (1, 4, 3, 8)'),
    (lambda: built(nc.TupleCacheMHA),
     "8 tokens of 64 elements (256 bytes) each: kv[0] (1, 4, 8, 8), kv[1] (1, 4, 8, 8)"),
    (lambda: built(nc.StackedViews),
     "8 tokens of 64 elements (256 bytes) each: kv (2, 1, 4, 8, 8), k (1, 4, 8, 8) in kv, v (1, 4, 8, 8) in kv"),
    (lambda: built(nc.GQAKeysValues),
     "8 tokens of 32 elements (128 bytes) each: keys (1, 2, 8, 8), values (1, 2, 8, 8)"),
    (lambda: built(nc.StepCountedMHA),
     "8 tokens of 64 elements (256 bytes) each: past_k (1, 4, 8, 8), past_v (1, 4, 8, 8)"),
    (lambda: built(nc.ZeroedInPlace),
     "k_buf (1, 4, 16, 8), v_buf (1, 4, 16, 8): 1,024 elements (4,096 bytes), no more than after the first token"),
], ids=["self.k", "dict", "tuple", "views-of-kv", "gqa-keys-values", "step-counter", "zeroed-in-place"])
def test_a_correct_cache_under_any_name_passes_and_says_what_it_holds(module, holds):
    """The tensors a cached forward fills and the reset empties are the cache, whatever they are called; a causal mask
    buffer no forward changes, and a step counter (a buffer the reset replaces, a tensor it never resets) are not.  A
    tensor kept beside views of it (``self.k = self.kv[0]``) counts once (a token took 128 elements, 512 bytes)."""
    results = verdicts(module())
    check = results["kv-cache"]
    assert check.status == "pass" and check.evidence.endswith(f"; after 8 tokens the cache holds {holds}"), check
    assert [rule for rule, check in results.items() if check.status == "fail"] == []


@pytest.mark.parametrize(("module", "words"), [
    (lambda: built(nc.WindowKV, keep_all=True),
     f"but the cache keeps more than the window needs: k holds 8 tokens after 8, and a window of W = 3 needs only the "
     f"last 3 — {GROWS}: {DROP}"),
    (lambda: built(nc.DictCacheWindow, keep_all=True),
     f'but the cache keeps more than the window needs: cache["k"] holds 8 tokens after 8, and a window of W = 3 needs '
     f"only the last 3 — {GROWS}: {DROP}"),
    (lambda: built(nc.GQAKeysValues, repeated=True),
     "but keys and values hold num_heads = 4 heads where num_kv_groups = 2 K/V heads are declared (64 elements per "
     "token, where 2 K/V heads need 32) — cache the keys and values before repeat_interleave, and repeat them after "
     "reading the cache"),
], ids=["self.k-keeps-all", "dict-keeps-all", "gqa-keys-values-repeated"])
def test_a_wasteful_cache_under_any_name_fails_naming_its_tensors(module, words):
    """Right outputs, but a window cache under self.k or in a dict keeps every token, a GQA cache under self.keys
    keeps num_heads heads: the waste its variant exists to save, found without a "cache" name."""
    results = verdicts(module())
    check = results["kv-cache"]
    assert check.status == "fail" and check.evidence.endswith(words), check
    assert [rule for rule, check in results.items() if check.status == "fail"] == ["kv-cache"]


def test_a_cache_the_caller_holds_says_what_the_returned_cache_holds():
    """Hugging Face's (out, present): the tensors of the cache the last forward returned, named by the argument the
    caller passes them back as."""
    check = verdicts(um.PastKeyValues().eval())["kv-cache"]
    assert check.status == "pass" and check.evidence.endswith(
        "; after 8 tokens the cache holds 8 tokens of 64 elements (256 bytes) each: past_key_values[0] (1, 4, 8, 8), "
        "past_key_values[1] (1, 4, 8, 8)"), check


def test_a_dynamic_cache_the_caller_holds_says_what_its_layers_hold():
    pytest.importorskip("transformers")
    check = verdicts(um.CacheObjectAttention().eval())["kv-cache"]
    assert check.status == "pass" and check.evidence.endswith(
        "; after 8 tokens the cache holds 8 tokens of 64 elements (256 bytes) each: past_key_values.layers[0].keys "
        "(1, 4, 8, 8), past_key_values.layers[0].values (1, 4, 8, 8)"), check


def test_a_window_cache_the_caller_holds_passes_when_it_returns_the_window_and_fails_when_it_returns_everything():
    right = verdicts(built(nc.PastWindow))
    assert right["kv-cache"].status == "pass" and right["kv-cache"].evidence.endswith(
        "; after 8 tokens the cache holds 3 tokens of 64 elements (256 bytes) each: past_key_values[0] (1, 4, 3, 8), "
        "past_key_values[1] (1, 4, 3, 8)"), right["kv-cache"]
    assert [rule for rule, check in right.items() if check.status == "fail"] == []
    wasteful = verdicts(built(nc.PastWindow, keep_all=True))
    check = wasteful["kv-cache"]
    assert check.status == "fail" and check.evidence.startswith("two sequences: a prefill of 4 tokens"), check
    assert check.evidence.endswith(
        f"but the cache keeps more than the window needs: past_key_values[0] holds 8 tokens after 8, and a window of "
        f"W = 3 needs only the last 3 — {GROWS}: {DROP}"), check
    assert [rule for rule, check in wasteful.items() if check.status == "fail"] == ["kv-cache"]


NESTED = ("8 tokens of 64 elements (256 bytes) each: {0}[0][0] (1, 2, 8, 8), {0}[0][1] (1, 2, 8, 8), {0}[1][0] "
          "(1, 2, 8, 8), {0}[1][1] (1, 2, 8, 8)")


@pytest.mark.parametrize(("cls", "name"), [(nc.LayerCaches, "kv"), (nc.PastLayers, "past_key_values")],
                         ids=["self.kv-list-of-tuples", "legacy-past_key_values"])
def test_a_cache_nested_per_layer_says_what_every_layer_holds_once(cls, name):
    """A list of per-layer (k, v) tuples the module keeps, or Hugging Face's legacy tuple of (k, v) tuples the caller
    holds: every layer's K and V are the cache, each counted once, and the pass says what the cache holds."""
    results = verdicts(built(cls))
    check = results["kv-cache"]
    assert check.status == "pass" and check.evidence.endswith(
        f"; after 8 tokens the cache holds {NESTED.format(name)}"), check
    assert [rule for rule, check in results.items() if check.status == "fail"] == []


@pytest.mark.parametrize(("cls", "name"), [(nc.LayerCaches, "kv"), (nc.PastLayers, "past_key_values")],
                         ids=["self.kv-list-of-tuples", "legacy-past_key_values"])
def test_a_nested_per_layer_cache_of_repeated_heads_fails_naming_every_layers_tensors(cls, name):
    """Right outputs, but each layer caches its K and V after repeat_interleave: the GQA waste, found two levels deep,
    fails naming every layer's tensors."""
    check = verdicts(built(cls, repeated=True))["kv-cache"]
    tensors = f"{name}[0][0] and {name}[0][1] and {name}[1][0] and {name}[1][1]"
    assert check.status == "fail" and check.evidence.endswith(
        f"but {tensors} hold num_heads = 4 heads where num_kv_groups = 2 K/V heads are declared (128 elements per "
        "token, where 2 K/V heads need 64) — cache the keys and values before repeat_interleave, and repeat them "
        "after reading the cache"), check


def test_nested_containers_are_read_to_a_limit_and_each_tensor_once():
    """Lists, tuples and dicts of any depth up to the limit; the same tensor under two paths counted once; a
    container that holds itself does not loop."""
    k, v, deep = torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4), torch.full((1, 2, 3, 4), 2.0)
    nested = {"layers": [(k, v), {"k": k, "v": v}], "deep": [[[[[[deep]]]]]], "deep enough": [[[deep]]]}
    loop: list = [v]
    loop.append(loop)
    assert kv_cache_rule._tensors_in("c", nested) == {'c["layers"][0][0]': k, 'c["layers"][0][1]': v,
                                               'c["deep enough"][0][0][0]': deep}
    assert kv_cache_rule._tensors_in("c", loop) == {"c[0]": v}


class _Copies(TorchFunctionMode):
    """The bytes every ``clone`` under it makes."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") == "clone":
            self.bytes += out.nbytes
        return out


def test_finding_the_cache_copies_one_tokens_cache_alone():
    """The finder copies what the reset emptied once, after one token: one token's K and V, in bytes, not the
    sequence's cache, nor the mask buffer."""
    module = built(nc.TupleCacheMHA)
    x = checks.default_input(module)[:1]  # (1, 8, 16)
    with torch.no_grad():
        module(x, use_cache=True)
    with _Copies() as copies:
        cache, fed, views = kv_cache_rule._found_cache(module, module.reset_cache, x)
    assert {path: tuple(value.shape) for path, value in cache.items()} == {"kv[0]": (1, 4, 8, 8), "kv[1]": (1, 4, 8, 8)}
    assert [{path: tuple(shape) for path, shape in shapes.items()} for shapes in fed] == [
        {"kv[0]": (1, 4, 1, 8), "kv[1]": (1, 4, 1, 8)}, {"kv[0]": (1, 4, 2, 8), "kv[1]": (1, 4, 2, 8)}]
    assert views == {}
    assert copies.bytes == 2 * 4 * 8 * 4  # one token's K and V: 4 heads × 8 floats each


def test_a_view_counts_in_the_tensor_it_views_and_halves_of_one_tensor_count_each():
    """``k = kv[0]`` and ``v = kv[1]`` beside ``kv`` are views of it; the halves alone (``kv.unbind(0)``, ``kv`` not
    kept) share its memory but hold none of each other's, so each counts; a slice along the last dimension
    (``kv[..., :8]``) is a view too, and a view of a view counts in the tensor both view."""
    kv = torch.zeros(2, 1, 4, 8, 16)  # (2, b, h, n, 2·hd)
    k, v = kv[0], kv[1]  # (1, 4, 8, 16) each
    assert kv_cache_rule._views({"kv": kv, "k": k, "v": v}) == {"k": "kv", "v": "kv"}
    assert kv_cache_rule._views({"k": k, "v": v}) == {}
    assert kv_cache_rule._views({"kv": kv, "k": k, "first": k[..., :8], "again": kv.view(-1)}) == {
        "k": "kv", "first": "kv", "again": "kv"}
    held = kv_cache_rule._held({"kv": kv, "k": k, "v": v},
                               [{"kv": (2, 1, 4, 1, 16), "k": (1, 4, 1, 16), "v": (1, 4, 1, 16)},
                                {"kv": (2, 1, 4, 2, 16), "k": (1, 4, 2, 16), "v": (1, 4, 2, 16)}])
    assert (held.elements, held.bytes, held.per_token, held.per_token_bytes) == (1024, 4096, 128, 512)


@pytest.mark.parametrize(("reset", "empty"), [("nothing", "kv/k/v"), ("views", "kv")])
def test_a_reset_that_leaves_a_stacked_cache_names_what_to_empty_views_included(reset, empty):
    """A reset that empties nothing, or only the views ``k``/``v`` of the stacked ``kv`` the next forward extends: the
    second sequence attends over the first one's keys, and the verdict names the tensors the reset left."""
    check = verdicts(built(nc.StackedViews, reset=reset))["kv-cache"]
    assert check.status == "fail" and check.evidence.endswith(
        f"after reset_cache() the next sequence still attends over the last one's keys: empty {empty} in the reset"), \
        check
