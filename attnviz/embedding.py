"""Chapter 2 input embeddings: token embedding + absolute positional embedding, seeded.

With rotary positions (:mod:`attnviz.rope`) the attention rotates queries and keys by position instead, so the
input is the token embedding alone; the positional table is still created, so the token embeddings (and every
seeded weight after them) are the same for both settings."""

from __future__ import annotations

import torch
from torch import nn

from attnviz.tokens import N_VOCAB

# The book's hand-set 3-d vectors for "Your journey starts with one step" (Ch. 3.3.1).
JOURNEY_TEXT = "Your journey starts with one step"
JOURNEY_TOKEN_IDS = (7120, 7002, 4940, 351, 530, 2239)  # exactly one GPT-2 token per word
JOURNEY_INPUTS = (
    (0.43, 0.15, 0.89),  # Your     (x^1)
    (0.55, 0.87, 0.66),  # journey  (x^2)
    (0.57, 0.85, 0.64),  # starts   (x^3)
    (0.22, 0.58, 0.33),  # with     (x^4)
    (0.77, 0.25, 0.10),  # one      (x^5)
    (0.05, 0.80, 0.55),  # step     (x^6)
)


def journey_inputs() -> torch.Tensor:
    """The book's ``inputs`` tensor, shape (6, 3)."""
    return torch.tensor(JOURNEY_INPUTS)  # (6, 3)


class InputEmbedding(nn.Module):
    """``token_emb(ids) + pos_emb(arange(n))`` as in Ch. 2.8; ``learned_positions=False``: ``token_emb(ids)``."""

    def __init__(self, d_in: int, context_length: int, vocab_size: int = N_VOCAB):
        super().__init__()
        self.token_emb = nn.Embedding(vocab_size, d_in)
        self.pos_emb = nn.Embedding(context_length, d_in)

    def forward(self, token_ids: torch.Tensor, learned_positions: bool = True) -> dict[str, torch.Tensor]:
        token_embeddings = self.token_emb(token_ids)  # (b, n) -> (b, n, d_in)
        if learned_positions:
            pos_embeddings = self.pos_emb(torch.arange(token_ids.shape[-1]))  # (n, d_in)
        else:  # rotary: positions enter inside the attention
            pos_embeddings = torch.zeros(token_ids.shape[-1], token_embeddings.shape[-1])  # (n, d_in)
        input_embeddings = token_embeddings + pos_embeddings  # (b, n, d_in) + (n, d_in) -> (b, n, d_in)
        return {"token": token_embeddings, "position": pos_embeddings, "input": input_embeddings}
