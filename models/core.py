"""The one transformer core every family is built on.

`Transformer(cfg)(x, ...)` maps input embeddings [B, T, d] to hidden states [B, T, d]. What
differs between families is passed in: the attention pattern (`is_causal` or an explicit mask),
an optional per-token conditioning vector that drives adaptive LayerNorm (`cond`, [B, T|1, c]),
optional per-block additive inputs (`adds`), and an optional KV cache for generation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class CoreConfig:
    """Shape and block options of the core."""

    n_layer: int
    d_model: int
    n_head: int
    norm: str = "layernorm"
    qk_norm: bool = False
    bias: bool = True
    cond_dim: int = 0  # > 0: adaptive LayerNorm driven by a cond vector of this width


def make_norm(kind: str, dim: int, bias: bool = True) -> nn.Module:
    """LayerNorm (with bias when `bias`) or RMSNorm, eps 1e-5 as in GPT-2 and AO-GPT."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=1e-5, bias=bias)
    return nn.RMSNorm(dim, eps=1e-5)


class KVCache:
    """Per-layer keys and values of the slots committed so far, in buffers [B, H, capacity, hd].

    A forward pass with a cache writes its new keys and values after the committed ones and
    attends over both; `commit(n)` keeps the first `n` new positions (parallel decoding queries
    that are not real tokens are dropped this way: the next pass writes over them). Buffers
    grow by doubling, so a generation of n slots copies O(n) values, not O(n²).
    """

    FIRST_CAPACITY = 64  # slots in a new buffer; it doubles when a pass would overflow it

    def __init__(self, n_layer: int):
        self.k: list[torch.Tensor | None] = [None] * n_layer
        self.v: list[torch.Tensor | None] = [None] * n_layer
        self.length = 0  # committed slots

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new k, v [B, H, n, hd] after the committed slots; return committed + new."""
        end = self.length + k.shape[2]
        if self.k[layer] is None or end > self.k[layer].shape[2]:
            self.k[layer], self.v[layer] = (self._grown(old, new, end) for old, new in ((self.k[layer], k),
                                                                                         (self.v[layer], v)))
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def _grown(self, old: torch.Tensor | None, new: torch.Tensor, end: int) -> torch.Tensor:
        size = max(end, self.FIRST_CAPACITY if old is None else 2 * old.shape[2])
        buffer = new.new_empty(*new.shape[:2], size, new.shape[3])
        if self.length:
            buffer[:, :, :self.length] = old[:, :, :self.length]
        return buffer

    def commit(self, n: int) -> None:
        """Keep the first `n` positions written by the last forward pass."""
        self.length += n


class Attention(nn.Module):
    """Multi-head self-attention through `F.scaled_dot_product_attention`."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.n_head, self.d_model = cfg.n_head, cfg.d_model
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        hd = cfg.d_model // cfg.n_head
        self.q_norm = make_norm("rmsnorm", hd) if cfg.qk_norm else nn.Identity()
        self.k_norm = make_norm("rmsnorm", hd) if cfg.qk_norm else nn.Identity()

    def forward(self, x, attn_mask=None, is_causal=False, cache=None, layer=0):
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        # [B, T, d] -> [B, H, T, hd]
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))
        q, k = self.q_norm(q), self.k_norm(k)
        if cache is not None:
            k, v = cache.extend(layer, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return self.proj(y.transpose(1, 2).reshape(B, T, d))  # [B, H, T, hd] -> [B, T, d]


class MLP(nn.Module):
    """GELU MLP with 4x expansion."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=cfg.bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm block; with `cond_dim` the norms are modulated: x += g·f(norm(x)·(1+s) + b)."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.norm1 = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.attn = Attention(cfg)
        self.norm2 = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.mlp = MLP(cfg)
        self.modulation = nn.Linear(cfg.cond_dim, 6 * cfg.d_model) if cfg.cond_dim else None

    def forward(self, x, mod=None, attn_mask=None, is_causal=False, cache=None, layer=0):
        """mod: this block's (shift, 1 + scale, gate) x 2 per token, or None without conditioning."""
        attend = lambda h: self.attn(h, attn_mask, is_causal, cache, layer)  # noqa: E731
        if mod is None:
            x = x + attend(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        shift1, scale1, gate1, shift2, scale2, gate2 = mod
        x = mul_add(x, gate1, attend(mul_add(shift1, self.norm1(x), scale1)))
        return mul_add(x, gate2, self.mlp(mul_add(shift2, self.norm2(x), scale2)))


class Transformer(nn.Module):
    """Block stack and final norm; families add embeddings, conditioning and the head."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.final_modulation = nn.Linear(cfg.cond_dim, 2 * cfg.d_model) if cfg.cond_dim else None

    def modulation_tables(self, cond: torch.Tensor) -> list[torch.Tensor]:
        """adaLN projections of raw conditioning rows [..., c]: per block [6, ..., d] and for the
        final norm [2, ..., d], each (shift, 1 + scale, gate) chunk along the first dimension.

        Computed once, a table of every target position serves every decoding step."""
        c = F.silu(cond)
        return [split_modulation(b.modulation(c), 6) for b in self.blocks] + [
            split_modulation(self.final_modulation(c), 2)]

    def forward(self, x, *, cond=None, cond_index=None, tables=None, adds=None, attn_mask=None,
                is_causal=False, cache=None):
        """x: [B, T, d]; cond: raw conditioning (SiLU applied here), either per token [B, T|1, c]
        or, with `cond_index` [B, T], a table [P, c] whose row cond_index[b, t] conditions token
        (b, t): the projections then run once per table row instead of once per token. `tables`
        are precomputed `modulation_tables` (then `cond` is not needed).
        adds: per-block tensors broadcastable to x, added before each block."""
        if tables is None and cond is not None:
            if cond_index is not None and cond_index.numel() < cond.shape[0]:
                cond, cond_index = cond[cond_index], None  # few tokens: project per token
            tables = self.modulation_tables(cond)
        for i, block in enumerate(self.blocks):
            if adds is not None:
                x = x + adds[i]
            x = block(x, modulation_rows(tables, i, cond_index), attn_mask, is_causal, cache, i)
        if tables is None:
            return self.norm(x)
        shift, scale = modulation_rows(tables, -1, cond_index)
        return mul_add(shift, self.norm(x), scale)


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


def split_modulation(mod: torch.Tensor, n: int) -> torch.Tensor:
    """[..., n·d] -> [n, ..., d] with 1 added to the scale chunks (every second of a triple)."""
    mod = mod.unflatten(-1, (n, -1)).movedim(-2, 0)
    is_scale = torch.tensor([i % 3 == 1 for i in range(n)], dtype=mod.dtype, device=mod.device)
    return mod + is_scale.view(n, *([1] * (mod.dim() - 1)))


def modulation_rows(tables: list[torch.Tensor] | None, layer: int, index: torch.Tensor | None):
    """Layer `layer`'s modulation chunks per token, or None without conditioning.

    With `index` [B, T] the table is per position ([n, P, d]) and row index[b, t] is gathered
    for token (b, t); otherwise the table already holds per-token (or per-sequence) rows.
    """
    if tables is None:
        return None
    if index is None:
        return tables[layer].unbind(0)
    if not torch.is_grad_enabled():  # decoding: no autograd bookkeeping
        return _gather_rows(tables[layer], index)
    return _GatherRows.apply(tables[layer], index)


def _gather_rows(table: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(table[0][index], ..., table[n-1][index]): a row gather per chunk ([P, d] views with
    contiguous rows, which `index_select` reads in place; gathering along dim 1 of the
    [n, P, d] table would copy it whole first)."""
    flat = index.reshape(-1)
    return tuple(t.index_select(0, flat).view(*index.shape, t.shape[-1]) for t in table.unbind(0))


class _GatherRows(torch.autograd.Function):
    """(table[0][index], ..., table[n-1][index]) for a table [n, P, d] and index [B, T].

    Same values and gradients as indexing, but the backward scatters with `index_add_`, which
    on CPU is ~10x faster than the accumulating `index_put_` autograd would use, and no stack
    of the n gradients is needed.
    """

    @staticmethod
    def forward(ctx, table, index):
        ctx.save_for_backward(index)
        ctx.table_shape = table.shape
        return _gather_rows(table, index)

    @staticmethod
    def backward(ctx, *grads):
        (index,) = ctx.saved_tensors
        flat = index.reshape(-1)
        grad_table = grads[0].new_zeros(ctx.table_shape)
        for row, grad in zip(grad_table.unbind(0), grads):
            row.index_add_(0, flat, grad.reshape(flat.numel(), -1))
        return grad_table, None


def init_weights(module: nn.Module, n_layer: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) for weights, zero biases, residual projections
    scaled by 1/sqrt(2·n_layer) (Radford et al. 2019), as in nanoGPT and AO-GPT."""
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)
