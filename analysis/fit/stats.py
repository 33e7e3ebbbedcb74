"""Seed statistics: summaries with t-intervals, seeded bootstrap draws, percentile intervals,
and trends over sizes (OLS on size means).

Every interval here is a two-sided 95 % interval (`LEVEL`). Bootstrap draws are keyed by a
label (the size name) rather than by the cell, so two cells measured on the same seeds at a
size get the same resample indices: contrasts between them are paired by seed for free.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import statsmodels.api as sm
from scipy import stats as sps

LEVEL = 0.95  # two-sided coverage of every interval in the report
Q_LO, Q_HI = (1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2


@dataclass(frozen=True)
class SeedSummary:
    """Mean over seeds with std (ddof=1), standard error and a t-interval; NaN where n < 2."""

    mean: float
    std: float
    se: float
    lo: float
    hi: float
    n: int

    def to_dict(self) -> dict[str, float | int | None]:
        """Plain JSON form; NaN becomes None."""
        return {k: finite_or_none(getattr(self, k)) for k in ("mean", "std", "se", "lo", "hi", "n")}


def summarise(values: np.ndarray) -> SeedSummary:
    """Summary of one cell's per-seed values (NaNs must be removed by the caller)."""
    v = np.asarray(values, dtype=float)
    n = int(v.size)
    if n == 0:
        return SeedSummary(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    mean = float(v.mean())
    if n < 2:
        return SeedSummary(mean, math.nan, math.nan, math.nan, math.nan, 1)
    std = float(v.std(ddof=1))
    se = std / math.sqrt(n)
    half = float(sps.t.ppf(Q_HI, n - 1)) * se
    return SeedSummary(mean, std, se, mean - half, mean + half, n)


def welch(a: SeedSummary, b: SeedSummary) -> SeedSummary:
    """Difference a - b of two independent summaries with a Welch-Satterthwaite t-interval."""
    diff = a.mean - b.mean
    if a.n < 2 or b.n < 2:
        return SeedSummary(diff, math.nan, math.nan, math.nan, math.nan, min(a.n, b.n))
    va, vb = a.se**2, b.se**2
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1)) if se > 0 else a.n + b.n - 2
    half = float(sps.t.ppf(Q_HI, dof)) * se
    return SeedSummary(diff, math.nan, se, diff - half, diff + half, min(a.n, b.n))


def draw_indices(key: str, n: int, resamples: int, seed: int) -> np.ndarray:
    """Resample indices [resamples, n] into n seeds, a pure function of (seed, key, n)."""
    rng = np.random.default_rng([seed, zlib.crc32(key.encode()), n])
    return rng.integers(0, n, size=(resamples, n))


def bootstrap_means(groups: list[tuple[str, np.ndarray]], resamples: int, seed: int) -> np.ndarray:
    """Means of resampled seeds, one column per (key, per-seed values) group: [resamples, groups]."""
    out = np.empty((resamples, len(groups)))
    for j, (key, values) in enumerate(groups):
        v = np.asarray(values, dtype=float)
        out[:, j] = v[draw_indices(key, v.size, resamples, seed)].mean(axis=1)
    return out


def percentile_ci(samples: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval; `inverted_cdf` so infinite samples (never reached) stay well defined."""
    s = np.asarray(samples, dtype=float)
    lo = np.quantile(s, Q_LO, axis=axis, method="inverted_cdf")
    hi = np.quantile(s, Q_HI, axis=axis, method="inverted_cdf")
    return lo, hi


def ols_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of y [..., n] on x [n] (closed form, vectorised)."""
    xc = np.asarray(x, float) - np.mean(x)
    yc = y - y.mean(axis=-1, keepdims=True)
    return (yc * xc).sum(axis=-1) / (xc * xc).sum()


def finite_or_none(value: float | int | None) -> float | int | None:
    """A number as JSON holds it: ints as ints, finite floats as floats, NaN, ±inf and None as None."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Trend:
    """Slope of a per-size quantity against log10 x: OLS over the size means, t(df) interval.

    The residuals of the size means about the line carry both the seed noise and how far each
    size strays from it, so the interval includes the between-size deviation. `span_decades` is
    the measured range of log10 x: the slope holds over that span only."""

    slope: float
    lo: float
    hi: float
    n_points: int
    status: str
    reason: str = ""
    df: int = 0
    span_decades: float = math.nan
    x_min: float = math.nan
    x_max: float = math.nan

    def over_span(self) -> dict:
        """The change over the measured span (slope x decades) with its interval, as the report
        quotes it ("Δ changes by ..."); None where there is no slope or span."""
        parts = (self.slope, self.lo, self.hi, self.span_decades)
        if any(v is None for v in parts):
            return {"value": None, "ci95": [None, None]}
        s = self.span_decades
        return {"value": finite_or_none(self.slope * s), "ci95": [finite_or_none(self.lo * s), finite_or_none(self.hi * s)]}

    def to_dict(self) -> dict:
        """Plain JSON form, with the change over the span (`over_span`)."""
        return {"slope_per_decade": finite_or_none(self.slope), "change_over_span": self.over_span(),
                "ci95": [finite_or_none(self.lo), finite_or_none(self.hi)],
                "n_points": self.n_points, "status": self.status, "reason": self.reason, "df": self.df,
                "method": "OLS over size means, t(df) interval",
                "span_decades": finite_or_none(self.span_decades),
                "x_range": [finite_or_none(self.x_min), finite_or_none(self.x_max)]}


TREND_MIN_POINTS = 3  # a line through 2 size means has no residual df


def ols_trend(x: np.ndarray, y: np.ndarray) -> Trend:
    """statsmodels OLS of y (one value per size) on log10 x, with the t(k - 2) interval of the slope."""
    lx = np.log10(np.asarray(x, float))
    res = sm.OLS(np.asarray(y, float), sm.add_constant(lx)).fit()
    lo, hi = res.conf_int(alpha=1 - LEVEL)[1]
    return Trend(float(res.params[1]), float(lo), float(hi), int(lx.size), "ok", df=int(res.df_resid),
                 span_decades=float(np.ptp(lx)), x_min=float(np.min(x)), x_max=float(np.max(x)))


def trend(x: list[float], groups: list[list[tuple[str, np.ndarray, float]]], resamples: int = 0, seed: int = 0) -> Trend:
    """Slope of sum(sign * mean(values)) per size vs log10 x; each size is a list of
    (draw key, per-seed values, sign) groups (one paired group, or two unpaired ones).
    `resamples` and `seed` are accepted for compatibility; the interval is analytic."""
    if len(x) < TREND_MIN_POINTS:
        return Trend(math.nan, math.nan, math.nan, len(x), "not_identifiable",
                     f"{len(x)} size(s) with >= 2 seeds, need >= {TREND_MIN_POINTS}")
    point = np.array([sum(s * np.mean(v) for _, v, s in g) for g in groups])
    return ols_trend(np.asarray(x, float), point)
