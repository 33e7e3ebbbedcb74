"""models: the networks and the mathematics of aoscale (pure torch; of ours it imports only `cli`, for the
environment table the fused CPU kernels read).

`build_model(family, size, vocab_size=..., seq_len=..., **options)` is the public entry point.
The size rules (`models.ladder`) import no torch, and neither does importing this package: the
torch parts (`build_model`'s families, `EMA`, orders) load on first use, so planning a study
(`jobs.run.recipes`, `scaling.plan.dry_run`) stays fast.
"""
from __future__ import annotations

import importlib
from typing import Any

from .ladder import LADDER, Shape, get_shape, parse_sizes

__all__ = ["EMA", "FAMILIES", "FamilyModel", "LADDER", "Shape", "build_model", "get_shape",
           "parse_order", "parse_sizes", "sample_orders"]
_LAZY = {"EMA": ".ema", "FAMILIES": ".families", "FamilyModel": ".families", "parse_order": ".orders",
         "sample_orders": ".orders"}  # name -> the module (importing torch) that defines it


def __getattr__(name: str) -> Any:
    """The torch parts of the public API, imported on first access."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_model(family: str, size: str | Shape, *, vocab_size: int, seq_len: int, **options: Any):
    """Build a family at a ladder size (or custom shape); unknown names are ValueErrors."""
    from .families import FAMILIES  # noqa: PLC0415 - torch: importing models loads none
    from .families.base import resolve_options  # noqa: PLC0415 - torch, as above

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
