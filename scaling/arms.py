"""Arms: one family with one variant (its non-size, non-seed model options plus EMA).

A study crosses arms with sizes and seeds. Each arm carries a human label (the `RunSpec.variant`,
e.g. `adaln+ema0.9999+mix:0.1`) and, for ablations, its factor levels (`pe`, `ema`, `l2r_mix`,
`order`) so analysis can compute main effects without parsing labels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import models

# Option keys shown first in labels, in this order; other options follow as key=value.
LABEL_KEYS = ("target_pe", "loss", "ema", "order")
PAPER_EMA = 0.9999  # AO-GPT's EMA rate (scxue/AO-GPT-MDM configs; REFERENCES.md)
PAPER_L2R_MIX = "mix:0.1"  # AO-GPT's "CL_0.1": 10 % of sequences left-to-right


@dataclass(frozen=True)
class Arm:
    """A family with fixed model options and EMA rate; `factors` are its ablation levels."""

    family: str
    options: tuple[tuple[str, Any], ...] = ()
    ema: float = 0.0
    factors: tuple[tuple[str, Any], ...] = ()
    label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _pairs(self.options))
        object.__setattr__(self, "factors", _pairs(self.factors))
        if not self.label:
            object.__setattr__(self, "label", make_label(dict(self.options), self.ema, dict(self.factors)))

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (the TOML `[[arms]]` table has the same keys)."""
        return {"family": self.family, "options": dict(self.options), "ema": self.ema,
                "factors": dict(self.factors), "label": self.label}


def _pairs(value: Any) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, dict) else value
    return tuple(sorted((str(k), v) for k, v in items))


def make_label(options: dict[str, Any], ema: float, factors: dict[str, Any]) -> str:
    """`adaln+ema0.9999+mix:0.1`: label keys first, `ema0` only where EMA is an ablated factor."""
    shown = dict(options)
    if ema or "ema" in factors:
        shown["ema"] = f"ema{ema:g}"
    parts = [str(shown.pop(key)) for key in LABEL_KEYS if key in shown]
    parts += [f"{key}={shown[key]}" for key in sorted(shown)]
    return "+".join(parts) or "base"


# The default variant of each family (`--families ar,aogpt` without a preset).
DEFAULT_ARMS: dict[str, Arm] = {
    "ar": Arm("ar"),
    "aogpt": Arm("aogpt", {"target_pe": "adaln", "order": PAPER_L2R_MIX}, ema=PAPER_EMA),
    "sigma_gpt": Arm("sigma_gpt", {"target_pe": "input", "order": "uniform"}),
    "mdm": Arm("mdm", {"loss": "mdlm"}),
}

# Official AO-GPT network details (REFERENCES.md): RMSNorm, per-head QK RMSNorm, untied head.
OFFICIAL_AOGPT_OPTIONS = {"norm": "rmsnorm", "qk_norm": True, "tie_head": False}


def default_arm(family: str) -> Arm:
    """The family's default variant; unknown family -> ValueError naming the valid ones."""
    check_family(family)
    return DEFAULT_ARMS.get(family, Arm(family))


def check_family(family: str) -> None:
    """Unknown family -> ValueError naming the valid ones."""
    if family not in models.FAMILIES:
        raise ValueError(f"families: unknown family {family!r}; valid: {', '.join(models.FAMILIES)}")


def check_arm(arm: Arm) -> None:
    """Validate the family and its options against the model's option schema (no model built)."""
    check_family(arm.family)
    schema = models.FAMILIES[arm.family].OPTIONS
    try:
        models.families.base.resolve_options(arm.family, schema, dict(arm.options))
    except ValueError as error:
        raise ValueError(f"options: {error}") from None
    if not 0 <= arm.ema < 1:
        raise ValueError(f"ema: rate {arm.ema} must be in [0, 1) (0 = off; e.g. 0.9999)")


def arm_from_dict(data: dict[str, Any]) -> Arm:
    """An arm from a TOML `[[arms]]` table; unknown keys are errors."""
    known = {"family", "options", "ema", "factors", "label"}
    unknown = sorted(set(data) - known)
    if unknown or "family" not in data:
        raise ValueError(f"arms: each [[arms]] table needs 'family' and may have {sorted(known - {'family'})}; "
                         f"got {sorted(data)}")
    return Arm(data["family"], data.get("options", {}), float(data.get("ema", 0.0)),
               data.get("factors", {}), data.get("label", ""))
