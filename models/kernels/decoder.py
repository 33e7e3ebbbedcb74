"""`Decoder`: the core's KV-cached decoding step as one call into decode.c.

`Transformer.decoding()` builds one through the backend (`CPUKernels.decoder`) for CPU float32
cores; within that block, each cached pass that `Decoder.covers` runs here instead of through
the modules (same maths; the tests compare its logits with full recomputation).
"""
from __future__ import annotations

import ctypes
from functools import cache

import torch
from torch import nn

from ..rope import rope_frequencies
from . import _address, _library, plain_cpu_pass


class _Block(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in (
        "norm1_w", "norm1_b", "qkv_w", "qkv_b", "attn_w", "attn_b", "q_norm", "k_norm",
        "norm2_w", "norm2_b", "fc_w", "fc_b", "mlp_w", "mlp_b", "k_cache", "v_cache")]


class _Step(ctypes.Structure):
    _fields_ = [("B", ctypes.c_int64), ("m", ctypes.c_int64), ("d", ctypes.c_int64), ("H", ctypes.c_int64),
                ("c", ctypes.c_int64), ("capacity", ctypes.c_int64), ("P", ctypes.c_int64),
                ("eps", ctypes.c_float), ("center", ctypes.c_int), ("tables", ctypes.c_void_p),
                ("targets", ctypes.c_void_p), ("mask", ctypes.c_void_p), ("threads", ctypes.c_int),
                ("rope_freqs", ctypes.c_void_p), ("q_pos", ctypes.c_void_p), ("k_pos", ctypes.c_void_p)]


@cache
def block_sizes() -> tuple[int, int]:
    """decode.c's (ROWS, LANES): inputs are zero-padded to a multiple of ROWS rows, weights
    packed in panels of LANES outputs."""
    lib = _library()
    return ctypes.c_int64.in_dll(lib, "DECODE_ROWS").value, ctypes.c_int64.in_dll(lib, "DECODE_LANES").value


def pack_panels(weight: torch.Tensor) -> torch.Tensor:
    """A Linear weight [out, in] as panels [ceil(out / LANES), in, LANES] (zero-padded): panel p
    holds outputs p·LANES .. p·LANES + LANES - 1, feature by feature."""
    lanes = block_sizes()[1]
    out, n_in = weight.shape
    padded = weight.new_zeros(-(-out // lanes) * lanes, n_in)
    padded[:out] = weight
    return padded.view(-1, lanes, n_in).transpose(1, 2).contiguous()


class Decoder:
    """Decoding steps of one core (weights fixed while it lives: build it inside the layout)."""

    def __init__(self, core):
        cfg = core.cfg
        self.n_layer, self.H = cfg.n_layer, cfg.n_head
        self.panels: list[torch.Tensor] = []  # packed weights, alive as long as the decoder
        self.blocks = (_Block * cfg.n_layer)(*(self._block(b) for b in core.blocks))
        self.final = (_address(core.norm.weight), _address(getattr(core.norm, "bias", None)))
        eps = core.norm.eps
        self.eps = eps if eps is not None else torch.finfo(torch.float32).eps
        self.center = isinstance(core.norm, nn.LayerNorm)
        self.freqs = rope_frequencies(cfg.d_model // cfg.n_head) if cfg.pos == "rope" else None

    def covers(self, x, cond, tables, index, adds, attn_mask, is_causal) -> bool:
        """A step decode.c computes: float32 CPU rows outside autograd, autocast and compile, no
        per-block adds, an explicit mask [new rows, keys] shared by the batch (or none), and adaLN
        (if any) from one packed table [6·L + 2, P, d] of float32 rows with an index. Either
        position encoding: with RoPE the kernel turns queries and keys itself."""
        if torch.is_grad_enabled() or adds is not None or is_causal or not plain_cpu_pass():
            return False
        if x.dtype != torch.float32 or x.device.type != "cpu" or (attn_mask is not None and attn_mask.dim() != 2):
            return False
        if tables is None:
            return cond is None
        return (index is not None and len(tables) == 1 and tables[0].shape[0] == 6 * self.n_layer + 2
                and tables[0].dtype == torch.float32 and tables[0].device.type == "cpu")

    def _weight(self, linear: nn.Linear) -> int:
        with torch.no_grad():
            self.panels.append(pack_panels(linear.weight))
        return self.panels[-1].data_ptr()

    def _block(self, block) -> _Block:
        attn, mlp = block.attn, block.mlp
        _weight = self._weight
        return _Block(
            _address(block.norm1.weight), _address(getattr(block.norm1, "bias", None)),
            _weight(attn.qkv), _address(attn.qkv.bias), _weight(attn.proj), _address(attn.proj.bias),
            _address(None if attn.q_norm is None else attn.q_norm.weight),
            _address(None if attn.k_norm is None else attn.k_norm.weight),
            _address(block.norm2.weight), _address(getattr(block.norm2, "bias", None)),
            _weight(mlp.fc), _address(mlp.fc.bias), _weight(mlp.proj), _address(mlp.proj.bias), None, None)

    def __call__(self, x: torch.Tensor, cache, tables: torch.Tensor | None, targets: torch.Tensor | None,
                 attn_mask: torch.Tensor | None, positions=None) -> torch.Tensor:
        """Final-norm output [B, m, d] of new rows x [B, m, d] after the `cache.length` cached
        slots; their keys and values are written into the cache (the caller commits them).
        tables: packed adaLN tables [6L + 2, P, d] with each row's position `targets` [B, m].
        positions: with RoPE, the (query, key) positions [m] or [B, m] the rows turn by (the
        core's `positions`); None: both their own places after the cache."""
        B, m, d = x.shape
        rows = block_sizes()[0]
        R, R_pad = B * m, -(-B * m // rows) * rows
        hd = d // self.H
        cache.reserve(B, self.H, m, hd, x)
        for block, k, v in zip(self.blocks, cache.k, cache.v):
            block.k_cache, block.v_cache = k.data_ptr(), v.data_ptr()
        stream = x.new_zeros(R_pad, d)
        stream[:R] = x.reshape(R, d)
        out = x.new_empty(B, m, d)
        n_keys = cache.length + m
        threads = torch.get_num_threads()
        scratch = x.new_empty(_library().decode_scratch_floats(R_pad, d, threads, n_keys))
        if targets is not None:
            targets = targets.reshape(-1).contiguous()
            if targets.min() < 0 or targets.max() >= tables.shape[1]:  # the kernel reads table rows unchecked
                raise ValueError(f"cond_index: target positions must lie in [0, {tables.shape[1]})")
        mask = None if attn_mask is None else attn_mask.to(torch.bool).contiguous()
        if mask is not None and mask.shape != (m, n_keys):  # the kernel reads it unchecked
            raise ValueError(f"attn_mask: expected [{m}, {n_keys}] (new rows x cached + new), got {tuple(mask.shape)}")
        tables = None if tables is None else tables.contiguous()
        q_pos, k_pos = self._positions(positions, B, m)
        step = _Step(B, m, d, self.H, cache.length, cache.k[0].shape[2],
                     0 if tables is None else tables.shape[1], self.eps, int(self.center), _address(tables),
                     _address(targets), _address(mask), threads, _address(self.freqs), _address(q_pos),
                     _address(k_pos))
        _library().decode_step(ctypes.addressof(self.blocks), self.n_layer, *self.final, ctypes.addressof(step),
                               stream.data_ptr(), R_pad, out.data_ptr(), scratch.data_ptr())
        return out

    def _positions(self, positions, batch: int, m: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(query, key) positions as int64 [batch·m] each for decode.c (None: the rows' own places)."""
        if self.freqs is None or positions is None:
            return None, None
        flat = [p.expand(batch, m).reshape(-1).to(torch.int64).contiguous() for p in positions]
        return flat[0], flat[1]
