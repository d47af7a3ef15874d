"""Two testers' modules, written the way users write them: the verdicts and the words the checker gives each (the
modules are tests/helpers/user_modules.py's, after FusedHeads)."""

import numpy as np
import pytest
import torch
from helpers import user_modules as um

import attnviz
from attnviz import checks, explain


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


def fused(variant, **kwargs):
    torch.manual_seed(0)
    return um.FusedHeads(variant=variant, **kwargs).eval()


# ----------------------------------------------------------------- a −10,000 mask hides


@pytest.mark.parametrize("variant", ["bert-1e4", "where-masked-bias", "sdpa-float-1e4"])
def test_a_minus_ten_thousand_mask_is_a_causal_mask_and_every_rule_passes(variant):
    failed = {rule: check.evidence for rule, check in verdicts(fused(variant)).items() if check.status == "fail"}
    assert failed == {}


@pytest.mark.parametrize("variant", ["bert-1e4", "where-masked-bias", "sdpa-float-1e4"])
def test_explain_weight_hides_what_the_checker_hides(variant):
    torch.manual_seed(1)
    trace = attnviz.trace_module(fused(variant), torch.randn(1, 6, 64))
    for query in range(6):
        hidden = explain.explain_weight(trace, 0, query, 0).row_hidden  # (n,)
        assert hidden.tolist() == [key > query for key in range(6)]
        assert explain.explain_weight(trace, 1, query, 5).masked == (query < 5)


def test_one_definition_of_hidden_for_torch_and_numpy_fp16_rounding_included():
    scaled = torch.tensor([0.3, -2.7, 3.1, 0.0, -1.5, 900.0], dtype=torch.float16)  # (6,)
    push = torch.tensor([-10000.0, -10000.0, -float("inf"), -512.0, 0.0, -1e4], dtype=torch.float16)  # (6,)
    masked = scaled + push  # (6,) fp16 rounds −10000 + score to a multiple of 8
    expected = [True, True, True, False, False, True]  # ALiBi's largest push (0.5 × 1,024) is a bias, not a mask
    assert attnviz.trace.hidden_by_mask(masked, scaled).tolist() == expected
    assert attnviz.trace.hidden_by_mask(masked.float().numpy(), scaled.float().numpy()).tolist() == expected
    replaced = np.where([True, False, True], np.float32(-1e4), np.float32(-1.5))  # (3,) GPT-2's masked_bias
    assert attnviz.trace.hidden_by_mask(replaced, np.float32([2.0, -1.5, -3.0])).tolist() == [True, False, True]


# ----------------------------------------------------------------- q and k each scaled by head_dim ** -0.25


def test_q_and_k_each_scaled_by_a_fourth_root_pass_matches_reference():
    results = verdicts(fused("scale-q-and-k"))
    assert results["scaling"].status == "pass"
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


def test_q_and_k_each_scaled_are_explained_unscaled_with_the_divisor_root_head_dim():
    torch.manual_seed(1)
    trace = attnviz.trace_module(fused("scale-q-and-k"), torch.randn(1, 6, 64))
    explained = explain.explain_weight(trace, 1, 4, 2)
    assert explained.divisor == pytest.approx(4.0, rel=1e-4)  # √16
    assert explained.scaled == pytest.approx(explained.score / explained.divisor, rel=1e-4, abs=1e-6)
    assert explained.notes == ()  # the recorded q and k give the run's own score


# ----------------------------------------------------------------- nanoGPT's attn_dropout after masking after the softm


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_a_mask_after_the_softmax_is_not_blamed_on_the_eval_mode_dropout_after_it(dropout):
    torch.manual_seed(0)
    results = verdicts(um.MaskAfterSoftmax(dropout=dropout).eval())
    assert results["dropout-placement"].status == "pass", results["dropout-placement"].evidence
    assert "after the softmax" in results["mask-convention"].evidence
    assert results["rows-sum-to-one"].status == "fail"


def test_a_dropout_left_in_training_mode_after_a_mask_after_the_softmax_still_fails():
    torch.manual_seed(0)
    check = verdicts(um.MaskAfterSoftmax(dropout=0.2).train())["dropout-placement"]
    assert check.status == "fail" and "about 20%" in check.evidence and "module.eval()" in check.evidence


# ----------------------------------------------------------------- heads split with view and never transposed


@pytest.mark.parametrize("tokens", [8, 4])  # 4: as many tokens as heads, so the softmax's (h, h) is (n, n)
def test_heads_never_transposed_are_named_whatever_the_token_count(tokens):
    torch.manual_seed(0)
    x = torch.randn(2, tokens, 64)  # (b, n, d_in)
    shape = rf"gives \(2, {tokens}, 4, 4\): its last two dims are"
    with pytest.raises(attnviz.tracing.TraceError, match=shape) as raised:
        checks.check_module(um.ViewNoTranspose().eval(), x)
    assert "which are its dim 1" in str(raised.value) and "add .transpose(1, 2)" in str(raised.value)


def test_as_many_heads_as_tokens_in_a_right_module_is_still_attention():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 64)  # (b, n, d_in): n = 4 = heads
    assert {check.status for check in checks.check_module(fused("masked_fill"), x)} <= {"pass", "skip"}


# ----------------------------------------------------------------- the KV cache's words


def cached(bug=None, **kwargs):
    torch.manual_seed(0)
    return um.LearnerCachedMHA(32, 32, 16, 0.0, 4, bug=bug, **kwargs).eval()


def test_a_position_counter_one_ahead_fails_in_words_on_the_chunk_after_the_cache():
    check = verdicts(cached("one-ahead"))["kv-cache"]
    assert check.status == "fail"
    assert check.evidence.startswith("sequence 1, tokens 6 … 7 (a chunk of 2 after 6 tokens cached): the cached "
                                     "output differs from the uncached one by "), check
    assert check.evidence.endswith("the position is wrong: ptr_current_pos is 7 before token 6, and the step's mask "
                                   "treats token 6 as position 7; it must count the tokens fed so far (6)"), check
    assert verdicts(cached())["kv-cache"].status == "pass"


def test_repeated_kv_heads_are_named_when_the_sizes_have_other_names():
    torch.manual_seed(0)
    module = um.NanochatGQA(32, 4, 2, caches_repeated=True).eval()
    check = verdicts(module, sizes={"num_heads": 4, "num_kv_groups": 2})["kv-cache"]
    assert check.status == "fail" and "k_cache and v_cache hold num_heads = 4 heads where num_kv_groups = 2" \
        in check.evidence
    torch.manual_seed(0)
    assert verdicts(um.NanochatGQA(32, 4, 2).eval(), sizes={"num_kv_groups": 2})["kv-cache"].status == "pass"


def test_full_keys_and_values_beside_a_latent_are_named_from_the_traced_widths():
    torch.manual_seed(0)
    check = verdicts(um.DeepSeekNamedMLA(32, 4, 8, cache_full=True).eval())["kv-cache"]  # no d_out, no head_dim
    assert check.status == "fail" and "full keys and values where latent_dim = 8" in check.evidence
    torch.manual_seed(0)
    assert verdicts(um.DeepSeekNamedMLA(32, 4, 8).eval())["kv-cache"].status == "pass"


def test_attnviz_check_gives_the_rules_the_sizes_it_built_the_module_with():
    from test_cli import check

    result = check(f"{um.__file__}:NanochatGQA", "--d-in", 32, "--num-heads", 4, "--num-kv-groups", 2,
                   "--set", "caches_repeated=true")
    assert result.returncode == 1 and "where num_kv_groups = 2 K/V heads" in " ".join(result.stdout.split())


def test_a_reset_that_keeps_the_cache_says_so():
    check = verdicts(cached("reset-keeps-cache"))["kv-cache"]
    assert check.status == "fail" and check.evidence.endswith(
        "after reset_cache() the next sequence still attends over the last one's keys: empty cache_k/cache_v in the "
        "reset"), check.evidence


def test_a_reset_that_does_nothing_names_both_halves():
    check = verdicts(cached("never-resets"))["kv-cache"]
    assert check.status == "fail" and check.evidence.endswith(
        "reset_cache() resets nothing: the second sequence starts at ptr_current_pos = 8, not 0, and still attends "
        "over the first one's keys (cache_k/cache_v keep them) — in the reset, empty cache_k/cache_v and set "
        "ptr_current_pos back to 0"), check.evidence
    assert "set it back to 0 in the reset too" in verdicts(cached("reset-forgets-position"))["kv-cache"].evidence


def test_a_cached_forward_returning_nan_or_another_shape_says_so():
    nan = verdicts(cached("nan-when-cached"))["kv-cache"]
    assert nan.status == "fail" and nan.evidence.startswith(
        "sequence 1, tokens 0 … 3 (the prefill): the cached forward returns NaN at 4 of 4 positions where the "
        "uncached one is finite"), nan.evidence
    shape = verdicts(cached("last-token-when-cached"))["kv-cache"]
    assert shape.status == "fail" and shape.evidence.startswith(
        "sequence 1, tokens 0 … 3 (the prefill): the cached forward returned shape (1, 32) for an input of shape "
        "(1, 4, 32): an attention module returns one vector per token, (1, 4, 32)"), shape.evidence


# ----------------------------------------------------------------- messages


def test_a_single_heads_softmax_over_dim_0_is_over_the_batch():
    torch.manual_seed(0)
    rows = verdicts(um.SingleHeadCausal(bug="softmax-dim-0").eval(), rules=["rows-sum-to-one"])["rows-sum-to-one"]
    assert rows.status == "fail" and "runs over dim=0 of a (2, 8, 8) tensor (the batch):" in rows.evidence


def test_a_mask_buffer_used_whole_is_named_with_its_fix():
    torch.manual_seed(0)
    with pytest.raises(attnviz.tracing.TraceError) as raised:
        checks.check_module(um.SingleHeadCausal(bug="mask-not-sliced").eval())
    assert str(raised.value).endswith("— the mask self.mask (64, 64) is used whole: slice it to the tokens, "
                                      "self.mask[:n, :n] with n = x.shape[1] (whole, it fits only an input of 64 "
                                      "tokens; this one has 8)"), str(raised.value)
    assert "The size of tensor a (64) must match the size of tensor b (8)" in str(raised.value)  # torch's own words


def test_a_bare_multihead_attention_said_to_be_causal_is_told_its_attn_mask_not_masked_fill():
    torch.manual_seed(0)
    check = verdicts(torch.nn.MultiheadAttention(32, 4, batch_first=True).eval(), causal=True)["mask-convention"]
    assert check.status == "fail" and "masked_fill" not in check.evidence
    assert "nn.MultiheadAttention masks only through its attn_mask" in check.evidence


@pytest.mark.parametrize("spelling", ["num_kv_groups", "n_kv_heads", "num_kv_heads", "num_key_value_heads"])
def test_sizes_take_the_spellings_a_constructor_takes(spelling):
    torch.manual_seed(0)
    module = um.CachesRepeated(32, heads=4, groups=2).eval()
    assert checks.check_module(module, rules=["kv-cache"])[0].status == "pass"  # nothing says it has 2 K/V heads
    check = checks.check_module(module, rules=["kv-cache"], sizes={spelling: 2})[0]
    assert check.status == "fail" and "where num_kv_groups = 2" in check.evidence


@pytest.mark.parametrize("sizes", [{"bogus": 1}, {"num_kv_group": 2}])
def test_sizes_refuse_a_name_the_checker_does_not_read_and_list_those_it_does(sizes):
    with pytest.raises(ValueError, match=r"no size .* num_kv_groups .*latent_dim.*sliding_window_size"):
        checks.check_module(um.NanochatGQA(32, 4, 2).eval(), rules=["kv-cache"], sizes=sizes)


def test_sizes_refuse_a_value_that_is_not_a_size():
    with pytest.raises(ValueError, match="num_kv_groups"):
        checks.check_module(um.NanochatGQA(32, 4, 2).eval(), rules=["kv-cache"], sizes={"num_kv_groups": "2"})
