"""The scale a module really applies, wherever it applies it: to q or k before an SDPA call or a manual product,
before rotary, or against the latent of an absorbed MLA — read by the tracer and judged by ``scaling`` and
``matches-reference`` (the modules are tests/helpers/user_modules.py's ScaledBeforeTheCall and AbsorbedMLA)."""

import math

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing

TWICE = "the scores are divided by head_dim = 16 without the square root: divide by √head_dim = √16 ≈ 4"
ONCE = "the scores are divided by √head_dim = √16 ≈ 4"


def verdicts(module) -> dict[str, checks.Check]:
    torch.manual_seed(0)
    return {check.rule: check for check in checks.check_module(module.eval(), rules=("scaling", "matches-reference"))}


def scaled(how):
    torch.manual_seed(0)
    return um.ScaledBeforeTheCall(how=how)


@pytest.mark.parametrize("how", ["sdpa-q-divided", "sdpa-k-scaled", "rope-sdpa-twice"])
def test_q_or_k_scaled_before_sdpa_which_scales_again_fails_as_the_manual_product_does(how):
    results = verdicts(scaled(how))
    assert results["scaling"].status == "fail" and results["scaling"].evidence.startswith(TWICE)
    assert "before scaled_dot_product_attention, which multiplies the scores by 0.25 as well" in (
        results["scaling"].evidence)
    assert "pass scale=1.0" in results["scaling"].evidence
    assert results["matches-reference"].status == "fail"


def test_q_scaled_before_the_product_and_the_scores_after_it_fails_naming_both():
    results = verdicts(scaled("manual-twice"))
    assert results["scaling"].evidence == (f"{TWICE} — q is multiplied by 0.25 before the product, and the scores by "
                                           "0.25 after it: scale once")
    assert results["matches-reference"].status == "fail"


@pytest.mark.parametrize("how", ["sdpa-scale-one", "rope-manual", "rope-sdpa"])
def test_q_scaled_once_before_the_call_or_before_rotary_passes(how):
    results = verdicts(scaled(how))
    assert results["scaling"].status == "pass" and results["scaling"].evidence == ONCE
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


@pytest.mark.parametrize("how", ["rope-manual", "rope-sdpa"])
def test_the_stages_keep_q_from_before_its_scale_turned_by_rotary(how):
    """The recorded queries are q rotated without the scale, and the scale holds the factor q was given."""
    module = scaled(how).eval()
    x = torch.randn(2, 8, 64)  # (b, n, d)
    attention = tracing.combine(tracing.record(module, x).attentions)
    q = module.qkv(x).view(2, 8, 3, 4, 16).permute(2, 0, 3, 1, 4)[0]  # (b, h, n, hd)
    assert attention.scale == pytest.approx(0.25)
    assert attention.operand_scales == pytest.approx((0.25, 1.0))
    assert torch.allclose(attention.queries, um.rotate(q, module.cos, module.sin), atol=1e-5)


def test_a_norm_after_the_scale_undoes_it_and_is_no_scale():
    """rms_norm(q · hd^-0.5) forgets the factor: no rotation keeps a row's norm there, so the scores are unscaled."""
    results = verdicts(scaled("normed"))
    assert results["scaling"].evidence == "the scores are not scaled: divide by √head_dim = √16 ≈ 4"


# ----------------------------------------------------------------- MLA in DeepSeek-V3's absorbed form


@pytest.mark.parametrize("rope", [False, True])
def test_absorbed_mla_is_scaled_by_its_per_head_width_not_the_latents(rope):
    torch.manual_seed(0)
    results = verdicts(um.AbsorbedMLA(rope=rope))
    width = 24 if rope else 16
    assert results["scaling"].status == "pass"
    assert results["scaling"].evidence.startswith(
        f"the scores are divided by √qk_head_dim = √{width} ≈ {math.sqrt(width):.3g} (the per-head width the module "
        "keeps as qk_head_dim: Q·Kᵀ runs over its 32-wide latent")
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


def test_absorbed_mla_scaled_by_the_latents_width_fails_naming_it():
    torch.manual_seed(0)
    check = verdicts(um.AbsorbedMLA(bug="latent-scale"))["scaling"]
    assert check.status == "fail"
    assert check.evidence.startswith("the scores are divided by √32, the latent's width: divide by √qk_head_dim = √16")


def test_absorbed_mla_without_a_per_head_width_skips_in_words_rather_than_failing():
    torch.manual_seed(0)
    results = verdicts(um.AbsorbedMLA(declares_head_dim=False))
    for rule in ("scaling", "matches-reference"):
        assert results[rule].status == "skip"
        assert "Q·Kᵀ runs over the module's 32-wide latent" in results[rule].evidence
        assert "keep it as self.qk_head_dim" in results[rule].evidence


@pytest.mark.parametrize("tokens", [8, 4])  # 4: as many tokens as heads, so the softmax's last two dims are (n, n)
def test_scores_with_the_heads_between_queries_and_keys_are_named(tokens):
    torch.manual_seed(0)
    with pytest.raises(tracing.TraceError) as raised:
        checks.check_module(um.AbsorbedMLA(layout="bsht").eval(), torch.randn(2, tokens, 64))
    message = str(raised.value)
    assert f"gives (2, {tokens}, 4, {tokens}): (batch, queries, heads, keys)" in message
    assert 'DeepSeek-V3\'s einsum layout "bsht"' in message and '"bhst"' in message
