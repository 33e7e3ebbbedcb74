"""The next round of a frontier (isoFLOP) study: what it must add before its k can be read inside
the data (issue 35). A pure function of the study's runs; `scaling.rounds` trains what it plans.

Input: one row per run of the selection split (`validation`, never the reported split), the
reference metric (nll_l2r): family, variant, budget_flops, n_params, seed, lr (the run's own, from
its spec), value. Per (family, variant, budget) profile each shape's lr is the one with the lowest
seed-mean value (selection's rule), and the profile's points are those seed means.

The criteria, each checked per profile or per family (docs/DESIGN.md §11):

- bracketed: the lowest point is interior and >= SIDE_SHAPES measured shapes lie on each side of
  the fitted vertex (the parabola in ln N; the lowest point where it has no interior minimum);
  otherwise shapes are added beyond the short side, one grid step apart (the profile's own ratio);
- overlapping: AR's L_opt range over its bracketed budgets covers an any-order family's bracketed
  L_opt at one budget or more; otherwise the frontier at the lower loss extends its budgets
  downward (a step down costs a step's share), or, where that would need shapes smaller than
  `min_params`, the other frontier extends upward while the round stays within `max_round_flops`;
- tuned: an lr chosen at an edge of the values a cell tried gets the next value beyond it; the
  shapes nearest each minimum train at the family's rule lr(N) = lr0 (N / N0)^-gamma, fitted (OLS
  of ln lr* on ln N) on its cells whose sweep chose an interior lr, snapped to the sweep's grid,
  and checked at the top budget's minimum with one grid value on each side; a family without
  such a rule, or whose check chose an edge, sweeps each of those cells (one value each side);
- seeds: >= NEAR_SEEDS seeds at the NEAR_SHAPES shapes nearest each minimum, at their chosen lr
  (once the profile is bracketed and those cells tuned); >= MIN_BUDGETS budgets per family, added
  on the side that moves the family toward the other frontiers (AR down, the others up when
  affordable, else down).

A study that meets every criterion plans nothing. Budgets outside the measured range get a
prediction (`predict`) before they train: N_opt and L_opt at the new budget from the frontier's
lines in ln C, with the t(K - 2) predictive interval of a new vertex on the scale
`analysis.compare.frontier.between_budget_draws` uses (the vertices' scatter about the line or a vertex's
within-parabola variance, the larger), drawn from the same resample.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analysis.compare import fairness, frontier
from analysis.records.cells import latest
from analysis.compare.gap import REFERENCE_FAMILY, REFERENCE_METRIC
from analysis.records.read import load
from analysis.records.selection import SELECTION_SPLIT, select

ARM = ("family", "variant")
SIDE_SHAPES = 2  # measured shapes each side of a profile's vertex
NEAR_SHAPES = 3  # shapes nearest a minimum that need their own lr and seeds
NEAR_SEEDS = 2
MIN_BUDGETS = 5
MAX_NEW_BUDGETS = 2  # per family and round: the loop re-plans from what they measure
GRID_POINTS = 5  # shapes of a new budget
MIN_RULE_CELLS = 3  # swept cells with an interior lr that a family's lr(N) rule is fitted on
DEFAULT_GRID_RATIO = 1.6
DEFAULT_BUDGET_RATIO = math.sqrt(10.0)
LR_MANTISSAS = (1.0, 3.0)  # the lr grid per decade when a study trained a single value


@dataclass(frozen=True)
class PlannedRun:
    """One run a round adds: where it sits (a target core-parameter count N; the launcher picks
    the shape), what it trains at, and why."""

    family: str
    variant: str
    budget_flops: float
    n_params: float
    seed: int
    lr: float
    criterion: str  # bracketed | overlapping | tuned | seeds | budgets
    reason: str

    def key(self) -> tuple:
        """What makes two planned runs the same run."""
        return (self.family, self.variant, float(self.budget_flops), round(math.log(self.n_params), 6), self.seed,
                round(math.log(self.lr), 6))


@dataclass(frozen=True)
class Check:
    """One criterion on one subject (a profile or a family): met or not, and why."""

    criterion: str
    subject: str
    met: bool
    detail: str


@dataclass(frozen=True)
class RoundPlan:
    """The next round: its runs (empty when every criterion holds), every check, and the budgets
    it adds outside the measured range (each needs a prediction before it trains)."""

    runs: tuple[PlannedRun, ...]
    checks: tuple[Check, ...]
    new_budgets: tuple[tuple[str, str, float], ...]  # (family, variant, budget_flops)

    @property
    def cost_flops(self) -> float:
        """Training FLOPs of the round (each run spends its budget)."""
        return float(sum(r.budget_flops for r in self.runs))

    @property
    def done(self) -> bool:
        """Every criterion met: nothing to train."""
        return not self.runs


@dataclass(frozen=True)
class PlanConfig:
    """The planner's limits (plain values)."""

    min_params: float = 3e3  # the smallest shape a new budget may need (smaller shapes do not exist)
    max_round_flops: float | None = None  # an upward budget is affordable within this (None: the study's FLOPs)
    lr_mantissas: tuple[float, ...] = ()  # the lr grid's values per decade (default: the sweep's)


@dataclass(frozen=True)
class Profile:
    """One (family, variant, budget) profile as the planner sees it."""

    family: str
    variant: str
    budget_flops: float
    n: tuple[float, ...]  # sorted shapes (core parameters)
    mean: tuple[float, ...]  # seed mean at each shape's chosen lr
    best_lr: tuple[float, ...]
    seeds: tuple[int, ...]  # seeds at each shape's chosen lr
    tried: tuple[tuple[float, ...], ...]  # lrs tried per shape
    vertex_n: float
    l_opt: float
    interior: bool  # the lowest point is not at an end
    sides: tuple[int, int] = (0, 0)

    @property
    def bracketed(self) -> bool:
        """The lowest point interior with SIDE_SHAPES shapes on each side of the vertex."""
        return self.interior and min(self.sides) >= SIDE_SHAPES

    @property
    def name(self) -> str:
        return f"{self.family}/{self.variant} C={self.budget_flops:.3g}"

    def near(self) -> list[int]:
        """Indices of the NEAR_SHAPES shapes nearest the vertex."""
        dist = np.abs(np.log(self.n) - math.log(self.vertex_n))
        return sorted(np.argsort(dist, kind="stable")[:NEAR_SHAPES].tolist())

    def ratio(self) -> float:
        """The profile's grid step in N (median of its neighbours' ratios)."""
        if len(self.n) < 2:
            return DEFAULT_GRID_RATIO
        return float(max(1.2, math.exp(np.median(np.diff(np.log(self.n))))))


# ---- the profiles ---------------------------------------------------------------------------------
def profiles(points: pl.DataFrame) -> list[Profile]:
    """Per (family, variant, budget) the planner's profile of `points` (module doc)."""
    cells = (points.group_by([*ARM, "budget_flops", "n_params", "lr"])
             .agg(pl.col("value").mean().alias("mean"), pl.col("seed").n_unique().alias("seeds")))
    out = []
    for (family, variant, budget), part in sorted(cells.group_by([*ARM, "budget_flops"]),
                                                  key=lambda kv: tuple(map(str, kv[0][:2])) + (kv[0][2],)):
        rows = []
        for (n,), shape in sorted(part.group_by(["n_params"]), key=lambda kv: kv[0][0]):
            best = shape.sort(["mean", "lr"]).row(0, named=True)
            rows.append((float(n), best["mean"], best["lr"], best["seeds"], tuple(sorted(shape["lr"].to_list()))))
        out.append(_profile(str(family), str(variant), float(budget), rows))
    return out


def _profile(family: str, variant: str, budget: float, rows: list[tuple]) -> Profile:
    n, mean, lr, seeds, tried = (tuple(col) for col in zip(*rows))
    low = int(np.argmin(mean))
    vertex, l_opt = n[low], mean[low]
    if len(n) >= 3:
        x = np.log(n)
        c, b, a = np.polyfit(x, mean, 2)
        if c > 0 and x[0] <= -b / (2 * c) <= x[-1]:
            vertex, l_opt = math.exp(-b / (2 * c)), float(a - b * b / (4 * c))
    lx = math.log(vertex)
    sides = (int(np.sum(np.log(n) < lx - 1e-9)), int(np.sum(np.log(n) > lx + 1e-9)))
    return Profile(family, variant, budget, n, mean, lr, seeds, tried, vertex, l_opt, 0 < low < len(n) - 1, sides)


# ---- the lr grid and rule ---------------------------------------------------------------------------
def lr_grid(points: pl.DataFrame, config: PlanConfig) -> np.ndarray:
    """Every lr the study may train: the sweep's values per decade (mantissas; the 1-3 grid where the
    study trained one), over 12 decades."""
    mantissas = config.lr_mantissas or tuple(sorted({round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
                                                     for v in points["lr"].unique().to_list()}))
    mantissas = mantissas if len(mantissas) >= 2 else tuple(sorted({*mantissas, *LR_MANTISSAS}))
    return np.array(sorted(float(f"{m * 10.0 ** e:.12g}") for e in range(-8, 4) for m in mantissas))


def snap(lr: float, grid: np.ndarray, step: int = 0) -> float:
    """The grid value nearest `lr` in log, moved `step` grid values up (down when negative)."""
    i = int(np.argmin(np.abs(np.log(grid) - math.log(lr)))) + step
    return float(grid[min(max(i, 0), len(grid) - 1)])


@dataclass(frozen=True)
class LrRule:
    """A family's lr(N) = exp(intercept) N^-gamma (ln-ln OLS on its interior-swept cells)."""

    intercept: float
    gamma: float
    cells: int

    def at(self, n: float) -> float:
        return math.exp(self.intercept - self.gamma * math.log(n))


def _interior(tried: tuple[float, ...], best: float) -> bool:
    return len(tried) >= 3 and min(tried) < best < max(tried)


def fit_rule(profs: list[Profile]) -> LrRule | None:
    """The family's lr rule over its cells whose sweep chose an interior lr (None when fewer than
    MIN_RULE_CELLS such cells, or one shape only)."""
    pairs = [(math.log(p.n[i]), math.log(p.best_lr[i])) for p in profs for i in range(len(p.n))
             if _interior(p.tried[i], p.best_lr[i])]
    if len(pairs) < MIN_RULE_CELLS or len({x for x, _ in pairs}) < 2:
        return None
    x, y = np.array(pairs).T
    slope, intercept = np.polyfit(x, y, 1)
    return LrRule(float(intercept), float(-slope), len(pairs))


# ---- the planner -------------------------------------------------------------------------------------
@dataclass
class _Round:
    """What the planner collects while it checks (internal)."""

    shape_n: Callable[[float], float] = float  # N -> the core parameters of the shape a launcher trains for it
    runs: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    new_budgets: list = field(default_factory=list)

    def shapes(self, start: float, ratio: float, offsets: list[int], count: int, taken: tuple[float, ...] = ()) -> list[float]:
        """Up to `count` distinct shapes (their N) at start * ratio^k for k in `offsets`, in that
        order, none of them in `taken` (neighbours that round to one shape are skipped)."""
        out: list[float] = []
        for k in offsets:
            n = self.shape_n(start * ratio ** k)
            if len(out) < count and all(not math.isclose(n, t, rel_tol=1e-9) for t in (*taken, *out)):
                out.append(n)
        return out

    def add(self, run: PlannedRun) -> None:
        self.runs.setdefault(run.key(), run)

    def check(self, criterion: str, subject: str, met: bool, detail: str) -> None:
        self.checks.append(Check(criterion, subject, met, detail))


def plan_round(points: pl.DataFrame, config: PlanConfig = PlanConfig(),
               shape_n: Callable[[float], float] = float) -> RoundPlan:
    """The next round of a frontier study from its runs' validation values (module doc). `shape_n`
    maps a wanted N to the core parameters of the shape that would train (the launcher's shapes
    are discrete): new shapes are distinct shapes, stepping past neighbours that round together."""
    if points.is_empty():
        return RoundPlan((), (), ())
    grid = lr_grid(points, config)
    trained = {(r["family"], r["variant"], float(r["budget_flops"]), round(math.log(r["n_params"]), 6), r["seed"],
                round(math.log(r["lr"]), 6)) for r in points.iter_rows(named=True)}
    profs = profiles(points)
    by_arm: dict[tuple, list[Profile]] = {}
    for p in profs:
        by_arm.setdefault((p.family, p.variant), []).append(p)
    out = _Round(shape_n)
    for arm_profs in by_arm.values():
        rule = fit_rule(arm_profs)
        state = _rule_check(arm_profs, rule, grid, out)
        for p in arm_profs:
            _bracket(p, out)
            if p.bracketed:
                _tune(p, rule, state, grid, out)
    _budgets(by_arm, points, config, grid, out)
    runs = tuple(r for k, r in out.runs.items() if k not in trained)
    return RoundPlan(runs, tuple(out.checks), tuple(out.new_budgets))


def _bracket(p: Profile, out: _Round) -> None:
    """Shapes beyond the short side of an unbracketed profile (seed 0, the nearest shape's lr)."""
    left, right = p.sides
    if p.bracketed:
        out.check("bracketed", p.name, True, f"vertex N={p.vertex_n:.3g} with {left} shapes below, {right} above")
        return
    out.check("bracketed", p.name, False, f"lowest point {'interior' if p.interior else 'at an edge'}, "
                                          f"{left} shapes below the vertex and {right} above")
    ratio = p.ratio()
    below = max(SIDE_SHAPES - left, 0 if p.interior or p.vertex_n > p.n[0] else 1)
    above = max(SIDE_SHAPES - right, 0 if p.interior or p.vertex_n < p.n[-1] else 1)
    steps = list(range(1, 4 * SIDE_SHAPES + 1))
    lower = [n for n in out.shapes(p.n[0], 1 / ratio, steps, below, p.n) if n < p.n[0]]
    upper = [n for n in out.shapes(p.n[-1], ratio, steps, above, p.n) if n > p.n[-1]]
    for n in lower:
        out.add(PlannedRun(p.family, p.variant, p.budget_flops, n, 0, p.best_lr[0], "bracketed",
                           f"{p.name}: minimum not bracketed below ({left} shapes under its vertex); a shape "
                           f"below the smallest ({p.n[0]:.3g})"))
    for n in upper:
        out.add(PlannedRun(p.family, p.variant, p.budget_flops, n, 0, p.best_lr[-1], "bracketed",
                           f"{p.name}: minimum not bracketed above ({right} shapes over its vertex); a shape "
                           f"above the largest ({p.n[-1]:.3g})"))
    if len(lower) < below or len(upper) < above:
        out.check("bracketed", p.name, False, "no distinct shape left beyond the edge (the smallest shape is "
                  "reached); this profile stays unbracketed")


def _rule_check(profs: list[Profile], rule: LrRule | None, grid: np.ndarray, out: _Round) -> str:
    """Whether the family's rule holds at its top budget's minimum (the rule's lr and one grid value
    each side trained there, and the rule's the best): `held`, `pending` (the missing values are
    planned; cells that would use the rule wait for it) or `none` (no rule, or it failed)."""
    name = f"{profs[0].family}/{profs[0].variant}"
    if rule is None:
        out.check("tuned", f"{name} lr rule", False, "no rule: fewer than "
                  f"{MIN_RULE_CELLS} cells chose an interior lr; the cells near each minimum sweep their own")
        return "none"
    top = max(profs, key=lambda p: p.budget_flops)
    i = top.near()[len(top.near()) // 2] if top.bracketed else int(np.argmin(top.mean))
    want = [snap(rule.at(top.n[i]), grid, s) for s in (-1, 0, 1)]
    missing = [lr for lr in want if not any(math.isclose(lr, t, rel_tol=1e-6) for t in top.tried[i])]
    for lr in missing:
        out.add(PlannedRun(top.family, top.variant, top.budget_flops, top.n[i], 0, lr, "tuned",
                           f"{top.name}: checks the lr rule (gamma={rule.gamma:.2f} over {rule.cells} cells) at the "
                           f"top budget's minimum: rule value {want[1]:g} and one value each side"))
    if missing:
        out.check("tuned", f"{name} lr rule", False, f"gamma={rule.gamma:.2f}; its check at C={top.budget_flops:.3g} "
                  "is not trained yet")
        return "pending"
    held = math.isclose(top.best_lr[i], want[1], rel_tol=1e-6)
    out.check("tuned", f"{name} lr rule", held, f"gamma={rule.gamma:.2f}; at C={top.budget_flops:.3g} the check chose "
              f"{top.best_lr[i]:g} (rule {want[1]:g})" + ("" if held else ": the rule fails; cells sweep their own"))
    return "held" if held else "none"


def _tune(p: Profile, rule: LrRule | None, state: str, grid: np.ndarray, out: _Round) -> None:
    """Edge lrs widened, the near cells at the rule's lr (once its check held; they wait while it
    is pending) or their own sweep, then their seeds."""
    unsettled = []
    for i in p.near():
        tried, best = p.tried[i], p.best_lr[i]
        where = f"{p.name} N={p.n[i]:.3g}"
        if len(tried) >= 2 and best in (min(tried), max(tried)):
            step = -1 if best == min(tried) else 1
            out.add(PlannedRun(p.family, p.variant, p.budget_flops, p.n[i], 0, snap(best, grid, step), "tuned",
                               f"{where}: lr {best:g} is at the edge of {len(tried)} values tried; widen"))
            unsettled.append(i)
        elif _interior(tried, best):
            continue
        elif state == "held" and math.isclose(best, snap(rule.at(p.n[i]), grid), rel_tol=1e-6):
            continue
        elif state == "pending":
            unsettled.append(i)
        elif state == "held":
            out.add(PlannedRun(p.family, p.variant, p.budget_flops, p.n[i], 0, snap(rule.at(p.n[i]), grid), "tuned",
                               f"{where}: near the minimum, trained at {best:g}; the rule's lr(N)"))
            unsettled.append(i)
        else:
            for s in (-1, 1):
                out.add(PlannedRun(p.family, p.variant, p.budget_flops, p.n[i], 0, snap(best, grid, s), "tuned",
                                   f"{where}: near the minimum with one lr ({best:g}); its own sweep"))
            unsettled.append(i)
    out.check("tuned", p.name, not unsettled, "every shape near the minimum tuned" if not unsettled
              else f"{len(unsettled)} of {NEAR_SHAPES} shapes near the minimum not tuned")
    _seeds(p, [i for i in p.near() if i not in unsettled], out)


def _seeds(p: Profile, settled: list[int], out: _Round) -> None:
    short = [i for i in p.near() if p.seeds[i] < NEAR_SEEDS]
    for i in short:
        if i in settled:
            for seed in range(p.seeds[i], NEAR_SEEDS):
                out.add(PlannedRun(p.family, p.variant, p.budget_flops, p.n[i], seed, p.best_lr[i], "seeds",
                                   f"{p.name} N={p.n[i]:.3g}: near the minimum with {p.seeds[i]} seed(s) at lr "
                                   f"{p.best_lr[i]:g}; needs {NEAR_SEEDS}"))
    out.check("seeds", p.name, not short, f"{NEAR_SEEDS}+ seeds at the {NEAR_SHAPES} shapes nearest the minimum"
              if not short else f"{len(short)} shape(s) near the minimum with fewer than {NEAR_SEEDS} seeds")


# ---- budgets: overlap and count ----------------------------------------------------------------------
def _line(xs: list[float], ys: list[float], default_slope: float) -> tuple[float, float]:
    """(intercept, slope) of ys on xs; `default_slope` through the one point when only one."""
    if len(set(xs)) >= 2:
        slope, intercept = np.polyfit(xs, ys, 1)
        return float(intercept), float(slope)
    return ys[0] - default_slope * xs[0], default_slope


@dataclass(frozen=True)
class _Frontier:
    """One family's measured frontier as the budget rules read it."""

    family: str
    variant: str
    budgets: tuple[float, ...]
    l_bracketed: tuple[float, ...]  # L_opt of the bracketed budgets
    l_all: tuple[float, float]  # over every budget (its estimates)
    n_line: tuple[float, float]  # ln N_opt = a + b ln C
    l_line: tuple[float, float]  # ln L_opt = a + b ln C
    ratio: float  # budget step
    grid_ratio: float
    lr_at: tuple[tuple[float, float], ...]  # (N, lr) of the chosen cells, for new budgets' lr


def _frontier(profs: list[Profile]) -> _Frontier:
    cs = [p.budget_flops for p in profs]
    lc = [math.log(c) for c in cs]
    ratio = math.exp(float(np.median(np.diff(sorted(lc))))) if len(cs) > 1 else DEFAULT_BUDGET_RATIO
    return _Frontier(profs[0].family, profs[0].variant, tuple(sorted(cs)), tuple(p.l_opt for p in profs if p.bracketed),
                     (min(p.l_opt for p in profs), max(p.l_opt for p in profs)),
                     _line(lc, [math.log(p.vertex_n) for p in profs], 0.5),
                     _line(lc, [math.log(p.l_opt) for p in profs], -0.05), max(ratio, 1.5),
                     float(np.median([p.ratio() for p in profs])),
                     tuple((p.n[i], p.best_lr[i]) for p in profs for i in range(len(p.n))))


def _budgets(by_arm: dict, points: pl.DataFrame, config: PlanConfig, grid: np.ndarray, out: _Round) -> None:
    """The overlap and budget-count criteria: new budgets, each a grid of shapes about its predicted
    N_opt (seeds at the central NEAR_SHAPES), at most MAX_NEW_BUDGETS per family and round."""
    fronts = {arm: _frontier(profs) for arm, profs in by_arm.items()}
    rules = {arm: fit_rule(profs) for arm, profs in by_arm.items()}
    study_flops = float(points["budget_flops"].sum())
    limit = config.max_round_flops if config.max_round_flops is not None else study_flops
    ref = next((f for arm, f in fronts.items() if arm[0] == REFERENCE_FAMILY), None)
    added: dict[tuple, list[float]] = {arm: [] for arm in fronts}
    if ref is not None:
        for arm, f in fronts.items():
            if arm[0] != REFERENCE_FAMILY:
                _overlap(ref, f, config, limit, added, out)
    for arm, f in fronts.items():
        toward = "down" if arm[0] == REFERENCE_FAMILY or ref is None or _above(ref, f) is False else "up"
        have = len(f.budgets) + len(added[arm])
        while have < MIN_BUDGETS and len(added[arm]) < MAX_NEW_BUDGETS:
            c = _next_budget(f, added[arm], toward, config, limit)
            if c is None:
                c = _next_budget(f, added[arm], "up" if toward == "down" else "down", config, limit)
            if c is None:
                break
            added[arm].append(c)
            have += 1
        out.check("budgets", f"{arm[0]}/{arm[1]}", not added[arm] and len(f.budgets) >= MIN_BUDGETS,
                  f"{len(f.budgets)} budgets measured, {len(added[arm])} added this round; needs {MIN_BUDGETS}")
    for arm, budgets in added.items():
        for c in budgets:
            _new_budget(fronts[arm], rules[arm], c, grid, out)


def _above(ref: _Frontier, f: _Frontier) -> bool | None:
    """Whether family f's frontier lies above (worse than) AR's in loss; None when they overlap."""
    if f.l_all[0] > ref.l_all[1]:
        return True
    if f.l_all[1] < ref.l_all[0]:
        return False
    return None


def _overlap(ref: _Frontier, f: _Frontier, config: PlanConfig, limit: float, added: dict, out: _Round) -> None:
    name = f"{f.family}/{f.variant} vs {ref.family}/{ref.variant}"
    inside = _covered(ref, f)
    if inside:
        out.check("overlapping", name, True, f"AR's bracketed L_opt {min(ref.l_bracketed):.4g}-"
                  f"{max(ref.l_bracketed):.4g} covers the family's {', '.join(f'{v:.4g}' for v in inside)}")
        return
    above = _above(ref, f)
    out.check("overlapping", name, False, f"AR's L_opt {ref.l_all[0]:.4g}-{ref.l_all[1]:.4g}, the family's "
              f"{f.l_all[0]:.4g}-{f.l_all[1]:.4g}" + ("" if above is not None else " (overlapping, not yet bracketed)"))
    if above is None:
        return
    low, high = (ref, f) if above else (f, ref)  # `low` is the frontier at the lower loss: it goes down
    target = math.log(high.l_all[0] if above else high.l_all[1])
    for arm, front, direction in (((low.family, low.variant), low, "down"), ((high.family, high.variant), high, "up")):
        for _ in range(MAX_NEW_BUDGETS):
            if _reaches(front, added[arm], target, direction):
                return
            c = _next_budget(front, added[arm], direction, config, limit)
            if c is None:
                break
            added[arm].append(c)
        if added[arm]:
            return


def _covered(ref: _Frontier, f: _Frontier) -> list[float]:
    """The family's bracketed L_opt values inside AR's bracketed L_opt range."""
    if not ref.l_bracketed:
        return []
    lo, hi = min(ref.l_bracketed), max(ref.l_bracketed)
    return [v for v in f.l_bracketed if lo <= v <= hi]


def _reaches(f: _Frontier, added: list[float], target_ln_l: float, direction: str) -> bool:
    """Whether the budgets measured and added reach the loss `target_ln_l` on the family's line."""
    c = min(f.budgets + tuple(added)) if direction == "down" else max(f.budgets + tuple(added))
    ln_l = f.l_line[0] + f.l_line[1] * math.log(c)
    return ln_l >= target_ln_l if direction == "down" else ln_l <= target_ln_l


def _next_budget(f: _Frontier, added: list[float], direction: str, config: PlanConfig, limit: float) -> float | None:
    """The next budget beyond the measured ones (`direction` down or up), None when too small a
    model or too costly (a round's budgets within `limit` FLOPs)."""
    known = f.budgets + tuple(added)
    c = min(known) / f.ratio if direction == "down" else max(known) * f.ratio
    n_opt = math.exp(f.n_line[0] + f.n_line[1] * math.log(c))
    if direction == "down" and n_opt / f.grid_ratio ** (GRID_POINTS // 2) < config.min_params:
        return None
    if direction == "up" and (GRID_POINTS + NEAR_SHAPES) * (c + sum(added)) > limit:
        return None
    return float(f"{c:.3g}")


def _new_budget(f: _Frontier, rule: LrRule | None, c: float, grid: np.ndarray, out: _Round) -> None:
    """A new budget's grid: GRID_POINTS shapes about the predicted N_opt, NEAR_SEEDS seeds at the
    central NEAR_SHAPES, each at the rule's lr (else the lr chosen at the nearest measured shape)."""
    out.new_budgets.append((f.family, f.variant, c))
    n_opt = math.exp(f.n_line[0] + f.n_line[1] * math.log(c))
    offsets = [0] + [s * k for k in range(1, 4 * GRID_POINTS) for s in (1, -1)]
    shapes = sorted(out.shapes(n_opt, f.grid_ratio, offsets, GRID_POINTS))
    centre = int(np.argmin([abs(math.log(n / n_opt)) for n in shapes]))
    for i, n in enumerate(shapes):
        lr = snap(rule.at(n), grid) if rule is not None else min(f.lr_at, key=lambda t: abs(math.log(t[0] / n)))[1]
        for seed in range(NEAR_SEEDS if abs(i - centre) <= NEAR_SHAPES // 2 else 1):
            out.add(PlannedRun(f.family, f.variant, c, n, seed, lr, "budgets",
                               f"{f.family}/{f.variant}: new budget C={c:.3g} ({len(f.budgets)} measured, "
                               f"range {min(f.budgets):.3g}-{max(f.budgets):.3g}), shapes about the predicted "
                               f"N_opt {n_opt:.3g}"))


# ---- the held-out prediction ---------------------------------------------------------------------------
def predict_at(profiles_: list[frontier.Profile], budget_flops: float, rng: np.random.Generator) -> dict:
    """N_opt and L_opt predicted at `budget_flops` from the ok profiles' lines in ln C, each with the
    95 % predictive interval of a new vertex (module doc); no interval under 3 ok budgets."""
    ok = [p for p in profiles_ if p.status == "ok"]
    out = {"budget_flops": budget_flops, "from_budgets": [p.budget_flops for p in ok]}
    if len(ok) < 2:
        return {**out, "n_opt": {"value": None, "ci95": [None, None]}, "l_opt": {"value": None, "ci95": [None, None]},
                "interval": f"none: {len(ok)} ok budgets"}
    lc = np.log([p.budget_flops for p in ok])
    x_new = math.log(budget_flops)
    for name, attr in (("n_opt", "n_opt"), ("l_opt", "l_opt")):
        y = np.log([getattr(p, attr) for p in ok])
        intercept_slope = np.polyfit(lc, y, 1)
        value = math.exp(float(np.polyval(intercept_slope, x_new)))
        ci = [None, None]
        if len(ok) >= frontier.MIN_EXPONENT_BUDGETS:
            within = np.log(np.column_stack([getattr(p, f"{attr}_draws") for p in ok]))
            with np.errstate(over="ignore", invalid="ignore"):  # a draw past float range is no value
                ci = frontier._ci(np.exp(predictive_draws(lc, y, within, x_new, rng)))
        out[name] = {"value": value, "ci95": ci}
    out["interval"] = (f"t({len(ok) - 2}) predictive, a new vertex at C={budget_flops:.3g}"
                       if len(ok) >= frontier.MIN_EXPONENT_BUDGETS else "none: needs >= 3 ok budgets")
    return out


def predictive_draws(ln_c: np.ndarray, y: np.ndarray, within: np.ndarray, x_new: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Draws of a new vertex at ln C = x_new: the line re-fitted on the vertices drawn with
    `frontier.between_budget_draws`' scale, plus a new vertex's own scatter on the same scale."""
    s_b, _ = frontier.scale_draws(ln_c, y, within, rng)
    k = len(y)
    drawn = y[None, :] + s_b * rng.standard_normal((len(s_b), k))
    xc = ln_c - ln_c.mean()
    slope = (drawn - drawn.mean(1, keepdims=True)) @ xc / (xc @ xc)
    return drawn.mean(1) + slope * (x_new - ln_c.mean()) + s_b[:, 0] * rng.standard_normal(len(s_b))


def predictions(front: frontier.Frontier, budgets: list[tuple[str, str, float]], seed: int = 0) -> dict[float, dict]:
    """Per new budget, the prediction of each of its families' reported frontiers (metric nll_l2r)."""
    out: dict[float, dict] = {}
    for family, variant, c in budgets:
        for e in front.entries:
            if (e.key.family, e.key.variant) == (family, variant) and e.key.metric == REFERENCE_METRIC:
                rng = np.random.default_rng([seed, int(math.log(c) * 1000)])
                row = {**dict(zip(frontier.ENTRY, e.key)), **predict_at(e.profiles, c, rng)}
                out.setdefault(c, {"budget_flops": c, "entries": []})["entries"].append(row)
    return out


# ---- reading a study ------------------------------------------------------------------------------------
PLAN_COLUMNS = ("family", "variant", "budget_flops", "n_params", "seed", "lr", "value")


def read_study(study_dir, resamples: int = 200, seed: int = 0) -> tuple[pl.DataFrame, frontier.Frontier]:
    """A study's planner points (its runs' last validation nll_l2r, each with its spec's lr) and
    its reported frontier (analysis.compare.frontier on the records selection reports), as the report reads
    them: judge runs out, one kind of weights."""
    inputs = load([study_dir])
    records, _ = fairness.compared_only(inputs.records)
    records, _, _ = fairness.choose_weights(records, inputs.options)
    final, _ = latest(records)
    front = frontier.analyse(select(final, inputs.settings).reported, resamples, seed)
    if "budget_flops" not in final.columns or inputs.specs is None or "lr" not in inputs.specs.columns:
        return pl.DataFrame(schema=dict.fromkeys(PLAN_COLUMNS, pl.Float64)), front
    val = final.filter((pl.col("split") == SELECTION_SPLIT) & (pl.col("metric") == REFERENCE_METRIC)
                       & pl.col("m").is_null() & pl.col("budget_flops").is_not_null())
    lrs = inputs.specs.select("run_id", pl.col("lr").cast(pl.Float64)).unique("run_id")
    points = val.join(lrs, on="run_id").select(*PLAN_COLUMNS).with_columns(
        pl.col("budget_flops").cast(pl.Float64), pl.col("n_params").cast(pl.Float64))
    return points, front
