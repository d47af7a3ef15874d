"""Scores that are the sum of two products, q₁·k₁ + q₂·k₂ — DeepSeek-V3's MLA in its absorbed form with decoupled
rotary (its latent scores plus its rotary ones), Transformer-XL's content plus position terms —, read by the tracer as
one Q·Kᵀ of the concatenations [Q₁ | Q₂] and [K₁ | K₂] (the modules are tests/helpers/user_modules.py's AbsorbedMLA
and ContentPlusPosition)."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing


def verdicts(module) -> dict[str, checks.Check]:
    torch.manual_seed(0)
    return {check.rule: check for check in checks.check_module(module.eval())}


def absorbed_scores(module: um.AbsorbedMLA, x: torch.Tensor):
    """(the scores before the scale (b, h, s, t), the queries (b, h, s, c + r), the keys (b, 1, t, c + r)) of an
    AbsorbedMLA with rope, computed here from its weights: the latent product plus the rotary one."""
    b, s, _ = x.shape
    heads, latent, nope, rope = module.n_heads, module.kv_lora_rank, module.nope, module.rope
    with torch.no_grad():
        q = module.wq(x).view(b, s, heads, nope + rope).transpose(1, 2)  # (b, h, s, nope + r)
        c_kv, k_pe = module.wkv_a(x).split([latent, rope], dim=-1)  # (b, t, c), (b, t, r)
        w_uk = module.wkv_b.weight.view(heads, nope + module.v_head_dim, latent)[:, :nope]  # (h, nope, c)
        q_latent = q[..., :nope] @ w_uk  # (b, h, s, nope) @ (h, nope, c) -> (b, h, s, c)
        k_latent = module.kv_norm(c_kv)[:, None]  # (b, 1, t, c)
        cos, sin = um.rope_angles(rope, s)  # (s, r) each
        q_pe = um.rotate(q[..., nope:], cos, sin)  # (b, h, s, r)
        k_pe = um.rotate(k_pe[:, None], cos, sin)  # (b, 1, t, r)
    scores = q_latent @ k_latent.transpose(-2, -1) + q_pe @ k_pe.transpose(-2, -1)  # (b, h, s, t)
    return scores, torch.cat([q_latent, q_pe], dim=-1), torch.cat([k_latent, k_pe], dim=-1)


def test_absorbed_mla_with_decoupled_rotary_passes_every_rule_that_applies():
    results = verdicts(um.AbsorbedMLA(rope=True))
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    assert results["rotary-placement"].status == "pass", results["rotary-placement"].evidence
    assert results["scaling"].evidence.startswith("the scores are divided by √qk_head_dim = √24")
    assert {rule: check.evidence for rule, check in results.items() if check.status == "fail"} == {}
    assert [rule for rule, check in results.items() if check.status == "skip"] == ["kv-cache"]  # it keeps no cache


@pytest.mark.parametrize("rope", [False, True])
def test_the_bsht_layout_is_refused_in_words_with_decoupled_rotary_as_without_it(rope):
    """DeepSeek's own "bsht" scores put the heads between the queries and the keys, which attnviz does not read: the
    sum of two products is refused the same way as one."""
    torch.manual_seed(0)
    with pytest.raises(tracing.TraceError) as raised:
        checks.check_module(um.AbsorbedMLA(rope=rope, layout="bsht").eval())
    assert 'DeepSeek-V3\'s einsum layout "bsht"' in str(raised.value)


def test_the_traced_scores_are_the_sum_of_the_two_products_before_the_scale():
    torch.manual_seed(0)
    module = um.AbsorbedMLA(rope=True).eval()
    x = torch.randn(2, 6, 64)  # (b, s, dim)
    recording = tracing.record(module, x)
    attention = recording.attentions[0]
    scores, queries, keys = absorbed_scores(module, x)  # (2, 4, 6, 6), (2, 4, 6, 40), (2, 1, 6, 40)
    assert torch.allclose(attention.scores, scores, atol=1e-5)
    assert attention.queries.shape == (2, 4, 6, 40) and torch.allclose(attention.queries, queries, atol=1e-5)
    assert attention.keys.shape == (2, 1, 6, 40) and torch.allclose(attention.keys, keys, atol=1e-5)
    assert attention.scale == pytest.approx(24 ** -0.5)
    assert torch.allclose(attention.scaled, scores * 24 ** -0.5, atol=1e-5)
    visible = torch.ones(6, 6, dtype=torch.bool).tril()  # (s, t)
    assert torch.equal(~attention.masked_cells()[0, 0], visible)
    assert torch.allclose(attention.masked[..., visible], attention.scaled[..., visible])
    # the diagram's stages: the module's own sum is the scores, its multiply the scaled scores, its added mask masked
    staged = [(op.name, op.stage) for op in recording.ops if op.stage in ("scores", "scaled", "masked")]
    assert staged == [("add", "scores"), ("mul", "scaled"), ("add", "masked")]


def test_decoupled_rotary_that_leaves_its_keys_unturned_fails_rotary_placement():
    """Only q_pe turned: the summed scores depend on the query's position, as rotary on the queries alone makes
    them."""
    results = verdicts(um.AbsorbedMLA(rope=True, bug="unrotated-keys"))
    check = results["rotary-placement"]
    assert check.status == "fail", check.evidence
    assert check.evidence.startswith("scores depend on the query's position, not the distance i − j: rotary applied "
                                     "to the queries only"), check.evidence
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence


def test_content_plus_position_scores_are_one_product_and_match_the_reference():
    """Transformer-XL's (q + u)·k + (q + v)·r, r a learned table: Q = [q + u | q + v], K = [k | r], scaled by 1/√d
    of each term's width."""
    torch.manual_seed(0)
    module = um.ContentPlusPosition().eval()
    results = verdicts(module)
    assert results["matches-reference"].status == "pass", results["matches-reference"].evidence
    assert results["scaling"].evidence == "the scores are divided by √head_dim = √8 ≈ 2.83"
    assert {rule: check.evidence for rule, check in results.items() if check.status == "fail"} == {}
    x = torch.randn(1, 5, 32)  # (b, n, d_in)
    attention = tracing.record(module, x).attentions[0]
    with torch.no_grad():
        q = module.W_query(x).view(1, 5, 4, 8).transpose(1, 2)  # (1, h, n, hd)
        k = module.W_key(x).view(1, 5, 4, 8).transpose(1, 2)  # (1, h, n, hd)
        r = module.pos_table[:5].expand(1, 4, 5, 8)  # (1, h, n, hd)
        expected = (q + module.content_bias) @ k.transpose(2, 3) + (q + module.position_bias) @ r.transpose(2, 3)
    assert torch.allclose(attention.scores, expected, atol=1e-5)  # (1, h, n, n)
    assert torch.allclose(attention.keys, torch.cat([k, r], dim=-1), atol=1e-6)  # (1, h, n, 2·hd)
