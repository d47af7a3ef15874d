"""A scale the module's config declares as its design — Gemma's ``query_pre_attn_scalar``, DeepSeek's YaRN ``mscale``
in ``rope_scaling`` — passes ``scaling`` and ``matches-reference``, named, and a module that ignores it (÷√head_dim,
the book's) fails ``scaling``, naming both; a scale the module sets itself (``self.scaling``) is its own claim and
fails, naming the attribute; a module whose only fault is the scale fails ``matches-reference`` naming the scale, not
the mask (the modules are tests/helpers/user_modules.py's Gemma3Layer, GemmaStyleAttention, DeepSeekV2YarnMLA,
CustomScale and MyMultiHeadAttention)."""

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


def test_a_deepseek_port_that_forgets_yarns_mscale_fails_naming_it():
    mscale = 0.1 * 0.707 * math.log(40) + 1
    check = verdicts(deepseek(YARN, yarn_mscale=False))["scaling"]
    assert check == checks.Check("scaling", "fail", (
        "the scores are divided by √head_dim = √24 ≈ 4.9, the book's scale, but the module's config declares the "
        f"scale its model is trained with: {24 ** 0.5 / mscale ** 2:.4g} = √24 ÷ mscale², YaRN's from the config's "
        f"rope_scaling (mscale = 0.1 · mscale_all_dim · ln(factor) + 1 = {mscale:.4g}: DeepSeek) — divide by "
        f"{24 ** 0.5 / mscale ** 2:.4g}, not 4.899"))
