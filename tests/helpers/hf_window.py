"""transformers' own Mistral and Qwen2 attention layers (eager) with a sliding window, each in the wrapper a user
writes to call one as forward(x, past_key_values=None): the rotary angles from the cache's length and the additive
mask their model would build for a cache that keeps every token (the future and the keys W or more behind hidden).
The layer only calls ``past_key_values.update``: which tokens the cache keeps is the cache's choice.
``CausalMask*``: the wrapper docs/check-your-module.md shows, which builds a causal mask only (the window forgotten);
``max_window_layers`` (Qwen2): 1 makes layer 0 a full-attention layer, its window switched off."""

import torch
from torch import nn
from transformers import MistralConfig, Qwen2Config
from transformers.models.mistral.modeling_mistral import MistralAttention, MistralRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2RotaryEmbedding


class WindowLayer(nn.Module):
    family = "mistral"

    hides_window = True  # False: the wrapper builds a causal mask only

    def __init__(self, d_in=64, num_heads=8, num_kv_heads=2, sliding_window=3, max_window_layers=0):
        super().__init__()
        config_class, attention_class, rotary_class = {
            "mistral": (MistralConfig, MistralAttention, MistralRotaryEmbedding),
            "qwen2": (Qwen2Config, Qwen2Attention, Qwen2RotaryEmbedding)}[self.family]
        qwen2 = {"use_sliding_window": True, "max_window_layers": max_window_layers} if self.family == "qwen2" else {}
        config = config_class(hidden_size=d_in, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                              intermediate_size=4 * d_in, num_hidden_layers=1, vocab_size=100,
                              sliding_window=sliding_window, **qwen2)
        config._attn_implementation = "eager"
        self.window = sliding_window
        self.self_attn = attention_class(config, layer_idx=0)
        self.rotary_emb = rotary_class(config)

    def forward(self, hidden_states, past_key_values=None):
        b, T, _ = hidden_states.shape
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        positions = torch.arange(past, past + T)  # (T,)
        cos, sin = self.rotary_emb(hidden_states, positions[None].expand(b, T))  # (b, T, head_dim) each
        behind = positions[:, None] - torch.arange(past + T)[None, :]  # (T, past + T): query minus key position
        hidden = (behind < 0) | (behind >= self.window)  # (T, past + T): the future and the keys W or more behind
        if not self.hides_window:
            hidden = behind < 0  # (T, past + T): the future alone
        mask = torch.zeros(T, past + T).masked_fill(hidden, torch.finfo(torch.float32).min)[None, None]
        return self.self_attn(hidden_states, (cos, sin), mask, past_key_values=past_key_values,
                              cache_position=positions)[0]  # (b, T, d_in)


class Mistral(WindowLayer):
    family = "mistral"


class Qwen2(WindowLayer):
    family = "qwen2"


class CausalMaskMistral(WindowLayer):
    family = "mistral"
    hides_window = False


class CausalMaskQwen2(WindowLayer):
    family = "qwen2"
    hides_window = False
