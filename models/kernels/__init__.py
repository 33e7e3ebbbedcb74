"""Fused CPU kernels for adaptive LayerNorm (see adaln.c), built on first use.

The C source is compiled once per machine with the system C compiler (~1 s) into a cache
folder (`AOSCALE_KERNEL_CACHE`, else `$XDG_CACHE_HOME/aoscale/kernels`) under a name that hashes
the source, the compiler and its flags; a build is written to a temporary file and renamed into
place, so concurrent first uses never see a half-written library. Without a compiler, or with
`AOSCALE_KERNELS=0`, `available()` is False and callers use their eager PyTorch path (same
values, slower), after one warning.

The kernels take float32 CPU tensors; `modulated_norm` and `gated_residual` are differentiable.
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

SOURCE = Path(__file__).with_name("adaln.c")
FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC")
VECTOR_FLAGS = ("-mavx2", "-mfma")  # when the CPU has both: ~1.4x faster kernels than SSE2 here
_SIGNATURES = {  # C argument types, in order: p = pointer, i = int64, f = float, n = int
    "modnorm_forward": "ppppppppp" "iifnn",
    "modnorm_backward": "pppppppppppppp" "iiinn",
    "gated_forward": "ppppp" "iin",
    "gated_backward": "ppppppp" "iiin",
}
_CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "f": ctypes.c_float, "n": ctypes.c_int}


def cache_dir() -> Path:
    if os.environ.get("AOSCALE_KERNEL_CACHE"):
        return Path(os.environ["AOSCALE_KERNEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aoscale" / "kernels"


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


def build() -> Path:
    """The compiled library's path, compiling it first if this machine has no copy."""
    cc, version = _compiler()
    flags = _flags()
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode() + " ".join(flags).encode()).hexdigest()[:16]
    target = cache_dir() / f"adaln-{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            subprocess.run([cc, *flags, "-o", tmp, str(SOURCE), "-lm"], capture_output=True, text=True, check=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


@cache
def _library() -> ctypes.CDLL | None:
    if os.environ.get("AOSCALE_KERNELS", "1") == "0":
        return None
    try:
        lib = ctypes.CDLL(str(build()))
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", "") or err
        warnings.warn(f"aoscale: fused adaLN kernels unavailable ({str(detail).strip()[:200]}); "
                      "using the eager path (same values, slower)", RuntimeWarning, stacklevel=3)
        return None
    for name, sig in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [_CTYPES[c] for c in sig], None
    return lib


def available() -> bool:
    """Whether the kernels are built and enabled on this machine."""
    return _library() is not None


def usable(*tensors: torch.Tensor) -> bool:
    """The kernels apply: built, and every tensor is float32 on the CPU."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and available()


def _threads() -> int:
    return torch.get_num_threads()


# ---- modulated norm ------------------------------------------------------------------------
def modulated_norm(x, index, scale, shift, weight=None, bias=None, eps=1e-5, center=True):
    """(norm(x)·weight + bias)·scale[index] + shift[index] for x [..., d] with index (flat,
    one per row of x) into tables [P, d]; LayerNorm when `center`, else RMSNorm."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, scale, shift, weight, bias)):
        return _ModulatedNorm.apply(x, index, scale, shift, weight, bias, eps, center)
    return _modnorm_forward(x, index, scale, shift, weight, bias, eps, center)[0]


def _affine(weight, bias, like):
    """The norm's (weight, bias), with 1 and 0 for what it lacks (the kernels take both)."""
    d = like.shape[-1]
    return (like.new_ones(d) if weight is None else weight.detach(),
            like.new_zeros(d) if bias is None else bias.detach())


def _modnorm_forward(x, index, scale, shift, weight, bias, eps, center):
    rows = x.contiguous().view(-1, x.shape[-1])  # [n, d]
    n, d = rows.shape
    out, mean, rstd = torch.empty_like(rows), rows.new_empty(n), rows.new_empty(n)
    w, b = _affine(weight, bias, rows)
    _library().modnorm_forward(rows.data_ptr(), index.data_ptr(), scale.data_ptr(), shift.data_ptr(),
                               w.data_ptr(), b.data_ptr(), out.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                               n, d, eps, int(center), _threads())
    return out.view(x.shape), rows, mean, rstd


class _ModulatedNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index, scale, shift, weight, bias, eps, center):
        out, rows, mean, rstd = _modnorm_forward(x, index, scale, shift, weight, bias, eps, center)
        ctx.save_for_backward(rows, index, scale, weight, bias, mean, rstd)
        ctx.center = center
        return out

    @staticmethod
    def backward(ctx, grad):
        rows, index, scale, weight, bias, mean, rstd = ctx.saved_tensors
        g = grad.contiguous()
        n, d = rows.shape
        threads = _threads()
        P, threads = scale.shape[0], _threads()
        gx, gscale, gshift = torch.empty_like(rows), torch.empty_like(scale), torch.empty_like(scale)
        gw, gb = rows.new_empty(d), rows.new_empty(d)
        scratch = rows.new_empty((threads - 1) * (2 * P * d + 2 * d))  # other threads' partial sums
        w, b = _affine(weight, bias, rows)
        _library().modnorm_backward(g.data_ptr(), rows.data_ptr(), index.data_ptr(), scale.data_ptr(),
                                    w.data_ptr(), b.data_ptr(), mean.data_ptr(), rstd.data_ptr(), gx.data_ptr(),
                                    gscale.data_ptr(), gshift.data_ptr(), gw.data_ptr(), gb.data_ptr(),
                                    scratch.data_ptr(), n, d, P, int(ctx.center), threads)
        return (gx.view(grad.shape), None, gscale, gshift, None if weight is None else gw,
                None if bias is None else gb, None, None)


# ---- gated residual ------------------------------------------------------------------------
def gated_residual(x, y, index, gate):
    """x + gate[index]·y for x, y [..., d] and a gate table [P, d] (index: one per row)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, y, gate)):
        return _GatedResidual.apply(x, y, index, gate)
    return _gated_forward(x, y, index, gate)


def _gated_forward(x, y, index, gate):
    xs, ys = x.contiguous(), y.contiguous()
    out = torch.empty_like(xs)
    d = xs.shape[-1]
    _library().gated_forward(xs.data_ptr(), ys.data_ptr(), index.data_ptr(), gate.data_ptr(), out.data_ptr(),
                             xs.numel() // d, d, _threads())
    return out


class _GatedResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, index, gate):
        ctx.save_for_backward(y.contiguous(), index, gate)
        return _gated_forward(x, y, index, gate)

    @staticmethod
    def backward(ctx, grad):
        y, index, gate = ctx.saved_tensors
        g = grad.contiguous()
        threads = _threads()
        gy, ggate = torch.empty_like(y), torch.empty_like(gate)
        scratch = gate.new_empty(threads - 1, *gate.shape)  # other threads' partial sums
        d = y.shape[-1]
        _library().gated_backward(g.data_ptr(), y.data_ptr(), index.data_ptr(), gate.data_ptr(), gy.data_ptr(),
                                  ggate.data_ptr(), scratch.data_ptr(), y.numel() // d, d, gate.shape[0], threads)
        return grad, gy, None, ggate
