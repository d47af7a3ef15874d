"""The book's Chapter 4 GPT model (``GPTModel``), built on attnviz's recording ``MultiHeadAttention``.

Class names, attribute names, constructor arguments (the book's ``cfg`` dict) and parameter-creation
order are the book's (``ch04/01_main-chapter-code/gpt.py``), so the book's ch05 ``state_dict`` loads
unchanged.  Two additions, neither of which changes a result:

* ``cfg`` may carry ``ln_eps`` (default 1e-5, the book's ``LayerNorm.eps``; GPT-2 configs say
  ``layer_norm_epsilon``);
* ``forward`` takes an optional :class:`PathRecorder`.  Without one, the forward pass is the book's;
  with one, the *same* code also records the (stage, shape) path of the whole model, the residual
  stream entering every block, and a full :class:`~attnviz.attention.Recorder` of the blocks asked for
  (``norm1``, then ``att``'s named steps, then the rest of the block).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from attnviz.attention import MultiHeadAttention, Recorder, record

# The book's GPT_CONFIG_124M (Chapter 4): GPT-2 small.
GPT_CONFIG_124M = {
    "vocab_size": 50257,  # vocabulary size (tiktoken's GPT-2 encoding)
    "context_length": 1024,  # positions in pos_emb
    "emb_dim": 768,  # embedding dimension
    "n_heads": 12,  # attention heads per block
    "n_layers": 12,  # transformer blocks
    "drop_rate": 0.1,  # dropout rate
    "qkv_bias": False,  # the book trains without query/key/value biases; OpenAI's GPT-2 has them
}


class LayerNorm(nn.Module):
    """Section 4.2: normalise the last dimension (biased variance), then ``scale`` and ``shift``."""

    def __init__(self, emb_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)  # (b, n, d) -> (b, n, 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # (b, n, d) -> (b, n, 1)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)  # (b, n, d)
        return self.scale * norm_x + self.shift  # (d,) * (b, n, d) + (d,) -> (b, n, d)


class GELU(nn.Module):
    """Section 4.3: the tanh approximation of GELU that GPT-2 was trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1 + torch.tanh(
            torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))
        ))  # elementwise: (...) -> (...)


class FeedForward(nn.Module):
    """Section 4.3: ``layers`` = Linear(d, 4d), GELU, Linear(4d, d)."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]),
            GELU(),
            nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)  # (b, n, d) -> (b, n, 4d) -> (b, n, d)


class TransformerBlock(nn.Module):
    """Section 4.5: pre-LayerNorm attention and feed-forward, each with a shortcut connection.

    ``forward(x, recorder=None)``: with a :class:`Recorder`, records ``norm1`` (the LayerNorm'd block input,
    kept: it is what the attention sees), ``att``'s named steps, then the shapes of ``shortcut1``,
    ``norm2``, ``ff`` and ``shortcut2``.
    """

    def __init__(self, cfg: dict):
        super().__init__()
        self.att = MultiHeadAttention(
            d_in=cfg["emb_dim"],
            d_out=cfg["emb_dim"],
            context_length=cfg["context_length"],
            num_heads=cfg["n_heads"],
            dropout=cfg["drop_rate"],
            qkv_bias=cfg["qkv_bias"],
        )
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"], eps=cfg.get("ln_eps", 1e-5))
        self.norm2 = LayerNorm(cfg["emb_dim"], eps=cfg.get("ln_eps", 1e-5))
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x: torch.Tensor, recorder: Recorder | None = None) -> torch.Tensor:
        # Shortcut connection for the attention block
        shortcut = x  # (b, n, d)
        x = self.norm1(x)  # (b, n, d)
        record(recorder, "norm1", x)
        x = self.att(x, recorder)  # (b, n, d) -> (b, n, d), att records its named steps
        x = self.drop_shortcut(x)  # (b, n, d)
        x = x + shortcut  # add the original input back -> (b, n, d)
        record(recorder, "shortcut1", x, keep=False)

        # Shortcut connection for the feed-forward block
        shortcut = x  # (b, n, d)
        x = self.norm2(x)  # (b, n, d)
        record(recorder, "norm2", x, keep=False)
        x = self.ff(x)  # (b, n, d) -> (b, n, d)
        record(recorder, "ff", x, keep=False)
        x = self.drop_shortcut(x)  # (b, n, d)
        x = x + shortcut  # (b, n, d)
        record(recorder, "shortcut2", x, keep=False)
        return x


class PathRecorder:
    """What :meth:`GPTModel.forward` records when one is passed.

    * ``shapes``: (stage, shape) of the whole path, in order: ``tokens``, ``tok_emb``, ``pos_emb``,
      ``input``; per block the traced block's own entries (``norm1``, ``att``'s steps, …) and then
      ``block i`` (the block's output); ``final_norm``, ``logits``.
    * ``blocks``: {layer: Recorder} for every layer in ``layers`` (``recorder_factory(layer)``, default a
      plain :class:`Recorder` that keeps every step).
    * ``block_inputs``: the residual stream entering every block, detached, when ``keep_block_inputs``.
    """

    def __init__(
        self,
        layers: Iterable[int] = (),
        keep_block_inputs: bool = False,
        recorder_factory: Callable[[int], Recorder] | None = None,
    ):
        self.layers = frozenset(layers)
        self.keep_block_inputs = keep_block_inputs
        self.recorder_factory = recorder_factory or (lambda index: Recorder())
        self.shapes: list[tuple[str, tuple[int, ...]]] = []
        self.blocks: dict[int, Recorder] = {}
        self.block_inputs: list[torch.Tensor] = []

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self.shapes.append((name, tuple(tensor.shape)))

    def enter_block(self, index: int, x: torch.Tensor) -> Recorder | None:
        if self.keep_block_inputs:
            self.block_inputs.append(x.detach())
        if index not in self.layers:
            return None
        self.blocks[index] = self.recorder_factory(index)
        return self.blocks[index]

    def leave_block(self, index: int, x: torch.Tensor) -> None:
        if index in self.blocks:
            self.shapes.extend(self.blocks[index].shapes)
        self.add(f"block {index}", x)


class GPTModel(nn.Module):
    """Section 4.6: token + position embeddings, ``n_layers`` transformer blocks, final norm, output head."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])

        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])

        self.final_norm = LayerNorm(cfg["emb_dim"], eps=cfg.get("ln_eps", 1e-5))
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx: torch.Tensor, recorder: PathRecorder | None = None) -> torch.Tensor:
        batch_size, seq_len = in_idx.shape  # (b, n) token ids
        tok_embeds = self.tok_emb(in_idx)  # (b, n) -> (b, n, d)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))  # (n,) -> (n, d)
        x = tok_embeds + pos_embeds  # (b, n, d) + (n, d) -> (b, n, d)
        x = self.drop_emb(x)  # (b, n, d)
        if recorder is not None:
            for name, tensor in (("tokens", in_idx), ("tok_emb", tok_embeds), ("pos_emb", pos_embeds), ("input", x)):
                recorder.add(name, tensor)
        for index, block in enumerate(self.trf_blocks):  # = the book's self.trf_blocks(x), one block at a time
            block_recorder = recorder.enter_block(index, x) if recorder is not None else None
            x = block(x, block_recorder)  # (b, n, d) -> (b, n, d)
            if recorder is not None:
                recorder.leave_block(index, x)
        x = self.final_norm(x)  # (b, n, d)
        logits = self.out_head(x)  # (b, n, d) -> (b, n, vocab)
        if recorder is not None:
            recorder.add("final_norm", x)
            recorder.add("logits", logits)
        return logits
