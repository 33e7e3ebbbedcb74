"""The one transformer core every family is built on.

`Transformer(cfg)(x, ...)` maps input embeddings [B, T, d] to hidden states [B, T, d]. What
differs between families is passed in: the attention pattern (`is_causal` or an explicit mask),
an optional per-token conditioning vector that drives adaptive LayerNorm (`cond`, [B, T|1, c]),
optional per-block additive inputs (`adds`), and an optional KV cache for generation.

The modules read like nanoGPT's. Where the kernel backend (the fused CPU kernels:
`models.kernels.cpu_backend.backend()`) declares that it covers a pass, it runs the whole pass (or, inside
`Transformer.decoding()`, the whole KV-cached step) instead, with the same maths; tests compare
both paths.
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .kernels import cpu_backend
from .rope import ROPE_BASE, rope_angles, rope_frequencies  # noqa: F401 (part of the core's API)
from .modulation import ChunkProjection, modulation_rows, mul_add

NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")  # absolute learned table (GPT-2, AO-GPT) | rotary (Su et al. 2021)


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
    pos: str = "learned"  # "rope": queries and keys rotated by their positions in every block


def make_norm(kind: str, dim: int, bias: bool = True) -> nn.Module:
    """LayerNorm (with bias when `bias`) or RMSNorm, eps 1e-5 as in GPT-2 and AO-GPT."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=1e-5, bias=bias)
    return nn.RMSNorm(dim, eps=1e-5)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, hd] rotated pairwise by angles (cos, sin) [B|1, 1, T, hd] (RoPE)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Rotary(NamedTuple):
    """A pass's RoPE angles: queries turned by `q` (cos, sin), keys by `k`, each [B|1, 1, T, hd]
    (a named tuple: torch.compile traces it as plain tensors)."""

    q: tuple[torch.Tensor, torch.Tensor]
    k: tuple[torch.Tensor, torch.Tensor]

    @classmethod
    def at(cls, query_positions: torch.Tensor, key_positions: torch.Tensor, head_dim: int) -> Rotary:
        """Angles for integer positions [T] or [B, T] of the queries and of the keys."""
        def angles(positions):
            cos, sin = rope_angles(positions if positions.dim() == 2 else positions[None], head_dim)
            return cos[:, None], sin[:, None]  # [B|1, 1, T, hd]
        k = angles(key_positions)
        return cls(k if query_positions is key_positions else angles(query_positions), k)


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


class PassInputs(NamedTuple):
    """What every block of one forward pass reads besides the residual stream: the attention
    pattern (`attn_mask`, or `is_causal`), the RoPE angles (`rotary`) and the KV cache (a named
    tuple: torch.compile traces it as its fields)."""

    attn_mask: torch.Tensor | None = None
    is_causal: bool = False
    rotary: Rotary | None = None
    cache: KVCache | None = None


class Attention(nn.Module):
    """Multi-head self-attention through `F.scaled_dot_product_attention`."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.n_head, self.d_model = cfg.n_head, cfg.d_model
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        hd = cfg.d_model // cfg.n_head
        if cfg.pos == "rope" and hd % 2:
            raise ValueError(f"pos: rope needs an even head width, got d_model/n_head = {hd}")
        self.q_norm = make_norm("rmsnorm", hd) if cfg.qk_norm else None
        self.k_norm = make_norm("rmsnorm", hd) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, inputs: PassInputs, layer: int = 0) -> torch.Tensor:
        """x [B, T, d]; `inputs.rotary` (RoPE angles) turns queries and keys before the cache
        stores them (as block `layer`'s)."""
        attn_mask, is_causal, rotary, cache = inputs
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)  # (under autograd, a permute + unbind here
        # would cost two copies of the gradient where split's backward makes one)
        # [B, T, d] -> [B, H, T, hd]
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = rotate(q, *rotary.q), rotate(k, *rotary.k)
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
    """Pre-norm block, as nanoGPT's: x += attn(norm1(x)); x += mlp(norm2(x)). With adaLN rows
    (`mod`, per token: shift, 1 + scale, gate for attention, then for the MLP) each branch is
    x += gate·f(norm(x)·(1 + scale) + shift), as in DiT and AO-GPT."""

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.norm1 = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.attn = Attention(cfg)
        self.norm2 = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.mlp = MLP(cfg)
        self.modulation = ChunkProjection(cfg.cond_dim, 6, cfg.d_model) if cfg.cond_dim else None

    def forward(self, x: torch.Tensor, inputs: PassInputs, mod=None, layer: int = 0) -> torch.Tensor:
        """x: the residual stream [B, T, d]; inputs: the pass's; mod: six [B|1, T|1, d] rows or None;
        layer: this block's index (its KV-cache slot)."""
        if mod is None:
            x = x + self.attn(self.norm1(x), inputs, layer)
            return x + self.mlp(self.norm2(x))
        shift1, scale1, gate1, shift2, scale2, gate2 = mod
        h = mul_add(shift1, self.norm1(x), scale1)
        x = mul_add(x, gate1, self.attn(h, inputs, layer))
        return mul_add(x, gate2, self.mlp(mul_add(shift2, self.norm2(x), scale2)))


class Transformer(nn.Module):
    """Block stack and final norm; families add embeddings, conditioning and the head.

    A forward pass runs the modules below (through torch.compile after `compile_stack()`)
    unless the kernel backend (`models.kernels.cpu_backend.backend()`, chosen in that one place)
    declares that it covers the pass: then it runs the whole pass, or inside `decoding()` the whole
    KV-cached step, with the same maths. A compiled core leaves uncached passes to the compiler."""

    PassInputs = PassInputs  # for the kernel backend, which builds a pass's inputs without importing models.core

    def __init__(self, cfg: CoreConfig):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.bias)
        self.final_modulation = ChunkProjection(cfg.cond_dim, 2, cfg.d_model) if cfg.cond_dim else None
        self._decoder = None  # within `decoding()`: the backend's decoding step, if it has one
        self._compiled = None  # `compile_stack()`: the block stack through torch.compile

    @property
    def compiled(self) -> bool:
        """Whether uncached passes go through torch.compile: `compile_stack()` was called, the
        compiler could build here, and no compiled call has failed (after one, the eager stack runs
        and this is False: records name the path that ran)."""
        return self._compiled is not None and self._compiled.active

    def modulation_tables(self, cond: torch.Tensor) -> list[torch.Tensor]:
        """adaLN projections of raw conditioning rows [..., c]: per block a chunk-major [6, ..., d]
        holding (shift, 1 + scale, gate) x 2, then the final norm's [2, ..., d] (shift, 1 + scale).

        Computed once, a table of every target position serves every decoding step."""
        c = F.silu(cond)
        return [b.modulation(c) for b in self.blocks] + [self.final_modulation(c)]

    @contextmanager
    def decoding(self):
        """Within the `with` block, KV-cached decoding steps that the kernel backend covers run
        as one backend call each (weights are packed for it here, once)."""
        backend = cpu_backend.backend()
        self._decoder = None if backend is None else backend.decoder(self)
        try:
            yield
        finally:
            self._decoder = None

    def compile_stack(self, compiler: Callable = torch.compile, device: torch.device | None = None) -> None:
        """Run the block stack of uncached passes (training, evaluation) through `compiler`
        (torch.compile); KV-cached decoding stays eager (its shapes change every step). Where the
        default compiler cannot build kernels for `device` (the weights' by default: see
        `compile_problem`), a warning says so and the stack stays eager from the start; should a
        compiled call fail later, the same, from then on. `compiled` says which ran."""
        if compiler is torch.compile:
            where = device if device is not None else next(self.parameters()).device
            problem = compile_problem(torch.device(where))
            if problem is not None:
                warnings.warn(f"aoscale: torch.compile cannot build here ({problem}); running the eager core "
                              "(same maths, slower)", RuntimeWarning, stacklevel=2)
                self._compiled = None
                return
        self._compiled = _CompiledOrEager(self._stack, compiler)

    def stay_eager(self) -> None:
        """Undo `compile_stack()`: uncached passes run the eager stack (`compiled` is False)."""
        self._compiled = None

    def forward(self, x, *, cond=None, cond_index=None, tables=None, adds=None, attn_mask=None,
                is_causal=False, cache=None, positions=None):
        """x: [B, T, d]; cond: raw conditioning (SiLU applied here), either per token [B, T|1, c]
        or, with `cond_index` [B, T], a table [P, c] whose row cond_index[b, t] conditions token
        (b, t): the projections then run once per table row instead of once per token. `tables`
        are precomputed `modulation_tables` (then `cond` is not needed), per block or packed into
        one [6·L + 2, P, d]. adds: per-block tensors broadcastable to x, added before each block.
        positions: with `pos = "rope"`, the (query, key) positions [T] or [B, T] the rows are
        rotated by; default: both the rows' own places after the cache (0, 1, ... without one).
        Returns the final norm's output [B, T, d]."""
        step = dict(tables=tables, index=cond_index, adds=adds, attn_mask=attn_mask, is_causal=is_causal)
        if cache is not None and self._decoder is not None and self._decoder.covers(x, cond=cond, **step):
            return self._decoder(x, cache, None if tables is None else tables[0], cond_index, attn_mask, positions)
        step["rotary"] = self.rotary(x, cache, positions)  # RoPE angles (the decoder makes its own)
        if tables is None and cond is not None:
            if cond_index is not None and cond_index.numel() < cond.shape[0]:
                cond, cond_index = cond[cond_index], None  # few tokens: project per token
            tables = self.modulation_tables(cond)
            step.update(tables=tables, index=cond_index)
        compiled = cache is None and self._compiled is not None and self._compiled.active
        backend = None if cache is not None or compiled else cpu_backend.backend()
        if backend is not None and backend.covers(self, x, **step):
            return backend.forward(self, x, **step)
        rows = None if tables is None else [r for table in tables for r in modulation_rows(table, cond_index)]
        stack = self._compiled if compiled else self._stack
        return stack(x, rows, adds, attn_mask, is_causal, step["rotary"], cache)

    def rotary(self, x: torch.Tensor, cache: KVCache | None, positions) -> Rotary | None:
        """The pass's RoPE angles (None with learned positions): see `forward`'s `positions`."""
        if self.cfg.pos != "rope":
            return None
        if positions is None:
            start = 0 if cache is None else cache.length
            own = torch.arange(start, start + x.shape[1], device=x.device)
            positions = (own, own)
        return Rotary.at(*positions, self.cfg.d_model // self.cfg.n_head)

    def _stack(self, x, rows, adds, attn_mask, is_causal, rotary=None, cache=None):
        """The eager pass: every block, then the final norm (rows: 6 per block, then 2)."""
        inputs = PassInputs(attn_mask, is_causal, rotary, cache)
        for i, block in enumerate(self.blocks):
            if adds is not None:
                x = x + adds[i]
            x = block(x, inputs, mod=None if rows is None else rows[6 * i:6 * i + 6], layer=i)
        if rows is None:
            return self.norm(x)
        shift, scale = rows[-2:]
        return mul_add(shift, self.norm(x), scale)


def compile_problem(device: torch.device) -> str | None:
    """Why torch.compile's default backend (inductor) cannot build kernels for `device` here, by
    inductor's own checks: a working C++ compiler (`torch._inductor.cpp_builder.get_cpp_compiler`:
    `CXX` or the compilers it searches) on the CPU, Triton on a GPU; None when it can (a failure
    those checks miss still falls back at the first compiled call: `_CompiledOrEager`)."""
    try:
        if device.type == "cuda":
            from torch.utils._triton import has_triton  # noqa: PLC0415 - only when compiling for a GPU

            return None if has_triton() else "Triton is not installed"
        from torch._inductor import cpp_builder  # noqa: PLC0415 - seconds to import; only when compiling

        cpp_builder.get_cpp_compiler()
    except Exception as error:  # noqa: BLE001 - inductor's check raises its own types
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        return f"{type(error).__name__}: {first}"[:200]
    return None


class _CompiledOrEager:
    """`fn` through `compiler`, falling back to `fn` itself for good after a compiled call raises
    (a missing C compiler, an unsupported operator): the eager call then runs the same inputs,
    so a genuine error in them is still raised."""

    def __init__(self, fn: Callable, compiler: Callable):
        self.fn, self.compiled = fn, compiler(fn)

    def __call__(self, *args):
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except Exception as error:  # noqa: BLE001 - any compiler failure; the eager call re-raises real ones
                self.compiled = None
                warnings.warn(f"aoscale: torch.compile failed ({type(error).__name__}: {str(error).strip()[:200]}); "
                              "running the eager core (same maths, slower)", RuntimeWarning, stacklevel=2)
        return self.fn(*args)

    @property
    def active(self) -> bool:
        """Whether calls still go through the compiler."""
        return self.compiled is not None


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """A copy of a 2-D weight with the same values, stored column-major (strides (1, rows))."""
    return weight.t().contiguous().t()


# Weight initialisations (the `init` network option): gpt2 draws N(0, 0.02) untruncated and starts
# the start token at zero; official (scxue/AO-GPT-MDM `_init_weights`) draws every weight and
# embedding, the start token (`wnonee`) included, from N(0, std) truncated at ±3 std.
INITS = ("gpt2", "official")


def _normal(p: torch.Tensor, std: float, init: str) -> None:
    if init == "official":
        nn.init.trunc_normal_(p, 0.0, std, -3 * std, 3 * std)
    else:
        nn.init.normal_(p, 0.0, std)


def init_weights(module: nn.Module, n_layer: int, init: str = "gpt2") -> None:
    """GPT-2 initialisation: N(0, 0.02) for weights, zero biases, residual projections
    scaled by 1/sqrt(2·n_layer) (Radford et al. 2019), as in nanoGPT and AO-GPT; `init`
    "official" truncates each normal at ±3σ as the AO-GPT code does."""
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
            _normal(p, std, init)


def init_start(start: torch.Tensor, init: str) -> None:
    """The start token's embedding: zero under gpt2, N(0, 0.02) truncated at ±3σ under official
    (the AO-GPT code's `wnonee` is an embedding table initialised like the others)."""
    with torch.no_grad():
        start.zero_() if init == "gpt2" else _normal(start, 0.02, init)
