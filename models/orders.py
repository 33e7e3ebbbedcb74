"""Generation orders for any-order decoders: which position each slot predicts.

An order is a LongTensor [B, L] whose row is a permutation of 0..L-1: slot j predicts the
token at position order[b, j]. Every order is drawn per sequence from the caller's generator.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

ORDER_KINDS = ("l2r", "r2l", "uniform", "mix:P", "fixed:SEED", "blockwise:B")


@dataclass(frozen=True)
class OrderSpec:
    """A parsed order string: `kind` plus its parameter (mix probability, seed, block size)."""

    kind: str
    param: float = 0.0

    def __str__(self) -> str:
        if self.kind in ("l2r", "r2l", "uniform"):
            return self.kind
        value = self.param if self.kind == "mix" else int(self.param)
        return f"{self.kind}:{value}"


def parse_order(text: str) -> OrderSpec:
    """Parse `l2r`, `r2l`, `uniform`, `mix:p` (p = P(sequence is L2R)), `fixed:seed`, `blockwise:b`."""
    kind, _, arg = str(text).partition(":")
    try:
        if kind in ("l2r", "r2l", "uniform") and not arg:
            return OrderSpec(kind)
        if kind == "mix" and 0.0 <= float(arg) <= 1.0:
            return OrderSpec(kind, float(arg))
        if kind == "fixed" and int(arg) >= 0:
            return OrderSpec(kind, int(arg))
        if kind == "blockwise" and int(arg) >= 1:
            return OrderSpec(kind, int(arg))
    except ValueError:
        pass
    raise ValueError(f"order: invalid order {text!r}; valid: {', '.join(ORDER_KINDS)} (0<=P<=1, B>=1)")


def _uniform(batch: int, length: int, generator, device) -> torch.Tensor:
    return torch.rand(batch, length, generator=generator, device=device).argsort(dim=1)


def sample_orders(order: str | OrderSpec, batch: int, length: int, generator=None, device="cpu") -> torch.Tensor:
    """Draw one order per sequence: LongTensor [batch, length]."""
    spec = order if isinstance(order, OrderSpec) else parse_order(order)
    identity = torch.arange(length, device=device).expand(batch, length)
    if spec.kind == "l2r":
        return identity.clone()
    if spec.kind == "r2l":
        return identity.flip(1).clone()
    if spec.kind == "uniform":
        return _uniform(batch, length, generator, device)
    if spec.kind == "mix":
        is_l2r = torch.rand(batch, 1, generator=generator, device=device) < spec.param
        return torch.where(is_l2r, identity, _uniform(batch, length, generator, device))
    if spec.kind == "fixed":
        fixed = torch.randperm(length, generator=torch.Generator().manual_seed(int(spec.param)))
        return fixed.to(device).expand(batch, length).clone()
    return _blockwise(int(spec.param), batch, length, generator, device)


def _blockwise(block: int, batch: int, length: int, generator, device) -> torch.Tensor:
    """Contiguous blocks of `block` tokens visited in a random block order, L2R inside a block."""
    n_blocks = -(-length // block)
    block_order = _uniform(batch, n_blocks, generator, device)  # [B, n_blocks]
    starts = block_order.unsqueeze(-1) * block  # [B, n_blocks, 1]
    positions = (starts + torch.arange(block, device=device)).reshape(batch, -1)  # [B, n_blocks*block]
    keep = positions < length  # the last block may be short
    return positions[keep].view(batch, length)
