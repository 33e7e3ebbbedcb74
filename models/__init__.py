"""models: the networks and the mathematics of aoscale (pure torch, no other package of ours).

`build_model(family, size, vocab_size=..., seq_len=..., **options)` is the public entry point.
"""
from __future__ import annotations

from typing import Any

from .ema import EMA
from .families import FAMILIES, FamilyModel
from .families.base import resolve_options
from .ladder import LADDER, Shape, get_shape, parse_sizes
from .orders import parse_order, sample_orders

__all__ = ["EMA", "FAMILIES", "FamilyModel", "LADDER", "Shape", "build_model", "get_shape",
           "parse_order", "parse_sizes", "sample_orders"]


def build_model(family: str, size: str | Shape, *, vocab_size: int, seq_len: int, **options: Any) -> FamilyModel:
    """Build a family at a ladder size (or custom shape); unknown names are ValueErrors."""
    if family not in FAMILIES:
        raise ValueError(f"family: unknown family {family!r}; valid: {', '.join(FAMILIES)}")
    shape = size if isinstance(size, Shape) else get_shape(size)
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size: must be an integer >= 2, got {vocab_size!r}")
    if not isinstance(seq_len, int) or seq_len < 2:
        raise ValueError(f"seq_len: must be an integer >= 2, got {seq_len!r}")
    cls = FAMILIES[family]
    resolved = resolve_options(family, cls.OPTIONS, options)
    model = cls(shape, vocab_size, seq_len, resolved)
    model.size = size if isinstance(size, str) else shape.label
    return model
