"""Evaluation noise of a paired gap, from the per-window losses runs keep (`runs/*/eval_windows.parquet`).

Every run of a study scores the same validation windows (jobs.eval.windows), so the choice of
windows is common to all seeds: the seed-to-seed spread of a paired gap does not contain it. Write
the per-window gap of seed s on window w as d_sw = mu + a_s + b_w + e_sw (seed effect a, window
effect b, interaction e). The paired gap's mean over S seeds and W windows has variance
Var(a)/S + Var(b)/W + Var(e)/(SW). The seed t-interval estimates the first and last terms; this
module estimates the window term from the two-way table of d: Var(b) = Var_w(column means) -
MS_interaction / S (floored at 0), and adds it, with Satterthwaite's degrees of freedom for the
sum (the interval is never narrower than the seed interval alone). Windows count as independent
draws from the text (no finite-population correction).

Files only (polars, numpy, scipy): no torch, no other aoscale package.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats as sps

from analysis.fit.stats import Q_HI, SeedSummary

WINDOWS_FILE = "eval_windows.parquet"  # jobs.eval.windows.WINDOWS_FILE (analysis imports no jobs)
PAIR_KEYS = ("dataset", "split", "window")


@dataclass(frozen=True)
class WindowNoise:
    """The window-sampling variance of a paired gap's mean, from S seeds x W common windows."""

    var: float
    n_seeds: int
    n_windows: int

    @property
    def se(self) -> float:
        """Its standard error."""
        return math.sqrt(self.var)


def read_windows(paths: tuple[str, ...] | list[str]) -> pl.DataFrame | None:
    """Every `runs/*/eval_windows.parquet` under the study directories among `paths` (None if none)."""
    files = [f for p in paths if Path(p).is_dir() for f in sorted(Path(p).glob(f"runs/*/{WINDOWS_FILE}"))]
    if not files:
        return None
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


def same_runs(windows: pl.DataFrame, final: pl.DataFrame) -> pl.DataFrame:
    """The windows of the records' studies and kind of weights (what the gaps were computed on)."""
    keep = pl.col("study").is_in(final["study"].unique().to_list())
    if "weights" in final.columns:
        keep &= pl.col("weights").is_in(final["weights"].drop_nulls().unique().to_list())
    return windows.filter(keep)


def gap_table(windows: pl.DataFrame, family_runs: dict[int, str], reference_runs: dict[int, str],
              metric: str, reference_metric: str, dataset: str, split: str) -> np.ndarray:
    """d [seeds, windows]: family minus reference per window, over the seeds both have (by seed)
    and the windows every one of those runs scored (sorted by window)."""
    def side(runs: dict[int, str], name: str) -> dict[int, pl.DataFrame]:
        rows = windows.filter(pl.col("run_id").is_in(list(runs.values())) & (pl.col("metric") == name)
                              & (pl.col("dataset") == dataset) & (pl.col("split") == split) & pl.col("m").is_null())
        by_run = {r: g.select("window", "value") for (r,), g in rows.group_by(["run_id"])}
        return {s: by_run[r] for s, r in runs.items() if r in by_run}

    fam, ref = side(family_runs, metric), side(reference_runs, reference_metric)
    seeds = sorted(set(fam) & set(ref))
    if not seeds:
        return np.empty((0, 0))
    frames = [fam[s].rename({"value": f"f{s}"}) for s in seeds] + [ref[s].rename({"value": f"r{s}"}) for s in seeds]
    table = frames[0]
    for frame in frames[1:]:
        table = table.join(frame, on="window", how="inner")
    table = table.sort("window")
    return np.array([table[f"f{s}"].to_numpy() - table[f"r{s}"].to_numpy() for s in seeds])


def window_noise(d: np.ndarray) -> WindowNoise | None:
    """The window term of Var(mean d) from a [seeds, windows] table (None below 2 x 2)."""
    n_seeds, n_windows = d.shape
    if n_seeds < 2 or n_windows < 2:
        return None
    columns = d.mean(axis=0)
    residual = d - d.mean(axis=1, keepdims=True) - columns[None, :] + d.mean()
    ms_interaction = float((residual ** 2).sum()) / ((n_seeds - 1) * (n_windows - 1))
    var_b = max(float(columns.var(ddof=1)) - ms_interaction / n_seeds, 0.0)
    return WindowNoise(var_b / n_windows, n_seeds, n_windows)


def with_window_noise(delta: SeedSummary, noise: WindowNoise) -> SeedSummary:
    """A paired seed summary widened by the window term: se^2 + var, t-interval on Satterthwaite df,
    never narrower than the seed interval it widens."""
    seed_var = delta.se ** 2
    total = seed_var + noise.var
    if not math.isfinite(total) or delta.n < 2:
        return delta
    denom = seed_var ** 2 / (delta.n - 1) + noise.var ** 2 / (noise.n_windows - 1)
    dof = total ** 2 / denom if denom > 0 else math.inf
    se = math.sqrt(total)
    half = float(sps.t.ppf(Q_HI, dof)) * se if math.isfinite(dof) else float(sps.norm.ppf(Q_HI)) * se
    half = max(half, (delta.hi - delta.lo) / 2)  # more df never makes an interval with more noise narrower
    return SeedSummary(delta.mean, delta.std, se, delta.mean - half, delta.mean + half, delta.n)


def runs_by_seed(final: pl.DataFrame, family: str, variant: str, size: str, metric: str) -> dict[int, str]:
    """{seed: run_id} of one cell's runs at one size (the records the gap was computed from)."""
    rows = final.filter((pl.col("family") == family) & (pl.col("variant") == variant) & (pl.col("size") == size)
                        & (pl.col("metric") == metric)).select("seed", "run_id").unique()
    return dict(rows.sort("seed").iter_rows())
