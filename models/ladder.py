"""Size rules: named model shapes, their analytic parameter counts and FLOPs.

A size names a *shape* (layers, width, heads). Run rules (tokens, batch, learning rate) live in
`scaling/`. Every family built at a shape reports its own parameter groups; the analytic counts
here are for the shape's GPT-2-style core, the convention used for fits.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """A transformer shape: depth, width, attention heads."""

    n_layer: int
    d_model: int
    n_head: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def label(self) -> str:
        """The custom-shape spelling `layers/width/heads`."""
        return f"{self.n_layer}/{self.d_model}/{self.n_head}"


# GPT-3 Table 2.1 (Brown et al. 2020). The table's 1.3B head count (24) and 13B width (5140)
# are inconsistent with d_head = 128; like gpt-neox we use 16 heads and 5120.
GPT3_RUNGS = {
    "125M": Shape(12, 768, 12),
    "350M": Shape(24, 1024, 16),
    "760M": Shape(24, 1536, 16),
    "1.3B": Shape(24, 2048, 16),
    "2.7B": Shape(32, 2560, 32),
    "6.7B": Shape(32, 4096, 32),
    "13B": Shape(40, 5120, 40),
}

# CPU rungs, named like the GPT-3 rungs by their approximate non-embedding count 12·L·d².
CPU_RUNGS = {
    "0.1M": Shape(2, 64, 2),  # 12·2·64² = 98 k
    "0.3M": Shape(3, 96, 3),  # 12·3·96² = 332 k
    "1M": Shape(5, 128, 4),  # 12·5·128² = 983 k
    "3M": Shape(7, 192, 6),  # 12·7·192² = 3.10 M
    "10M": Shape(8, 320, 5),  # 12·8·320² = 9.83 M
}

LADDER: dict[str, Shape] = {**CPU_RUNGS, **GPT3_RUNGS}

_CUSTOM = re.compile(r"^(\d+)/(\d+)/(\d+)$")


def get_shape(size: str) -> Shape:
    """The shape of a ladder name (`125M`) or a custom `layers/width/heads` (`6/384/6`)."""
    if size in LADDER:
        return LADDER[size]
    match = _CUSTOM.match(str(size).strip())
    if not match:
        raise ValueError(
            f"size: unknown size {size!r}; valid: {', '.join(LADDER)} or a custom 'layers/width/heads'"
        )
    shape = Shape(*(int(g) for g in match.groups()))
    if min(shape.n_layer, shape.d_model, shape.n_head) <= 0 or shape.d_model % shape.n_head:
        raise ValueError(f"size: custom shape {size!r} needs positive values and width divisible by heads")
    return shape


def parse_sizes(text: str) -> list[str]:
    """Parse a comma-separated list such as `125M,350M,760M`; every entry is validated."""
    sizes = [s.strip() for s in str(text).split(",") if s.strip()]
    if not sizes:
        raise ValueError("sizes: empty list; give e.g. '125M,350M,760M'")
    for size in sizes:
        get_shape(size)
    return sizes


def core_params(shape: Shape) -> int:
    """Non-embedding parameters of a GPT-2 block stack with LayerNorm and biases.

    Per layer: attention 4d² + 4d, MLP 8d² + 5d, two LayerNorms 4d  -> 12d² + 13d;
    plus the final LayerNorm 2d. Kaplan et al. (2020) approximate this as 12·L·d².
    """
    d = shape.d_model
    return shape.n_layer * (12 * d * d + 13 * d) + 2 * d


def train_flops_per_token(shape: Shape, seq_len: int, vocab_size: int) -> int:
    """Training FLOPs per token of the core plus output head (forward + backward = 3 x forward).

    Forward per token (Kaplan et al. 2020, Table 1): 2·N_matmul for the weight matmuls
    (N_matmul = 12·L·d²), 2·L·n_ctx·d for attention scores and mixing, 2·d·V for the head.
    """
    d, n_layer = shape.d_model, shape.n_layer
    forward = 2 * 12 * n_layer * d * d + 2 * n_layer * seq_len * d + 2 * d * vocab_size
    return 3 * forward


# Continuous shapes (isoFLOP grids need sizes between the named rungs), written for CPU scale:
# heads of width 16, widths in steps of 16, and depth growing as the cube root of the core count
# with an aspect ratio d ≈ 32·L (the CPU rungs run 24-32: 2/48/2, 3/96/3). Solving 12·L·d² = N
# with d = 32·L gives L = (N / 12,288)^(1/3). From width 256 on, heads are 64 wide (GPT-3's
# 125M-2.7B rungs use 64-80) and widths step by 64.
CUSTOM_HEAD_DIM = 16
WIDE_HEAD_DIM, WIDE_FROM = 64, 256
CUSTOM_ASPECT = 32  # d_model per layer


def shape_for_params(n_params: float) -> Shape:
    """The custom shape whose core count (12·L·d²) is nearest `n_params` under the rule above."""
    if not n_params > 0:
        raise ValueError(f"n_params: must be positive, got {n_params!r}")
    n_layer = max(1, round((n_params / (12 * CUSTOM_ASPECT**2)) ** (1 / 3)))
    width = (n_params / (12 * n_layer)) ** 0.5
    head = WIDE_HEAD_DIM if width >= WIDE_FROM else CUSTOM_HEAD_DIM
    d_model = max(head, head * round(width / head))
    return Shape(n_layer, d_model, d_model // head)
