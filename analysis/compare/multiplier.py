"""The multiplier k(x) = x_family(L_ar(x)) / x: how many times AR's x the family needs to reach
AR's loss at x, in each x convention (core parameters, family parameters, training FLOPs).

k is evaluated only at AR's measured x (so L_ar(x) is an interpolation of AR's curve). The implied
family size x_family = L_family^-1(L_ar(x)) is an interpolation too only when it lies inside the
family's measured range; otherwise the k rests on the family's curve past its data and is marked
`extrapolated` (in fits.json, the tables and the figures; never in the summary's headline).
The interval combines the two fits' resamples, drawn independently (conservative when the two
families' seeds are positively correlated).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit.fits import CurveFit
from analysis.fit.powerlaw import predict
from analysis.fit.stats import percentile_ci
from analysis.records.cells import CellKey

RANGE_TOLERANCE = 1e-9  # relative slack on the measured range's ends (float round-off)


@dataclass(frozen=True)
class Multiplier:
    """k at AR's measured x on one axis, its 95 % interval, the share of resamples in which the
    family never reaches AR's loss (k = inf), the implied family x and whether it is extrapolated."""

    x: float
    k: float
    lo: float
    hi: float
    unreached: float
    axis: str = "n_params"
    x_family: float = float("nan")
    extrapolated: bool = False

    def to_json(self) -> dict:
        """The fits.json entry."""
        def fin(v):
            return float(v) if np.isfinite(v) else None
        return {"axis": self.axis, "x": self.x, "k": fin(self.k), "ci95": [fin(self.lo), fin(self.hi)],
                "unreached": self.unreached, "x_family": fin(self.x_family), "extrapolated": self.extrapolated}


def _values(fit: CurveFit) -> np.ndarray:
    return np.array([p.value for p in fit.params.values()])


def implied_x(fam: np.ndarray, target: np.ndarray) -> np.ndarray:
    """x at which rows (E, A, alpha) of `fam` reach `target` (inf where never: target <= E)."""
    fam = np.atleast_2d(fam)
    excess = target - fam[:, 0]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x_fam = np.power(fam[:, 1] / np.where(excess > 0, excess, 1.0), 1.0 / fam[:, 2])
    return np.where(excess > 0, x_fam, np.inf)


def inside(x: float, xs: tuple[float, ...]) -> bool:
    """Whether x lies within the measured range of xs."""
    return bool(np.isfinite(x) and min(xs) * (1 - RANGE_TOLERANCE) <= x <= max(xs) * (1 + RANGE_TOLERANCE))


def axis_multipliers(fam: CurveFit | None, ref: CurveFit | None, axis: str) -> tuple[tuple[Multiplier, ...], str]:
    """k at each of AR's measured x on one axis, from the two fits (both must be usable)."""
    if fam is None or ref is None or not (fam.usable and ref.usable):
        return (), "needs both power-law fits usable (status ok or reduced)"
    out = []
    for x in sorted(ref.xs):
        target = float(predict(_values(ref), x)[0])
        x_fam = float(implied_x(_values(fam), np.array([target]))[0])
        boot = implied_x(fam.samples, predict(ref.samples, x)) / x
        lo, hi = percentile_ci(boot)
        out.append(Multiplier(float(x), x_fam / x, float(lo), float(hi), float(np.mean(~np.isfinite(boot))), axis,
                              x_fam, not inside(x_fam, fam.xs)))
    return tuple(out), ""


def multipliers(fits_by_axis: dict[str, dict[CellKey, CurveFit]], fam_key: CellKey, ref_key: CellKey,
                main_axis: str) -> tuple[tuple[Multiplier, ...], str]:
    """k on every axis that has fits; the reason (of the main axis) when it has none."""
    out, why = [], ""
    for axis in sorted(fits_by_axis, key=lambda a: (a != main_axis, a)):
        fits = fits_by_axis[axis]
        got, reason = axis_multipliers(fits.get(fam_key), fits.get(ref_key), axis)
        out += got
        if axis == main_axis:
            why = reason
    return tuple(out), why


def headline(mults: tuple[Multiplier, ...], axis: str) -> Multiplier | None:
    """The k a summary may quote: on `axis`, not extrapolated, at the largest such x (else None)."""
    ok = [m for m in mults if m.axis == axis and not m.extrapolated and np.isfinite(m.k)]
    return max(ok, key=lambda m: m.x, default=None)
