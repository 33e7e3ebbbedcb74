"""Rotary position angles (RoPE, Su et al. 2021): shared by the core and the fused decoding kernel.

Its own module so that `models.kernels` can use it without importing the core (which imports the
kernels)."""
from __future__ import annotations

import torch

ROPE_BASE = 10000.0  # RoPE's θ base (Su et al. 2021, RoFormer §3.2.2)


def rope_angles(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [..., T, hd] of RoPE for integer positions [..., T]: pair i (features i and
    i + hd/2, the "rotate half" layout) turns by position·ROPE_BASE^(-2i/hd)."""
    angles = positions.to(torch.float32)[..., None] * rope_frequencies(head_dim, positions.device)  # [..., T, hd/2]
    angles = torch.cat([angles, angles], -1)
    return angles.cos(), angles.sin()


def rope_frequencies(head_dim: int, device=None) -> torch.Tensor:
    """float32 [hd/2]: pair i turns by ROPE_BASE^(-2i/hd) radians per position."""
    return ROPE_BASE ** (-torch.arange(head_dim // 2, device=device, dtype=torch.float32) * 2 / head_dim)
