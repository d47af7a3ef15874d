"""explain_weight and attention_sums: every number of one weight's decomposition adds up to the Trace's own stages,
for the book's classes, a GPT-2 checkpoint's layer, the bundled model and users' own modules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.checkpoints import random_gpt2
from helpers.user_modules import AbsorbedMLA, BroadcastGQA, ContentPlusPosition
from torch import nn

import attnviz
from attnviz import models, pipeline
from attnviz.config import AttentionConfig, InputError
from attnviz.explain import ExplainError, attention_sums, explain_weight
from attnviz.producers import model_layer
from attnviz.views.explain_figures import products_figure

TEXT = "The cat sat on the mat. The cat sat on the"
BOOK_VARIANTS = ("simplified", "self_attention_v1", "self_attention_v2", "causal", "mha_wrapper", "mha")


def assert_adds_up(trace, cells=None):
    """The issue's identities at every cell (or ``cells``): products sum to the score, scaled and weight are the
    Trace's, nothing is NaN, a masked cell has weight 0 and a reason."""
    heads, n = trace.num_heads, trace.n
    cells = cells or [(h, i, j) for h in range(heads) for i in range(n) for j in range(n)]
    for head, query, key in cells:
        explanation = explain_weight(trace, head, query, key)
        assert explanation.products.shape == (explanation.head_dim,)
        assert explanation.products.dtype == np.float32
        assert np.isclose(explanation.products.sum(), explanation.score, rtol=1e-6, atol=1e-7)
        assert np.isclose(explanation.score, trace.steps["scores"][0, head, query, key], rtol=1e-4, atol=1e-4)
        assert explanation.scaled == trace.steps["scaled"][0, head, query, key]
        assert explanation.weight == trace.steps["weights"][0, head, query, key]
        assert np.isclose(explanation.score / explanation.divisor, explanation.scaled, rtol=1e-4, atol=1e-5)
        assert np.allclose(explanation.query_vector * explanation.key_vector, explanation.products)
        assert not any(np.isnan(v) for v in (explanation.score, explanation.scaled, explanation.weight))
        assert not np.isnan(explanation.products).any()
        assert np.isclose(explanation.row_weights.sum(), 1.0, atol=1e-5)
        assert explanation.row_weights[key] == explanation.weight
        logits = explanation.row_masked.astype(np.float64)  # (n,) the softmax over row i makes the weights
        softmax = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()  # (n,)
        assert np.allclose(softmax, explanation.row_weights, atol=1e-5)
        assert explanation.masked == (explanation.reason is not None)
        if explanation.masked:
            assert explanation.weight == 0.0 and np.isneginf(explanation.row_masked[key])
        assert explanation.notes == ()


# -------------------------------------------------------------------- the book's classes

@pytest.fixture(scope="module", params=BOOK_VARIANTS)
def book_trace(request):
    variant = request.param
    return pipeline.run(TEXT, AttentionConfig(variant=variant, d_in=24, d_out=24, num_heads=4, seed=7,
                                              causal=variant != "simplified"))


def test_book_classes_add_up_at_every_cell(book_trace):
    assert_adds_up(book_trace)


def test_book_divisor_is_root_head_dim_except_the_simplified_class(book_trace):
    explanation = explain_weight(book_trace, book_trace.num_heads - 1, 4, 2)
    if book_trace.config.variant == "simplified":
        assert explanation.divisor == 1.0 and "no scaling" in explanation.scaling
        assert "stand in" in explanation.stand_in and "÷ 1" in explanation.stand_in
        assert np.array_equal(explanation.query_vector, book_trace.embeddings["input"][4])
        assert np.array_equal(explanation.key_vector, book_trace.embeddings["input"][2])
    else:
        head_dim = 24 // book_trace.num_heads
        assert explanation.head_dim == head_dim
        assert explanation.divisor == pytest.approx(math.sqrt(head_dim))
        assert f"√{head_dim}" in explanation.scaling
        assert explanation.stand_in is None


def test_book_causal_cell_is_masked_with_a_reason():
    trace = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    explanation = explain_weight(trace, 1, 3, 5)
    assert explanation.masked and explanation.weight == 0.0
    assert explanation.reason == (
        "key 5 comes after query 3: the causal mask hides it (−∞ before the softmax), so its weight is 0")
    assert np.isfinite([explanation.score, explanation.scaled]).all()
    assert explanation.row_hidden.tolist() == [j > 3 for j in range(trace.n)]
    assert not explain_weight(trace, 1, 3, 3).masked


def test_hidden_cells_are_the_cells_explain_weight_calls_masked():
    """A box selection's cells, told apart as explain_weight tells one: the causal mask's, a sliding window's."""
    causal = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    window = pipeline.run(TEXT, AttentionConfig(variant="swa", d_in=16, d_out=16, num_heads=2, sliding_window_size=2))
    cells = [(q, k) for q in range(causal.n) for k in range(causal.n)]
    for trace in (causal, window):
        expected = [explain_weight(trace, 1, q, k).masked for q, k in cells]
        assert attnviz.explain.hidden_among(trace, 1, cells).tolist() == expected
    assert attnviz.explain.hidden_among(causal, 0, [(0, 1), (2, 1), (1, 3)]).tolist() == [True, False, True]
    assert attnviz.explain.hidden_among(window, 0, [(4, 1), (4, 3)]).tolist() == [True, False]  # outside the window
    unmasked = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2, causal=False))
    assert not attnviz.explain.hidden_among(unmasked, 0, cells).any()


def test_mha_products_are_q_times_k_from_the_modules_own_weights():
    config = AttentionConfig(variant="mha", d_in=12, d_out=12, num_heads=3, seed=5, qkv_bias=True)
    trace = pipeline.run(TEXT, config)
    torch.manual_seed(config.seed)  # the seeded module the producer builds
    module = attnviz.attention.MultiHeadAttention(12, 12, config.context_length, 0.0, 3, qkv_bias=True)
    x = torch.tensor(trace.embeddings["input"])  # (n, 12)
    with torch.no_grad():
        queries = (x @ module.W_query.weight.T + module.W_query.bias).view(trace.n, 3, 4)  # (n, 12) -> (n, h, hd)
        keys = (x @ module.W_key.weight.T + module.W_key.bias).view(trace.n, 3, 4)  # (n, h, hd)
    explanation = explain_weight(trace, 2, 7, 4)
    assert np.allclose(explanation.query_vector, queries[7, 2].numpy(), atol=1e-6)
    assert np.allclose(explanation.products, (queries[7, 2] * keys[4, 2]).numpy(), atol=1e-6)


def test_wrapper_head_is_its_own_causal_attention():
    config = AttentionConfig(variant="mha_wrapper", d_in=12, d_out=12, num_heads=3, seed=9)
    trace = pipeline.run(TEXT, config)
    torch.manual_seed(config.seed)
    wrapper = attnviz.attention.MultiHeadAttentionWrapper(12, 4, config.context_length, 0.0, 3)
    x = torch.tensor(trace.embeddings["input"])  # (n, 12)
    head = wrapper.heads[1]
    with torch.no_grad():
        queries, keys = head.W_query(x), head.W_key(x)  # (n, 4) each
    explanation = explain_weight(trace, 1, 6, 2)
    assert np.allclose(explanation.products, (queries[6] * keys[2]).numpy(), atol=1e-6)


def test_dropout_is_named_and_weight_stays_before_dropout():
    trace = pipeline.run(TEXT, AttentionConfig(variant="causal", d_in=8, d_out=8, dropout=0.5, train=True))
    dropped = trace.steps["dropped"][0, 0]
    query, key = next((i, j) for i in range(trace.n) for j in range(i + 1) if dropped[i, j] != 0)
    explanation = explain_weight(trace, 0, query, key)
    assert explanation.weight == trace.steps["weights"][0, 0, query, key]
    assert explanation.dropped == pytest.approx(2 * explanation.weight)
    assert any("Dropout ran" in note for note in explanation.notes)


# -------------------------------------------------------------------- out-of-range input

@pytest.mark.parametrize(("head", "query", "key", "named"), [
    (4, 0, 0, "head from 0 to 3"), (-1, 0, 0, "head from 0 to 3"), (0, 12, 0, "query from 0 to 11"),
    (0, 0, 99, "key from 0 to 11"), (0, -1, 0, "query from 0 to 11"), (0, 1.5, 0, "from 0 to 11"),
    (True, 0, 0, "from 0 to 3"), ("0", 0, 0, "from 0 to 3"),
])
def test_out_of_range_is_a_clear_input_error(head, query, key, named):
    trace = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=4))
    assert trace.n == 12
    with pytest.raises(ExplainError, match=named) as raised:
        explain_weight(trace, head, query, key)
    assert isinstance(raised.value, InputError) and not isinstance(raised.value, IndexError)


def test_numpy_integers_are_positions():
    trace = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=4))
    explanation = explain_weight(trace, np.int64(1), np.int32(5), np.int64(2))
    assert (explanation.head, explanation.query, explanation.key) == (1, 5, 2)


# -------------------------------------------------------------------- a checkpoint's layer, the bundled model

@pytest.fixture(scope="module")
def hf_model():
    return random_gpt2(4, n_layer=2, n_head=4, n_embd=32, n_positions=64)


@pytest.fixture(scope="module")
def checkpoint_dir(hf_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny-gpt2"
    hf_model.save_pretrained(path)
    yield str(path)
    model_layer._layer_runs.clear()


@pytest.mark.parametrize("layer", [0, 1])
def test_checkpoint_layer_adds_up(checkpoint_dir, layer):
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=checkpoint_dir, layer=layer))
    assert trace.num_heads == 4
    assert_adds_up(trace)
    assert explain_weight(trace, 0, 1, 0).divisor == pytest.approx(math.sqrt(8))


def test_checkpoint_products_are_hugging_faces_q_times_k(checkpoint_dir, hf_model):
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=checkpoint_dir, layer=0))
    block = hf_model.transformer.h[0]
    ids = torch.tensor(trace.token_ids)
    with torch.no_grad():
        hidden = hf_model.transformer.wte(ids) + hf_model.transformer.wpe(torch.arange(len(ids)))  # (n, 32)
        query, key, _ = block.attn.c_attn(block.ln_1(hidden)).split(32, dim=-1)  # (n, 32) each
    head, i, j = 3, 9, 4
    expected = query[i, head * 8 : (head + 1) * 8] * key[j, head * 8 : (head + 1) * 8]  # (8,)
    assert np.allclose(explain_weight(trace, head, i, j).products, expected.numpy(), atol=1e-5)


def test_bundled_model_adds_up():
    trace = pipeline.run(TEXT, AttentionConfig(checkpoint=str(models.BUNDLED), layer=1))
    n = trace.n
    assert_adds_up(trace, [(h, i, j) for h in range(trace.num_heads) for i in (0, n // 2, n - 1) for j in range(n)])


# -------------------------------------------------------------------- users' own modules

class SlidingWindowAttention(nn.Module):
    """One head that sees only the last ``window`` tokens and scales by a temperature, not √d."""

    def __init__(self, d_in=16, d_out=8, window=3, temperature=5.0):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.window, self.temperature = window, temperature

    def forward(self, x):
        n = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores / self.temperature
        position = torch.arange(n)
        distance = position[:, None] - position[None, :]
        hide = (distance < 0) | (distance >= self.window)
        scores = scores.masked_fill(hide, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ values


def user_trace(module, n=8, d_in=16, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(1, n, d_in)
    return attnviz.trace_module(module, x), x


@pytest.mark.parametrize("bug", [None, "no-scale", "scale-without-root"])
def test_user_multi_head_attention_adds_up_and_names_its_own_scale(bug):
    from helpers.user_modules import MyMultiHeadAttention

    torch.manual_seed(1)
    module = MyMultiHeadAttention(d_in=16, d_out=16, num_heads=4, bug=bug)
    trace, x = user_trace(module)
    assert_adds_up(trace)
    explanation = explain_weight(trace, 2, 6, 1)
    expected = {None: 2.0, "no-scale": 1.0, "scale-without-root": 4.0}[bug]
    assert explanation.divisor == pytest.approx(expected)
    if bug == "scale-without-root":
        assert "not √d_head" in explanation.scaling
    with torch.no_grad():
        queries = module.W_query(x)[0].view(8, 4, 4)  # (n, 16) -> (n, h, hd)
        keys = module.W_key(x)[0].view(8, 4, 4)  # (n, h, hd)
    assert np.allclose(explanation.products, (queries[6, 2] * keys[1, 2]).numpy(), atol=1e-6)


@pytest.mark.parametrize("name", ["CausalSelfAttention", "TorchMHA", "SDPAWithMask", "GroupedQueryAttention",
                                  "GQAWithSDPA"])
def test_users_sdpa_mha_and_gqa_modules_add_up(name):
    from helpers import user_modules

    torch.manual_seed(2)
    module = getattr(user_modules, name)()
    trace, _ = user_trace(module, d_in=32)
    assert_adds_up(trace)


# the module, its input width, the d_head it scales by, the vectors' length and what the words say d_head is
SCALED_BY_ANOTHER_WIDTH = {
    "absorbed-mla": (lambda: AbsorbedMLA(), 64, 16, 32, ("qk_head_dim", "32-wide latent")),
    "absorbed-mla-rope": (lambda: AbsorbedMLA(rope=True), 64, 24, 40, ("qk_head_dim", "32-wide latent", "8 rotary")),
    "content-plus-position": (lambda: ContentPlusPosition(), 32, 8, 16, ("two products", "8 wide each")),
}


@pytest.mark.parametrize("case", SCALED_BY_ANOTHER_WIDTH)
def test_the_divisor_is_root_d_head_of_the_width_the_module_scales_by_not_the_vectors_length(case):
    """MLA in DeepSeek-V3's absorbed form takes q·k over its 32-wide latent (plus its rotary dims) but divides by
    √qk_head_dim; Transformer-XL-like scores add two products of 8 and divide by √8: q and k are longer than d_head,
    and the explanation says ÷ √d_head with the module's d_head, and why q and k are longer, as the checker judges."""
    make, d_in, d_head, length, words = SCALED_BY_ANOTHER_WIDTH[case]
    torch.manual_seed(4)
    trace, _ = user_trace(make(), d_in=d_in)
    assert_adds_up(trace, [(h, i, j) for h in range(trace.num_heads) for i in (0, 5, 7) for j in range(8)])
    why = explain_weight(trace, 1, 6, 2)
    assert why.divisor == math.sqrt(d_head)
    assert why.scaling.startswith(f"÷ √d_head = √{d_head} = {math.sqrt(d_head):.4g}")
    assert why.head_dim == length and why.d_head == d_head
    assert "not √d_head" not in why.scaling and "own scale" not in why.scaling
    for word in (*words, f"{length} long"):
        assert word in why.scaling
    assert f"÷ √{d_head} " in products_figure(why).layout.title.text.replace("<br>", " ")


def test_absorbed_mla_scaled_by_its_latent_is_named_against_its_own_d_head():
    """The bug the checker fails (1/√kv_lora_rank): the explanation measures ÷ √32 and says it is not √d_head = √16."""
    torch.manual_seed(4)
    trace, _ = user_trace(AbsorbedMLA(bug="latent-scale"), d_in=64)
    why = explain_weight(trace, 0, 5, 1)
    assert why.divisor == pytest.approx(math.sqrt(32))
    assert "not √d_head = √16 = 4" in why.scaling and "latent" in why.scaling
    assert why.d_head == 16


def test_absorbed_mla_that_keeps_no_known_head_width_says_d_head_is_not_known():
    torch.manual_seed(4)
    trace, _ = user_trace(AbsorbedMLA(declares_head_dim=False), d_in=64)
    why = explain_weight(trace, 0, 5, 1)
    assert why.divisor == pytest.approx(4.0)
    assert "√d_head = √32" not in why.scaling and "32-wide latent" in why.scaling
    assert why.d_head is None


def test_a_scale_the_config_declares_is_named_as_the_configs_and_one_nobody_declared_as_the_runs_own():
    """Gemma's query_pre_attn_scalar = 256 over heads of 16: the scores are divided by 16, which the config declares
    — not "this run's own scale", which stays for a divisor nobody declared (a number the module keeps itself)."""
    from types import SimpleNamespace

    from helpers.user_modules import CustomScale, GemmaStyleAttention

    from attnviz.explain import head_scale
    from attnviz.trace_file import load_trace, trace_npz
    from attnviz.views.steps import stage_title

    config = SimpleNamespace(hidden_size=32, num_attention_heads=2, head_dim=16, query_pre_attn_scalar=256)
    torch.manual_seed(4)
    trace, _ = user_trace(GemmaStyleAttention(config), d_in=32)
    assert_adds_up(trace)
    why = explain_weight(trace, 1, 6, 2)
    assert why.divisor == pytest.approx(16.0)
    assert why.scaling == ("÷ 16: the scale the config declares, query_pre_attn_scalar = 256 (the book's is "
                           "√d_head = √16 = 4)")
    assert head_scale(trace) == (pytest.approx(16.0), 16)
    assert stage_title(trace, "scaled").endswith(  # the map's title says so too
        "÷ 16, set by the model's config (the book's: √dₖ = √16)")
    assert explain_weight(load_trace(trace_npz(trace)), 1, 6, 2).scaling == why.scaling  # a trace file keeps it
    torch.manual_seed(4)
    trace, _ = user_trace(CustomScale(d_model=16, n_heads=4, temperature=32))
    assert explain_weight(trace, 1, 6, 2).scaling == "÷ 5.657: this run's own scale, not √d_head = √4 = 2"
    assert stage_title(trace, "scaled").endswith("÷ 5.657 (not √dₖ = √4)"), stage_title(trace, "scaled")


def test_a_measured_divisor_is_the_configs_within_a_tenth_of_a_percent():
    """The explanation's words and the scaled map's title read "the config's scale" through one function."""
    from attnviz.explain import declared_divisor

    declared = ((1 / 16, "query_pre_attn_scalar = 256"), (1 / 8, "attention_multiplier = 0.125"))
    assert declared_divisor(16.01, declared) == (16.0, "query_pre_attn_scalar = 256")
    assert declared_divisor(8.0, declared) == (8.0, "attention_multiplier = 0.125")
    assert declared_divisor(16.1, declared) is None and declared_divisor(16.0, ()) is None


def test_sliding_window_cells_say_the_window_hides_them_and_the_temperature_is_the_divisor():
    trace, _ = user_trace(SlidingWindowAttention(window=3, temperature=5.0))
    assert_adds_up(trace)
    behind = explain_weight(trace, 0, 6, 2)
    assert behind.masked and behind.weight == 0.0
    assert behind.reason == ("key 2 is 4 tokens before query 6: the sliding window keeps only the 3 most recent keys "
                             "(4 to 6), so the mask hides it (−∞ before the softmax) and its weight is 0")
    assert "comes after query 6" in explain_weight(trace, 0, 6, 7).reason
    assert not explain_weight(trace, 0, 6, 4).masked
    assert behind.divisor == pytest.approx(5.0) and "not √d_head" in behind.scaling
    assert behind.stand_in is None


def test_a_window_of_one_key_says_one_token_and_one_key():
    trace, _ = user_trace(SlidingWindowAttention(window=1, temperature=5.0))
    assert explain_weight(trace, 0, 6, 5).reason == (
        "key 5 is 1 token before query 6: the sliding window keeps only the 1 most recent key (6 to 6), so the mask "
        "hides it (−∞ before the softmax) and its weight is 0")


def test_grouped_keys_that_are_never_repeated_map_to_their_group():
    torch.manual_seed(3)
    module = BroadcastGQA(mask="padding")
    trace, x = user_trace(module)
    assert trace.steps["keys"].shape[1] == 2 and trace.num_heads == 4
    with torch.no_grad():
        keys = module.wk(x)[0].view(8, 2, 4)  # (n, kv, hd)
    for head in range(4):
        assert np.array_equal(explain_weight(trace, head, 5, 3).key_vector, keys[3, head // 2].numpy())
    padded = explain_weight(trace, 3, 7, 7)
    assert padded.masked and padded.weight == 0.0 and np.isfinite(padded.row_masked[7])
    assert padded.reason.startswith("the mask hides key 7 from query 7")
    assert_adds_up(trace, [(h, i, j) for h in range(4) for i in range(8) for j in range(7)])


def test_a_run_without_recorded_queries_is_a_clear_error():
    class SoftmaxOfInputs(nn.Module):
        def forward(self, x):
            weights = torch.softmax(x[..., :8] * 2.0, dim=-1)
            return weights

    trace, _ = user_trace(SoftmaxOfInputs())
    with pytest.raises(ExplainError, match="recorded no"):
        explain_weight(trace, 0, 0, 0)


# -------------------------------------------------------------------- several tokens at once

@pytest.fixture(scope="module")
def mha_trace():
    return pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=4, seed=11))


@pytest.mark.parametrize("stage", ["weights", "scaled"])
def test_attention_sums_equal_direct_sums(mha_trace, stage):
    attention_map = mha_trace.steps[stage][0, 2].astype(np.float64)  # (n, n)
    sums = attention_sums(mha_trace, 2, queries=[7, 3, 9, 3], keys=(0, 4), stage=stage)
    assert sums.queries == (3, 7, 9) and sums.keys == (0, 4) and sums.stage == stage
    expected = attention_map[3] + attention_map[7] + attention_map[9]
    assert np.allclose(sums.per_key_sum, expected, atol=1e-5)
    assert np.allclose(sums.per_key_mean, expected / 3, atol=1e-5)
    assert np.allclose(sums.per_query_total, attention_map[:, 0] + attention_map[:, 4], atol=1e-5)
    if stage == "weights":
        assert sums.per_key_sum.sum() == pytest.approx(3.0, abs=1e-5)  # each selected row gives away 1


def test_attention_sums_of_queries_only_and_keys_only(mha_trace):
    by_queries = attention_sums(mha_trace, 0, queries=np.array([5]))
    assert by_queries.per_query_total is None and by_queries.keys == ()
    assert np.allclose(by_queries.per_key_sum, mha_trace.steps["weights"][0, 0, 5])
    by_keys = attention_sums(mha_trace, 0, keys=[11])
    assert by_keys.per_key_sum is None and by_keys.per_key_mean is None
    assert np.allclose(by_keys.per_query_total[:11], 0.0)  # causal: only the last query sees the last key


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "at least one"), ({"queries": []}, "query selection is empty"), ({"keys": ()}, "key selection is empty"),
    ({"queries": [12]}, "query 12 is out of range.*0 to 11"), ({"keys": [-2]}, "0 to 11"),
    ({"queries": [1], "stage": "masked"}, "Cannot sum"), ({"queries": ["a"]}, "whole number"),
])
def test_attention_sums_reject_bad_selections(mha_trace, kwargs, message):
    with pytest.raises(ExplainError, match=message):
        attention_sums(mha_trace, 0, **kwargs)
    with pytest.raises(ExplainError, match="head from 0 to 3"):
        attention_sums(mha_trace, 4, queries=[1])


def test_explain_weight_is_exported():
    assert attnviz.explain_weight is explain_weight
    assert "explain_weight" in dir(attnviz)


def test_queries_changed_after_recording_are_named_not_hidden():
    """A module that rotates its queries after the recorded step (rotary positions): the products still come from
    what was recorded, and a note says they do not give the run's score."""
    import dataclasses

    trace = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    steps = dict(trace.steps, queries=trace.steps["queries"] * 1.5)
    explanation = explain_weight(dataclasses.replace(trace, steps=steps), 0, 6, 2)
    assert explanation.scaled == trace.steps["scaled"][0, 0, 6, 2]
    assert any("the run's score is" in note for note in explanation.notes)


def test_a_row_whose_every_key_is_hidden_gives_zeros_not_nan():
    import dataclasses

    trace = pipeline.run(TEXT, AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2))
    masked, weights = trace.steps["masked"].copy(), trace.steps["weights"].copy()
    masked[0, 1, 4] = -np.inf  # padding hides every key of query 4: softmax of all −∞ is NaN
    weights[0, 1, 4] = np.nan
    broken = dataclasses.replace(trace, steps=dict(trace.steps, masked=masked, weights=weights, dropped=weights))
    explanation = explain_weight(broken, 1, 4, 2)
    assert explanation.masked and explanation.weight == 0.0 and explanation.dropped == 0.0
    assert not np.isnan(explanation.row_weights).any()
    assert explanation.reason.startswith("the mask hides key 2 from query 4")
    assert any("Every key is hidden" in note for note in explanation.notes)


@pytest.mark.parametrize("overrides", [
    {"variant": "gqa", "num_heads": 12, "num_kv_groups": 4},
    {"variant": "mqa"},
    {"variant": "mla"},
    {"variant": "swa", "sliding_window_size": 3},
    {"variant": "mha", "positions": "rotary"},
    {"variant": "gqa", "num_kv_groups": 3, "positions": "rotary"},
], ids=lambda o: "-".join(str(v) for v in o.values()))
def test_todays_attention_explains_every_cell_with_the_q_and_k_that_meet_in_qkt(overrides):
    """Grouped K/V heads, the latent's up-projected keys, a window and rotated q and k: the products still add up to
    the recorded score, ÷ √head_dim to the scaled score, and a key the window hides says so."""
    from attnviz.config import AttentionConfig
    from attnviz.explain import explain_weight
    from attnviz.pipeline import run

    trace = run("one two three four five six seven", AttentionConfig(d_in=48, d_out=48, **overrides))
    for head in range(trace.num_heads):
        for query in range(trace.n):
            for key in range(trace.n):
                why = explain_weight(trace, head, query, key)
                assert why.products.sum() == pytest.approx(trace.steps["scores"][0, head, query, key], abs=1e-4)
                assert why.scaled == pytest.approx(why.score / why.divisor, abs=1e-4)
                assert why.weight == trace.steps["weights"][0, head, query, key]
                assert not why.notes, why.notes
    if overrides["variant"] == "swa":
        far = explain_weight(trace, 0, 5, 1)  # 5 − 1 = 4 ≥ W = 3: outside the window
        assert far.masked and far.weight == 0 and "window" in far.reason


def test_explain_weight_names_something_that_is_not_a_trace():
    """A string (or a module) in place of the Trace raises an ExplainError that names what it needs."""
    with pytest.raises(ExplainError, match="trace must be a Trace"):
        explain_weight("trace", 0, 0, 0)


def test_scores_a_module_changes_before_the_softmax_are_named_and_the_book_classes_get_no_such_note():
    """Gemma 2's soft-cap (cap · tanh(s / cap)) sits between the scaled scores and the softmax: the explanation says
    the softmax takes another number than the scaled score, which one, and why it may be; the book's classes feed the
    softmax their scaled scores and get no such note."""
    from helpers.user_modules import SoftCappedAttention

    torch.manual_seed(0)
    trace, _ = user_trace(SoftCappedAttention(d_model=32, n_heads=4, cap=0.5), d_in=32)
    why = explain_weight(trace, 1, 6, 2)
    capped = 0.5 * math.tanh(why.scaled / 0.5)
    assert why.row_masked[2] == pytest.approx(capped, rel=1e-4)
    assert any(note.startswith("The module changes its scaled scores before the softmax") and f"{capped:.4g}" in note
               for note in why.notes)
    assert not any("before the softmax" in note for note in explain_weight(trace, 1, 6, 7).notes)  # a masked cell
    book = attnviz.run("The cat sat on the mat.", AttentionConfig(variant="mha", d_in=32, d_out=32, num_heads=4))
    assert not any("before the softmax" in note for q in range(book.n) for k in range(q + 1)
                   for note in explain_weight(book, 0, q, k).notes)
