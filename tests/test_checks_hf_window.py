"""kv-cache on transformers' own sliding-window layers (Mistral, Qwen2) that fill the ``DynamicCache`` attnviz hands
them: which tokens that cache keeps is attnviz's choice, not the layer's, so a window the cache outgrows is said, not
failed — from Python (Qwen2's layer declares its window) and from ``attnviz check --window`` alike."""

import contextlib
import io

import pytest
import torch

from attnviz import checks, cli

pytest.importorskip("transformers")
from helpers import hf_window  # noqa: E402  (imports transformers)

KEPT = ("after 8 tokens the cache holds 8 tokens of 32 elements (128 bytes) each: past_key_values.layers[0].keys "
        "(1, 2, 8, 8), past_key_values.layers[0].values (1, 2, 8, 8) — more than a window of W = 3 needs, and not the "
        "layer's doing: the DynamicCache attnviz hands it keeps every token, and the layer only adds to it (a "
        "transformers model hands a sliding-window layer DynamicCache(config=…), whose DynamicSlidingWindowLayer "
        "keeps the last W − 1 = 2)")


@pytest.mark.parametrize("family", ["Qwen2", "Mistral"])
def test_a_hugging_face_window_layer_passes_with_the_cache_attnviz_hands_it(family):
    torch.manual_seed(0)
    module = getattr(hf_window, family)(sliding_window=3).eval()
    check = checks.check_module(module, rules=["kv-cache"], sizes={"sliding_window_size": 3})[0]
    assert check.status == "pass", check
    assert check.evidence.startswith("two sequences: a prefill of 4 tokens, then 2 tokens one by one and the last 2 "
                                     "in one forward (a chunk after the cache), each given the DynamicCache the "
                                     "forward before filled (past_key_values), give the uncached outputs"), check
    assert check.evidence.endswith(KEPT), check


def test_python_and_the_command_line_agree_on_a_hugging_face_window_layer():
    torch.manual_seed(0)
    in_python = checks.check_module(hf_window.Qwen2(num_heads=8, num_kv_heads=2, sliding_window=3).eval())
    assert [c for c in in_python if c.status != "pass"] == []
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        returncode = cli.main(["check", f"{hf_window.__file__}:Mistral", "--num-heads", "8", "--num-kv-groups", "2",
                               "--window", "3"])
    assert returncode == 0, out.getvalue() + err.getvalue()
    assert "kv-cache" in out.getvalue() and "FAIL" not in out.getvalue()


def test_a_window_layer_that_keeps_its_own_cache_still_fails_when_it_keeps_too_much():
    """The cache a module returns is its own: more than W tokens in it stays a failure."""

    class KeepsEverything(torch.nn.Module):
        def __init__(self, d_in=16, sliding_window_size=3):
            super().__init__()
            self.sliding_window_size = sliding_window_size
            self.W_query = torch.nn.Linear(d_in, d_in, bias=False)
            self.W_key = torch.nn.Linear(d_in, d_in, bias=False)
            self.W_value = torch.nn.Linear(d_in, d_in, bias=False)

        def forward(self, x, past_kv=None):
            n = x.shape[1]
            queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
            if past_kv is not None:
                keys = torch.cat([past_kv[0], keys], dim=1)  # (b, past + n, d)
                values = torch.cat([past_kv[1], values], dim=1)  # (b, past + n, d)
            total = keys.shape[1]
            attn_scores = queries @ keys.transpose(1, 2) / x.shape[-1] ** 0.5  # (b, n, past + n)
            behind = torch.arange(total - n, total)[:, None] - torch.arange(total)[None, :]  # (n, past + n)
            attn_scores = attn_scores.masked_fill((behind < 0) | (behind >= self.sliding_window_size), -torch.inf)
            attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, n, past + n)
            return attn_weights @ values, (keys, values)  # (b, n, d), the cache: every token

    torch.manual_seed(0)
    check = checks.check_module(KeepsEverything().eval(), rules=["kv-cache"])[0]
    assert check.status == "fail" and "the cache keeps more than the window needs" in check.evidence, check
