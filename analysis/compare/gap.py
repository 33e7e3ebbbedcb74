"""The AR-vs-any-order gap: Delta(x) = L_family(x) - L_ar(x) per size with t-intervals (paired by
seed where at least two seeds match, Welch otherwise), its trend over the measured span of x (OLS
over the size means), and the multiplier k(x) (`analysis.compare.multiplier`): how many times more x the
family needs to reach AR's loss at x, interpolated inside the measured range or marked extrapolated."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from analysis.fit import evalnoise

from analysis.records.cells import Cell, Point
from analysis.fit.fits import MIN_SEEDS, CurveFit, predict
from analysis.compare.multiplier import Multiplier, multipliers
from analysis.fit.stats import (
    SeedSummary,
    Trend,
    bootstrap_means,
    percentile_ci,
    summarise,
    trend,
    welch,
)

REFERENCE_FAMILY, REFERENCE_METRIC = "ar", "nll_l2r"
COMPARED_METRICS = ("nll_anyorder", "nll_l2r")  # each non-AR family is compared under both


@dataclass(frozen=True)
class GapPoint:
    """Delta at one size."""

    size: str
    x: float
    delta: SeedSummary
    paired: bool
    n_family: int
    n_reference: int
    plateau: str = ""  # why this size's comparison is not a result (a run on the plateau), else ""
    eval_se: float = math.nan  # the windows' share of delta.se (analysis.fit.evalnoise), NaN without window files
    n_windows: int = 0  # common windows behind eval_se


@dataclass(frozen=True)
class Gap:
    """One family/variant/metric against the AR reference on one dataset/split."""

    family: str
    variant: str
    metric: str  # the records' metric (nll_l2r, nll_anyorder, ...), nats per byte
    dataset: str
    split: str
    reference: str  # the reference's metric (AR's nll_l2r)
    points: tuple[GapPoint, ...]  # one per size both cells trained, smallest first
    trend: Trend  # how the gap changes with x (analysis.fit.stats.trend)
    multipliers: tuple[Multiplier, ...]  # compute multipliers read off the fits, where they hold
    multiplier_reason: str = ""  # why there are none, else ""
    reference_key: tuple[str, str] = (REFERENCE_FAMILY, "")  # the AR cell's (family, variant)


def _gap_point(a: Point, r: Point) -> tuple[GapPoint, list[tuple[str, np.ndarray, float]]]:
    va, vr = dict(zip(a.seeds, a.values)), dict(zip(r.seeds, r.values))
    common = sorted(set(va) & set(vr))
    if len(common) >= MIN_SEEDS:
        diffs = np.array([va[s] - vr[s] for s in common])
        return GapPoint(a.label, r.x, summarise(diffs), True, a.array.size, r.array.size), [(a.draw_key, diffs, 1.0)]
    delta = welch(summarise(a.array), summarise(r.array))
    groups = [(a.draw_key + "|family", a.array, 1.0), (r.draw_key + "|reference", r.array, -1.0)]
    return GapPoint(a.label, r.x, delta, False, a.array.size, r.array.size), groups


def _values(fit: CurveFit) -> np.ndarray:
    return np.array([p.value for p in fit.params.values()])


def compute_gaps(cells: list[Cell], fits: dict[tuple, CurveFit], resamples: int, seed: int, *, x: str = "n_params",
                 axis_fits: dict[str, dict[tuple, CurveFit]] | None = None) -> tuple[list[Gap], list[str]]:
    """Every non-AR (family, variant) x COMPARED_METRICS against AR's nll_l2r, per dataset/split.
    `axis_fits` adds the fits on other x conventions, for the multipliers on those axes."""
    by_axis = {**(axis_fits or {}), x: fits}
    refs = [c for c in cells if c.key.family == REFERENCE_FAMILY and c.key.metric == REFERENCE_METRIC and c.key.m is None]
    if not refs:
        return [], [f"no gap: no '{REFERENCE_FAMILY}' runs with metric '{REFERENCE_METRIC}'"]
    notes, gaps = [], []
    ref_by_data = {}
    for c in refs:  # with several AR variants, the one with most runs is the reference
        best = ref_by_data.get(c.key.data)
        if best is None or _n_runs(c) > _n_runs(best):
            ref_by_data[c.key.data] = c
    for c in cells:
        ref = ref_by_data.get(c.key.data)
        if c.key.family == REFERENCE_FAMILY or c.key.metric not in COMPARED_METRICS or c.key.m is not None or ref is None:
            continue
        gaps.append(_gap(c, ref, by_axis, x, resamples, seed))
    if not gaps:
        notes.append("no gap: no non-AR family with nll_anyorder or nll_l2r on the reference's datasets")
    return gaps, notes


def _n_runs(cell: Cell) -> int:
    return sum(len(p.values) for p in cell.points)


def _gap(c: Cell, ref: Cell, by_axis: dict, x: str, resamples: int, seed: int) -> Gap:
    ref_points = {p.label: p for p in ref.points}
    points, xs, groups = [], [], []
    for a in c.points:
        r = ref_points.get(a.label)
        if r is None:
            continue
        gp, g = _gap_point(a, r)
        points.append(gp)
        if min(gp.n_family, gp.n_reference) >= MIN_SEEDS:
            xs.append(gp.x)
            groups.append(g)
    tr = trend(xs, groups, resamples, seed)
    mult, why = multipliers(by_axis, c.key, ref.key, x)
    k = c.key
    return Gap(k.family, k.variant, k.metric, k.dataset, k.split, f"{ref.key.family}/{ref.key.variant} {REFERENCE_METRIC}",
               tuple(points), tr, mult, why, (ref.key.family, ref.key.variant))


def with_eval_noise(gaps: list[Gap], final: pl.DataFrame, windows: pl.DataFrame | None) -> list[Gap]:
    """Each paired per-size gap with the evaluation noise of its windows added to its interval
    (analysis.fit.evalnoise), where the runs' per-window files exist; other points are unchanged."""
    if windows is None or windows.is_empty():
        return gaps
    windows = evalnoise.same_runs(windows, final)
    out = []
    for g in gaps:
        ref_family, ref_variant = g.reference_key
        points = []
        for p in g.points:
            noise = None
            if p.paired:
                family = evalnoise.runs_by_seed(final, g.family, g.variant, p.size, g.metric)
                reference = evalnoise.runs_by_seed(final, ref_family, ref_variant, p.size, REFERENCE_METRIC)
                d = evalnoise.gap_table(windows, family, reference, g.metric, REFERENCE_METRIC, g.dataset, g.split)
                noise = evalnoise.window_noise(d) if d.shape[0] == p.delta.n else None
            points.append(p if noise is None else replace(p, delta=evalnoise.with_window_noise(p.delta, noise),
                                                          eval_se=noise.se, n_windows=noise.n_windows))
        out.append(replace(g, points=tuple(points)))
    return out


@dataclass(frozen=True)
class MatchedPoint:
    """Δ at matched family parameters: the family's loss at its own non-embedding count x minus
    AR's fitted loss at the same x (bootstrap over the family's seeds and AR's fit)."""

    family: str
    variant: str
    metric: str
    dataset: str
    split: str
    size: str
    x: float
    delta: float
    lo: float
    hi: float
    n: int
    status: str
    reason: str = ""


def matched_family_gaps(cells: list[Cell], fits: dict[tuple, CurveFit], resamples: int, seed: int) -> list[MatchedPoint]:
    """Δ per size at matched family parameters (cells and fits on x = n_params_family)."""
    refs = {}
    for c in cells:
        if c.key.family == REFERENCE_FAMILY and c.key.metric == REFERENCE_METRIC and c.key.m is None:
            best = refs.get(c.key.data)
            refs[c.key.data] = c if best is None or _n_runs(c) > _n_runs(best) else best
    out = []
    for c in cells:
        ref = refs.get(c.key.data)
        if c.key.family == REFERENCE_FAMILY or c.key.metric not in COMPARED_METRICS or c.key.m is not None or ref is None:
            continue
        out += [_matched(c, a, fits.get(ref.key), resamples, seed) for a in c.points]
    return out


def _matched(c: Cell, a: Point, ref_fit: CurveFit | None, resamples: int, seed: int) -> MatchedPoint:
    k = c.key
    base = dict(family=k.family, variant=k.variant, metric=k.metric, dataset=k.dataset, split=k.split, size=a.label, x=a.x,
                n=a.array.size)
    if ref_fit is None or not ref_fit.usable:
        why = f"AR's fit on n_params_family is {ref_fit.status if ref_fit else 'missing'}"
        return MatchedPoint(**base, delta=math.nan, lo=math.nan, hi=math.nan, status="not_computed", reason=why)
    delta = float(a.array.mean() - predict(_values(ref_fit), a.x)[0])
    boot = bootstrap_means([(a.draw_key + "|matched", a.array)], len(ref_fit.samples), seed)[:, 0]
    lo, hi = percentile_ci(boot - predict(ref_fit.samples, a.x))
    return MatchedPoint(**base, delta=delta, lo=float(lo), hi=float(hi), status="ok")
