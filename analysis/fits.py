"""Curve fits with bootstrap intervals: pure functions returning frozen results with a status.

Identifiability rule: a point (size) needs >= 2 seeds to enter a fit (points with fewer are
dropped and named in `reason`); a fit needs >= 3 such points. Otherwise the result has status
`not_identifiable` and no parameters - it is never fitted silently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np

from analysis import powerlaw
from analysis.cells import Cell, Point
from analysis.stats import bootstrap_means, percentile_ci

MIN_POINTS = 3  # three parameters (E, A, alpha)
MIN_SEEDS = 2  # the bootstrap resamples seeds
PREDICT_FACTORS = (10.0, 100.0)  # extrapolate to 10x and 100x the largest fitted x
POWER_NAMES = ("E", "A", "alpha")
ENSEMBLE_NAMES = ("c", "b", "gamma")


@dataclass(frozen=True)
class MetricForm:
    """How a metric enters the power law: the fitted quantity and, if not fitted, why."""

    fitted: str = "value"
    transform: Callable[[np.ndarray], np.ndarray] = staticmethod(lambda v: v)
    skip_reason: str = ""


METRIC_FORMS: dict[str, MetricForm] = {
    "lambada_acc": MetricForm("1 - value", lambda v: 1.0 - v),  # error rate falls with size
    "infill_em": MetricForm("1 - value", lambda v: 1.0 - v),
    "gen_time_s": MetricForm(skip_reason="generation time grows with size; not a decreasing power law"),
}


@dataclass(frozen=True)
class Param:
    """A point estimate with its 95 % bootstrap interval (None when not computed)."""

    value: float
    ci95: tuple[float | None, float | None]


@dataclass(frozen=True)
class CurveFit:
    """One fitted curve y(x) = p0 + p1 * x^-p2 (names in `params` order)."""

    labels: dict
    x: str
    form: str
    params: dict[str, Param]
    n_points: int
    n_seeds_min: int
    status: str
    reason: str = ""
    predictions: tuple[tuple[float, Param], ...] = ()
    samples: np.ndarray | None = field(default=None, compare=False, repr=False)  # [B, 3] (E, A, alpha)

    def curve(self) -> powerlaw.PowerLaw | None:
        """The fitted curve, or None if not fitted."""
        if self.status != "ok":
            return None
        return powerlaw.PowerLaw(*(p.value for p in self.params.values()))

    def to_json(self) -> dict:
        """The fits.json entry."""
        out = {**{k: v for k, v in self.labels.items()}, "x": self.x, "form": self.form,
               "params": {k: {"value": _num(p.value), "ci95": [_num(c) for c in p.ci95]}
                          for k, p in self.params.items()},
               "n_points": self.n_points, "n_seeds_min": self.n_seeds_min, "status": self.status,
               "reason": self.reason,
               "predictions": [{"x": _num(x), "value": _num(p.value), "ci95": [_num(c) for c in p.ci95]}
                               for x, p in self.predictions]}
        return out


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def usable_points(points: tuple[Point, ...]) -> tuple[list[Point], list[str]]:
    """Points with enough seeds, and a note for each one left out."""
    keep = [p for p in points if len(p.values) >= MIN_SEEDS]
    dropped = [f"{p.label} has {len(p.values)} seed(s)" for p in points if len(p.values) < MIN_SEEDS]
    return keep, dropped


def identifiability(points: list[Point], dropped: list[str]) -> str:
    """Empty if fittable, else the reason."""
    if len(points) >= MIN_POINTS:
        return ""
    why = f"{len(points)} point(s) with >= {MIN_SEEDS} seeds, need >= {MIN_POINTS}"
    return why + (f" ({'; '.join(dropped)})" if dropped else "")


def fit_points(points: tuple[Point, ...], *, labels: dict, x: str, form: str, names: tuple[str, ...],
               resamples: int, seed: int, transform=lambda v: v) -> CurveFit:
    """Fit y = p0 + p1 x^-p2 to the seed means of `points`, bootstrap over seeds within each point."""
    keep, dropped = usable_points(points)
    n_seeds_min = min((len(p.values) for p in points), default=0)
    base = dict(labels=labels, x=x, form=form, n_points=len(keep), n_seeds_min=n_seeds_min)
    reason = identifiability(keep, dropped)
    if reason:
        return CurveFit(**base, params={}, status="not_identifiable", reason=reason)
    values = [transform(p.array) for p in keep]
    if any(np.any(v <= 0) for v in values):
        return CurveFit(**base, params={}, status="not_identifiable", reason="non-positive values; a log-space fit needs y > 0")
    xs = np.array([p.x for p in keep])
    if np.any(xs <= 0) or np.unique(xs).size < MIN_POINTS:
        return CurveFit(**base, params={}, status="not_identifiable", reason=f"need >= {MIN_POINTS} distinct positive {x} values")
    x_ref = float(np.exp(np.log(xs).mean()))
    lx = np.log(xs / x_ref)
    theta, _ = powerlaw.fit_theta(lx, np.array([v.mean() for v in values]))
    y_boot = bootstrap_means([(p.draw_key, v) for p, v in zip(keep, values)], resamples, seed)
    boot = _to_original(powerlaw.fit_resamples(lx, y_boot, theta), x_ref)
    point = _to_original(theta[None, :], x_ref)[0]
    lo, hi = percentile_ci(boot)
    params = {n: Param(float(point[i]), (float(lo[i]), float(hi[i]))) for i, n in enumerate(names)}
    boundary = _boundary_notes(theta, point)  # a flat, step-like or offset-free curve: not identified
    notes = "; ".join(dropped + boundary)
    predictions = () if boundary else _predictions(point, boot, xs.max())  # no power law: no extrapolation
    return CurveFit(**base, params=params, status="at_bound" if boundary else "ok", reason=notes,
                    predictions=predictions, samples=boot)


def _to_original(theta: np.ndarray, x_ref: float) -> np.ndarray:
    """[B, 3] (e, a, alpha) in reference units -> (E, A, alpha) in original units."""
    return np.stack([np.exp(theta[:, 0]), np.exp(theta[:, 1] + theta[:, 2] * math.log(x_ref)), theta[:, 2]], 1)


# A parameter within this share of its search box's width of an edge sits at its bound: e = log E
# at -20 is E = 2e-9, i.e. no irreducible loss was identified (a pure power law fits better).
BOUND_MARGIN = 0.01


def _boundary_notes(theta: np.ndarray, point: np.ndarray) -> list[str]:
    """Notes for every parameter at its search bound; theta in reference units, point (E, A, alpha)."""
    lo, hi = powerlaw.BOUNDS[2]
    notes = []
    if point[2] < 2 * lo or point[2] > 0.99 * hi:  # within a hair of the search box
        notes.append(f"exponent at its bound ({point[2]:.3g})")
    for i, name in ((0, "E"), (1, "A")):
        lo, hi = powerlaw.BOUNDS[i]
        margin = BOUND_MARGIN * (hi - lo)
        if theta[i] < lo + margin or theta[i] > hi - margin:
            notes.append(f"{name} at its bound ({point[i]:.3g})")
    return notes


def predict(params: np.ndarray, x: float) -> np.ndarray:
    """E + A x^-alpha for rows of (E, A, alpha)."""
    params = np.atleast_2d(params)
    return params[:, 0] + params[:, 1] * x ** (-params[:, 2])


def _predictions(point: np.ndarray, boot: np.ndarray, x_max: float) -> tuple[tuple[float, Param], ...]:
    out = []
    for factor in PREDICT_FACTORS:
        x = float(x_max * factor)
        lo, hi = percentile_ci(predict(boot, x))
        out.append((x, Param(float(predict(point, x)[0]), (float(lo), float(hi)))))
    return tuple(out)


def fit_cell(cell: Cell, *, x: str, resamples: int, seed: int) -> CurveFit:
    """The power-law fit of one (family, variant, metric, dataset, split, m) cell."""
    labels = cell.as_dict()
    metric_form = METRIC_FORMS.get(labels["metric"], MetricForm())
    form = f"{metric_form.fitted} = E + A*{x}^-alpha"
    if metric_form.skip_reason:
        return CurveFit(labels=labels, x=x, form=form, params={}, n_points=len(cell.points),
                        n_seeds_min=min(len(p.values) for p in cell.points), status="not_fitted",
                        reason=metric_form.skip_reason)
    return fit_points(cell.points, labels=labels, x=x, form=form, names=POWER_NAMES,
                      resamples=resamples, seed=seed, transform=metric_form.transform)
