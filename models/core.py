"""The one transformer core every family is built on.

`Transformer(cfg)(x, ...)` maps input embeddings [B, T, d] to hidden states [B, T, d]. What
differs between families is passed in: the attention pattern (`is_causal` or an explicit mask),
an optional per-token conditioning vector that drives adaptive LayerNorm (`cond`, [B, T|1, c]),
optional per-block additive inputs (`adds`), and an optional KV cache for generation.

On the CPU in float32, adaLN's residual updates and norms run through fused kernels
(`models.modulation`, `models.kernels`), and inside `decode_layout` each KV-cached decoding step
is one kernel call; both give the eager modules' values (tests compare them).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .kernels.decoder import Decoder, supported
from .modulation import ChunkProjection, Modulation

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
        self._make_room(layer, end, k)
        self.k[layer].narrow(2, self.length, k.shape[2]).copy_(k)  # narrow + copy_: a slice
        self.v[layer].narrow(2, self.length, v.shape[2]).copy_(v)  # assignment costs ~10 µs more
        return self.k[layer].narrow(2, 0, end), self.v[layer].narrow(2, 0, end)

    def reserve(self, batch: int, heads: int, n_new: int, head_dim: int, like: torch.Tensor) -> None:
        """Buffers in every layer with room for `n_new` slots after the committed ones (for a
        decoding kernel that writes them itself)."""
        template = like.new_empty(batch, heads, 0, head_dim)
        for layer in range(len(self.k)):
            self._make_room(layer, self.length + n_new, template)

    def _make_room(self, layer: int, end: int, like: torch.Tensor) -> None:
        """Grow this layer's buffers (shaped like `like` [B, H, *, hd]) to hold `end` slots."""
        if self.k[layer] is None or end > self.k[layer].shape[2]:
            self.k[layer], self.v[layer] = (self._grown(old, like, end) for old in (self.k[layer], self.v[layer]))

    def _grown(self, old: torch.Tensor | None, like: torch.Tensor, end: int) -> torch.Tensor:
        size = max(end, self.FIRST_CAPACITY if old is None else 2 * old.shape[2])
        buffer = like.new_empty(*like.shape[:2], size, like.shape[3])
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
        self.modulation = ChunkProjection(cfg.cond_dim, 6, cfg.d_model) if cfg.cond_dim else None

    def forward(self, x, h, mod: Modulation | None, next_norm: nn.Module, attn_mask=None, is_causal=False,
                cache=None, layer=0, add=None):
        """x: the residual stream [B, T, d]; h: this block's first norm of it (modulated with
        adaLN). Returns the updated stream and `next_norm` of it (the next block's first norm,
        or the final norm): each norm is computed with the residual update that feeds it, which
        the adaLN kernels fuse into one pass. mod: the pass's adaLN modulation (this block
        reads chunks 6·layer + 2 .. 6·layer + 8), or None; add: added before `next_norm`."""
        k = 6 * layer
        x, h = residual_norm(mod, k + 2, x, self.attn(h, attn_mask, is_causal, cache, layer), self.norm2)
        return residual_norm(mod, k + 5, x, self.mlp(h), next_norm, add)


def residual_norm(mod: Modulation | None, k: int, x, y, norm: nn.Module, add=None):
    """(x + y, norm(x + y)), or with `mod` their gated and modulated versions (chunk k is the
    gate, k + 1 and k + 2 the norm's shift and 1 + scale)."""
    if mod is not None:
        return mod.residual_norm(k, x, y, norm)
    x = x + y if add is None else x + y + add
    return x, norm(x)


class Transformer(nn.Module):
    """Block stack and final norm; families add embeddings, conditioning and the head."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.final_modulation = ChunkProjection(cfg.cond_dim, 2, cfg.d_model) if cfg.cond_dim else None
        self._decoder: Decoder | None = None  # within decode_layout: the fused decoding step

    def modulation_tables(self, cond: torch.Tensor) -> list[torch.Tensor]:
        """adaLN projections of raw conditioning rows [..., c]: per block a chunk-major [6, ..., d]
        holding (shift, 1 + scale, gate) x 2, then the final norm's [2, ..., d] (shift, 1 + scale).
        Each chunk is a contiguous [..., d] table that the kernels and gathers read in place.

        Computed once, a table of every target position serves every decoding step."""
        c = F.silu(cond)
        return [b.modulation(c) for b in self.blocks] + [self.final_modulation(c)]

    @contextmanager
    def decode_layout(self):
        """Within the `with` block, run KV-cached decoding steps through the fused decoding
        kernel (`models.kernels.decoder`) where it applies, and hold each CPU block Linear's
        weight [out, in] column-major (same values) for the steps it does not cover; the
        original tensors are restored on exit.

        Decoding multiplies a few rows by every weight. The kernel does a whole step in one
        call, reading weights packed once here; in eager steps MKL streams a row-major [in, out]
        operand (which `F.linear` then passes to addmm untransposed) ~1.4x faster than the
        usual layout (0.63 vs 0.90 ms for the 3M core's 28 weights, batch 8). It changes the
        shared module, so no other thread may train the model meanwhile.
        """
        decoder = Decoder(self) if supported(self) else None  # reads the row-major weights
        linears = [m for m in self.blocks.modules() if isinstance(m, nn.Linear) and m.weight.device.type == "cpu"]
        originals = [m.weight.data for m in linears]  # kept alive: the decoder reads them
        with torch.inference_mode(False), torch.no_grad():
            for m in linears:
                m.weight.data = column_major(m.weight.data)
        try:
            self._decoder = decoder
            yield
        finally:
            self._decoder = None
            for m, weight in zip(linears, originals):
                m.weight.data = weight

    def _use_decoder(self, x, cache, cond, cond_index, tables, adds, attn_mask, is_causal) -> bool:
        """A cached decoding step the fused kernel covers: float32 on the CPU, no autograd, no
        per-block adds, a mask shared by the batch, and adaLN (if any) from one packed table
        (`AOGPT.modulation_tables`)."""
        if self._decoder is None or cache is None or torch.is_grad_enabled() or adds is not None or is_causal:
            return False
        if x.dtype != torch.float32 or x.device.type != "cpu" or (attn_mask is not None and attn_mask.dim() != 2):
            return False
        if tables is None:
            return cond is None
        return cond_index is not None and len(tables) == 1 and tables[0].shape[0] == 6 * len(self.blocks) + 2

    def forward(self, x, *, cond=None, cond_index=None, tables=None, adds=None, attn_mask=None,
                is_causal=False, cache=None):
        """x: [B, T, d]; cond: raw conditioning (SiLU applied here), either per token [B, T|1, c]
        or, with `cond_index` [B, T], a table [P, c] whose row cond_index[b, t] conditions token
        (b, t): the projections then run once per table row instead of once per token. `tables`
        are precomputed `modulation_tables` (then `cond` is not needed).
        adds: per-block tensors broadcastable to x, added before each block."""
        if self._use_decoder(x, cache, cond, cond_index, tables, adds, attn_mask, is_causal):
            return self._decoder(x, cache, None if tables is None else tables[0], cond_index, attn_mask)
        if tables is None and cond is not None:
            if cond_index is not None and cond_index.numel() < cond.shape[0]:
                cond, cond_index = cond[cond_index], None  # few tokens: project per token
            tables = self.modulation_tables(cond)
        mod = None if tables is None else Modulation(tables, cond_index, x)
        if adds is not None:
            x = x + adds[0]
        first = self.blocks[0].norm1
        h = first(x) if mod is None else mod.norm(0, first, x)
        for i, block in enumerate(self.blocks):
            last = i + 1 == len(self.blocks)
            next_norm = self.norm if last else self.blocks[i + 1].norm1
            add = None if adds is None or last else adds[i + 1]
            x, h = block(x, h, mod, next_norm, attn_mask, is_causal, cache, i, add)
        return h


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """A copy of a 2-D weight with the same values, stored column-major (strides (1, rows))."""
    return weight.t().contiguous().t()


def init_weights(module: nn.Module, n_layer: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) for weights, zero biases, residual projections
    scaled by 1/sqrt(2·n_layer) (Radford et al. 2019), as in nanoGPT and AO-GPT."""
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)
