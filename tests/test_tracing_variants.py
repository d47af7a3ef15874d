"""Tracing today's attention written as plain modules: the maps and the per-head Q, K, V are the ones the
formulas give (written here independently of the modules), for GQA, MQA, MLA, SWA and rotary."""

import pytest
import torch
from helpers import user_modules as um

from attnviz import checks, tracing


def x(n=7, d=16, batch=2):
    return torch.randn(batch, n, d, generator=torch.Generator().manual_seed(3))  # (b, n, d)


def build(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(16, 32, 16, 0.0, 4, *args, **kwargs).eval()  # 4 heads of 8


def band(n, window):
    diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (diff >= 0) & (diff < window)  # (n, n): True where query i sees key j


@pytest.mark.parametrize("cls", [um.LearnerSWA, um.LearnerSWAWithSDPA])
@pytest.mark.parametrize("window", [1, 3, 6])
def test_a_sliding_windows_weights_are_positive_exactly_inside_the_band(cls, window):
    trace = tracing.trace_module(build(cls, window), x())
    weights = torch.tensor(trace.steps["weights"])  # (b, h, n, n)
    assert weights.shape == (2, 4, 7, 7)
    assert torch.equal(weights > 0, band(7, window).expand_as(weights))
    attention = tracing.combine(tracing.record(build(cls, window), x()).attentions)
    assert checks.sliding_window(attention) == window


@pytest.mark.parametrize("cls", [um.LearnerGQA, um.LearnerGQAWithSDPA])
@pytest.mark.parametrize("groups", [1, 2])
def test_grouped_query_keys_and_values_are_per_query_head(cls, groups):
    module, inputs = build(cls, groups), x()
    trace = tracing.trace_module(module, inputs)
    with torch.no_grad():
        k = module.W_key(inputs).view(2, 7, groups, 8).transpose(1, 2)  # (b, g, n, hd)
        v = module.W_value(inputs).view(2, 7, groups, 8).transpose(1, 2)
    for head in range(4):
        group = head // (4 // groups)  # neighbouring query heads share a group
        assert torch.allclose(torch.tensor(trace.steps["keys"])[:, head], k[:, group], atol=1e-6)
        assert torch.allclose(torch.tensor(trace.steps["values"])[:, head], v[:, group], atol=1e-6)


def test_latent_attentions_keys_come_up_from_the_latent():
    module, inputs = build(um.LearnerMLA, latent_dim=6), x()
    trace = tracing.trace_module(module, inputs)
    with torch.no_grad():
        keys = module.W_UK(module.W_DKV(inputs)).view(2, 7, 4, 8).transpose(1, 2)  # (b, h, n, hd)
    assert torch.allclose(torch.tensor(trace.steps["keys"]), keys, atol=1e-6)


def rotated(t, base=10_000.0):
    """t (b, h, n, hd) rotated as complex pairs (feature i with i + hd/2) by e^{i·p·θ_i}: the rotary formula."""
    half = t.shape[-1] // 2
    theta = base ** (-torch.arange(half).double() * 2 / t.shape[-1])  # (hd/2,)
    turn = torch.polar(torch.ones(t.shape[-2], half, dtype=torch.double),
                       torch.arange(t.shape[-2]).double()[:, None] * theta)  # (n, hd/2)
    pairs = torch.complex(t[..., :half].double(), t[..., half:].double()) * turn  # (b, h, n, hd/2)
    return torch.cat([pairs.real, pairs.imag], dim=-1).float()


@pytest.mark.parametrize("cls", [um.LearnerRotaryGQA, um.LearnerGQAWithSDPA])
def test_rotary_queries_and_keys_are_traced_after_the_rotation(cls):
    module = build(cls, 2) if cls is um.LearnerRotaryGQA else build(cls, 2, rotary=True)
    inputs = x()
    trace = tracing.trace_module(module, inputs)
    with torch.no_grad():
        q = module.W_query(inputs).view(2, 7, 4, 8).transpose(1, 2)  # (b, h, n, hd)
        k = module.W_key(inputs).view(2, 7, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)  # (b, h, n, hd)
    assert torch.allclose(torch.tensor(trace.steps["queries"]), rotated(q), atol=1e-5)
    assert torch.allclose(torch.tensor(trace.steps["keys"]), rotated(k), atol=1e-5)
    assert [c.rule for c in checks.check_module(module) if c.status == "fail"] == []
