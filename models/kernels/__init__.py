"""Fused CPU kernels, built on first use: adaptive LayerNorm for training and evaluation
(adaln.c) and the KV-cached decoding step (decode.c, `models.kernels.decoder`).
`cpu_backend.backend()` hands them to the core (and says which passes they take over).

The C source is compiled once per machine with the system C compiler (~1 s) into
`cache_dir()`, under a name that hashes the source, the compiler and its flags. A build is
written to a temporary file and renamed into place, so concurrent first uses (ranks, workers)
never load a half-written library. Without a compiler, or with
`AOSCALE_KERNELS=0`, `available()` is False and callers use their eager PyTorch path (the same
maths, slower; not the same rounding: see docs/DESIGN.md "Numerics paths"); a missing compiler
or a failed build warns once. `AOSCALE_KERNELS` takes 1 (the default) or 0, nothing else.

The kernels take float32 CPU tensors; `modulated_norm` and `residual_norm` are differentiable.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import warnings
from functools import cache
from pathlib import Path

import torch

from cli.environment import kernels_enabled

SOURCES = tuple(Path(__file__).with_name(name) for name in ("adaln.c", "decode.c"))
FLAGS = ("-O3", "-fno-trapping-math", "-fopenmp", "-shared", "-fPIC")  # no FP traps: branch-free selects vectorize
VECTOR_FLAGS = ("-mavx2", "-mfma")  # when the CPU has both: ~1.4x faster kernels than SSE2 here
_SIGNATURES = {  # C argument types in order (p = pointer, i = int64, f = float, n = int), result type
    "resnorm_forward": ("pppppppppppp" "iifnn", None),
    "resnorm_backward": ("ppppppppppppppppppp" "iiinn", None),
    "decode_step": ("pippppipp", None),
    "decode_scratch_floats": ("iiii", ctypes.c_int64),
}
_CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "f": ctypes.c_float, "n": ctypes.c_int}


def cache_dir() -> Path:
    """`$AOSCALE_KERNEL_CACHE`, else `~/.cache/aoscale/kernels` (per machine, not per data cache)."""
    return Path(os.environ.get("AOSCALE_KERNEL_CACHE") or Path.home() / ".cache" / "aoscale" / "kernels")


def _compiler() -> tuple[str, str]:
    cc = os.environ.get("CC", "cc")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    return cc, version


def _flags() -> tuple[str, ...]:
    """FLAGS, plus AVX2/FMA code generation where this CPU has both (they are part of the
    cache key, so machines sharing a cache folder never load code their CPU lacks)."""
    try:
        cpu = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        cpu = set()
    return FLAGS + VECTOR_FLAGS if {"avx2", "fma"} <= cpu else FLAGS


@cache
def build_key() -> str:
    """The build's key: a hash of the sources, the compiler's version and the flags. Two machines
    with one key run the same machine code (the numerics path, `jobs.run.numerics`, carries it)."""
    _, version = _compiler()
    source = b"".join(path.read_bytes() for path in SOURCES)
    return hashlib.sha256(source + version.encode() + " ".join(_flags()).encode()).hexdigest()[:16]


def build() -> Path:
    """The compiled library's path, compiling it first if this machine has no copy."""
    cc, _ = _compiler()
    flags = _flags()
    target = cache_dir() / f"aoscale-kernels-{build_key()}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            subprocess.run([cc, *flags, "-o", tmp, *map(str, SOURCES), "-lm"], capture_output=True, text=True, check=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


@cache
def _library() -> ctypes.CDLL | None:
    if not kernels_enabled():  # AOSCALE_KERNELS: 1 (default) or 0; anything else is refused
        return None
    try:
        lib = ctypes.CDLL(str(build()))
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or err
        warnings.warn(f"aoscale: fused CPU kernels unavailable ({str(detail).strip()[:200]}); "
                      "using the eager path (same values, slower)", RuntimeWarning, stacklevel=3)
        return None
    for name, (sig, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [_CTYPES[c] for c in sig], restype
    return lib


def available() -> bool:
    """Whether the kernels are built and enabled on this machine."""
    return _library() is not None


def plain_cpu_pass() -> bool:
    """No autocast (its bf16 outputs would reach the float32 kernels) and no torch.compile
    tracing (the kernels are opaque to it): a precondition of every kernel pass."""
    return not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()


def _affine(weight, bias, like):
    """The norm's (weight, bias), with 1 and 0 for what it lacks (the kernels take both)."""
    d = like.shape[-1]
    return (like.new_ones(d) if weight is None else weight, like.new_zeros(d) if bias is None else bias)


def _address(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def modulated_norm(x, index, scale, shift, weight=None, bias=None, eps=1e-5, center=True):
    """h = (norm(x)·weight + bias)·scale[index] + shift[index] for x [..., d], `index` (int64,
    one per row of x, each in [0, P): the caller checks, see `cpu_backend._flat_chunks`) into contiguous
    tables [P, d]; LayerNorm when `center`, else RMSNorm."""
    return _apply(x, None, index, None, scale, shift, weight, bias, eps, center)


def residual_norm(x, y, index, gate, scale, shift, weight=None, bias=None, eps=1e-5, center=True):
    """(x1, h): the gated residual update x1 = x + gate[index]·y and `modulated_norm` of x1."""
    return _apply(x, y, index, gate, scale, shift, weight, bias, eps, center)


def _apply(*args):
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args):
        return _ResidualNorm.apply(*args)
    x1, h = _forward(*args)[:2]
    return h if args[1] is None else (x1, h)


def _forward(x, y, index, gate, scale, shift, weight, bias, eps, center):
    if index.dtype != torch.int64 or not all(t is None or t.is_contiguous() for t in (index, gate, scale, shift)):
        raise ValueError("index: the kernels take a contiguous int64 index and contiguous [P, d] tables")
    x, y = x.contiguous(), None if y is None else y.contiguous()
    d = x.shape[-1]
    n = x.numel() // d  # rows
    x1 = None if y is None else torch.empty_like(x)
    h, stats = torch.empty_like(x), x.new_empty(2, n)  # stats: mean, rstd per row
    w, b = _affine(weight, bias, x)
    _library().resnorm_forward(x.data_ptr(), _address(y), index.data_ptr(), _address(gate), scale.data_ptr(),
                               shift.data_ptr(), w.data_ptr(), b.data_ptr(), _address(x1), h.data_ptr(),
                               stats[0].data_ptr(), stats[1].data_ptr(), n, d, eps, int(center), torch.get_num_threads())
    return x1, h, x if x1 is None else x1, y, stats  # the last three: what the backward reads


class _ResidualNorm(torch.autograd.Function):
    """`residual_norm` (or, with y None, `modulated_norm`) with the fused backward."""

    @staticmethod
    def forward(ctx, x, y, index, gate, scale, shift, weight, bias, eps, center):
        x1, h, normed, y, stats = _forward(x, y, index, gate, scale, shift, weight, bias, eps, center)
        ctx.save_for_backward(normed, y, index, gate, scale, weight, bias, stats)
        ctx.center = center
        ctx.set_materialize_grads(False)
        return h if y is None else (x1, h)

    @staticmethod
    def backward(ctx, *grads):
        normed, y, index, gate, scale, weight, bias, stats = ctx.saved_tensors
        grad_x1, grad_h = (None, grads[0]) if len(grads) == 1 else grads
        grad_h = torch.zeros_like(normed) if grad_h is None else grad_h.contiguous()
        grad_x1 = None if grad_x1 is None else grad_x1.contiguous()
        d, P, threads = normed.shape[-1], scale.shape[0], torch.get_num_threads()
        n = normed.numel() // d
        gx, gy = torch.empty_like(normed), None if y is None else torch.empty_like(normed)
        gscale, gshift = torch.empty_like(scale), torch.empty_like(scale)
        ggate = None if gate is None else torch.empty_like(gate)
        gw, gb = normed.new_empty(d), normed.new_empty(d)
        scratch = normed.new_empty((threads - 1) * (3 * P * d + 2 * d))  # other threads' partial sums
        w, b = _affine(weight, bias, normed)
        _library().resnorm_backward(
            grad_h.data_ptr(), _address(grad_x1), normed.data_ptr(), _address(y), index.data_ptr(),
            _address(gate), scale.data_ptr(), w.data_ptr(), b.data_ptr(), stats[0].data_ptr(),
            stats[1].data_ptr(), gx.data_ptr(), _address(gy), _address(ggate), gscale.data_ptr(),
            gshift.data_ptr(), gw.data_ptr(), gb.data_ptr(), scratch.data_ptr(), n, d, P, int(ctx.center), threads)
        return (gx, gy, None, ggate, gscale, gshift, None if weight is None else gw,
                None if bias is None else gb, None, None)
