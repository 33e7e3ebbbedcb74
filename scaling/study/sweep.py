"""Study axes beyond sizes x seeds: hyperparameter sweeps and plans along compute.

`expand` turns a study's arms into runs. Without the settings below it is the plain grid
(size-major, then seed, then arm: the order and run ids studies always had). With them:

- `sweep`: run settings swept as ordinary runs, each value its own run id; every run carries a
  `sweep_<name>` tag (a record column). TOML `[sweep] lr = [1e-3, 3e-3]`, per family
  `[sweep.mdm] lr = [...]` (replaces the study-wide list of that setting for that family),
  `at_budget = 1e12` (sweep only at that compute budget; the other budgets run the study's value
  or the one the study file sets). CLI: `--sweep lr=1e-3,3e-3` and `--sweep mdm:lr=...`.
- `carry_lr` (a table family -> lr; `scaling.launch --carry-lr-from STUDY` fills it from that
  study's report, analysis.records.carry): with a sweep at one budget, every other budget's runs of a
  family train at its carried lr, an ordinary run field (so it is in their run ids); the swept
  budget still sweeps. The study records the table in study.json's settings. Carried into the swept
  study's own directory, the new plan extends it (its runs kept: scaling.run.study_ledger.extends).
- `budgets` (training FLOPs, `--budgets 1e12,3e12,1e13`): isoFLOP profiles. Per arm and budget,
  `grid_points` sizes (default 5) spaced by `grid_step` (default 2x in core parameters) on a log
  grid centred on the predicted optimum, shapes from `models.ladder.shape_for_params`; each run's
  tokens = budget / that family's training FLOPs per token as executed (`FamilyModel.flops_per_token`
  at the run's sequences per forward pass, `sequences_per_pass`; a batch sweep's runs are planned
  at their own batch).
  The predicted optimum is the size at which a run of `CHINCHILLA_TOKENS_PER_PARAM` tokens per
  core parameter spends the budget. `optimum_seeds`: seeds of the central `optimum_span` grid
  points (default: the study's seeds everywhere).
- `branches` (fractions of each run's steps, e.g. [0.25, 0.5]; needs `[run] schedule = "wsd"`):
  WSD cooldown branches (jobs.train.wsd_branch). Each run is a trunk; at each fraction a branch takes
  its state and decays over `branch_decay` (default 0.2) of the tokens seen so far, evaluated as
  its own point; it costs its decay tokens only.
- `tokens_per_param` given as a list (`--tokens-per-param 4,8,16,32`): the data axis at fixed
  sizes, one run per value.
Runs planned by budget carry `budget_flops`, every planned run `plan_tokens` (the tokens the plan
asked for before rounding to whole steps): selection's cell key (analysis.compare.frontier).
"""
from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import models
from models.ladder import core_params, shape_for_params, train_flops_per_token

from jobs.run.recipes import CHINCHILLA_TOKENS_PER_PARAM, Budget, schedule
from jobs.train.spec_rules import FIELD_RULES

SWEEP_PREFIX = "sweep_"
# swept name -> (where it goes, the field): budget fields go through the rung's schedule (a batch
# sweep keeps each run's tokens, so its steps change), run fields are set on the RunSpec.
SWEEPABLE: dict[str, tuple[str, str]] = {
    "lr": ("budget", "lr"), "warmup": ("budget", "warmup_steps"), "batch_size": ("budget", "batch_size"),
    "beta1": ("run", "beta1"), "beta2": ("run", "beta2"), "weight_decay": ("run", "weight_decay"),
    "min_lr_ratio": ("run", "min_lr_ratio"),
}
INT_SETTINGS = ("warmup", "batch_size")
AXIS_KEYS = ("sweep", "budgets", "grid_points", "grid_step", "optimum_seeds", "optimum_span", "branches",
             "branch_decay", "carry_lr")
DEFAULT_BRANCH_DECAY = 0.2  # a branch decays over this share of the tokens its trunk had seen
DEFAULT_GRID_POINTS = 5
DEFAULT_GRID_STEP = 2.0
# A planned run trains whole steps, so it spends at least its budget and up to one step more; a run
# that overshoots by more than this share cannot stand for its budget (it needs about 4+ steps).
BUDGET_TOLERANCE = 0.25
MIN_GRID_POINTS = 5  # an isoFLOP parabola needs curvature on both sides of its minimum
MAX_PLAN_PARAMS = 1e13  # a planned shape's core parameters: 5x the largest dense model reported (1.8e12)
MAX_GRID_DECADES = 300.0  # a grid's widest size, n_opt * step ** (4 * points), stays a finite float64 (< 1.8e308)
OPTIMUM_BISECTIONS = 14  # ln(1e10) / 2^14: the predicted optimum to 0.15 %, finer than shapes snap


@dataclass(frozen=True)
class Sweep:
    """Swept settings: study-wide lists, per-family replacements, and an optional budget."""

    common: tuple[tuple[str, tuple[float, ...]], ...] = ()
    per_family: tuple[tuple[str, tuple[tuple[str, tuple[float, ...]], ...]], ...] = ()
    at_budget: float | None = None

    def axes(self, family: str) -> dict[str, tuple[float, ...]]:
        """name -> values for one family (its own lists replace the study-wide ones)."""
        return {**dict(self.common), **dict(dict(self.per_family).get(family, ()))}

    def combos(self, family: str, budget_flops: float | None) -> list[dict[str, float]]:
        """Every combination of swept values for this family at this budget ([{}] when none)."""
        axes = self.axes(family)
        if not axes or (self.at_budget is not None and budget_flops != self.at_budget):
            return [{}]
        names = sorted(axes)
        return [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def _values(name: str, raw: Any) -> tuple[float, ...]:
    if name not in SWEEPABLE:
        raise ValueError(f"sweep: unknown setting {name!r}; sweepable: {', '.join(SWEEPABLE)}")
    items = [v.strip() for v in raw.split(",") if v.strip()] if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"sweep: {name} needs a list of values, e.g. {name} = [1e-3, 3e-3, 1e-2]")
    values = _floats(f"sweep: {name}", items, f"{name} = [1e-3, 3e-3, 1e-2]")
    if name in INT_SETTINGS and any(v != int(v) for v in values):
        raise ValueError(f"sweep: {name} values must be whole numbers, got {list(values)}")
    values = tuple(int(v) if name in INT_SETTINGS else v for v in values)
    for value in values:  # each by the run field's one rule (jobs.train.spec_rules.FIELD_RULES)
        FIELD_RULES[SWEEPABLE[name][1]](f"sweep.{name}", value)
    return tuple(sorted(values))


def parse_sweep(value: Any, families: set[str]) -> Sweep:
    """A TOML `[sweep]` table or a list of CLI `[family:]name=v,v,...` strings; ValueError on bad input."""
    if value is None or value == {} or value == []:
        return Sweep()
    table: dict[str, Any] = {}
    if isinstance(value, (list, tuple)):
        for item in value:
            key, sep, raw = str(item).partition("=")
            if not sep:
                raise ValueError(f"sweep: {item!r} is not NAME=V,V,...; e.g. --sweep lr=1e-3,3e-3,1e-2")
            family, _, name = key.strip().rpartition(":")
            target = table.setdefault(family, {}) if family else table
            if name in target:
                raise ValueError(f"sweep: {key.strip()} given twice (--sweep {key.strip()}={target[name]} and "
                                 f"--sweep {item}); give one list, e.g. --sweep {key.strip()}={target[name]},{raw}")
            target[name] = raw
    elif isinstance(value, dict):
        table = dict(value)
    else:
        raise ValueError(f"sweep: expected a table of lists, got {value!r}")
    at_budget = table.pop("at_budget", None)
    if isinstance(at_budget, str):  # --sweep at_budget=1e12
        at_budget = _floats("sweep: at_budget", [at_budget], "at_budget = 1e12")[0]
    if at_budget is not None and (isinstance(at_budget, bool) or not isinstance(at_budget, (int, float))
                                  or not at_budget > 0 or not math.isfinite(at_budget)):
        raise ValueError(f"sweep: at_budget must be a positive number of FLOPs, got {at_budget!r}")
    common, per_family = {}, {}
    for key, raw in table.items():
        if isinstance(raw, dict) and not raw:
            raise ValueError(f"sweep: the table for {key!r} is empty, so it sweeps nothing; give it a setting "
                             f"({key} = {{lr = [1e-3, 3e-3]}}) or drop it")
        if isinstance(raw, dict):
            if key not in families and key in models.FAMILIES:
                continue  # a family this study does not train (a preset narrowed by --families)
            if key not in families:
                raise ValueError(f"sweep: {key!r} is not a family of this study; valid: {', '.join(sorted(families))}")
            per_family[key] = tuple(sorted((n, _values(n, v)) for n, v in raw.items()))
        else:
            common[key] = _values(key, raw)
    return Sweep(tuple(sorted(common.items())), tuple(sorted(per_family.items())),
                 None if at_budget is None else float(at_budget))


def named_families(value: Any) -> set[str]:
    """The families a sweep's per-family parts name (`--sweep mdm:lr=...`, TOML `[sweep.mdm]`)."""
    if isinstance(value, dict):
        return {str(key) for key, raw in value.items() if isinstance(raw, dict)}
    if isinstance(value, (list, tuple)):
        return {str(item).partition("=")[0].strip().rpartition(":")[0] for item in value} - {""}
    return set()


def check_touches(sweep: Sweep, budgets: list[float] | None) -> None:
    """Refuse a sweep that would touch no run: `at_budget` with no budgets planned, at a budget the
    study does not plan, or with no setting to sweep."""
    at = sweep.at_budget
    if at is None:
        return
    if not sweep.common and not sweep.per_family:
        raise ValueError(f"sweep: at_budget = {at:g} but no setting is swept; add one (lr = [1e-3, 3e-3]) or "
                         "drop at_budget")
    if budgets is None:
        raise ValueError(f"sweep: at_budget = {at:g} sweeps only at that budget, but the study plans no budgets; "
                         f"add budgets (--budgets {at:g},...) or drop at_budget")
    if at not in budgets:
        raise ValueError(f"sweep: at_budget = {at:g} is not one of the study's budgets "
                         f"({', '.join(f'{b:g}' for b in budgets)}), so the sweep touches no run; set it to one of them")


def parse_carry(value: Any) -> dict[str, float]:
    """A `carry_lr` table (family -> positive lr); ValueError naming the fix."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise ValueError(f"carry_lr: expected a table of family = lr, e.g. {{ar = 3e-3}}, got {value!r}")
    return {str(k): float(FIELD_RULES["lr"](f"carry_lr.{k}", v)) for k, v in sorted(value.items())}


def carried(settings: dict, sweep: Sweep, families: set[str]) -> dict[str, float]:
    """The carried lr per family, checked against the study: it needs a sweep at one budget and
    an lr for every family of the study."""
    carry = parse_carry(settings.get("carry_lr"))
    if not carry:
        return {}
    if sweep.at_budget is None or settings.get("budgets") is None:
        raise ValueError("carry_lr: needs budgets and a sweep at one of them (sweep at_budget) to carry from")
    missing = sorted(families - set(carry))
    if missing:
        raise ValueError(f"carry_lr: no lr for {', '.join(missing)}; give one per family of the study")
    return carry


def parse_numbers(key: str, value: Any) -> list[float] | None:
    """A comma-separated string, a number or a list of positive numbers; None when absent."""
    if value is None:
        return None
    items = [v for v in str(value).split(",") if v.strip()] if isinstance(value, (str, int, float)) else value
    if isinstance(value, bool):
        items = [value]
    numbers = list(_floats(key, items, "1e12,3e12,1e13"))
    if not numbers or any(not n > 0 for n in numbers):
        raise ValueError(f"{key}: expected positive numbers such as 1e12,3e12,1e13, got {value!r}")
    return numbers


def _floats(key: str, items: Any, example: str) -> tuple[float, ...]:
    """Finite numbers from `items` (numbers or their text); a boolean (TOML `true`), text that is no
    number, or a value given twice is refused naming `key` and the item as written."""
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"{key}: expected a list of numbers such as {example}, got {items!r}")
    values: dict[float, Any] = {}
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"{key}: {str(item).lower()} is a boolean, not a number; write numbers such as {example}")
        try:
            number = float(item.strip() if isinstance(item, str) else item)
        except (TypeError, ValueError):
            raise ValueError(f"{key}: {item!r} is not a number; write numbers such as {example}") from None
        if not math.isfinite(number):
            raise ValueError(f"{key}: {item!r} is not a finite number; write numbers such as {example}")
        if number in values:
            first, again = _written(values[number]), _written(item)
            raise ValueError(f"{key}: {again} given twice{'' if first == again else f' (as {first} and {again})'}; "
                             "give each value once")
        values[number] = item
    return tuple(values)


def _written(item: Any) -> str:
    """A list item as the user wrote it: text as is, an int as is, a float as Python writes it when short
    (4.0, 0.5) and in exponent form otherwise (1e+12)."""
    if isinstance(item, str):
        return item.strip()
    return repr(item) if isinstance(item, int) or len(repr(item)) <= 8 else f"{item:g}"


def _positive(settings: dict, key: str, default: Any, kind: type) -> Any:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (kind is int and value != int(value)):
        raise ValueError(f"{key}: must be a positive {'integer' if kind is int else 'number'}, got {value!r}")
    return kind(value)


# ---- planning along compute ----------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One planned run before its sweep values: where it sits and what it trains for."""

    arm: Any
    options: dict
    size: str
    seed: int
    budget: Budget
    tags: tuple[tuple[str, Any], ...] = ()


# (family, options, size[, sequences per forward pass]) -> training FLOPs per token as executed; without
# the pass size, the study's plan for that size (`sequences_per_pass`)
FlopsPerToken = Callable[..., float]


def _bisect_optimum(budget_flops: float, per_token: Callable[[Any], float]) -> float:
    """N at which N x CHINCHILLA_TOKENS_PER_PARAM tokens at `per_token(shape)` spend the budget."""
    lo, hi = math.log(1e3), math.log(1e13)
    for _ in range(OPTIMUM_BISECTIONS):
        mid = (lo + hi) / 2
        shape = shape_for_params(math.exp(mid))
        spent = per_token(shape) * CHINCHILLA_TOKENS_PER_PARAM * core_params(shape)
        lo, hi = (mid, hi) if spent < budget_flops else (lo, mid)
    return math.exp((lo + hi) / 2)


def predicted_optimum(budget_flops: float, family: str, options: dict, fpt: FlopsPerToken,
                      analytic: Callable[[Any], float]) -> float:
    """Core parameters N at which N x CHINCHILLA_TOKENS_PER_PARAM tokens spend `budget_flops`
    under the family's own FLOPs per token. Bisection in ln N over the continuous shapes on the
    analytic core count (`analytic(shape)`), scaled by the family's measured ratio to it at the
    first estimate (one model built instead of one per step; the ratio varies slowly with size)."""
    first = shape_for_params(_bisect_optimum(budget_flops, analytic))
    ratio = fpt(family, options, first.label) / analytic(first)
    return _bisect_optimum(budget_flops, lambda shape: ratio * analytic(shape))


def grid_sizes(n_opt: float, points: int, step: float) -> list[str]:
    """`points` distinct custom shapes on a log grid of ratio `step` in core parameters centred on
    n_opt, smallest first. Where rounding to whole shapes merges neighbours (the tiniest widths),
    the grid grows outward, alternately above and below, until it has `points` shapes."""
    sizes: list[str] = []
    for k in range(4 * points):
        for offset in ((k,) if k == 0 else (k, -k)):
            label = shape_for_params(n_opt * step ** offset).label
            if label not in sizes and len(sizes) < points:
                sizes.append(label)
    widest = max(core_params_of(size) for size in sizes)
    if widest > MAX_PLAN_PARAMS:
        raise ValueError(f"grid_step: {step:g} over {points} sizes reaches {widest:.3g} core parameters, more than "
                         f"{MAX_PLAN_PARAMS:.0e}; give a ratio such as 1.6 to 4")
    return sorted(sizes, key=core_params_of)


def central(index: int, points: int, span: int) -> bool:
    """Whether a profile's `index`-th of `points` sizes is one of its `span` central ones."""
    return abs(index - (points - 1) / 2) <= (span - 1) / 2 + 1e-9


def profile_runs(points: int, seeds: int, optimum_seeds: int | None, span: int | None) -> int:
    """Runs of one isoFLOP profile, from its numbers alone (`budget_points` builds as many): its
    `span` central sizes at `optimum_seeds` seeds (default `seeds`), the others at `seeds`."""
    half, centre = ((span or 1) - 1) / 2 + 1e-9, (points - 1) / 2
    low, high = max(0, math.ceil(centre - half)), min(points - 1, math.floor(centre + half))
    n_central = max(0, high - low + 1)
    return n_central * (optimum_seeds or seeds) + (points - n_central) * seeds


def budget_points(settings: dict, arms: list, seeds: int, budget: Budget, fpt: FlopsPerToken,
                  analytic: Callable[[Any], float]) -> list[Point]:
    """isoFLOP profiles: per budget and arm, a log grid of sizes around the predicted optimum."""
    points_n = _positive(settings, "grid_points", DEFAULT_GRID_POINTS, int)
    if points_n < MIN_GRID_POINTS:
        raise ValueError(f"grid_points: an isoFLOP profile needs at least {MIN_GRID_POINTS} sizes, got {points_n}")
    step = _positive(settings, "grid_step", DEFAULT_GRID_STEP, float)
    if step <= 1:
        raise ValueError(f"grid_step: must exceed 1 (a ratio of core parameters), got {step}")
    if 4 * points_n * math.log10(step) > MAX_GRID_DECADES:  # grid_sizes reaches step ** (4 * points)
        raise ValueError(f"grid_step: {step:g} over {points_n} sizes spans more than 1e{MAX_GRID_DECADES:g} in "
                         "core parameters; give a ratio such as 1.6 to 4")
    extra_seeds = _positive(settings, "optimum_seeds", seeds, int)
    span = _positive(settings, "optimum_span", 1, int)
    out = []
    for flops in parse_numbers("budgets", settings["budgets"]):
        for arm, options in arms:
            sizes = grid_sizes(predicted_optimum(flops, arm.family, options, fpt, analytic), points_n, step)
            for i, size in enumerate(sizes):
                tokens = max(1, int(flops / fpt(arm.family, options, size)))
                n_seeds = extra_seeds if central(i, len(sizes), span) else seeds
                tags = (("budget_flops", flops), ("plan_tokens", tokens))
                out += [Point(arm, options, size, seed, replace(budget, tokens=tokens, max_tokens=None), tags)
                        for seed in range(n_seeds)]
    return out


def data_points(sizes: list[str], ratios: list[float], arms: list, seeds: int, budget: Budget) -> list[Point]:
    """The data axis at fixed sizes: one run per tokens-per-parameter value."""
    out = []
    for size in sizes:
        for ratio in ratios:
            tokens = max(1, round(ratio * core_params_of(size)))
            for seed in range(seeds):
                out += [Point(arm, options, size, seed, replace(budget, tokens_per_param=ratio),
                              (("plan_tokens", tokens),)) for arm, options in arms]
    return out


def core_params_of(size: str) -> int:
    """Core parameters of a ladder name or custom shape."""
    from models.ladder import get_shape  # noqa: PLC0415 - keeps the import list short

    return core_params(get_shape(size))


def grid_points(settings: dict, arms: list, seeds: int, budget: Budget) -> list[Point]:
    """The plain grid: size-major, then seed, then arm."""
    return [Point(arm, options, size, seed, budget) for size in settings["sizes"] for seed in range(seeds)
            for arm, options in arms]


def sequences_per_pass(settings: dict, size: str, batch_size: int | None = None) -> int:
    """Sequences in one forward pass of a run at `size` as the study plans it (`RunSpec.micro_batch`):
    [run] micro_batch_size, else the batch (`batch_size`, else the study's, else the rung's rule)."""
    micro = dict(settings.get("run") or {}).get("micro_batch_size")
    batch = batch_size or settings.get("batch_size")
    return int(micro or batch or schedule(size, Budget(seq_len=settings["seq_len"])).batch_size)


def family_fpt(settings: dict) -> tuple[FlopsPerToken, Callable[[Any], float]]:
    """Training FLOPs per token as executed of (family, options, size[, sequences per pass]) at the
    study's tokenizer and context (the pass size defaults to the study's plan for the size,
    `sequences_per_pass`), and the analytic core count of a shape (models.ladder) at the same."""
    from .accounting import family_accounting, vocab_of  # noqa: PLC0415 - builds models (torch)

    vocab, seq_len = vocab_of(settings["tokenizer"]), settings["seq_len"]

    def fpt(family: str, options: dict, size: str, passes: int | None = None) -> float:
        passes = passes or sequences_per_pass(settings, size)
        return family_accounting(family, size, json.dumps(options, sort_keys=True), vocab, seq_len, passes)[1]

    return fpt, lambda shape: float(train_flops_per_token(shape, seq_len, vocab))


def plan(settings: dict, arms: list, seeds: int, budget: Budget, ratios: list[float] | None) -> list[Point]:
    """The study's points: isoFLOP profiles, the data axis, or the plain grid."""
    if settings.get("budgets") is not None:
        return budget_points(settings, arms, seeds, budget, *family_fpt(settings))
    if ratios is not None and len(ratios) > 1:
        return data_points(settings["sizes"], ratios, arms, seeds, budget)
    return grid_points(settings, arms, seeds, budget)


# ---- the hook --------------------------------------------------------------------------------------
Make = Callable[[Any, dict, str, int, Budget, dict, dict], Any]  # -> a study Cell


def budget_settings(settings: dict) -> dict:
    """The settings the study's Budget reads: a list-valued `tokens_per_param` (the data axis)
    contributes its first value (each point sets its own)."""
    ratios = parse_numbers("tokens_per_param", settings.get("tokens_per_param"))
    return settings if ratios is None else {**settings, "tokens_per_param": ratios[0]}


def expand(settings: dict, arms: list, seeds: int, budget: Budget, make: Make) -> list:
    """Every run of the study as a Cell (see the module docstring). `make(arm, options, size, seed,
    budget, run_fields, tags)` builds one."""
    ratios = parse_numbers("tokens_per_param", settings.get("tokens_per_param"))
    sweep = parse_sweep(settings.get("sweep"), {arm.family for arm, _ in arms})
    check_touches(sweep, parse_numbers("budgets", settings.get("budgets")))
    carry = carried(settings, sweep, {arm.family for arm, _ in arms})
    cells, planned = [], []
    fpt = family_fpt(settings)[0] if settings.get("budgets") is not None else None
    for point in plan(settings, arms, seeds, budget, ratios):
        tags = dict(point.tags)
        base = point.budget
        if carry and tags.get("budget_flops") != sweep.at_budget:
            base = replace(base, lr=carry[point.arm.family])
        for combo in sweep.combos(point.arm.family, tags.get("budget_flops")):
            run_budget, run_fields = base, {}
            for name, value in combo.items():
                where, field = SWEEPABLE[name]
                if where == "budget":
                    run_budget = replace(run_budget, **{field: value})
                else:
                    run_fields[field] = value
            combo_tags = {**tags, **{SWEEP_PREFIX + name: value for name, value in combo.items()}}
            if fpt is not None and "batch_size" in combo:  # the pass size is part of the FLOPs per token
                passes = sequences_per_pass(settings, point.size, combo["batch_size"])
                tokens = max(1, int(tags["budget_flops"] / fpt(point.arm.family, point.options, point.size, passes)))
                run_budget, combo_tags["plan_tokens"] = replace(run_budget, tokens=tokens), tokens
            cells.append(make(point.arm, point.options, point.size, point.seed, run_budget, run_fields, combo_tags))
            planned.append((point, cells[-1]))
    if fpt is not None:
        check_budget_costs(planned, fpt)
    return with_branches(cells, settings)


def check_budget_costs(planned: list[tuple[Point, Any]], fpt: FlopsPerToken) -> None:
    """Refuse a budget whose runs, rounded up to whole steps, spend more than BUDGET_TOLERANCE over
    it (a budget below one step of its smallest shape, or a batch so large that the shapes train a
    step or two), naming the worst run and its numbers."""
    over = []
    for point, cell in planned:
        budget_flops = dict(point.tags)["budget_flops"]
        cost = fpt(point.arm.family, point.options, point.size, cell.spec.micro_batch) * cell.spec.tokens
        if cost > budget_flops * (1 + BUDGET_TOLERANCE):
            over.append((budget_flops, core_params_of(point.size), cost, cell.spec))
    if not over:
        return
    budget_flops, _, cost, spec = min(over, key=lambda item: item[:2])  # the lowest budget's smallest shape
    raise ValueError(
        f"budgets: {budget_flops:g} FLOPs cannot be met: {spec.family} at {spec.size} trains {spec.steps} step(s) "
        f"of {spec.batch_size}x{spec.seq_len} tokens, {cost:.3g} FLOPs, {cost / budget_flops:.3g}x the budget "
        f"(a run may exceed it by {BUDGET_TOLERANCE:.0%}); raise the budget, or lower --batch-size or --seq-len "
        "so each run trains several steps")


def with_branches(cells: list, settings: dict) -> list:
    """Each trunk followed by its WSD cooldown branches (see the module docstring)."""
    fractions = parse_numbers("branches", settings.get("branches"))
    if not fractions:
        return cells
    if any(f >= 1 for f in fractions):
        raise ValueError(f"branches: fractions of a run's steps must be below 1, got {fractions}")
    decay = _positive(settings, "branch_decay", DEFAULT_BRANCH_DECAY, float)
    if decay > 1:
        raise ValueError(f"branch_decay: a share of the tokens a trunk has seen, at most 1 (default "
                         f"{DEFAULT_BRANCH_DECAY:g}), got {decay:g}")
    out = []
    for cell in cells:
        spec = cell.spec
        if spec.schedule != "wsd":
            raise ValueError('branches: cooldown branches need the WSD schedule; set [run] schedule = "wsd"')
        points = sorted({max(1, round(f * spec.steps)) for f in fractions})
        trunk = spec.replace(snapshot_steps=",".join(map(str, points)))
        out.append(type(cell)(trunk, cell.factors, trunk.run_id))
        for step in points:
            steps = step + max(1, round(decay * step))
            tracking = {**dict(spec.tracking), "plan_tokens": steps * spec.batch_size * spec.seq_len,
                        "branch_step": step}
            branch = spec.replace(branch_from=spec.run_id, branch_step=step, steps=steps, tracking=tracking)
            out.append(type(cell)(branch, cell.factors, branch.run_id))
    return out
