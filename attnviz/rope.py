"""Rotary position embeddings (RoPE) in the book's split-halves form: the angles, their cos/sin tables and the rotation.

The book's Llama code (``compute_rope_params`` / ``apply_rope`` in its bonus material) rotates each head's
query and key vectors after the head split and before QKᵀ; the pair (x[d], x[d + hd/2]) turns by the angle
position × θ_d, θ_d = base^(−2d/hd).  Because both vectors turn by their own position, q_i · k_j depends on
i − j only: the embedding then adds no learned positions.  No learned weights: nothing here draws random numbers.
"""

from __future__ import annotations

import torch

ROPE_BASES = (10_000, 500_000)  # GPT-NeoX/Llama 2 and Llama 3


def compute_rope_params(head_dim: int, theta_base: float = 10_000, context_length: int = 4096,
                        device=None, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (context_length, head_dim): row p holds the angles p·θ_d twice (both halves)."""
    angles = rope_angles(head_dim, theta_base, context_length, device, dtype)  # (ctx, hd/2)
    angles = torch.cat([angles, angles], dim=1)  # (ctx, hd/2) -> (ctx, hd): the same angle for both halves
    return torch.cos(angles), torch.sin(angles)  # (ctx, hd) each


def rope_frequencies(head_dim: int, theta_base: float = 10_000, device=None, dtype=torch.float32) -> torch.Tensor:
    """θ_d = base^(−2d/hd) for d = 0 … hd/2 − 1, (hd/2,): the angle pair d turns by per position (d = 0 fastest:
    one radian a position; the last pair slowest)."""
    if head_dim % 2:
        raise ValueError(f"Rotary positions rotate pairs of dimensions: head_dim must be even, got {head_dim}.")
    return 1.0 / theta_base ** (torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim)  # (hd/2,)


def rope_angles(head_dim: int, theta_base: float = 10_000, context_length: int = 4096, device=None,
                dtype=torch.float32) -> torch.Tensor:
    """(context_length, hd/2): row p holds p·θ_d, the angle by which position p turns the pair (x[d], x[d + hd/2])
    — the angles whose cos and sin :func:`compute_rope_params` tabulates."""
    inv_freq = rope_frequencies(head_dim, theta_base, device, dtype)  # (hd/2,)
    positions = torch.arange(context_length, dtype=dtype, device=device)  # (ctx,)
    return positions.unsqueeze(1) * inv_freq.unsqueeze(0)  # (ctx, 1) * (1, hd/2) -> (ctx, hd/2)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (b, heads, n, hd) by the first n rows of ``cos``/``sin`` (ctx, hd), split-halves style."""
    num_tokens, head_dim = x.shape[-2], x.shape[-1]
    x1 = x[..., : head_dim // 2]  # (b, h, n, hd/2): the first half
    x2 = x[..., head_dim // 2 :]  # (b, h, n, hd/2): the second half
    cos = cos[:num_tokens].unsqueeze(0).unsqueeze(0)  # (ctx, hd) -> (1, 1, n, hd)
    sin = sin[:num_tokens].unsqueeze(0).unsqueeze(0)  # (1, 1, n, hd)
    rotated = torch.cat((-x2, x1), dim=-1)  # (b, h, n, hd): each pair turned by 90°
    return (x * cos + rotated * sin).to(x.dtype)  # (b, h, n, hd)
