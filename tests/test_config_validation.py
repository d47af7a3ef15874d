"""AttentionConfig.validate: every bad setting gives a message a user can act on (divisors suggested, the
single-head variants ignore num_heads); valid configs validate to themselves."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from helpers.runs import TEXT, small

from attnviz import variants
from attnviz.config import AttentionConfig, ConfigError
from attnviz.pipeline import run

# ============================== config validation ==============================

CONFIG_ERRORS = [
    ({"variant": "gpt5"}, r"Unknown variant 'gpt5'; choose one of simplified, .*mha, .*swa\."),
    ({"d_in": 1.5}, r"d_in must be a whole number, got 1\.5\."),
    ({"d_in": "3"}, r"d_in must be a whole number, got '3'\."),
    ({"d_in": True}, r"d_in must be a whole number, got True\."),
    ({"d_in": 0}, r"d_in must be between 1 and 4096, got 0\."),
    ({"d_in": 4097}, r"d_in must be between 1 and 4096, got 4097\."),
    ({"d_out": 2.0}, r"d_out must be a whole number, got 2\.0\."),
    ({"d_out": -8}, r"d_out must be between 1 and 4096, got -8\."),
    ({"context_length": None}, r"context_length must be a whole number, got None\."),
    ({"context_length": 0}, r"context_length must be between 1 and 1024, got 0\."),
    ({"context_length": 1025}, r"context_length must be between 1 and 1024, got 1025\."),
    ({"num_heads": 2.5}, r"num_heads must be a whole number, got 2\.5\."),
    ({"num_heads": 0}, r"num_heads must be between 1 and \d+, got 0\."),
    ({"num_heads": 10**6, "d_out": 8}, r"num_heads must be between 1 and \d+, got 1000000\."),
    ({"seed": "123"}, r"seed must be a whole number, got '123'\."),
    ({"seed": -1}, r"seed must be between 0 and 4294967295, got -1\."),
    ({"seed": 2**32}, r"seed must be between 0 and 4294967295, got 4294967296\."),
    ({"dropout": 5}, r"dropout is a probability: .*from 0 up to \(not including\) 1, got 5\."),
    ({"dropout": -0.1}, r"dropout is a probability: .* got -0\.1\."),
    ({"dropout": True}, r"dropout is a probability: .* got True\."),
    ({"dropout": 1.0}, r"dropout is a probability: .* got 1\.0\."),
    ({"dropout": "0.1"}, r"dropout is a probability: .* got '0\.1'\."),
    ({"dropout": math.nan}, r"dropout is a probability: .* got nan\."),
    ({"device": "tpu"}, r"Unknown device 'tpu'; choose one of auto, cpu, cuda, mps\."),
    ({"embedding": "glove"}, r"Unknown embedding 'glove'; choose 'seeded' or 'book'\."),
    ({"embedding": "book", "d_in": 768}, r"journey vectors are 3-dimensional: set d_in to 3 \(got 768\)\."),
    ({"num_heads": 16, "d_out": 8}, r"16 heads need d_out ≥ 16; d_out is 8\."),
    ({"variant": "mha_wrapper", "num_heads": 9, "d_out": 4}, r"9 heads need d_out ≥ 9; d_out is 4\."),
    ({"attention": 0}, r"attention must be a whole number from 1 to 8192 \(which of a module's attentions to show, "
                       r"counted from 1\), got 0\."),
    ({"attention": "2"}, r"attention must be a whole number from 1 to 8192 .* got '2'\."),
    ({"attention": 2}, r"attention=2 picks one of your module's attentions; the book's classes and a checkpoint's "
                       r"layer compute one\."),
]


@pytest.mark.parametrize(("overrides", "message"), CONFIG_ERRORS)
def test_config_error_messages(overrides, message):
    config = small(**overrides)
    with pytest.raises(ConfigError, match=message):
        config.validate()
    with pytest.raises(ConfigError, match=message):  # run() validates before anything else
        run(TEXT, config)


@pytest.mark.parametrize(
    ("d_out", "heads", "suggested"),
    [(768, 7, [4, 6, 8]), (1024, 24, [8, 16, 32]), (1280, 36, [32, 40, 20]), (10, 3, [1, 2, 5]), (7, 2, [1, 7])],
)
@pytest.mark.parametrize("variant", tuple(name for name, v in variants.VARIANTS.items() if v.multi_head))
def test_non_divisible_heads_message_suggests_real_divisors(variant, d_out, heads, suggested):
    with pytest.raises(ConfigError) as info:
        small(variant, d_out=d_out, num_heads=heads).validate()
    message = str(info.value)
    assert message.startswith(f"d_out {d_out} is not divisible by {heads} heads; try ")
    tried = [int(v) for v in re.findall(r"\d+", message.split("try", 1)[1])]
    assert sorted(tried) == sorted(suggested)
    assert all(d_out % value == 0 for value in tried)
    assert " or " in message


def test_the_exact_768_by_7_message():
    with pytest.raises(ConfigError) as info:
        AttentionConfig(num_heads=7).validate()
    assert str(info.value) == "d_out 768 is not divisible by 7 heads; try 4, 6 or 8."




@pytest.mark.parametrize(("d_out", "heads", "near", "fitted"), [
    (768, 12, None, 12), (768, 12, 7, 12),  # heads that divide d_out stay, whatever they would fall back near
    (768, 7, None, 6),  # else the divisor nearest them, the smaller of two as near (6 and 8)
    (10, 4, None, 5), (10, 3, None, 2), (7, 2, None, 1), (7, 6, None, 7),
    (100, 3, 12, 10), (100, 7, 1, 1),  # or nearest ``near`` (a URL's: the default heads)
])
def test_fitted_heads_keeps_heads_that_divide_d_out_else_the_nearest_divisor(d_out, heads, near, fitted):
    from attnviz.config import fitted_heads

    assert fitted_heads(d_out, heads, near) == fitted
    assert d_out % fitted == 0
@pytest.mark.parametrize("variant", ["simplified", "self_attention_v1", "self_attention_v2", "causal"])
def test_single_head_variants_ignore_num_heads(variant):
    config = small(variant, d_out=10, num_heads=3).validate()
    trace = run(TEXT, config)
    assert config.heads == 1
    assert trace.num_heads == 1


def test_valid_configs_validate_to_themselves():
    config = small()
    assert config.validate() is config
    assert AttentionConfig().validate() == AttentionConfig()
    assert small(dropout=0).validate().dropout == 0
    assert small(dropout=np.float64(0.25)).validate().dropout == 0.25
    assert {f.name for f in dataclasses.fields(AttentionConfig)} >= {
        "variant", "d_in", "d_out", "num_heads", "dropout", "seed", "device"}


@pytest.mark.parametrize("rope_base", [10_000, 500_000, 1_000_000, 1_000_000.0, 5_000_000])
def test_real_models_rope_bases_are_accepted(rope_base):
    """Qwen2 and Mistral turn by θ = 1,000,000 (their config's rope_theta, a float), Yi by 5,000,000."""
    config = AttentionConfig(variant="mha", positions="rotary", rope_base=rope_base)
    assert config.validate() is config


@pytest.mark.parametrize("rope_base", [7, 0, -10_000, 1e12, float("nan"), "1e6", True])
def test_a_rope_base_outside_real_models_range_says_the_range(rope_base):
    with pytest.raises(ConfigError, match=r"rope_base must be a number from 100 to 1,000,000,000 \(10,000 Llama 2, "
                                          r"500,000 Llama 3, 1,000,000 Qwen2 and Mistral\), got "):
        AttentionConfig(variant="mha", positions="rotary", rope_base=rope_base).validate()


def test_a_rotary_run_at_theta_1e6_turns_as_transformers_qwen2_does():
    """A run at θ = 1e6 turns its queries and keys as transformers' Qwen2 rotary embedding and apply_rotary_pos_emb
    turn the same projections (both split halves), position by position; at θ = 10,000 they would turn otherwise."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding, apply_rotary_pos_emb

    config = AttentionConfig(variant="mha", d_in=32, d_out=32, num_heads=2, positions="rotary", rope_base=1_000_000)
    trace = run(TEXT, config)
    b, n, _ = trace.steps["queries"].shape
    split = [torch.from_numpy(np.array(trace.steps[stage])).view(b, n, 2, 16).transpose(1, 2)  # (b, h, n, hd)
             for stage in ("queries", "keys")]
    rotated = [torch.from_numpy(np.array(trace.steps[f"rotated_{stage}"])) for stage in ("queries", "keys")]
    for theta, same in ((1_000_000.0, True), (10_000.0, False)):
        qwen2 = Qwen2RotaryEmbedding(Qwen2Config(hidden_size=32, num_attention_heads=2, rope_theta=theta,
                                                 max_position_embeddings=64))
        cos, sin = qwen2(split[0], torch.arange(n)[None])  # (1, n, hd) each
        queries, keys = apply_rotary_pos_emb(*split, cos, sin)  # (b, h, n, hd) each
        assert torch.allclose(queries, rotated[0], atol=1e-5) == same
        assert torch.allclose(keys, rotated[1], atol=1e-5) == same
