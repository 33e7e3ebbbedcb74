"""Arms: one family with one variant (its formulation options), inside a study's network and EMA.

A study crosses arms with sizes and seeds. The network (norm, QK-norm, head tying, position
encoding: the options every family shares) and the EMA rate are study settings applied to every
arm alike (docs/DESIGN.md §7);
an arm overrides them only explicitly (`network=`, network keys in `options`, or `ema=`), and the
override shows in its label. Each arm carries a human label (the `RunSpec.variant`, e.g.
`adaln+mix:0.1`) and, for ablations, its factor levels (`pe`, `ema`, `l2r_mix`, `order`,
`network`) so analysis can compute main effects without parsing labels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import models
from models.families.base import COMMON_OPTIONS

# Option keys shown first in labels, in this order; other options follow as key=value.
LABEL_KEYS = ("target_pe", "loss", "ema", "order")
PAPER_EMA = 0.9999  # AO-GPT's EMA rate (scxue/AO-GPT-MDM configs; docs/DESIGN.md §12)

# The network options every family shares (the core's): a study setting, not a family's.
NETWORK_KEYS = tuple(COMMON_OPTIONS)
_GPT2 = {key: default for key, (default, _) in COMMON_OPTIONS.items()}
# Named networks. gpt2: LayerNorm, tied head, learned positions (Radford et al. 2019; the
# families' defaults). official: the AO-GPT code's RMSNorm (eps 1e-5), per-head QK RMSNorm,
# untied head with bias, learned positions and its initialisation (normals truncated at ±3σ, start
# token N(0, 0.02); scxue/AO-GPT-MDM; docs/DESIGN.md §12). Either takes
# overrides: `gpt2,pos=rope` is GPT-2's network with rotary positions (see `network_options`).
NETWORKS: dict[str, dict[str, Any]] = {
    "gpt2": _GPT2,
    "official": {**_GPT2, "norm": "rmsnorm", "qk_norm": True, "tie_head": False, "init": "official"},
}


@dataclass(frozen=True)
class Arm:
    """A family with its formulation options; `factors` are its ablation levels.

    `ema` None and `network` None take the study's; a value is an explicit, labelled override.
    """

    family: str
    options: tuple[tuple[str, Any], ...] = ()
    ema: float | None = None
    factors: tuple[tuple[str, Any], ...] = ()
    label: str = field(default="", compare=False)
    network: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _pairs(self.options))
        object.__setattr__(self, "factors", _pairs(self.factors))
        if not self.label:
            object.__setattr__(self, "label", make_label(dict(self.options), self.ema, dict(self.factors),
                                                         self.network))

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (the TOML `[[arms]]` table has the same keys; None values left out)."""
        out = {"family": self.family, "options": dict(self.options), "ema": self.ema,
               "factors": dict(self.factors), "label": self.label, "network": self.network}
        return {k: v for k, v in out.items() if v is not None}

    def model_options(self, network: dict[str, Any]) -> dict[str, Any]:
        """The options this arm builds its model with: the study's network, then the arm's own."""
        own = network_options(self.network) if self.network else {}
        return {**network, **own, **dict(self.options)}

    def ema_rate(self, study_ema: float) -> float:
        """The arm's EMA rate: its own override, else the study's."""
        return study_ema if self.ema is None else self.ema


def _pairs(value: Any) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, dict) else value
    return tuple(sorted((str(k), v) for k, v in items))


def make_label(options: dict[str, Any], ema: float | None, factors: dict[str, Any],
               network: str | None = None) -> str:
    """`adaln+mix:0.1`: label keys first; an explicit EMA or network override is shown
    (`ema0.999`, `net:gpt2`), the study's own never is."""
    shown = dict(options)
    if ema is not None:
        shown["ema"] = f"ema{ema:g}"
    parts = [f"net:{network}"] if network else []
    parts += [str(shown.pop(key)) for key in LABEL_KEYS if key in shown]
    parts += [f"{key}={shown[key]}" for key in sorted(shown)]
    return "+".join(parts) or "base"


def network_options(value: Any) -> dict[str, Any]:
    """A `network` setting as options: a name in NETWORKS, a name with overrides
    (`gpt2,pos=rope`; `pos=rope` alone starts from gpt2), or a table of NETWORK_KEYS."""
    if isinstance(value, str):
        parts = value.split(",")
        name, *pairs = ["gpt2", *parts] if "=" in parts[0] else parts
        if name not in NETWORKS:
            raise ValueError(f"network: unknown network {name!r}; valid: {', '.join(NETWORKS)}, optionally "
                             f"followed by ,key=value overrides of {', '.join(NETWORK_KEYS)} (e.g. gpt2,pos=rope)")
        overrides = dict(_override(pair) for pair in pairs)
        return {**NETWORKS[name], **_checked(overrides)}
    if not isinstance(value, dict) or set(value) - set(NETWORK_KEYS):
        raise ValueError(f"network: expected a name ({', '.join(NETWORKS)}) or a table with keys "
                         f"{', '.join(NETWORK_KEYS)}; got {value!r}")
    return {**NETWORKS["gpt2"], **_checked(value)}


def _override(pair: str) -> tuple[str, Any]:
    """`key=value` of a network string; true/false are booleans."""
    key, sep, text = pair.partition("=")
    if not sep or key not in NETWORK_KEYS:
        raise ValueError(f"network: {pair!r} is not an override key=value with a key of {', '.join(NETWORK_KEYS)}")
    return key, {"true": True, "false": False}.get(text.lower(), text)


def _checked(options: dict[str, Any]) -> dict[str, Any]:
    """Network options whose values every family accepts (COMMON_OPTIONS' validators)."""
    for key, value in options.items():
        check, expected = COMMON_OPTIONS[key][1]
        if not check(value):
            raise ValueError(f"network: {key} = {value!r} is invalid; expected {expected}")
    return options


def network_name(options: dict[str, Any]) -> str:
    """The name of the network these resolved options use, with `,key=value` for what differs
    from it (the named network differing least: `gpt2,pos=rope`)."""
    chosen = {key: options.get(key, default) for key, (default, _) in COMMON_OPTIONS.items()}

    def differing(name: str) -> list[str]:
        return [f"{key}={value}" for key, value in chosen.items() if NETWORKS[name][key] != value]

    name = min(NETWORKS, key=lambda n: len(differing(n)))
    return ",".join([name, *differing(name)])


def default_arm(family: str) -> Arm:
    """The family's default variant, as its module declares it (`FamilySpec.default_arm`):
    formulation only; network and EMA come from the study. Unknown family -> ValueError naming
    the valid ones."""
    check_family(family)
    return Arm(family, models.FAMILIES[family].SPEC.default_arm)


def check_family(family: str) -> None:
    """Unknown family -> ValueError naming the valid ones."""
    if family not in models.FAMILIES:
        raise ValueError(f"families: unknown family {family!r}; valid: {', '.join(models.FAMILIES)}")


# Every registered family's default arm (`--families ar,aogpt` without a preset), in the
# registry's order.
DEFAULT_ARMS: dict[str, Arm] = {name: default_arm(name) for name in models.FAMILIES}


def resolve_arm(arm: Arm, network: dict[str, Any]) -> dict[str, Any]:
    """Every model option of the arm's runs, defaults included (what run ids hash); ValueError
    naming the option when one is unknown or invalid (no model built)."""
    check_family(arm.family)
    if arm.network is not None:
        network_options(arm.network)  # ValueError naming the arm's network when it is unknown
    schema = models.FAMILIES[arm.family].OPTIONS
    try:
        return models.families.base.resolve_options(arm.family, schema, arm.model_options(network))
    except ValueError as error:
        raise ValueError(f"options: {error}") from None
