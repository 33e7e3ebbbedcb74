"""adaLN modulation: the chunk-major projection that makes a forward pass's tables
(`ChunkProjection`), the per-token rows gathered from them (`modulation_rows`) and the product
the blocks apply them with (`mul_add`).

The row operations are autograd Functions only where autograd's own backward is slower on CPU;
tests compare values and gradients with the plain tensor expressions. (The fused CPU kernels
read the tables in place instead: `models.kernels.cpu_backend`.)
"""
from __future__ import annotations

import torch
from torch import nn


def mul_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a + b·c (broadcasting); under autograd its backward makes one product per input."""
    if not torch.is_grad_enabled():
        return torch.addcmul(a, b, c)
    return _MulAdd.apply(a, b, c)


class _MulAdd(torch.autograd.Function):
    """`torch.addcmul(a, b, c)` with a leaner backward: autograd's formula for addcmul scales
    by `value` with a second full-size product per input (c·1, then ·grad); here grad_b = g·c
    and grad_c = g·b are one pass each and grad_a is g itself (adaLN makes four per block)."""

    @staticmethod
    def forward(ctx, a, b, c):
        ctx.save_for_backward(b, c)
        ctx.shapes = (a.shape, b.shape, c.shape)
        return torch.addcmul(a, b, c)

    @staticmethod
    def backward(ctx, grad):
        b, c = ctx.saved_tensors
        need = ctx.needs_input_grad
        grads = (grad if need[0] else None, grad * c if need[1] else None, grad * b if need[2] else None)
        return tuple(None if g is None else g.sum_to_size(shape) for g, shape in zip(grads, ctx.shapes))


class ChunkProjection(nn.Linear):
    """adaLN's projection Linear(c, n·d) whose output is chunk-major: rows c [..., c] give
    contiguous tables [n, ..., d] from one batched product (a row-major [..., n·d] result would
    need a copy per chunk), with 1 added to each scale chunk (every second of a (shift, scale,
    gate) triple). Same parameters as the Linear; a module, so ZeRO-3 gathers them for it."""

    def __init__(self, in_features: int, chunks: int, d: int):
        super().__init__(in_features, chunks * d)
        self.chunks = chunks

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        n = self.chunks
        d = self.out_features // n
        weight = self.weight.view(n, d, -1).transpose(1, 2)  # [n·d, c] -> [n, c, d]
        bias = self.bias.view(n, 1, d) + is_scale(n, weight)  # [n, 1, d]
        rows = c.reshape(-1, c.shape[-1])  # [..., c] -> [M, c]
        return torch.baddbmm(bias, rows.expand(n, *rows.shape), weight).view(n, *c.shape[:-1], d)


def is_scale(n: int, like: torch.Tensor) -> torch.Tensor:
    """1 for the scale chunks (every second of a (shift, scale, gate) triple) of n chunks, else
    0, shaped to broadcast over `like` [n, ..., d]: adding it turns scale into 1 + scale."""
    ones = torch.tensor([i % 3 == 1 for i in range(n)], dtype=like.dtype, device=like.device)
    return ones.view(n, *([1] * (like.dim() - 1)))


def modulation_rows(tables: torch.Tensor, index: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """Every chunk of packed `tables` [K, ..., d] per token: a tuple of K tensors.

    With `index` [B, T] the tables are per position ([K, P, d]) and row index[b, t] of each
    chunk is gathered for token (b, t); otherwise they already hold per-token (or
    per-sequence) rows.
    """
    if index is None:
        return tables.unbind(0)
    if not torch.is_grad_enabled():  # decoding: no autograd bookkeeping
        return _gather_rows(tables, index)
    return _GatherRows.apply(tables, index)


ONE_GATHER_MAX_BYTES = 1 << 24  # above this, gather chunk by chunk (see `_gather_rows`)


def _gather_rows(tables: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(tables[0][index], ..., tables[K-1][index]) for contiguous tables [K, P, d]: K tensors
    [B, T, d].

    A decoding step's few rows come from one `index_select` along the position dimension. A
    training batch's rows are gathered per chunk instead: one allocation for all K chunks
    (69 MB at the 3M rung, batch 8 x 256) is mapped fresh by the allocator on every call,
    and its page faults made the gather 10x slower (25 vs 2.6 ms).
    """
    flat = index.reshape(-1)
    if flat.numel() * tables.shape[0] * tables.shape[-1] * tables.element_size() <= ONE_GATHER_MAX_BYTES:
        return tables.index_select(1, flat).view(tables.shape[0], *index.shape, -1).unbind(0)
    return tuple(chunk.index_select(0, flat).view(*index.shape, -1) for chunk in tables.unbind(0))


class _GatherRows(torch.autograd.Function):
    """(tables[0][index], ..., tables[K-1][index]) for tables [K, P, d] and index [B, T].

    Same values and gradients as indexing, but the backward scatters each chunk's gradient
    with `index_add_`, which on CPU is ~10x faster than the accumulating `index_put_` autograd
    would use, and no stack of the K gradients is needed.
    """

    @staticmethod
    def forward(ctx, tables, index):
        ctx.save_for_backward(index)
        ctx.table_shape = tables.shape
        return _gather_rows(tables, index)

    @staticmethod
    def backward(ctx, *grads):
        (index,) = ctx.saved_tensors
        flat = index.reshape(-1)
        grad_tables = grads[0].new_zeros(ctx.table_shape)
        for chunk, grad in zip(grad_tables.unbind(0), grads):
            chunk.index_add_(0, flat, grad.reshape(flat.numel(), -1))
        return grad_tables, None
