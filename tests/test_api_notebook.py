"""What a student meets calling attnviz from a notebook, as docs/api.md shows it: the book's printed numbers, yes/no
settings, map titles that agree with the checks, short printouts, paths with ``~``, and step indexes."""

import dataclasses
import functools
import importlib
import re
from copy import deepcopy

import numpy as np
import pytest
import torch
from torch import nn

import attnviz
from attnviz import AttentionConfig, explain, trace_file
from attnviz.config import ConfigError

JOURNEY = "Your journey starts with one step"


@pytest.mark.parametrize(("variant", "section", "seed"), [("simplified", "3.3", 123),
                                                          ("self_attention_v1", "3.4.2", 123),
                                                          ("self_attention_v2", "3.4.2", 789)])
def test_a_book_class_masked_by_default_says_how_to_get_the_books_numbers(variant, section, seed):
    masked = attnviz.run(JOURNEY, AttentionConfig(variant=variant, d_in=3, d_out=2, embedding="book"))
    [note] = [note for note in masked.notes if "causal mask" in note]
    assert f"book's {section} listing has no causal mask" in note
    assert "causal=False" in note
    assert (f"seed={seed}" in note) == (seed != 123)  # v2's listing seeds 789
    as_printed = attnviz.run(JOURNEY, AttentionConfig(variant=variant, d_in=3, d_out=2, embedding="book",
                                                      causal=False, seed=seed))
    assert not [note for note in as_printed.notes if "causal mask" in note]
    printed = {"simplified": ("weights", [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),  # the book's row 1
               "self_attention_v1": ("context", [0.2996, 0.8053]),  # the book's row 0
               "self_attention_v2": ("context", [-0.0739, 0.0713])}
    stage, row = printed[variant]
    values = as_printed.steps[stage][0, 0, 1] if stage == "weights" else as_printed.steps[stage][0, 0]
    np.testing.assert_allclose(values, row, atol=1e-4)


@pytest.mark.parametrize("variant", ["causal", "mha_wrapper", "mha"])
def test_a_book_class_that_masks_gets_no_such_note(variant):
    trace = attnviz.run(JOURNEY, AttentionConfig(variant=variant, d_in=8, d_out=8, num_heads=2))
    assert not [note for note in trace.notes if "causal mask" in note]


@pytest.mark.parametrize(("setting", "value"), [("causal", "False"), ("causal", 0), ("train", "no"), ("train", 0),
                                                ("train", 1.0), ("qkv_bias", "True"), ("causal", None)])
def test_a_yes_no_setting_refuses_anything_but_true_or_false(setting, value):
    config = AttentionConfig(d_in=8, d_out=8, num_heads=2, dropout=0.5, **{setting: value})
    with pytest.raises(ConfigError) as raised:
        config.validate()
    assert str(raised.value) == f"{setting} must be True or False, got {value!r}."
    with pytest.raises(ConfigError):
        attnviz.run(JOURNEY, config)


def test_true_false_and_an_open_qkv_bias_run():
    for causal, train in ((True, False), (False, True)):
        trace = attnviz.run(JOURNEY, AttentionConfig(d_in=8, d_out=8, num_heads=2, causal=causal, train=train))
        assert (trace.config.causal, trace.config.train) == (causal, train)
    assert AttentionConfig(qkv_bias=None).validate().qkv_bias is None


def test_a_checkpoints_layer_refuses_a_string_for_causal_too():
    from attnviz.models import BUNDLED

    with pytest.raises(ConfigError, match=r"^causal must be True or False, got 'False'\.$"):
        attnviz.run(JOURNEY, AttentionConfig(checkpoint=str(BUNDLED), layer=0, causal="False"))


class DividesByHeadDim(nn.Module):
    """Scores ÷ head_dim, not ÷ √head_dim: a slip a learner makes."""

    def __init__(self, d_in=32, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_in // num_heads
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        b, n, d_in = x.shape
        queries = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        keys = self.W_key(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        values = self.W_value(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, h, n, hd)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, n, n)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_weights = torch.softmax(attn_scores.masked_fill(mask, -torch.inf) / self.head_dim, dim=-1)  # (b, h, n, n)
        return (attn_weights @ values).transpose(1, 2).reshape(b, n, d_in)  # (b, n, d_in)


def scaled_titles(trace) -> list[str]:
    from attnviz.views import notebook

    drawn = notebook.figures_of(trace, "scaled")
    return [drawn["grid"].layout.title.text or "", drawn["head"].layout.title.text or ""]


def test_the_scaled_maps_title_says_the_divisor_the_run_used():
    example = importlib.import_module("docs.examples.my_attention")  # the README's module: it never scales
    unscaled = attnviz.trace_module(example.MultiHeadAttention(32, 32, 16, 0.0, 4), torch.randn(1, 5, 32))
    assert attnviz.explain_weight(unscaled, 0, 1, 0).scaling.startswith("no scaling (÷ 1)")
    for title in scaled_titles(unscaled):
        assert "÷ √dₖ" not in title.replace("no ÷√dₖ", "") and "no ÷√dₖ" in title, title
    slipped = attnviz.trace_module(DividesByHeadDim(), torch.randn(1, 5, 32))  # ÷ 8 where √dₖ is √8 = 2.828
    for title in scaled_titles(slipped):
        assert "÷ 8" in title and "not √dₖ" in title, title
    book = attnviz.run(JOURNEY, AttentionConfig(d_in=32, d_out=32, num_heads=4))
    assert all("scaled = scores ÷ √dₖ" in title for title in scaled_titles(book))


@pytest.fixture(scope="module")
def generation():
    model = attnviz.models.random_gpt("mha")
    return model, attnviz.models.generate(model, [1, 2, 3], 3)


@pytest.mark.parametrize("index", [10, 4, -5])
def test_check_step_outside_the_steps_names_the_range(generation, index):
    model, result = generation
    assert len(result.steps) == 4
    with pytest.raises(IndexError, match=rf"^step {index} is out of range: this generation has 4 steps, choose step "
                                         r"from 0 to 3 \(or −4 to −1, counted from the end\)\.$"):
        attnviz.models.check_step(model, result, index)


NO_MODEL = r"^model must be an attnviz\.models\.GPTModel \(random_gpt, or a loaded checkpoint\), got str\.$"
ANOTHER_MODEL = (r"^This generation was made by another model of the same shape, or by this model before its weights "
                 r"changed: its model's fingerprint is [0-9a-f]{12}…, this model's [0-9a-f]{12}…\. Check it with the "
                 r"model that made it, or generate again with this one\.$")


@functools.cache
def same_shape_other_weights():
    """The fixture's model with another seed: its layers and heads, not its weights."""
    return attnviz.models.random_gpt("mha", seed=124)


# a GPTModel config of the book's keys, small enough to build in milliseconds
SMALL_CFG = dict(vocab_size=50, context_length=16, emb_dim=32, n_heads=4, n_layers=2, drop_rate=0.0, qkv_bias=False)
# what a model past the machine's memory is told (the free memory shown is this machine's)
TOO_BIG = r"float32 numbers \([\d,.]+ [kMG]?B\), more than the [\d,.]+ [kMG]?B this machine has free: make "


@pytest.mark.parametrize(("call", "message"), [
    pytest.param(lambda model, result: attnviz.models.cache_settings("x"), NO_MODEL, id="cache_settings"),
    pytest.param(lambda model, result: attnviz.models.cache_holds("x"), NO_MODEL, id="cache_holds"),
    pytest.param(lambda model, result: attnviz.models.generate("x", [1, 2, 3], 3), NO_MODEL, id="generate"),
    pytest.param(lambda model, result: attnviz.models.check_step("x", result, 0), NO_MODEL, id="check_step"),
    pytest.param(lambda model, result: attnviz.models.check_steps("x", result), NO_MODEL, id="check_steps"),
    pytest.param(lambda model, result: attnviz.models.ablate("x", [1, 2], [(0, 0)]), NO_MODEL, id="ablate"),
    pytest.param(lambda model, result: attnviz.models.ablate_next("x", [1, 2], [(0, 0)], 1), NO_MODEL,
                 id="ablate_next"),
    pytest.param(lambda model, result: attnviz.models.ablation_grid("x", [1, 2, 1, 2], 2), NO_MODEL,
                 id="ablation_grid"),
    pytest.param(lambda model, result: attnviz.models.knocked_out("x", [(0, 0)]).__enter__(), NO_MODEL,
                 id="knocked_out"),
    pytest.param(lambda model, result: attnviz.models.logit_lens("x", [1, 2], 1), NO_MODEL, id="logit_lens"),
    pytest.param(lambda model, result: attnviz.models.value_weighted("x", [1, 2]), NO_MODEL, id="value_weighted"),
    pytest.param(lambda model, result: attnviz.models.attention_maps("x", [1, 2]), NO_MODEL, id="attention_maps"),
    pytest.param(lambda model, result: attnviz.models.layer_maps("x", [1, 2], 0), NO_MODEL, id="layer_maps"),
    pytest.param(lambda model, result: next(attnviz.models.iter_layer_maps("x", [1, 2])), NO_MODEL,
                 id="iter_layer_maps"),
    pytest.param(lambda model, result: attnviz.models.every_layer("x", [1, 2], lambda maps: maps), NO_MODEL,
                 id="every_layer"),
    pytest.param(lambda model, result: attnviz.models.trace_layer("x", [1, 2], 0), NO_MODEL, id="trace_layer"),
    pytest.param(lambda model, result: attnviz.models.switch_layer("x", None, 0), NO_MODEL, id="switch_layer"),
    pytest.param(lambda model, result: attnviz.models.running("x", True).__enter__(), NO_MODEL, id="running"),
    pytest.param(lambda model, result: attnviz.models.ablate(model, "Your journey", [(0, 0)]),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got str 'Your journey': tokenize a text first",
                 id="ablate-text"),
    pytest.param(lambda model, result: attnviz.models.ablate_next(model, None, [(0, 0)], 0),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got NoneType: ", id="ablate_next-None"),
    pytest.param(lambda model, result: attnviz.models.ablation_grid(model, [-1, 2, -1, 2], 2),
                 r"^Token ids must be in 0…50256\.$", id="ablation_grid-negative-id"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1, 50257], 0),
                 r"^Token ids must be in 0…50256\.$", id="logit_lens-id-past-the-vocabulary"),
    pytest.param(lambda model, result: attnviz.models.value_weighted(model, [1] * 257),
                 r"^257 tokens; this model reads at most 256\.$", id="value_weighted-past-the-context"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1.0, 2.0], 0),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got list: ", id="logit_lens-floats"),
    pytest.param(lambda model, result: attnviz.models.generate(model, [1.5, 2.0], 1),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got list: ", id="generate-floats"),
    pytest.param(lambda model, result: attnviz.models.generate(model, b"abc", 1),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got bytes b'abc': tokenize a text first",
                 id="generate-bytes"),
    pytest.param(lambda model, result: attnviz.models.generate(model, torch.tensor([True, False]), 1),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got Tensor: ", id="generate-bool-tensor"),
    pytest.param(lambda model, result: attnviz.models.attention_maps(model, [True, 1]),
                 r"^token_ids must be whole numbers \(GPT-2 token ids\), got list: ", id="maps-a-bool-among-ids"),
    pytest.param(lambda model, result: attnviz.models.generate(model, {2, 1}, 1),
                 r"^token_ids must be a sequence in order \(a list, a tuple, a tensor\), got set: a set keeps no "
                 r"order of tokens\.$", id="generate-set"),
    pytest.param(lambda model, result: attnviz.models.generate(model, torch.tensor([[1, 2], [3, 4]]), 1),
                 r"^token_ids must be one sequence of token ids, \(n,\) or a batch of one \(1, n\), got shape "
                 r"\(2, 2\): pass one sequence at a time, such as token_ids\[0\]\.$", id="generate-batch-of-two"),
    pytest.param(lambda model, result: attnviz.models.attention_maps(model, torch.tensor([[1, 2], [3, 4]])),
                 r"^token_ids must be one sequence of token ids, \(n,\) or a batch of one \(1, n\), got shape "
                 r"\(2, 2\): pass one sequence at a time", id="attention_maps-batch-of-two"),
    pytest.param(lambda model, result: attnviz.models.generate(model, torch.tensor([[1], [2]]), 1),
                 r"^token_ids must be one sequence of token ids, \(n,\) or a batch of one \(1, n\), got shape "
                 r"\(2, 1\)", id="generate-column"),
    pytest.param(lambda model, result: attnviz.models.generate(model, 5, 1),
                 r"^token_ids must be a sequence of token ids, got the single number 5: pass a list, such as \[5\]\.$",
                 id="generate-one-number"),
    pytest.param(lambda model, result: attnviz.models.generate(model, [], 1),
                 r"^token_ids is empty: give at least one token id\.$", id="generate-empty"),
    pytest.param(lambda model, result: attnviz.models.layer_maps(model, torch.zeros(1, 0, dtype=torch.long), 0),
                 r"^token_ids is empty: give at least one token id\.$", id="layer_maps-empty-batch"),
    pytest.param(lambda model, result: attnviz.models.attention_maps(model, [1, 2**70]),
                 r"^Token ids must be in 0…50256\.$", id="attention_maps-id-past-int64"),
    pytest.param(lambda model, result: attnviz.models.position_loss(None, [1, 2]),
                 r"^logits must be a \(n, vocab\) tensor \(ablate's\) for the 2 token ids, got NoneType\.$",
                 id="position_loss-no-logits"),
    pytest.param(lambda model, result: attnviz.models.position_loss(torch.zeros(3, 5), [1, 2]),
                 r"^logits must be a \(n, vocab\) tensor \(ablate's\) for the 2 token ids, got \(3, 5\)\.$",
                 id="position_loss-other-tokens"),
    pytest.param(lambda model, result: attnviz.models.ablate_next(model, [1, 2], [(0, 0)], "1"),
                 r"^position must be a whole number from 0 to 1, got '1'\.$", id="ablate_next-position-text"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1, 2], None),
                 r"^position must be a whole number from 0 to 1, got None\.$", id="logit_lens-position-None"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1, 2], 1.5),
                 r"^position must be a whole number from 0 to 1, got 1\.5\.$", id="logit_lens-position-float"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1, 2], True),
                 r"^position must be a whole number from 0 to 1, got True\.$", id="logit_lens-position-True"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1, 2], 1, -1),
                 r"^k must be a whole number from 1 to 50257, got -1\.$", id="logit_lens-k-negative"),
    pytest.param(lambda model, result: attnviz.models.logit_lens(model, [1, 2], 1, "5"),
                 r"^k must be a whole number from 1 to 50257, got '5'\.$", id="logit_lens-k-text"),
    pytest.param(lambda model, result: attnviz.models.trace_layer(model, [1, 2], 0, top_k=10**9),
                 r"^top_k must be a whole number from 1 to 50257, got 1000000000\.$", id="trace_layer-top_k-huge"),
    pytest.param(lambda model, result: attnviz.models.ablation_grid(model, [1, 2, 1, 2], None),
                 r"^T \(the repeated half's length\) must be a whole number from 2 to 4, got None\.$",
                 id="ablation_grid-T-None"),
    pytest.param(lambda model, result: attnviz.models.ablation_grid(model, [1, 2, 1, 2], 99),
                 r"^T \(the repeated half's length\) must be a whole number from 2 to 4, got 99\.$",
                 id="ablation_grid-T-huge"),
    pytest.param(lambda model, result: attnviz.models.ablation_grid(model, [1, 2, 1, 2], 1),
                 r"^T \(the repeated half's length\) must be a whole number from 2 to 4, got 1\.$",
                 id="ablation_grid-T-one"),
    pytest.param(lambda model, result: attnviz.models.ablate(model, [1, 2], None),
                 r"^heads must be \(layer, head\) pairs of whole numbers, such as \[\(0, 1\)\], got None\.$",
                 id="ablate-heads-None"),
    pytest.param(lambda model, result: attnviz.models.ablate(model, [1, 2], (0, 1)),
                 r"^heads must be \(layer, head\) pairs of whole numbers, such as \[\(0, 1\)\], got \(0, 1\)\.$",
                 id="ablate-one-pair-unlisted"),
    pytest.param(lambda model, result: attnviz.models.ablate_next(model, [1, 2], "0,1", 1),
                 r"^heads must be \(layer, head\) pairs of whole numbers, such as \[\(0, 1\)\], got '0,1'\.$",
                 id="ablate_next-heads-text"),
    pytest.param(lambda model, result: attnviz.models.knocked_out(model, [(0.5, 0)]).__enter__(),
                 r"^heads must be \(layer, head\) pairs of whole numbers, such as \[\(0, 1\)\], got "
                 r"\[\(0\.5, 0\)\]\.$", id="knocked_out-heads-float"),
    pytest.param(lambda model, result: attnviz.models.check_step(model, None, 0),
                 r"^generation must be an attnviz\.models\.Generation \(generate's result\), got NoneType\.$",
                 id="check_step-no-generation"),
    pytest.param(lambda model, result: attnviz.models.check_steps(model, attnviz.models.cache_holds(model)),
                 r"^generation must be an attnviz\.models\.Generation \(generate's result\), got str\.$",
                 id="check_steps-no-generation"),
    pytest.param(lambda model, result: attnviz.models.check_steps(model, dataclasses.replace(result, steps=[
                     dataclasses.replace(step, weights=np.zeros((3, 8, 1, 4))) for step in result.steps])),
                 r"^This generation was made by another model: its steps hold 3 layers × 8 heads, this model has "
                 r"2 layers × 8 heads\.$", id="check_steps-another-models-generation"),
    pytest.param(lambda model, result: attnviz.models.check_steps(same_shape_other_weights(), result),
                 ANOTHER_MODEL, id="check_steps-a-generation-of-a-model-of-the-same-shape"),
    pytest.param(lambda model, result: attnviz.models.check_step(same_shape_other_weights(), result, 0),
                 ANOTHER_MODEL, id="check_step-a-generation-of-a-model-of-the-same-shape"),
    pytest.param(lambda model, result: attnviz.models.switch_layer(model, result, 1),
                 r"^trace must be an attnviz\.models\.LayerTrace \(trace_layer's result\), got Generation\.$",
                 id="switch_layer-no-layer-trace"),
    pytest.param(lambda model, result: attnviz.models.attention_maps(model, [1, 2], causal="False"),
                 r"^causal must be True or False, got 'False'\.$", id="attention_maps-causal-text"),
    pytest.param(lambda model, result: attnviz.models.trace_layer(model, [1, 2], 0, causal=0),
                 r"^causal must be True or False, got 0\.$", id="trace_layer-causal-zero"),
    pytest.param(lambda model, result: attnviz.models.generate(model, [1, 2], 1, use_cache="no"),
                 r"^use_cache must be True or False, got 'no'\.$", id="generate-use_cache-text"),
    pytest.param(lambda model, result: attnviz.models.generate(model, [1, 2], 1, keep_weights=None),
                 r"^keep_weights must be True or False, got None\.$", id="generate-keep_weights-None"),
    pytest.param(lambda model, result: attnviz.models.value_norms(model, torch.zeros(1, 2, 128)),
                 r"^att must be the book's MultiHeadAttention or a GPTModel block's attention "
                 r"\(model\.trf_blocks\[0\]\.att\), got GPTModel\.$", id="value_norms-a-model-for-att"),
    pytest.param(lambda model, result: attnviz.models.value_norms(nn.MultiheadAttention(128, 2, batch_first=True),
                                                                  torch.zeros(1, 2, 128)),
                 r"^att must be the book's MultiHeadAttention or a GPTModel block's attention "
                 r"\(model\.trf_blocks\[0\]\.att\), got MultiheadAttention\.$", id="value_norms-torch-mha-for-att"),
    pytest.param(lambda model, result: attnviz.models.value_weighted_module(model.trf_blocks[0].att,
                                                                            torch.zeros(2, 128)),
                 r"^x must be a \(1, n, 128\) float32 tensor, the input att reads, got \(2, 128\) float32\.$",
                 id="value_weighted_module-x-rank-2"),
    pytest.param(lambda model, result: attnviz.models.value_norms(model.trf_blocks[0].att, np.zeros((1, 2, 128))),
                 r"^x must be a \(1, n, 128\) float32 tensor, the input att reads, got ndarray\.$",
                 id="value_norms-x-numpy"),
    pytest.param(lambda model, result: attnviz.models.rollout("weights"),
                 r"^maps must be attention weights \(layers, heads, n, n\), got str\.$", id="rollout-text"),
    pytest.param(lambda model, result: attnviz.models.rollout(np.zeros((0, 2, 3, 3))),
                 r"^maps must be attention weights \(layers, heads, n, n\), at least one layer and head; got "
                 r"\(0, 2, 3, 3\)\.$", id="rollout-no-layers"),
    pytest.param(lambda model, result: attnviz.models.ablation_grid(model, [1, 2, 1, 2], 2, progress="bar"),
                 r"^progress must be a function called with the fraction done, or None, got str\.$",
                 id="ablation_grid-progress-text"),
    pytest.param(lambda model, result: attnviz.models.every_layer(model, [1, 2], None),
                 r"^tiles must be a function that makes one layer's \(heads, n, n\) maps small, got NoneType\.$",
                 id="every_layer-no-tiles"),
    pytest.param(lambda model, result: attnviz.models.random_gpt("mha", seed="123"),
                 r"^seed must be a whole number from 0 to 4294967295, got '123'\.$", id="random_gpt-seed-text"),
    pytest.param(lambda model, result: attnviz.models.random_gpt("mha", seed=None),
                 r"^seed must be a whole number from 0 to 4294967295, got None\.$", id="random_gpt-seed-None"),
    pytest.param(lambda model, result: attnviz.models.random_gpt("mha", n_layers=10**9),
                 r"^n_layers must be a whole number from 1 to 1,000 \(GPTModel builds its blocks one after the other; "
                 r"the deepest GPTs have about 100\), got 1000000000\.$", id="random_gpt-a-billion-layers"),
    pytest.param(lambda model, result: attnviz.models.random_gpt("mha", vocab_size=10**12),
                 r"^This GPTModel would hold 256,000,000,559,872 " + TOO_BIG + r"vocab_size, context_length, emb_dim "
                 r"or n_layers smaller\. The largest part: tok_emb and out_head, 2 × vocab_size × emb_dim, "
                 r"1,024,000\.00 GB\.$", id="random_gpt-vocab-past-the-memory"),
    pytest.param(lambda model, result: attnviz.models.random_gpt("gqa", emb_dim=2**24, n_heads=8),
                 r"^This GPTModel would hold [\d,]+ " + TOO_BIG + r".* The largest part: the blocks' weights, "
                 r"n_layers × about 12 × emb_dim², ", id="random_gpt-emb_dim-past-the-memory"),
    pytest.param(lambda model, result: attnviz.models.GPTModel({**SMALL_CFG, "n_layers": 1001}),
                 r"^n_layers must be a whole number from 1 to 1,000 ", id="GPTModel-n_layers-past-the-bound"),
    pytest.param(lambda model, result: attnviz.models.GPTModel({**SMALL_CFG, "context_length": 10**7}),
                 r"^This GPTModel would hold [\d,]+ " + TOO_BIG + r".* The largest part: the blocks' causal masks, "
                 r"n_layers × context_length², 800,000\.00 GB\.$", id="GPTModel-context-past-the-memory"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock(
                     {key: value for key, value in SMALL_CFG.items() if key != "emb_dim"}),
                 r"^The config has no 'emb_dim': TransformerBlock reads the book's GPT_CONFIG_124M keys "
                 r"\(context_length, emb_dim, n_heads, drop_rate, qkv_bias\)\.$", id="TransformerBlock-no-emb_dim"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "emb_dim": 30}),
                 r"^emb_dim 30 is not divisible by n_heads 4\.$", id="TransformerBlock-heads-do-not-divide"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "emb_dim": 0}),
                 r"^emb_dim must be a whole number ≥ 1, got 0\.$", id="TransformerBlock-emb_dim-zero"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "emb_dim": 32.0}),
                 r"^emb_dim must be a whole number ≥ 1, got 32\.0\.$", id="TransformerBlock-emb_dim-float"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "drop_rate": 1.5}),
                 r"^drop_rate must be a number from 0 up to \(not including\) 1, got 1\.5\.$",
                 id="TransformerBlock-drop_rate-1.5"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "context_length": 0}),
                 r"^context_length must be a whole number ≥ 1, got 0\.$", id="TransformerBlock-context-zero"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock(None),
                 r"^TransformerBlock's config must be a dict of the book's keys \(context_length, emb_dim, n_heads, "
                 r"drop_rate, qkv_bias\), got NoneType None\.$", id="TransformerBlock-no-config"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "n_kv_groups": 2}),
                 r"^The config has a key TransformerBlock does not read, 'n_kv_groups': attnviz names it "
                 r"'num_kv_groups'", id="TransformerBlock-the-bonus-scripts-key"),
    pytest.param(lambda model, result: attnviz.models.TransformerBlock({**SMALL_CFG, "context_length": 10**7}),
                 r"^This TransformerBlock would hold [\d,]+ " + TOO_BIG + r"emb_dim or context_length smaller\. The "
                 r"largest part: the causal mask, context_length², 400,000\.00 GB\.$",
                 id="TransformerBlock-context-past-the-memory"),
    pytest.param(lambda model, result: attnviz.models.FeedForward({}),
                 r"^The config has no 'emb_dim': FeedForward reads the book's GPT_CONFIG_124M keys \(emb_dim\)\.$",
                 id="FeedForward-no-emb_dim"),
    pytest.param(lambda model, result: attnviz.models.FeedForward({"emb_dim": -4}),
                 r"^emb_dim must be a whole number ≥ 1, got -4\.$", id="FeedForward-emb_dim-negative"),
    pytest.param(lambda model, result: attnviz.models.FeedForward({"emb_dim": 10**7}),
                 r"^This FeedForward would hold 800,000,050,000,000 " + TOO_BIG + r"emb_dim smaller\. The largest "
                 r"part: the feed-forward layers, 8 × emb_dim² \+ 5 × emb_dim, 3,200,000\.20 GB\.$",
                 id="FeedForward-emb_dim-past-the-memory"),
    pytest.param(lambda model, result: attnviz.models.LayerNorm(2.5),
                 r"^emb_dim must be a whole number ≥ 1, got 2\.5\.$", id="LayerNorm-emb_dim-float"),
    pytest.param(lambda model, result: attnviz.models.LayerNorm(0),
                 r"^emb_dim must be a whole number ≥ 1, got 0\.$", id="LayerNorm-emb_dim-zero"),
    pytest.param(lambda model, result: attnviz.models.LayerNorm(8, eps="1e-5"),
                 r"^eps must be a small positive number, got '1e-5'\.$", id="LayerNorm-eps-text"),
    pytest.param(lambda model, result: attnviz.models.LayerNorm(10**13),
                 r"^This LayerNorm would hold 20,000,000,000,000 " + TOO_BIG + r"emb_dim smaller\.",
                 id="LayerNorm-past-the-memory"),
    pytest.param(lambda model, result: attnviz.run(JOURNEY, AttentionConfig(d_in=8, d_out=8, num_heads=2)
                                                   ).hidden_cells(2),
                 r"^head 2 is out of range: this run has 2 heads, choose head from 0 to 1\.$",
                 id="trace.hidden_cells-head-out-of-range"),
    pytest.param(lambda model, result: attnviz.run(JOURNEY, AttentionConfig(d_in=8, d_out=8, num_heads=2)
                                                   ).hidden_cells("0"),
                 r"^head must be a whole number from 0 to 1, got '0'\.$", id="trace.hidden_cells-head-text"),
    pytest.param(lambda model, result: attnviz.models.discover(None, environ={}),
                 r"^extra_paths must be paths \(str or pathlib\.Path, a list of them\), got None\.$",
                 id="discover-extra_paths-None"),
    pytest.param(lambda model, result: attnviz.models.hf_cache_dir("HF_HOME=/tmp"),
                 r"^environ must be a mapping of environment variables \(like os\.environ\), or None, got str\.$",
                 id="hf_cache_dir-environ-text"),
    pytest.param(lambda model, result: attnviz.models.assign("wte", model.tok_emb.weight, None),
                 r"^wte: assign takes the model's tensor \(left\) and the checkpoint's tensor or NumPy array "
                 r"\(right\), got Parameter and NoneType\.$", id="assign-no-right"),
    pytest.param(lambda model, result: attnviz.check_module(DividesByHeadDim(), sizes=[("num_heads", 4)]),
                 r"^sizes must be a dict of the sizes the module was built with \(\{\"num_heads\": 8, …\}\), or "
                 r"None, got list$", id="check_module-sizes-list"),
    pytest.param(lambda model, result: attnviz.check_module(DividesByHeadDim(), rules=3),
                 r"^rules must be rule ids \(rows-sum-to-one, causal, .*\), or None for every rule, got int$",
                 id="check_module-rules-number"),
])
def test_a_models_function_given_bad_input_says_what_it_takes(generation, call, message):
    """Each function of ``attnviz.models`` given what a notebook user may pass by mistake names the argument, what it
    takes and what it got, in a ValueError, never Python's own AttributeError or TypeError from inside it."""
    with pytest.raises(ValueError, match=message):
        call(*generation)


@pytest.mark.parametrize("index", ["0", 1.0, True, None])
def test_check_step_given_no_whole_number_says_it_takes_one(generation, index):
    model, result = generation
    with pytest.raises(ValueError, match=rf"^step must be a whole number from 0 to 3 \(or −4 to −1, counted from the "
                                         rf"end\), got {re.escape(repr(index))}\.$"):
        attnviz.models.check_step(model, result, index)


@pytest.mark.parametrize("given", [
    pytest.param(lambda: (t for t in [1, 2, 3]), id="generator"),
    pytest.param(lambda: map(int, "123"), id="map"),
    pytest.param(lambda: torch.tensor([1, 2, 3]).unsqueeze(0), id="tensor-(1,n)-as-the-book-feeds-it"),
    pytest.param(lambda: np.array([[1, 2, 3]]), id="array-(1,n)"),
    pytest.param(lambda: [[1, 2, 3]], id="list-of-one-list"),
])
def test_one_sequence_is_read_alike_by_generate_and_the_maps(generation, given):
    """One sequence of ids — a generator or map (read once: its ids, not an empty prompt after a first check), a
    tensor, or a batch of one ``(1, n)`` as ``tokenizer.encode`` + ``unsqueeze(0)`` gives it — is the same prompt for
    generate and the same text for attention_maps."""
    model, result = generation
    assert attnviz.models.generate(model, given(), 0, keep_weights=False).token_ids == result.token_ids[:3]
    np.testing.assert_allclose(attnviz.models.layer_maps(model, given(), 0), result.steps[0].weights[0],
                               atol=1e-6)  # (heads, 3, 3): the prompt's step of generate([1, 2, 3]), layer 0


def test_a_copy_of_the_model_checks_its_generation_and_the_model_trained_further_does_not(generation):
    """The generation records the model's fingerprint (its weights and layout), not the object: a copy with the same
    weights (a checkpoint loaded again) checks it, every step ok; the copy after one in-place change of its weights
    (a training step) is another model, and is refused in words."""
    model, result = generation
    copy = deepcopy(model)
    assert all(check.ok for check in attnviz.models.check_steps(copy, result))
    with torch.no_grad():
        copy.trf_blocks[1].att.W_query.weight.mul_(1.5)
    with pytest.raises(ValueError, match=ANOTHER_MODEL):
        attnviz.models.check_steps(copy, result)


def test_check_step_counts_a_negative_step_from_the_end(generation):
    model, result = generation
    assert attnviz.models.check_step(model, result, -4) == attnviz.models.check_step(model, result, 0)
    assert attnviz.models.check_step(model, result, -1).ok


class BatchAttention(nn.Module):  # docs/api.md's MyAttention, as a user writes it
    def __init__(self, d_in=64, num_heads=4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_in, num_heads, batch_first=True)

    def forward(self, x):
        n = x.shape[1]
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # True: may not attend
        return self.mha(x, x, x, attn_mask=future, need_weights=False)[0]


def printed_in_a_notebook(value) -> str:
    """What Jupyter prints for a cell whose last line is ``value`` (IPython's plain-text formatter)."""
    from IPython.core.formatters import PlainTextFormatter

    return PlainTextFormatter()(value)


def test_a_trace_prints_in_a_few_lines_naming_its_tokens_heads_and_steps():
    trace = attnviz.run(JOURNEY, AttentionConfig(d_in=64, d_out=64, num_heads=4))
    printed = printed_in_a_notebook(trace)
    assert printed == repr(trace) == str(trace)
    assert len(printed.splitlines()) <= 5 and len(printed) < 600, printed
    assert printed.startswith("Trace of Multi-head attention (3.6.2): 6 tokens, 4 heads"), printed
    assert "'·journey'" in printed and "batch" not in printed
    for stage in trace.steps:
        assert stage in printed
    assert "weights, dropped (1, 4, 6, 6)" in printed and "output (1, 6, 64)" in printed


def test_a_batch_trace_prints_its_batch_and_a_long_text_a_few_of_its_tokens():
    batch = attnviz.trace_module(BatchAttention(), torch.randn(4, 7, 64))
    printed = printed_in_a_notebook(batch)
    assert len(printed.splitlines()) <= 5 and len(printed) < 600, printed
    assert "a batch of 4 × 7 tokens (views draw item 0), 4 heads" in printed and "(4, 4, 7, 7)" in printed
    long = attnviz.run(" ".join(["word"] * 300), AttentionConfig(d_in=16, d_out=16, num_heads=2))
    printed = printed_in_a_notebook(long)
    assert len(printed) < 600 and "… (300 in all)" in printed, printed


def test_a_generation_prints_in_a_few_lines(generation):
    _, result = generation
    printed = printed_in_a_notebook(result)
    assert len(printed.splitlines()) <= 5 and len(printed) < 600, printed
    assert printed.startswith("Generation with the KV cache: 3 prompt tokens + 3 new, 2 layers × 8 heads, 4 steps")
    assert f"token_ids: {result.token_ids}" in printed
    assert "the prompt's (2, 8, 3, 3), then one per new token (2, 8, 1, 4) … (2, 8, 1, 6)" in printed


def test_a_generation_step_prints_its_arrays_names_shapes_and_dtypes_not_their_values(generation):
    """A step holds the weights of every layer and head and the logits over the whole vocabulary: a notebook prints
    what it is (where it fed, what it chose) and each array's name, shape and dtype, as a Generation does."""
    model, result = generation
    prefill, step = result.steps[0], result.steps[1]
    vocab = model.tok_emb.weight.shape[0]
    printed = printed_in_a_notebook(step)
    assert printed == repr(step) == str(step)
    assert len(printed.splitlines()) <= 5 and len(printed) < 400, printed
    assert printed.startswith(f"Step at position 3: fed 1 token [{step.fed[0]}], next token {step.next_token} (p "), \
        printed
    assert "weights (layers, heads, q, k): (2, 8, 1, 4) float32" in printed
    assert f"logits (vocab,): ({vocab},) float32" in printed
    assert f"cache: {step.cache_bytes:,} bytes after it" in printed
    assert "array(" not in printed and "dtype=" not in printed  # no values
    assert printed_in_a_notebook(prefill).startswith("Step at position 0: fed 3 tokens [1, 2, 3], next token ")



def test_a_checkpoint_or_trace_path_given_in_python_may_start_with_the_home_folder(tmp_path, monkeypatch):
    """A path given in Python may start with ``~``, the home folder, as in a shell."""
    from pathlib import Path

    from attnviz import trace_file
    from attnviz.models import BUNDLED, CheckpointError

    monkeypatch.setenv("HOME", str(Path(BUNDLED).parent))
    at_home = f"~/{Path(BUNDLED).name}"
    assert attnviz.models.load_checkpoint(at_home).trf_blocks[1].att.num_heads == 2
    trace = attnviz.run(JOURNEY, AttentionConfig(checkpoint=at_home, layer=1))
    assert trace.model.layer == 1 and trace.tokens[1] == "·journey"
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "attnviz-trace.npz").write_bytes(trace_file.trace_npz(trace))
    assert attnviz.load_trace("~/attnviz-trace.npz").tokens == trace.tokens
    with pytest.raises(CheckpointError, match=f"^No file or folder at {tmp_path}/gone\\."):
        attnviz.models.load_checkpoint("~/gone")


TAKES_A_TRACE = {  # every public function that takes a Trace -> (a call of it on ``given``, the argument's name)
    "explain_weight": (lambda given: attnviz.explain_weight(given, 0, 0, 0), "trace"),
    "attention_sums": (lambda given: explain.attention_sums(given, 0, queries=[0]), "trace"),
    "trace_npz": (lambda given: trace_file.trace_npz(given), "trace"),
    "figures_of": (lambda given: importlib.import_module("attnviz.views.notebook").figures_of(given), "trace"),
    "notebook.show": (lambda given: importlib.import_module("attnviz.views.notebook").show(given), "trace"),
    "attnviz.show": (lambda given: attnviz.show(given), "trace_or_module"),
}


@pytest.mark.parametrize("given", ["Your journey starts with one step", None, np.zeros((1, 4, 6, 6))])
@pytest.mark.parametrize("function", TAKES_A_TRACE)
def test_every_function_that_takes_a_trace_names_its_argument_and_every_source_of_one(function, given):
    """A text, None or the weights array instead of a Trace is an InputError (``explain``'s an ExplainError) that
    names the argument and every function that gives a Trace — ``load_trace`` too, for a trace saved from a page —
    not an AttributeError from inside (``figures_of`` is what a student calls outside Jupyter: ``show`` points to
    it)."""
    from attnviz.config import InputError

    call, argument = TAKES_A_TRACE[function]
    module = " or an attention torch.nn.Module and a text" if argument == "trace_or_module" else ""
    with pytest.raises(InputError) as refused:
        call(given)
    assert str(refused.value) == (f"{argument} must be a Trace (from attnviz.run, attnviz.trace_module or "
                                  f"attnviz.load_trace){module}, got {type(given).__name__}.")
    assert function not in ("explain_weight", "attention_sums") or isinstance(refused.value, explain.ExplainError)


@pytest.mark.parametrize(("setting", "value"), [("causal", "False"), ("causal", 0), ("seed", "7"), ("seed", 1.5),
                                                ("seed", -1)])
def test_trace_module_refuses_a_causal_or_seed_of_the_wrong_kind(setting, value):
    """``causal="False"`` is a true string: read as True, it would mark a bidirectional module causal.  Like
    ``AttentionConfig``, trace_module says what it takes instead of guessing (and a seed it cannot use is no
    ValueError from inside torch)."""
    from helpers.user_modules import Bidirectional

    from attnviz.tracing import TraceError

    with pytest.raises(TraceError, match=rf"^{setting} must be "):
        attnviz.trace_module(Bidirectional(16), torch.randn(1, 3, 16), **{setting: value})


def test_check_module_refuses_a_string_for_causal():
    from helpers.user_modules import Bidirectional

    from attnviz.tracing import TraceError

    with pytest.raises(TraceError, match=r"^causal must be True, False or None \(read from the run\), got 'False'$"):
        attnviz.check_module(Bidirectional(16), causal="False")


def test_trace_module_keeps_the_seed_it_embedded_the_text_with():
    from helpers.user_modules import Bidirectional

    trace = attnviz.trace_module(Bidirectional(16), "Your journey", seed=7, causal=False)
    assert (trace.config.seed, trace.config.causal) == (7, False)
    again = attnviz.trace_module(Bidirectional(16), "Your journey", seed=trace.config.seed)
    assert np.array_equal(again.embeddings["input"], trace.embeddings["input"])
