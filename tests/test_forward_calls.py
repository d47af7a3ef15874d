"""How attnviz calls a user's forward: ``forward(x)``, self-attention as ``forward(x, x, x)`` for a query/key/value
signature (nn.MultiheadAttention itself), a one-line way forward for any other required argument, and a module
whose weights are on the meta device named as such."""

import pytest
import torch
from helpers import user_modules as um
from torch import nn

from attnviz import checks, tracing


def results(module, **kwargs) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module, **kwargs)}


@pytest.mark.parametrize("batch_first", [True, False])
def test_nn_multihead_attention_itself_is_checked_and_traced_as_self_attention(batch_first):
    """Passed as it is, nn.MultiheadAttention gets forward(x, x, x) on the (batch, n, d) input — turned to its
    (n, batch, d) when it was built without batch_first — and every rule passes or does not apply."""
    torch.manual_seed(0)
    module = nn.MultiheadAttention(32, 4, batch_first=batch_first).eval()
    found = results(module)
    assert {rule for rule, check in found.items() if check.status == "fail"} == set(), found
    assert found["causal"].status == "skip" and found["matches-reference"].status == "pass", found
    x = torch.randn(2, 5, 32)  # (b, n, d)
    trace = tracing.trace_module(module, x)
    assert trace.steps["weights"].shape == (2, 4, 5, 5)
    with torch.no_grad():
        expected = module(x, x, x)[0] if batch_first else module(*[x.transpose(0, 1)] * 3)[0].transpose(0, 1)
    assert torch.allclose(torch.from_numpy(trace.output.copy()), expected, atol=1e-6)


def test_the_annotated_transformers_query_key_value_signature_is_called_as_self_attention():
    torch.manual_seed(0)
    found = results(um.QueryKeyValue().eval())
    assert {rule for rule, check in found.items() if check.status == "fail"} == set(), found
    assert found["matches-reference"].status == "pass", found


@pytest.mark.parametrize(("module", "names"), [(um.TakesMaskCosSin(), "mask, cos and sin")])
def test_a_forward_that_needs_more_than_x_says_to_wrap_it(module, names):
    with pytest.raises(tracing.TraceError) as error:
        checks.check_module(module.eval())
    message = str(error.value)
    assert message.startswith(f"TakesMaskCosSin.forward needs {names} as well as x: attnviz calls forward(x) alone")
    assert "wrap your module so forward(x) builds the mask / cos / sin and calls yours" in message
    assert "TypeError" not in message and "\n" not in message


def test_a_multihead_attention_with_a_required_mask_too_says_to_wrap_it():
    class NeedsMask(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, query, key, value, attn_mask):
            return self.attn(query, key, value, attn_mask=attn_mask)[0]

    with pytest.raises(tracing.TraceError, match=r"^NeedsMask.forward needs attn_mask as well as x: attnviz calls"):
        checks.check_module(NeedsMask().eval())


def meta_module():
    with torch.device("meta"):
        return um.CausalSelfAttention(n_embd=32, n_head=4, block_size=16, flash=False)


META = ("the module's weights are on the meta device (no values): materialise it (module.to_empty(device='cpu') "
        "and load weights) before tracing")


@pytest.mark.parametrize("x", [None, torch.randn(2, 8, 32, device="meta")])
def test_a_module_on_the_meta_device_is_named_as_such(x):
    with pytest.raises(tracing.TraceError) as error:
        checks.check_module(meta_module(), x)
    assert str(error.value) == META
    with pytest.raises(tracing.TraceError) as error:
        tracing.trace_module(meta_module(), torch.randn(1, 8, 32) if x is None else x)
    assert str(error.value) == META


def test_causal_given_to_the_api_names_the_argument_not_the_cli_flag():
    torch.manual_seed(0)
    found = results(um.Bidirectional().eval(), causal=True)
    assert found["mask-convention"].evidence.startswith("causal=True was given, but no cell is hidden")
    assert "--causal" not in found["mask-convention"].evidence
    found = results(um.Bidirectional().eval(), causal=False)
    assert found["causal"].evidence == "not checked: causal=False was given"
