"""The fused CPU kernels as the core's backend: the one place that decides when they run.

`CPUKernels.covers` and `Decoder.covers` declare what they take over, checking every option of
the pass; the core (`models.core.Transformer`) runs everything else through its eager modules.

  a training or evaluation pass   adaLN's gated residual updates and modulated norms (adaln.c),
                                  the block stack's attention and MLP modules in between
  a KV-cached decoding step       every block and the final norm in one call (decode.c)
"""
from __future__ import annotations

import math
from functools import cache

import torch
from torch import nn

from . import available, modulated_norm, plain_cpu_pass, residual_norm
from .decoder import Decoder

FUSED_MIN_ROWS = 256  # below, the kernels' fixed call cost (~14 µs) exceeds what they save:
# a norm of 8 rows x 192 takes 13.5 µs fused and 5.1 µs eager, of 512 rows 60 vs 111 µs
NORM_TYPES = (nn.LayerNorm, nn.RMSNorm)


def _cpu_float32(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _norm_args(norm: nn.Module, x: torch.Tensor) -> tuple:
    """(weight, bias, eps, center) of a LayerNorm or RMSNorm module, as the kernels take them."""
    eps = norm.eps if norm.eps is not None else torch.finfo(x.dtype).eps
    return norm.weight, getattr(norm, "bias", None), eps, isinstance(norm, nn.LayerNorm)


class CPUKernels:
    """Whole forward passes of adaLN cores and whole decoding steps, on the CPU in float32."""

    def covers(self, core, x, tables, index, adds, attn_mask, is_causal, rotary) -> bool:
        """An uncached pass of an adaLN core (`tables` given) over >= FUSED_MIN_ROWS rows, with
        no per-block adds, float32 CPU inputs, tables and parameters, LayerNorm or RMSNorm norms,
        an int64 index (if any), outside autocast and torch.compile. Either position encoding:
        attention runs in the core's own modules (RoPE included)."""
        if tables is None or adds is not None or x.shape[:-1].numel() < FUSED_MIN_ROWS:
            return False
        if index is not None and index.dtype != torch.int64:
            return False
        norms = [core.norm] + [n for b in core.blocks for n in (b.norm1, b.norm2)]
        return (plain_cpu_pass() and _cpu_float32(x, *tables, *core.parameters())
                and all(isinstance(n, NORM_TYPES) for n in norms))

    def forward(self, core, x, tables, index, adds, attn_mask, is_causal, rotary) -> torch.Tensor:
        """The core's pass: each norm is computed with the residual update that feeds it, in one
        kernel call (chunks per block: shift, 1 + scale, gate for attention, then for the MLP;
        then the final norm's shift, 1 + scale)."""
        chunks, index = _flat_chunks(tables, index, x)
        blocks, inputs = core.blocks, core.PassInputs(attn_mask, is_causal, rotary)
        h = modulated_norm(x, index, chunks[1], chunks[0], *_norm_args(blocks[0].norm1, x))
        for i, block in enumerate(blocks):
            k = 6 * i
            next_norm = blocks[i + 1].norm1 if i + 1 < len(blocks) else core.norm
            y = block.attn(h, inputs)
            x, h = residual_norm(x, y, index, chunks[k + 2], chunks[k + 4], chunks[k + 3], *_norm_args(block.norm2, x))
            y = block.mlp(h)
            x, h = residual_norm(x, y, index, chunks[k + 5], chunks[k + 7], chunks[k + 6], *_norm_args(next_norm, x))
        return h

    def decoder(self, core) -> Decoder | None:
        """The decoding step for this core's current weights (learned or rotary positions), or
        None where decode.c does not cover it (weights not float32 on the CPU, norms with
        different eps)."""
        norms = [m for m in core.modules() if isinstance(m, NORM_TYPES)]
        if not _cpu_float32(*core.parameters()) or len({m.eps for m in norms}) != 1:
            return None
        return Decoder(core)


@cache
def backend() -> CPUKernels | None:
    """The core's kernel backend, or None where the kernels are not built or are switched off
    (`AOSCALE_KERNELS=0`): the one place that chooses it."""
    return CPUKernels() if available() else None


def _flat_chunks(tables, index, x) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every chunk as a contiguous [P, d] table, and one int64 row index per row of x.

    Tables [n, P, d] come with `index` [B, T]; without an index they hold per-token or
    per-sequence rows [n, *S, d] (S broadcasts to [B, T]), addressed by their flat position."""
    if index is None:
        S = tables[0].shape[1:-1]
        index = torch.arange(math.prod(S), device=x.device).view(S).expand(x.shape[:-1])
        tables = [table.reshape(table.shape[0], -1, table.shape[-1]) for table in tables]
    chunks = [chunk for table in tables for chunk in table.unbind(0)]
    index = index.reshape(-1).contiguous()
    if index.min() < 0 or index.max() >= chunks[0].shape[0]:  # the kernels read rows unchecked
        raise ValueError(f"cond_index: positions must lie in [0, {chunks[0].shape[0]})")
    return chunks, index
