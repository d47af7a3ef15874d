"""Masks the checker must read wherever they are: the future zeroed after the softmax with no mask buffer (a module
that means to be causal, and fails for it), a sliding window a module declares only through its submodule or its
config object (a wrapper that forgets it fails), and Mistral's reference-code window, W + 1 keys, named as such."""

import types

import pytest
import torch
from helpers import user_modules as um
from torch import nn

from attnviz import checks


def verdicts(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module.eval(), **kwargs)}


@pytest.mark.parametrize("how", ["tril", "mul"])
def test_the_future_zeroed_after_the_softmax_without_a_buffer_fails_as_a_mask_after_the_softmax(how):
    torch.manual_seed(0)
    results = verdicts(um.TrilAfterSoftmax(how=how))
    assert results["rows-sum-to-one"].status == "fail", results["rows-sum-to-one"]
    assert checks.MASK_AFTER_SOFTMAX in results["rows-sum-to-one"].evidence
    assert results["causal"].status == "fail", results["causal"]
    assert checks.MASK_AFTER_SOFTMAX in results["causal"].evidence
    assert results["causal"].evidence.startswith("changing tokens 1… changed the output at position 0")
    assert results["mask-convention"].status == "fail", results["mask-convention"]
    assert results["mask-convention"].evidence.startswith(
        "the weights of the future (above the diagonal) are set to 0 after the softmax, not hidden from it")


@pytest.mark.parametrize("how", ["tril", "mul"])
def test_a_mask_after_the_softmax_fails_the_same_rules_with_a_mask_buffer_or_without(how):
    torch.manual_seed(0)
    without = verdicts(um.TrilAfterSoftmax(how=how))
    torch.manual_seed(0)
    with_buffer = verdicts(um.MaskAfterSoftmax())
    failing = {rule for rule, check in without.items() if check.status == "fail"}
    assert failing == {rule for rule, check in with_buffer.items() if check.status == "fail"}
    assert {"rows-sum-to-one", "causal", "mask-convention", "matches-reference"} <= failing


class ConfigWindow(nn.Module):
    """A sliding window that lives only in the module's config object (``self.config.sliding_window``), switched on
    by ``use_sliding_window`` as Qwen2's config does; ``forgets``: the forward hides the future alone."""

    def __init__(self, d_in=16, sliding_window=3, use_sliding_window=True, forgets=False):
        super().__init__()
        self.config = types.SimpleNamespace(sliding_window=sliding_window, use_sliding_window=use_sliding_window)
        self.forgets = forgets
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        n = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
        diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): query minus key position
        hidden = diff < 0  # (n, n)
        if self.config.use_sliding_window and not self.forgets:
            hidden = hidden | (diff >= self.config.sliding_window)  # (n, n)
        attn_scores = (queries @ keys.transpose(1, 2)).masked_fill(hidden, -torch.inf)  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        return attn_weights @ values  # (b, n, n) @ (b, n, d) -> (b, n, d)


def test_a_window_in_the_config_object_is_the_modules_window():
    torch.manual_seed(0)
    assert verdicts(ConfigWindow(), rules=["mask-convention"])["mask-convention"].status == "pass"
    check = verdicts(ConfigWindow(forgets=True), rules=["mask-convention"])["mask-convention"]
    assert check.status == "fail", check
    assert check.evidence.startswith("the hidden cells are exactly the future, but the module's window is 3"), check


def test_a_window_the_config_switches_off_is_no_window():
    torch.manual_seed(0)
    check = verdicts(ConfigWindow(use_sliding_window=False), rules=["mask-convention"])["mask-convention"]
    assert check.status == "pass", check
    assert check.evidence == "the hidden cells are exactly the future (above the diagonal)"


class TwoConfigsWindow(nn.Module):
    """A sliding window in the learner's own ``self.cfg`` dict, kept beside the base model's ``self.config``, which
    switches its own sliding window off (and declares none); ``forgets``: the forward hides the future alone."""

    def __init__(self, d_in=16, forgets=False):
        super().__init__()
        self.config = types.SimpleNamespace(sliding_window=None, use_sliding_window=False)
        self.cfg = {"sliding_window": 3}
        self.forgets = forgets
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        n = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
        diff = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n): query minus key position
        hidden = diff < 0 if self.forgets else (diff < 0) | (diff >= self.cfg["sliding_window"])  # (n, n)
        attn_scores = (queries @ keys.transpose(1, 2)).masked_fill(hidden, -torch.inf)  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, n, n)
        return attn_weights @ values  # (b, n, n) @ (b, n, d) -> (b, n, d)


def test_a_window_is_switched_off_only_by_the_config_that_declares_it():
    """The base model's use_sliding_window=False does not switch off the window the module's own cfg declares."""
    torch.manual_seed(0)
    check = verdicts(TwoConfigsWindow(forgets=True), rules=["mask-convention"])["mask-convention"]
    assert check.status == "fail", check
    assert check.evidence.startswith("the hidden cells are exactly the future, but the module's window is 3"), check


hf_window = pytest.importorskip("helpers.hf_window")


@pytest.mark.parametrize("family", ["Qwen2", "Mistral"])
def test_a_wrapper_that_forgets_its_layers_window_fails_mask_convention(family):
    torch.manual_seed(0)
    check = verdicts(getattr(hf_window, f"CausalMask{family}")(sliding_window=3),
                     rules=["mask-convention"])["mask-convention"]
    assert check.status == "fail", check
    assert check.evidence.startswith("the hidden cells are exactly the future, but the module's window is 3: query 7 "
                                     "sees keys 0 … 4"), check


@pytest.mark.parametrize("family", ["Qwen2", "Mistral"])
def test_a_wrapper_that_builds_its_layers_window_passes_mask_convention(family):
    torch.manual_seed(0)
    check = verdicts(getattr(hf_window, family)(sliding_window=3), rules=["mask-convention"])["mask-convention"]
    assert check.status == "pass", check
    assert check.evidence.startswith("sliding window W = 3"), check


def test_a_qwen2_full_attention_layer_has_no_window():
    """max_window_layers=1: layer 0 attends to every earlier token, whatever sliding_window says."""
    torch.manual_seed(0)
    check = verdicts(hf_window.CausalMaskQwen2(sliding_window=3, max_window_layers=1),
                     rules=["mask-convention"])["mask-convention"]
    assert check.status == "pass", check
    assert check.evidence == "the hidden cells are exactly the future (above the diagonal)"


class ReferenceCodeWindow(nn.Module):
    """Mistral's reference code: ``torch.tril`` of ones, then ``torch.triu(mask, diagonal=-sliding_window)``, then
    ``torch.log`` — each query keeps W + 1 keys, itself and W behind."""

    def __init__(self, d_in=16, sliding_window=3):
        super().__init__()
        self.sliding_window = sliding_window
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        n = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
        mask = torch.tril(torch.full((n, n), fill_value=1.0), diagonal=0)  # (n, n): 1 on and below the diagonal
        mask = torch.log(torch.triu(mask, diagonal=-self.sliding_window))  # (n, n): 0 kept, -inf hidden
        attn_scores = queries @ keys.transpose(1, 2) / keys.shape[-1] ** 0.5 + mask  # (b, n, n)
        return torch.softmax(attn_scores, dim=-1) @ values  # (b, n, n) @ (b, n, d) -> (b, n, d)


def test_mistrals_reference_code_window_is_named_as_the_convention_that_keeps_w_plus_one_keys():
    torch.manual_seed(0)
    check = verdicts(ReferenceCodeWindow(), rules=["mask-convention"])["mask-convention"]
    assert check.status == "fail", check
    assert check.evidence == (
        "the hidden cells are the future and the keys 4 or more behind (a window of 4), but the module's window is "
        "3: each query keeps W + 1 = 4 keys, itself and 3 behind, the convention of Mistral's reference code "
        "(torch.triu(mask, diagonal=-sliding_window)); attnviz and Hugging Face count W keys, the query's own "
        "included: hide diff >= W, not diff > W"), check


class MaskedThenTril(nn.Module):
    """A causal module that hides the future before its softmax, then also calls ``tril()`` on the weights, as some
    write it for safety: the future's weights are 0 already, so the tril changes nothing."""

    def __init__(self, d_in=16):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_in, bias=False)
        self.W_key = nn.Linear(d_in, d_in, bias=False)
        self.W_value = nn.Linear(d_in, d_in, bias=False)

    def forward(self, x):
        n = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, n, d) each
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # (n, n)
        attn_scores = (queries @ keys.transpose(1, 2)).masked_fill(future, -torch.inf)  # (b, n, n)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1).tril()  # (b, n, n)
        return attn_weights @ values  # (b, n, n) @ (b, n, d) -> (b, n, d)


def test_a_tril_after_a_softmax_whose_future_is_hidden_already_changes_nothing_and_passes():
    torch.manual_seed(0)
    results = verdicts(MaskedThenTril())
    failing = {rule: check.evidence for rule, check in results.items() if check.status == "fail"}
    assert failing == {}
    assert results["mask-convention"].evidence == "the hidden cells are exactly the future (above the diagonal)"
