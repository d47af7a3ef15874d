"""An attention function kept in a library's file, as transformers keeps GPT-2's ``eager_attention_forward``: a user's
module in another file calls it (``user_modules.EagerAttention``)."""

import torch
from torch import nn


def eager_attention_forward(module, query, key, value, attention_mask, renormalise=False):
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * query.size(-1) ** -0.5  # (b, h, n, n)
    attn_weights = attn_weights + attention_mask  # (b, h, n, n)
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)  # (b, h, n, n)
    attn_weights = attn_weights.type(value.dtype)  # (b, h, n, n): a no-op in float32
    if renormalise:
        attn_weights = attn_weights / attn_weights.sum(dim=-1, keepdim=True)  # (b, h, n, n)
    attn_weights = module.attn_dropout(attn_weights)  # (b, h, n, n)
    attn_output = torch.matmul(attn_weights, value)  # (b, h, n, n) @ (b, h, n, hd) -> (b, h, n, hd)
    return attn_output.transpose(1, 2)  # (b, n, h, hd)
