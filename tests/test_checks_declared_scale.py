"""A scale the module's config declares as its design — Gemma's ``query_pre_attn_scalar``, DeepSeek's YaRN ``mscale``
in ``rope_scaling`` — passes ``scaling`` and ``matches-reference``, named, and a module that ignores it (÷√head_dim,
the book's) fails ``scaling``, naming both — save YaRN's, with which √head_dim passes as well (Ministral 3); Gemma's
scale kept as ``self.scaling = query_pre_attn_scalar ** -0.5``, a config dict kept as ``self.cfg``, Granite's
``attention_multiplier`` and transformers' Gemma 3n (q and k normalised, scaling 1) pass; another scale the module
sets itself (``self.scaling``) is its own claim and fails, naming the attribute; a module whose only fault is the
scale fails ``matches-reference`` naming the scale, not the mask (the modules are tests/helpers/user_modules.py's)."""

import math
from types import SimpleNamespace

import torch
from helpers import user_modules as um

from attnviz import checks

RULES = ("mask-convention", "scaling", "matches-reference")


def verdicts(module, rules=RULES) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval(), rules=rules)}


def gemma(query_pre_attn_scalar=12):
    torch.manual_seed(0)
    return um.Gemma3Layer(head_dim=8, query_pre_attn_scalar=query_pre_attn_scalar)


def deepseek(rope_scaling, yarn_mscale=True):
    torch.manual_seed(0)
    config = SimpleNamespace(hidden_size=64, num_attention_heads=4, kv_lora_rank=16, qk_nope_head_dim=16,
                             qk_rope_head_dim=8, v_head_dim=16, max_position_embeddings=64, rope_scaling=rope_scaling)
    return um.DeepSeekV2YarnMLA(config, yarn_mscale=yarn_mscale)


def gemma_style(query_pre_attn_scalar=256, scale="config"):
    torch.manual_seed(0)
    config = SimpleNamespace(hidden_size=64, num_attention_heads=4, head_dim=16,
                             query_pre_attn_scalar=query_pre_attn_scalar)
    return um.GemmaStyleAttention(config, scale=scale)


YARN = {"type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,  # DeepSeek-V2's own
        "original_max_position_embeddings": 4096}


def test_gemma_query_pre_attn_scalar_other_than_head_dim_passes_named_as_the_configs_scale():
    results = verdicts(gemma(12))
    assert results["scaling"].status == "pass", results["scaling"].evidence
    assert results["scaling"].evidence == ("the scores are divided by √12 = √query_pre_attn_scalar, the config's "
                                           "scale (Gemma); the book's is √head_dim = √8")
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    assert "√query_pre_attn_scalar" in results["matches-reference"].evidence
    results = verdicts(gemma(8))  # Gemma-2/3 2B-12B: query_pre_attn_scalar is head_dim, the book's words
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √8 ≈ 2.83"
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


def test_deepseek_yarn_mscale_squared_passes_named_as_yarns():
    module = deepseek(YARN)
    mscale = 0.1 * 0.707 * math.log(40) + 1
    assert math.isclose(module.softmax_scale, 24 ** -0.5 * mscale ** 2)  # the module applies what the test names
    results = verdicts(module)
    assert results["scaling"].status == "pass", results["scaling"].evidence
    assert results["scaling"].evidence == (
        f"the scores are divided by {24 ** 0.5 / mscale ** 2:.4g} = √24 ÷ mscale², YaRN's from the config's "
        f"rope_scaling (mscale = 0.1 · mscale_all_dim · ln(factor) + 1 = {mscale:.4g}: DeepSeek); the book's is "
        "√head_dim = √24")
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    results = verdicts(deepseek(None))  # no YaRN: judged by the book's √head_dim
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √24 ≈ 4.9"


def test_a_scale_the_module_sets_itself_fails_naming_the_attribute_and_matches_reference_names_the_scale():
    torch.manual_seed(0)
    results = verdicts(um.CustomScale(), rules=None)
    assert {rule for rule, check in results.items() if check.status == "fail"} == {"scaling", "matches-reference"}
    assert results["mask-convention"].status == "pass"
    assert results["scaling"].evidence == ("the scores are multiplied by 0.1768, i.e. divided by 5.657: divide by "
                                           "√head_dim = √4 ≈ 2 — the scale is the module's self.scaling (0.1768)")
    reference = results["matches-reference"].evidence
    assert "is_causal" not in reference and "masks the future" not in reference, reference
    assert reference.endswith("— the difference is the scale alone: with the scores scaled as the module scales "
                              "them (× 0.1768, not ÷√4), the reference matches (see scaling)"), reference


def test_the_books_scale_by_d_out_bug_keeps_its_words_and_matches_reference_names_the_scale():
    torch.manual_seed(0)
    results = verdicts(um.MyMultiHeadAttention(bug="scale-by-d-out"))
    assert results["scaling"].evidence == ("the scores are divided by √d_out = √16 (the whole width): divide by "
                                           "√head_dim = √4 ≈ 2")
    assert results["matches-reference"].status == "fail"
    assert "the difference is the scale" in results["matches-reference"].evidence


def test_a_gemma_port_that_divides_by_root_head_dim_fails_naming_the_configs_scale_and_the_measured_one():
    results = verdicts(gemma_style(256, scale="head_dim"))
    assert results["scaling"] == checks.Check("scaling", "fail", (
        "the scores are divided by √head_dim = √16 ≈ 4, the book's scale, but the module's config declares the scale "
        "its model is trained with: √256 = √query_pre_attn_scalar, the config's scale (Gemma) — divide by 16, not 4"))
    assert results["mask-convention"].status == "pass"


def test_a_gemma_port_that_applies_the_configs_scale_passes_and_one_equal_to_head_dim_passes_as_the_books():
    assert verdicts(gemma_style(256))["scaling"] == checks.Check("scaling", "pass", (
        "the scores are divided by √256 = √query_pre_attn_scalar, the config's scale (Gemma); the book's is "
        "√head_dim = √16"))
    for scale in ("config", "head_dim"):  # query_pre_attn_scalar = head_dim: the config's scale is the book's
        assert verdicts(gemma_style(16, scale=scale))["scaling"] == checks.Check(
            "scaling", "pass", "the scores are divided by √head_dim = √16 ≈ 4")


def test_a_deepseek_port_without_yarns_mscale_passes_as_ministral_3_scales_and_an_unscaled_one_fails():
    """Ministral 3 declares YaRN with mscale_all_dim and divides by √head_dim; DeepSeek multiplies by mscale²: both
    pass, named; a scale that is neither still fails, naming the config's."""
    mscale = 0.1 * 0.707 * math.log(40) + 1
    check = verdicts(deepseek(YARN, yarn_mscale=False))["scaling"]
    assert check == checks.Check("scaling", "pass", (
        f"the scores are divided by √head_dim = √24 ≈ 4.9 — the config's rope_scaling declares YaRN's mscale "
        f"({mscale:.4g}): DeepSeek's attention divides by √24 ÷ mscale² = {24 ** 0.5 / mscale ** 2:.4g}, Ministral "
        "3's by √24; both are what real models do"))
    module = deepseek(YARN, yarn_mscale=False)
    module.softmax_scale = 1.0  # unscaled: neither
    check = verdicts(module)["scaling"]
    assert check.status == "fail" and check.evidence.startswith(
        "the scores are not scaled, but the module's config declares the scale its model is trained with: "
        f"{24 ** 0.5 / mscale ** 2:.4g} = √24 ÷ mscale², YaRN's"), check.evidence


def test_transformers_ministral_3_with_its_default_yarn_config_passes():
    torch.manual_seed(0)
    results = verdicts(um.Ministral3Layer())
    assert results["scaling"].status == "pass", results["scaling"].evidence
    assert "Ministral 3's by √128" in results["scaling"].evidence
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


def test_a_gemma_scale_kept_as_self_scaling_from_query_pre_attn_scalar_passes_and_one_without_the_root_fails():
    torch.manual_seed(0)
    results = verdicts(um.GemmaScalarAttention())  # query_pre_attn_scalar 24, head_dim 16, kept nowhere
    assert results["scaling"] == checks.Check("scaling", "pass", (
        "the scores are divided by √24 = √query_pre_attn_scalar, as self.att.scaling = query_pre_attn_scalar ** -0.5 "
        "says (Gemma); the book's is √head_dim = √16"))
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    results = verdicts(um.GemmaScalarAttention(query_pre_attn_scalar=None))  # the core's else: the book's
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √16 ≈ 4"
    results = verdicts(um.GemmaScalarAttention(root=False))  # 1 / query_pre_attn_scalar: the square root forgotten
    assert results["scaling"].status == "fail" and results["matches-reference"].status == "fail"
    assert results["scaling"].evidence.endswith("the scale is the module's self.att.scaling (0.04167)")


def test_a_config_dict_kept_as_self_cfg_declares_its_scale():
    torch.manual_seed(0)
    results = verdicts(um.GemmaCfgDictAttention())
    assert results["scaling"] == checks.Check("scaling", "pass", (
        "the scores are divided by √24 = √query_pre_attn_scalar, the config's scale (Gemma); the book's is "
        "√head_dim = √16"))
    check = verdicts(um.GemmaCfgDictAttention(scale="head_dim"))["scaling"]  # the dict's scale ignored
    assert check.status == "fail" and "√24 = √query_pre_attn_scalar, the config's scale (Gemma)" in check.evidence


def test_granites_attention_multiplier_is_the_configs_scale():
    torch.manual_seed(0)
    results = verdicts(um.GraniteLayer())
    assert results["scaling"] == checks.Check("scaling", "pass", (
        "the scores are divided by 16 = 1 ÷ attention_multiplier, the config's scale (Granite); the book's is "
        "√head_dim = √16"))
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


def test_gemma_3n_unscaled_with_q_and_k_normalised_passes_in_transformers_own_class_only():
    torch.manual_seed(0)
    results = verdicts(um.Gemma3nLayer())
    assert results["scaling"].status == "pass", results["scaling"].evidence
    assert "transformers' Gemma3nTextAttention normalises q and k" in results["scaling"].evidence
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    torch.manual_seed(0)
    results = verdicts(um.NormedUnscaledAttention())  # a user's own: a forgotten √head_dim looks the same
    assert results["scaling"].status == "fail" and results["matches-reference"].status == "fail"
    assert results["scaling"].evidence.startswith("the scores are not scaled: divide by √head_dim = √16")
