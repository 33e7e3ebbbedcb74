"""Ensemble-size sensitivity: NLL vs M per size fitted as NLL(M) = c + b M^-gamma (bootstrap over
seeds, all M of a size drawn with the same seeds), and the gain NLL(M_min) - NLL(M_max) per size
(paired within each run) with its trend per decade of model size."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from analysis.records.cells import Point, per_seed
from analysis.fit.fits import ENSEMBLE_NAMES, MIN_SEEDS, CurveFit, fit_points
from analysis.fit.stats import SeedSummary, Trend, summarise, trend

METRIC = "nll_ensemble"


@dataclass(frozen=True)
class GainPoint:
    """Gain from M_min to M_max at one size (per-seed paired differences)."""

    size: str
    x: float
    m_min: int
    m_max: int
    gain: SeedSummary


@dataclass(frozen=True)
class EnsembleStudy:
    """One family/variant on one dataset/split."""

    family: str
    variant: str
    dataset: str
    split: str
    fits: tuple[CurveFit, ...]  # one per size, x = m
    gains: tuple[GainPoint, ...]
    gain_trend: Trend
    points: tuple[tuple[Point, ...], ...] = ()  # per size, aligned with `fits`


def ensemble_studies(final: pl.DataFrame, x: str, resamples: int, seed: int) -> list[EnsembleStudy]:
    """All ensemble analyses present in the latest records."""
    rows = final.filter((pl.col("metric") == METRIC) & pl.col("m").is_not_null())
    if rows.is_empty():
        return []
    seeds = per_seed(rows, x)
    out = []
    for key, group in seeds.group_by(["family", "variant", "dataset", "split"], maintain_order=True):
        out.append(_study(tuple(key), group, resamples, seed))
    return sorted(out, key=lambda s: (s.family, s.variant, s.dataset, s.split))


def _size_points(group: pl.DataFrame, size: str) -> list[Point]:
    sub = group.filter(pl.col("size") == size).sort(["m", "seed"])
    return [Point(f"M={m}", float(m), tuple(g["seed"]), tuple(g["value"]), size)
            for (m,), g in sub.group_by(["m"], maintain_order=True)]


def _study(key: tuple, group: pl.DataFrame, resamples: int, seed: int) -> EnsembleStudy:
    family, variant, dataset, split = key
    sizes = group.group_by("size").agg(pl.col("x").median()).sort(["x", "size"])
    fits, gains, all_points = [], [], []
    for size, x_size in sizes.iter_rows():
        points = _size_points(group, size)
        all_points.append(tuple(points))
        labels = {"family": family, "variant": variant, "metric": METRIC, "dataset": dataset,
                  "split": split, "m": None, "size": size}
        fits.append(fit_points(tuple(points), labels=labels, x="m", form="NLL(M) = c + b*M^-gamma",
                               names=ENSEMBLE_NAMES, resamples=resamples, seed=seed, reducible=False))
        gain = _gain(points, size, x_size)
        if gain is not None:
            gains.append(gain)
    usable = [(g, _gain_values(_size_points(group, g.size))) for g in gains if g.gain.n >= MIN_SEEDS]
    tr = trend([g.x for g, _ in usable], [[(g.size, v, 1.0)] for g, v in usable], resamples, seed)
    return EnsembleStudy(family, variant, dataset, split, tuple(fits), tuple(gains), tr, tuple(all_points))


def _gain_values(points: list[Point]) -> np.ndarray:
    lo, hi = points[0], points[-1]
    a, b = dict(zip(lo.seeds, lo.values)), dict(zip(hi.seeds, hi.values))
    return np.array([a[s] - b[s] for s in sorted(set(a) & set(b))])


def _gain(points: list[Point], size: str, x: float) -> GainPoint | None:
    if len(points) < 2:
        return None
    return GainPoint(size, float(x), int(points[0].x), int(points[-1].x), summarise(_gain_values(points)))
