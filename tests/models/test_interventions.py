"""Head ablation, value-weighted attention, rollout and the logit lens: against Hugging Face's GPT-2, hand-computed
cases and the invariants each formula must keep."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.checkpoints import random_gpt2

from attnviz import attention, models
from attnviz.head_types import repeated_random_tokens
from attnviz.models import interventions

TOKENS = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 464, 2068]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(Hugging Face GPT2LMHeadModel, the same weights loaded by attnviz from save_pretrained)."""
    hf = random_gpt2(seed=3, n_layer=3, n_head=4, n_embd=32, n_positions=64)
    folder = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(folder)
    return hf, models.load_checkpoint(str(folder))


def hf_ablated_logits(hf, heads) -> torch.Tensor:
    """transformers' GPT-2 (eager) with a forward pre-hook on attn.c_proj zeroing each head's input columns."""
    head_dim = hf.config.n_embd // hf.config.n_head
    handles = []
    for layer, head in heads:
        def hook(module, args, head=head):
            (x,) = args
            x = x.clone()
            x[..., head * head_dim:(head + 1) * head_dim] = 0
            return (x,)
        handles.append(hf.transformer.h[layer].attn.c_proj.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            return hf(torch.tensor([TOKENS])).logits[0]
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("heads", [[], [(0, 0)], [(1, 3)], [(2, 1), (0, 2)], [(0, 0), (0, 1), (0, 2), (0, 3)]])
def test_ablate_equals_hugging_face_with_c_proj_columns_zeroed(pair, heads):
    hf, model = pair
    ours = interventions.ablate(model, TOKENS, heads)
    torch.testing.assert_close(ours, hf_ablated_logits(hf, heads), atol=1e-4, rtol=0)
    if heads:
        assert (ours - interventions.ablate(model, TOKENS, [])).abs().max() > 1e-3  # it did something


@pytest.mark.parametrize("how", interventions.HOW)
def test_ablate_equals_the_same_model_with_out_proj_hooks_and_leaves_the_model_alone(pair, how):
    """``ablate`` computes without hooks (a shared model is never changed): equal to ``knocked_out``'s hooks."""
    _, model = pair
    heads = [(0, 1), (2, 3), (2, 0)]
    seen = []  # (how many pre-hooks out_proj had during the call, what it was given)
    watch = model.trf_blocks[2].att.out_proj.register_forward_pre_hook(
        lambda m, a: seen.append((len(m._forward_pre_hooks), a[0].clone())))
    try:
        ours = interventions.ablate(model, TOKENS, heads, how)
    finally:
        watch.remove()
    hooks, given = seen[0]
    assert hooks == 1 and given[0, :, 3 * 8:4 * 8].abs().max() > 0  # only our watch: the model was not changed
    with interventions.knocked_out(model, heads, how), torch.no_grad():
        hooked = model(torch.tensor([TOKENS]))[0]
    torch.testing.assert_close(ours, hooked, atol=1e-5, rtol=0)
    torch.testing.assert_close(interventions.ablate(model, TOKENS, [*heads, (2, 3)], how), ours)  # a head named twice


def test_ablate_next_is_ablate_at_that_position(pair):
    hf, model = pair
    for heads, position in (([], 0), ([(1, 2)], 5), ([(0, 0), (2, 3)], len(TOKENS) - 1)):
        full = interventions.ablate(model, TOKENS, heads)[position]
        torch.testing.assert_close(interventions.ablate_next(model, TOKENS, heads, position), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(interventions.ablate_next(model, TOKENS, [(1, 3)], 4),
                               hf_ablated_logits(hf, [(1, 3)])[4], atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"^position must be a whole number from 0 to 11, got 12\.$"):
        interventions.ablate_next(model, TOKENS, [], len(TOKENS))


def test_knock_outs_run_the_model_as_trained_whatever_mask_another_view_left_set(pair):
    """Another session's unmasked view switches the shared model's mask off (models.running); every knock-out runs
    the model as trained, with it, and leaves the flags as it found them."""
    _, model = pair
    ids = repeated_random_tokens(8, 5, bos=True)
    expected = (interventions.ablate_next(model, TOKENS, [(1, 2)], 6), interventions.ablation_grid(model, ids, 8)[0],
                interventions.logit_lens(model, TOKENS, 6)[1])
    for block in model.trf_blocks:
        block.att.causal = False
    try:
        got = (interventions.ablate_next(model, TOKENS, [(1, 2)], 6), interventions.ablation_grid(model, ids, 8)[0],
               interventions.logit_lens(model, TOKENS, 6)[1])
        assert [block.att.causal for block in model.trf_blocks] == [False] * 3
    finally:
        for block in model.trf_blocks:
            block.att.causal = True
    torch.testing.assert_close(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], atol=1e-6)
    np.testing.assert_allclose(got[2], expected[2], atol=1e-6)


def test_mean_ablation_replaces_the_slice_by_its_mean_over_positions(pair):
    _, model = pair
    att = model.trf_blocks[1].att
    seen = {}
    handle = att.out_proj.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0].clone()))
    with interventions.knocked_out(model, [(1, 2)], "mean"), torch.no_grad():
        model(torch.tensor([TOKENS]))
    handle.remove()
    part = seen["x"][0, :, 2 * att.head_dim:3 * att.head_dim]  # (n, hd): the hook order keeps the pre-ablation copy
    with interventions.knocked_out(model, [(1, 2)], "mean"):
        after = {}
        h2 = att.out_proj.register_forward_hook(lambda m, a, o: after.setdefault("x", a[0].clone()))
        with torch.no_grad():
            model(torch.tensor([TOKENS]))
        h2.remove()
    ablated = after["x"][0, :, 2 * att.head_dim:3 * att.head_dim]
    torch.testing.assert_close(ablated, part.mean(dim=0, keepdim=True).expand_as(part))


def test_a_head_that_does_not_exist_is_refused(pair):
    _, model = pair
    with pytest.raises(ValueError, match="head 4 does not exist"):
        interventions.ablate(model, TOKENS, [(0, 4)])
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        interventions.ablate(model, TOKENS, [(3, 0)])


@pytest.mark.parametrize("how", interventions.HOW)
def test_the_batched_grid_equals_one_ablation_at_a_time(pair, how):
    """Every head of every layer, the last included (whose knock-out reruns only its feed-forward half), on the random
    checkpoint (knock-outs move its loss by ~1e-3) and on the bundled model (by nats)."""
    bundled = models.load_checkpoint(str(models.BUNDLED))
    for model, T, tolerance, moved in ((pair[1], 8, 1e-5, 1e-7), (bundled, 20, 1e-4, 0.1)):
        ids = repeated_random_tokens(T, 5, bos=True)  # (2T + 1,)
        delta, intact = interventions.ablation_grid(model, ids, T, how=how)
        second = slice(len(ids) - T, len(ids) - 1)
        intact_loss = interventions.position_loss(interventions.ablate(model, ids, []), ids)[second].mean()
        assert intact == pytest.approx(intact_loss, abs=tolerance)
        layers, heads = len(model.trf_blocks), model.trf_blocks[0].att.num_heads
        assert delta.shape == (layers, heads)
        for layer in range(layers):
            for head in range(heads):
                loss = interventions.position_loss(interventions.ablate(model, ids, [(layer, head)], how), ids)
                assert delta[layer, head] == pytest.approx(loss[second].mean() - intact_loss, abs=tolerance)
        assert (np.abs(delta) > moved).mean() >= 0.5  # the knock-outs moved the loss: the comparison can fail


def test_a_block_run_at_some_positions_equals_the_whole_block_there(pair):
    _, model = pair
    block = model.trf_blocks[1]
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        torch.testing.assert_close(interventions._block_at(block, x, slice(4, 8)), block(x)[:, 4:8])
        torch.testing.assert_close(interventions._block_at(block, x, slice(None)), block(x))


def test_value_weighted_attention_sums_to_the_attention_output(pair):
    """Σ_h Σ_j α_ij f^h(x_j) + b_O equals the attention's output (Kobayashi et al.'s decomposition)."""
    _, model = pair
    att = model.trf_blocks[1].att
    x = torch.randn(1, 7, 32)
    with torch.no_grad():
        norms, f = interventions._value_weighted(att, x)  # (h, n, n), (h, n, d)
        recorder = attention.Recorder()
        output = att(x, recorder)[0]  # (n, d)
        weights = recorder.steps["weights"][0]  # (h, n, n)
        rebuilt = torch.einsum("hij,hjd->id", weights, f) + att.out_proj.bias  # (n, d)
    torch.testing.assert_close(rebuilt, output, atol=1e-5, rtol=0)
    torch.testing.assert_close(norms, weights * f.norm(dim=-1)[:, None, :])


def test_value_norms_are_the_lengths_of_what_each_head_moves(pair):
    _, model = pair
    att = model.trf_blocks[2].att
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        norms = interventions.value_norms(att, x)  # (h, n)
        _, f = interventions._value_weighted(att, x)
        values = att.W_value(x)[0]  # (n, h·hd)
        head = 1
        by_hand = values[:, head * 8:(head + 1) * 8] @ att.out_proj.weight[:, head * 8:(head + 1) * 8].T  # (n, d)
    torch.testing.assert_close(norms, f.norm(dim=-1))
    torch.testing.assert_close(norms[head], by_hand.norm(dim=-1), atol=1e-6, rtol=1e-5)


def test_value_weighted_maps_for_every_layer_and_a_tiny_value_carries_nothing(pair):
    _, model = pair
    maps = interventions.value_weighted(model, TOKENS)
    assert maps.shape == (3, 4, len(TOKENS), len(TOKENS)) and (maps >= 0).all()
    assert np.allclose(np.triu(maps[0, 0], 1), 0)  # causal: nothing from the future
    block = model.trf_blocks[0]
    x = torch.randn(1, 4, 32)
    with torch.no_grad():
        saved = block.att.W_value.weight.clone(), block.att.W_value.bias.clone()
        x[0, 0] = 0  # x_0 = 0 …
        block.att.W_value.bias.zero_()  # … and no bias: f(x_0) = 0
        try:
            vw = interventions.value_weighted_module(block.att, x)
        finally:
            block.att.W_value.weight.copy_(saved[0])
            block.att.W_value.bias.copy_(saved[1])
    assert np.allclose(vw[:, :, 0], 0)  # however much weight token 0 gets, it carries nothing


def test_rollout_hand_computed_and_invariants():
    maps = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]])  # (1 layer, 1 head, 3, 3)
    expected = 0.5 * maps[0, 0] + 0.5 * np.eye(3)  # rows already sum to 1
    np.testing.assert_allclose(interventions.rollout(maps)[0], expected)
    two = np.concatenate([maps, maps])  # (2, 1, 3, 3)
    np.testing.assert_allclose(interventions.rollout(two)[1], expected @ expected)
    rng = np.random.default_rng(0)
    random_maps = np.tril(rng.random((4, 3, 6, 6)))
    random_maps /= random_maps.sum(-1, keepdims=True)
    rolled = interventions.rollout(random_maps)
    np.testing.assert_allclose(rolled.sum(-1), 1)
    assert np.allclose(np.triu(rolled, 1), 0)  # causal in, causal out


def test_logit_lens_last_layer_is_the_models_prediction(pair):
    hf, model = pair
    top_ids, top_probs = interventions.logit_lens(model, TOKENS, position=5, k=5)
    assert top_ids.shape == top_probs.shape == (3, 5)
    assert (np.diff(top_probs, axis=1) <= 0).all()
    with torch.no_grad():
        probs = torch.softmax(hf(torch.tensor([TOKENS])).logits[0, 5], dim=-1)
    np.testing.assert_array_equal(top_ids[-1], probs.topk(5).indices.numpy())
    np.testing.assert_allclose(top_probs[-1], probs.topk(5).values.numpy(), atol=1e-5)


def test_on_the_bundled_model_the_induction_circuit_is_causal():
    """Each layer-0 previous-token head, and layer 1's heads together, are each necessary for the repeat."""
    model = models.load_checkpoint(str(models.BUNDLED))
    ids = repeated_random_tokens(40, 7, bos=True)
    delta, intact = interventions.ablation_grid(model, ids, 40)
    assert intact < 2.0
    assert (delta[0] > 3.0).all()  # every layer-0 head alone: the loss on the repeat rises by several nats
    second = slice(len(ids) - 40, len(ids) - 1)
    both = interventions.position_loss(interventions.ablate(model, ids, [(1, 0), (1, 1)]), ids)[second].mean()
    assert both - intact > 5.0
