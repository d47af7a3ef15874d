"""The tracer's walk from the softmax back to Q @ Kᵀ and on to ``@ V`` through the spellings real modules use
(``torch.where`` masks, TransformerLens, Hugging Face's eager attention), and what it says when there is no attention
over the keys."""

from pathlib import Path

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing


def line_of(path: Path, start: str) -> int:
    """The number of the first line of ``path`` that starts with ``start`` (indentation aside)."""
    lines = path.read_text().splitlines()
    return next(number for number, text in enumerate(lines, 1) if text.strip().startswith(start))


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


@pytest.mark.parametrize("spelling", ["keep", "buffer", "inverted"])
def test_a_where_mask_without_the_scale_fails_scaling_as_a_masked_fill_one_does(spelling):
    """``torch.where(keep, att, -inf)`` (or a buffer fill, or ``where(~keep, -inf, att)``): the walk back from the
    softmax follows the scores, not the condition, so the forgotten ÷√head_dim is found."""
    torch.manual_seed(0)
    results = verdicts(um.WhereMasked(spelling=spelling, scaled=False).eval())
    assert results["scaling"].status == "fail"
    assert results["scaling"].evidence == "the scores are not scaled: divide by √head_dim = √8 ≈ 2.83"
    assert results["matches-reference"].status == "fail"  # Q, K and V are found: the context is compared
    assert results["causal"].status == "pass" and results["mask-convention"].status == "pass"


@pytest.mark.parametrize("spelling", ["keep", "buffer", "inverted"])
def test_a_where_mask_with_the_scale_passes_every_rule(spelling):
    torch.manual_seed(0)
    module = um.WhereMasked(spelling=spelling).eval()
    results = verdicts(module)
    assert {rule: c.status for rule, c in results.items() if c.status != "pass"} == {"kv-cache": "skip",
                                                                                "rotary-placement": "skip"}
    trace = tracing.trace_module(module, torch.randn(2, 6, 32))
    assert {"queries", "keys", "scores", "scaled", "masked", "context"} <= set(trace.steps)
    weights = trace.steps["weights"]  # (b, h, n, n)
    assert (weights[..., torch.ones(6, 6).triu(1).bool().numpy()] == 0).all()


def test_transformer_lens_attention_passes_scaling_and_matches_reference():
    """TransformerLens masks with ``torch.where(final_mask, attn_scores, self.IGNORE)`` and, after the softmax, sets
    NaN to 0 with another ``where`` and casts with ``.to(dtype=v.dtype)``: the walk goes through all three."""
    torch.manual_seed(0)
    results = verdicts(TLAttention := um.TransformerLensAttention().eval())
    assert results["scaling"].status == "pass", results["scaling"].evidence
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    assert {rule for rule, c in results.items() if c.status == "fail"} == set()
    trace = tracing.trace_module(TLAttention, torch.randn(1, 5, 32))
    assert trace.steps["context"].shape == (1, 4, 5, 8)


def test_a_same_dtype_type_cast_after_the_softmax_passes_through_as_dropout_does():
    """Hugging Face's eager attention does ``attn_weights.type(value.dtype)`` after the softmax: a no-op in float32,
    so V is found and the context compared."""
    torch.manual_seed(0)
    results = verdicts(um.EagerAttention().eval())
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    assert results["scaling"].status == "pass"


def test_transformers_gpt2_eager_attention_is_compared_with_the_reference():
    """The real thing: transformers' GPT2Attention (eager), given the additive causal mask its model builds."""
    pytest.importorskip("transformers")
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = GPT2Config(n_embd=32, n_head=4, n_positions=16, attn_pdrop=0.0, resid_pdrop=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    inner = GPT2Attention(config, layer_idx=0).eval()

    class GPT2Eager(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.d_in, self.attn = 32, inner

        def forward(self, x):
            n = x.shape[1]
            mask = torch.full((n, n), torch.finfo(x.dtype).min).triu(1)[None, None]  # (1, 1, n, n)
            return self.attn(x, attention_mask=mask)[0]

    check = verdicts(GPT2Eager().eval())["matches-reference"]
    assert check.status == "pass", check.evidence


def test_a_line_outside_the_users_file_is_named_with_its_file():
    """The call that hides V is in the library's file, not the module's: the message names that file."""
    torch.manual_seed(0)
    check = verdicts(um.EagerAttention(renormalise=True).eval())["matches-reference"]
    assert check.status == "skip"
    line = line_of(Path(um.__file__).with_name("library_attention.py"), "attn_weights = attn_weights / ")
    assert f"the / on line {line} of " in check.evidence and "library_attention.py" in check.evidence


def test_a_line_in_the_users_file_is_named_without_a_file():
    torch.manual_seed(0)
    check = verdicts(um.RenormalisedWeights().eval())["matches-reference"]
    assert "the / on line" in check.evidence and ".py" not in check.evidence


@pytest.mark.parametrize("fill", ["-inf", "min"])
def test_a_softmax_over_the_heads_fails_the_check_naming_its_dim_shape_and_line(fill):
    """A softmax over the heads is a bug in the module's attention, not a module attnviz cannot run: check_module
    raised TraceError ("no attention found: …") and attnviz check exited 2, "cannot be checked"."""
    torch.manual_seed(0)
    line = line_of(Path(um.__file__), "att = F.softmax(att, dim=1)")
    results = verdicts(um.SoftmaxOverHeads(fill=fill).eval(), rules=["rows-sum-to-one", "causal"])
    named = (f"the softmax on line {line} runs over dim=1 of a (2, 4, 8, 8) tensor (the heads): each cell's weights "
             "sum to 1 over that dimension, not each query's over the keys, and a cell the mask hides in all 4 gets "
             "weight 1/4, not 0 (NaN where the fill is −∞: 0/0) — use dim=-1 (the keys)")
    rows = results["rows-sum-to-one"]
    assert rows.status == "fail" and rows.evidence.endswith(f"should be 1 — {named}"), rows.evidence
    if fill == "min":  # the hidden future gets 1/4 of each head's weight
        causal = results["causal"]
        assert causal.status == "fail" and causal.evidence.endswith(f"the mask hides the future, but {named}")
    assert tracing.trace_module(um.SoftmaxOverHeads(), torch.randn(2, 8, 32)).steps["weights"].shape == (2, 4, 8, 8)


@pytest.mark.parametrize("merge", ["view", "reshape_as"])
def test_queries_scaled_before_the_heads_are_folded_into_the_batch_pass_every_rule(merge):
    """OPT's, BART's and Whisper's order: q scaled, then viewed, transposed and reshaped to (b·h, n, hd).  scaling
    finds the scale before the view, matches-reference compares the concatenated heads (a context put back with
    reshape_as(x) too), and only kv-cache and rotary-placement do not pass; the trace has 4 heads."""
    torch.manual_seed(0)
    results = verdicts(um.FoldedHeads(merge=merge).eval())
    assert {rule for rule, check in results.items() if check.status != "pass"} == {"kv-cache",
                                                                                         "rotary-placement"}, results
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √4 ≈ 2"
    assert results["matches-reference"].evidence.startswith("the concatenated heads equal"), results
    trace = tracing.trace_module(um.FoldedHeads(merge=merge).eval(), torch.randn(1, 8, 16))
    assert trace.steps["weights"].shape == (1, 4, 8, 8) and trace.steps["queries"].shape == (1, 4, 8, 4)


@pytest.mark.parametrize("merge", ["view", "reshape_as"])
def test_heads_mixed_with_tokens_by_a_bad_view_still_fail(merge):
    """The walk reads through views and reshapes, but the concatenated heads are still compared: a (b·h, n, hd)
    context viewed straight as (b, n, d) fails causal and matches-reference (with reshape_as(x), matches-reference
    compared the context alone and passed)."""
    torch.manual_seed(0)
    results = verdicts(um.FoldedHeads(merge=merge, bug="heads-mixed").eval())
    assert results["causal"].status == "fail", results["causal"]
    assert results["matches-reference"].status == "fail" and results["matches-reference"].evidence.startswith(
        "the concatenated heads ≠"), results["matches-reference"]


def test_transformers_opt_eager_attention_scales_its_queries_before_the_view():
    """The real thing: transformers' OPTAttention (eager) multiplies q_proj's output by head_dim ** -0.5, then views
    and transposes it, and calls its attention with scaling=1.0; given the additive causal mask its model builds."""
    pytest.importorskip("transformers")
    from transformers import OPTConfig
    from transformers.models.opt.modeling_opt import OPTAttention

    config = OPTConfig(hidden_size=32, num_attention_heads=4, ffn_dim=64, attention_dropout=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    inner = OPTAttention(config, layer_idx=0).eval()

    class OPTEager(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = inner

        def forward(self, hidden_states):
            n = hidden_states.shape[1]
            mask = torch.full((n, n), float("-inf")).triu(1)[None, None]  # (1, 1, n, n)
            return self.self_attn(hidden_states, attention_mask=mask)[0]  # (b, n, 32)

    results = verdicts(OPTEager().eval())
    assert results["scaling"] == checks.Check("scaling", "pass", "the scores are divided by √head_dim = √8 ≈ 2.83")
    assert results["matches-reference"].status == "pass", results["matches-reference"]
    assert {rule for rule, check in results.items() if check.status == "fail"} == set(), results
