"""The one transformer core every family is built on.

`Transformer(cfg)(x, ...)` maps input embeddings [B, T, d] to hidden states [B, T, d]. What
differs between families is passed in: the attention pattern (`is_causal` or an explicit mask),
an optional per-token conditioning vector that drives adaptive LayerNorm (`cond`, [B, T|1, c]),
optional per-block additive inputs (`adds`), and an optional KV cache for generation.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
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
        self.k[layer].narrow(2, self.length, k.shape[2]).copy_(k)  # narrow + copy_: a slice
        self.v[layer].narrow(2, self.length, v.shape[2]).copy_(v)  # assignment costs ~10 µs more
        return self.k[layer].narrow(2, 0, end), self.v[layer].narrow(2, 0, end)

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
        self.q_norm = make_norm("rmsnorm", hd) if cfg.qk_norm else None
        self.k_norm = make_norm("rmsnorm", hd) if cfg.qk_norm else None

    def forward(self, x, attn_mask=None, is_causal=False, cache=None, layer=0):
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # (under autograd, a permute + unbind here
        # would cost two copies of the gradient where split's backward makes one)
        # [B, T, d] -> [B, H, T, hd]
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.q_norm is not None:
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

    def modulation_tables(self, cond: torch.Tensor) -> torch.Tensor:
        """adaLN projections of raw conditioning rows [..., c], packed chunk-major into one
        contiguous [6·L + 2, ..., d]: (shift, 1 + scale, gate) x 2 per block, then the final
        norm's (shift, 1 + scale). Each chunk is a contiguous [..., d] table, so a row gather
        reads it in place, and one `index_select` gathers a decoding step's rows for every layer.

        Computed once, a table of every target position serves every decoding step."""
        c = F.silu(cond)
        mods = [chunk_major(b.modulation(c), 6) for b in self.blocks] + [chunk_major(self.final_modulation(c), 2)]
        tables = torch.cat(mods)  # one pass makes the chunk-major views contiguous
        return tables.add_(is_scale(tables.shape[0], tables))

    @contextmanager
    def decode_layout(self):
        """Within the `with` block, hold each CPU block Linear's weight [out, in] column-major
        (same values); the original tensors are restored on exit.

        Decoding multiplies a few rows by every weight; MKL streams a row-major [in, out]
        operand (which `F.linear` then passes to addmm untransposed) ~1.4x faster than the usual
        layout (0.63 vs 0.90 ms for the 3M core's 28 weights, batch 8). It changes the shared
        module, so no other thread may train the model meanwhile.
        """
        linears = [m for m in self.blocks.modules() if isinstance(m, nn.Linear) and m.weight.device.type == "cpu"]
        originals = [m.weight.data for m in linears]
        with torch.inference_mode(False), torch.no_grad():
            for m in linears:
                m.weight.data = column_major(m.weight.data)
        try:
            yield
        finally:
            for m, weight in zip(linears, originals):
                m.weight.data = weight

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
        rows = modulation_rows(tables, cond_index)
        for i, block in enumerate(self.blocks):
            if adds is not None:
                x = x + adds[i]
            mod = None if rows is None else rows[6 * i:6 * i + 6]
            x = block(x, mod, attn_mask, is_causal, cache, i)
        if rows is None:
            return self.norm(x)
        shift, scale = rows[-2:]
        return mul_add(shift, self.norm(x), scale)


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """A copy of a 2-D weight with the same values, stored column-major (strides (1, rows))."""
    return weight.t().contiguous().t()


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


def chunk_major(mod: torch.Tensor, n: int) -> torch.Tensor:
    """[..., n·d] -> a view [n, ..., d]."""
    return mod.unflatten(-1, (n, -1)).movedim(-2, 0)


def is_scale(n: int, like: torch.Tensor) -> torch.Tensor:
    """1 for the scale chunks (every second of a (shift, scale, gate) triple) of n chunks, else
    0, shaped to broadcast over `like` [n, ..., d]: adding it turns scale into 1 + scale."""
    ones = torch.tensor([i % 3 == 1 for i in range(n)], dtype=like.dtype, device=like.device)
    return ones.view(n, *([1] * (like.dim() - 1)))


def modulation_rows(tables: torch.Tensor | None, index: torch.Tensor | None):
    """Every chunk of packed `tables` [K, ..., d] per token: a tuple of K tensors, or None
    without conditioning.

    With `index` [B, T] the tables are per position ([K, P, d]) and row index[b, t] of each
    chunk is gathered for token (b, t); otherwise they already hold per-token (or
    per-sequence) rows.
    """
    if tables is None:
        return None
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


def init_weights(module: nn.Module, n_layer: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) for weights, zero biases, residual projections
    scaled by 1/sqrt(2·n_layer) (Radford et al. 2019), as in nanoGPT and AO-GPT."""
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)
