"""Compute-optimal frontiers of isoFLOP studies (scaling.study.sweep `budgets`) and the training-compute
multiplier at matched loss.

Input: the records `analysis.records.selection` keeps (best swept settings per cell chosen on validation,
values from the other splits). Per (family, variant, dataset, split, metric):

- Approach 2 (Hoffmann et al. 2022, as SMDM's isoFLOP profiles): per budget C, OLS of the per-seed
  losses on a parabola in x = ln N (N = the core's non-embedding parameters, `n_params`).
  N_opt = exp(-b / 2c), L_opt = the vertex. Intervals: 2,000 draws of the coefficients from a
  multivariate t with the fit's residual df (statsmodels' covariance), so they carry how far the
  sizes stray from the parabola; a budget with 0 residual df is `saturated` (no interval), a vertex
  outside the measured sizes is `edge` (not used downstream), c <= 0 is `no_minimum`. The parabola is
  linear in its coefficients, so these draws are exactly its re-fits on runs resampled from the
  fitted parabola with t-calibrated noise (a parametric resample over runs).
- Exponents a of N_opt ∝ C^a and L_opt ∝ C^b: OLS slopes of ln N_opt and ln L_opt on ln C over the
  `ok` budgets. Their intervals carry the scatter of the vertices between budgets (an lr carried
  from another budget, a shape grid placed differently: what makes one budget's vertex stray from
  the frontier beyond its own parabola's noise). `between_budget_draws` is scalefit's scale rule
  one level up: s^2 = the larger of the vertices' mean square about the line (df K - 2) and the
  within-parabola variance of a vertex (from the re-fitted parabolas' draws); each resample draws
  the K vertices about their measured values with that scale, t-calibrated with the line's df
  (s_b^2 = s^2 (K - 2) / chi2_{K-2}), so the slope's percentile interval is the t(K - 2) interval of
  OLS over the vertices, widened where the parabolas are noisier than the vertices' scatter shows
  (the larger scale with the smaller df: never narrower, so no selection on a small mean square).
  For L_opt the line in ln C also absorbs the frontier's curvature, which makes k's interval
  conservative (tests/analysis/compare/test_frontier_coverage.py). Fewer than 3 budgets leave no df for
  the scatter: the value, no interval, and the reason.
- Approach 3: L(N, D) = E + A·N^-α + B·D^-β by least squares on ln L (D = training tokens), solved
  by a grid over (α, β, E) with A, B linear, then polished (scipy least_squares). Its interval is
  a residual bootstrap (residuals scaled by sqrt(n / df), t-calibrated) whose every resample is
  solved by the same grid + polish; resamples ending at a bound are counted. df = n - 5. One budget
  alone does not identify it (`not_identifiable`), and E below 1e-3 of the smallest loss is its
  E -> 0 bound (`at_bound`).
- Compute multipliers: k(L) = C_family(L) / C_AR(L) along the two Approach-2 frontiers (each
  compared metric against AR's nll_l2r, as the per-size gaps; ln C
  interpolated in L_opt between budgets by a monotone cubic), at loss levels inside both measured L_opt
  ranges; without an overlap one level between them, linearly extended and `extrapolated: true`
  (never in a summary). The interval reads the L_opt draws of `between_budget_draws` (the same
  resample as the exponents), the two families drawn independently. k is given on two FLOP counts
  (`flops`): `charged`, each family's own training FLOPs (`budget_flops`, planned with
  `FamilyModel.flops_per_token` as executed: AO-GPT's adaLN modulation once per position and forward
  pass since issue 47, per token in studies planned before; docs/DESIGN.md §4.5), and `core`,
  6·N·D with N the shared core's non-embedding parameters (`n_params`) and D the tokens: the same
  count for every family at a shape, without any family's own projections. A budget's core C at its
  vertex is C times the core-to-charged ratio of its runs, interpolated in ln N at N_opt.
- Where the frontiers share no loss range, a bound read off measured points only (`k_bound`): AR
  reached loss L* (its best seed-mean point) at budget C_AR, and the family's L_opt at its budget C_f,
  a bracketed-or-interior (`ok`) vertex, lies above L* with its whole 95 % interval. If the family's
  frontier falls with C, it needs more than C_f to reach L*, so k(L*) > C_f / C_AR; the largest
  such ratio over the measured budgets is reported, on both FLOP counts (AR's core C from its
  point's own 6·N·D). It is a bound, never a k.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import polars as pl
import statsmodels.api as sm
from scipy.interpolate import PchipInterpolator
from scipy.optimize import least_squares

from analysis.fit import fitstatus
from analysis.compare.gap import COMPARED_METRICS, REFERENCE_FAMILY, REFERENCE_METRIC
from analysis.records.selection import DATA_METRICS
from analysis.fit.stats import Q_HI, Q_LO, finite_or_none

class EntryKey(NamedTuple):
    """What one frontier is: (family, variant, dataset, split, metric), a tuple in ENTRY order."""

    family: str
    variant: str
    dataset: str
    split: str
    metric: str

    @property
    def data(self) -> tuple[str, str]:
        """(dataset, split): where the frontier was measured."""
        return self.dataset, self.split


ENTRY = EntryKey._fields
N_DRAWS = 2000
K_DRAWS = 1000  # of those, the ones k's interval is read from (one interpolation per draw and family)
APPROACH3_MAX_RESAMPLES = 200  # every resample is a full grid + polish solve
EXPONENT_BOUNDS = (0.01, 3.0)
LOG_E_MIN = -20.0
# An irreducible loss below this share of the smallest measured loss is the E -> 0 edge of the
# parameter space (the law collapses to two power terms): such a fit is `at_bound`, not `ok`.
E_FLOOR_SHARE = 1e-3
N_LOSS_LEVELS = 3
MIN_EXPONENT_BUDGETS = 3  # a line through two vertices leaves no df for the scatter between budgets
FLOP_COUNTS = ("charged", "core")


def _ci(draws: np.ndarray) -> list[float | None]:
    d = draws[np.isfinite(draws)]
    if d.size < 0.5 * draws.size or d.size < 10:
        return [None, None]
    return [float(np.quantile(d, Q_LO)), float(np.quantile(d, Q_HI))]


@dataclass
class Profile:
    """One budget's isoFLOP parabola."""

    budget_flops: float
    n_points: int
    n_sizes: int
    df: int
    status: str
    n_opt: float = math.nan
    l_opt: float = math.nan
    n_opt_draws: np.ndarray = field(default_factory=lambda: np.full(N_DRAWS, np.nan))
    l_opt_draws: np.ndarray = field(default_factory=lambda: np.full(N_DRAWS, np.nan))
    curve: tuple[float, float, float, float] = (math.nan, math.nan, math.nan, 0.0)  # a, b, c, x centre
    core_flops: float = math.nan  # 6·N·D at the vertex (see the module doc)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"budget_flops": self.budget_flops, "n_points": self.n_points, "n_sizes": self.n_sizes,
                "df": self.df, "status": self.status, "notes": list(self.notes),
                "core_flops": finite_or_none(self.core_flops),
                "n_opt": {"value": finite_or_none(self.n_opt), "ci95": _ci(self.n_opt_draws)},
                "l_opt": {"value": finite_or_none(self.l_opt), "ci95": _ci(self.l_opt_draws)}}


def fit_profile(budget: float, n: np.ndarray, loss: np.ndarray, rng: np.random.Generator) -> Profile:
    """Approach 2 at one budget: the parabola in ln N through the per-seed points."""
    x = np.log(n)
    centre = float(x.mean())
    sizes = len(np.unique(n))
    if sizes < 3:
        return Profile(budget, len(x), sizes, 0, "too_few_sizes")
    fit = sm.OLS(loss, np.column_stack([np.ones_like(x), x - centre, (x - centre) ** 2])).fit()
    a, b, c = (float(v) for v in fit.params)
    df = int(fit.df_resid)
    _, notes = fitstatus.judge("ok", lof_p=_parabola_lack_of_fit(fit, n, loss))
    prof = Profile(budget, len(x), sizes, df, "ok", curve=(a, b, c, centre), notes=tuple(notes))
    if c <= 0:
        prof.status = "no_minimum"
        return prof
    vertex = -b / (2 * c)
    prof.n_opt, prof.l_opt = math.exp(centre + vertex), a - b * b / (4 * c)
    if not x.min() - centre <= vertex <= x.max() - centre:
        prof.status = "edge"
    if df <= 0:
        prof.status = "saturated" if prof.status == "ok" else prof.status
        return prof
    z = rng.multivariate_normal(np.zeros(3), fit.cov_params(), size=N_DRAWS, method="svd")
    z /= np.sqrt(rng.chisquare(df, size=N_DRAWS) / df)[:, None]
    da, db, dc = (fit.params[None, :] + z).T
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # bad draws are NaN below
        good = dc > 0
        prof.n_opt_draws = np.where(good, np.exp(centre - db / (2 * dc)), np.nan)
        prof.l_opt_draws = np.where(good, da - db * db / (4 * dc), np.nan)
    return prof


def _parabola_lack_of_fit(fit, n: np.ndarray, loss: np.ndarray) -> float | None:
    """p of the parabola's lack of fit against the seeds' scatter at each size (None without seeds)."""
    ss_pure = float(sum(((loss[n == v] - loss[n == v].mean()) ** 2).sum() for v in np.unique(n)))
    return fitstatus.lack_of_fit_p(float(fit.ssr), int(fit.df_resid), ss_pure, len(n) - len(np.unique(n)))


def _robust_var(draws: np.ndarray) -> np.ndarray:
    """Per-column variance from the interquartile range (the vertex draws have heavy tails)."""
    q1, q3 = np.nanquantile(draws, [0.25, 0.75], axis=0)
    return ((q3 - q1) / 1.349) ** 2


def between_budget_draws(ln_c: np.ndarray, y: np.ndarray, within: np.ndarray,
                         rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Draws [B, K] of a vertex quantity y [K] (ln N_opt or ln L_opt per budget) that carry the
    scatter between budgets, and which scale they took (module doc). `within` [B, K] are the
    re-fitted parabolas' draws of y; the scale is the larger of the vertices' mean square about the
    line in ln C and the within-parabola variance of a vertex, always with the line's K - 2 df, so
    the draws never narrow the t(K - 2) interval of OLS over the vertices. With < 3 budgets there is
    no such df and `within` is returned as it is (its callers give no interval then)."""
    k = len(y)
    if k < MIN_EXPONENT_BUDGETS:
        return within, "within-parabola"
    s_b, scale = scale_draws(ln_c, y, within, rng)
    return y[None, :] + s_b * rng.standard_normal((len(within), k)), scale


def scale_draws(ln_c: np.ndarray, y: np.ndarray, within: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """The t-calibrated scale draws [B, 1] of `between_budget_draws` (>= 3 budgets): the larger of
    the vertices' mean square about the line in ln C and a vertex's within-parabola variance, over
    chi2 with the line's K - 2 df; and which of the two it took."""
    fit = sm.OLS(y, sm.add_constant(ln_c)).fit()
    ms_between, df = float(fit.mse_resid), int(fit.df_resid)
    ms_within = float(np.mean(_robust_var(within))) if np.isfinite(within).any() else 0.0
    scale = "between-budget" if ms_between >= ms_within else "within-parabola"
    return np.sqrt(max(ms_between, ms_within) * df / rng.chisquare(df, size=(len(within), 1))), scale


def slopes(ln_c: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """OLS slope of each row of draws [B, K] on ln C [K]."""
    xc = ln_c - ln_c.mean()
    return (draws - draws.mean(1, keepdims=True)) @ xc / (xc @ xc)


def _exponent(ln_c: np.ndarray, y: np.ndarray, draws: np.ndarray, scale: str) -> dict:
    """The slope of y on ln C over the ok budgets, with its interval from `draws` (>= 3 budgets)."""
    if len(y) < 2:
        return {"value": None, "ci95": [None, None], "n_budgets": len(y), "interval": "needs >= 2 ok budgets"}
    value = float(np.polyfit(ln_c, y, 1)[0])
    if len(y) < MIN_EXPONENT_BUDGETS:
        return {"value": value, "ci95": [None, None], "n_budgets": len(y),
                "interval": f"none: {len(y)} ok budgets leave no df for the scatter between budgets "
                            f"(needs >= {MIN_EXPONENT_BUDGETS})"}
    with np.errstate(invalid="ignore"):
        ci = _ci(slopes(ln_c, draws))
    return {"value": value, "ci95": ci, "n_budgets": len(y), "interval": f"t({len(y) - 2}) on the {scale} scale"}


# ---- Approach 3 --------------------------------------------------------------------------------
_GRID_EXP = np.linspace(0.05, 1.5, 8)
_GRID_E = (0.0, 0.3, 0.6, 0.8, 0.9, 0.97)  # fractions of the smallest loss


def _model(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray) -> np.ndarray:
    log_e, log_a, log_b, alpha, beta = theta
    return np.logaddexp.reduce([np.full_like(ln_n, log_e), log_a - alpha * ln_n, log_b - beta * ln_d], axis=0)


def _grid_start(ln_n: np.ndarray, ln_d: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """The best θ of the grid: every (α, β) pair, every E fraction, A and B by least squares."""
    pn, pd = np.exp(-np.outer(_GRID_EXP, ln_n)), np.exp(-np.outer(_GRID_EXP, ln_d))  # [G, n]
    es = np.maximum(np.array(_GRID_E) * loss.min(), math.exp(LOG_E_MIN))  # [F]
    rhs = loss[None, :] - es[:, None]  # [F, n]
    best, start = math.inf, None
    for i, alpha in enumerate(_GRID_EXP):
        for j, beta in enumerate(_GRID_EXP):
            design = np.stack([pn[i], pd[j]], 1)  # [n, 2]
            coef = np.clip(np.linalg.lstsq(design, rhs.T, rcond=None)[0], 1e-12, None)  # [2, F]
            fitted = np.log(es[None, :] + design @ coef)  # [n, F]
            sse = ((fitted - np.log(loss)[:, None]) ** 2).sum(0)
            f = int(np.argmin(sse))
            if sse[f] < best:
                best = float(sse[f])
                start = np.array([math.log(es[f]), *np.log(coef[:, f]), alpha, beta])
    return start


def solve_nd(ln_n: np.ndarray, ln_d: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """(θ = ln E, ln A, ln B, α, β; SSE on ln L): grid with A, B linear, then a bounded polish."""
    lo = [LOG_E_MIN, -50, -50, EXPONENT_BOUNDS[0], EXPONENT_BOUNDS[0]]
    hi = [float(y.min()), 50, 50, EXPONENT_BOUNDS[1], EXPONENT_BOUNDS[1]]
    start = np.clip(_grid_start(ln_n, ln_d, np.exp(y)), lo, np.nextafter(np.array(hi), -np.inf))
    out = least_squares(lambda t: _model(t, ln_n, ln_d) - y, start, bounds=(lo, hi), xtol=1e-12, ftol=1e-12)
    return out.x, float(np.sum(out.fun ** 2))


def _at_bound(theta: np.ndarray, y: np.ndarray) -> bool:
    exps = theta[3:]
    e_floor = max(LOG_E_MIN, float(y.min()) + math.log(E_FLOOR_SHARE))
    return bool(theta[0] <= e_floor + 1e-6 or np.any(exps <= EXPONENT_BOUNDS[0] + 1e-6)
                or np.any(exps >= EXPONENT_BOUNDS[1] - 1e-6) or theta[0] >= y.min() - 1e-9)


def fit_nd(n: np.ndarray, d: np.ndarray, loss: np.ndarray, resamples: int, rng: np.random.Generator,
           n_budgets: int | None = None) -> dict:
    """Approach 3 with its residual bootstrap; params E, A, B, alpha, beta with 95 % intervals.

    On one isoFLOP budget D is a function of N (D = C / FLOPs per token), so A·N^-α and B·D^-β
    cannot be told apart: with `n_budgets` < 2 the fit is `not_identifiable`, whatever its df."""
    ln_n, ln_d, y = np.log(n), np.log(d), np.log(loss)
    df = len(y) - 5
    if n_budgets is not None and n_budgets < 2:
        return {"status": "not_identifiable", "n_points": len(y), "df": df,
                "reason": "one isoFLOP budget: N and D move together; needs >= 2 budgets"}
    if len(np.unique(n)) < 3 or len(np.unique(d)) < 3 or df < 1:
        return {"status": "saturated" if df < 1 else "too_few_points", "n_points": len(y), "df": df}
    theta, sse = solve_nd(ln_n, ln_d, y)
    fitted = _model(theta, ln_n, ln_d)
    resid = (y - fitted) * math.sqrt(len(y) / df)
    draws, at_bound = [], 0
    for _ in range(min(resamples, APPROACH3_MAX_RESAMPLES)):
        t, _ = solve_nd(ln_n, ln_d, fitted + rng.choice(resid, size=len(y), replace=True))
        at_bound += _at_bound(t, y)
        draws.append(t)
    draws = np.array(draws).reshape(-1, 5)
    values = {"E": np.exp(draws[:, 0]), "A": np.exp(draws[:, 1]), "B": np.exp(draws[:, 2]),
              "alpha": draws[:, 3], "beta": draws[:, 4]}
    point = dict(zip(("E", "A", "B", "alpha", "beta"), (*np.exp(theta[:3]), *theta[3:])))
    a3 = values["beta"] / (values["alpha"] + values["beta"])
    status, notes = fitstatus.judge("at_bound" if _at_bound(theta, y) else "ok", resamples=len(draws),
                                    at_bound=at_bound, lof_p=_nd_lack_of_fit(ln_n, ln_d, y, sse, df))
    return {"status": status, "notes": notes, "n_points": len(y), "df": df,
            "rss_log": sse, "resamples": len(draws), "resamples_at_bound": at_bound,
            "params": {k: {"value": float(point[k]), "ci95": _ci(v)} for k, v in values.items()},
            "n_opt_exponent": {"value": float(point["beta"] / (point["alpha"] + point["beta"])), "ci95": _ci(a3)}}


def _nd_lack_of_fit(ln_n: np.ndarray, ln_d: np.ndarray, y: np.ndarray, sse: float, df: int) -> float | None:
    """p of Approach 3's lack of fit against the seeds' scatter at each (N, D) (None without seeds)."""
    cells = pl.DataFrame({"n": ln_n, "d": ln_d, "y": y}).group_by("n", "d").agg(
        ss=((pl.col("y") - pl.col("y").mean()) ** 2).sum(), count=pl.len())
    return fitstatus.lack_of_fit_p(sse, df, float(cells["ss"].sum()), len(y) - cells.height)


# ---- frontier entries and multipliers ------------------------------------------------------------
@dataclass
class Entry:
    """One (family, variant, dataset, split, metric) frontier."""

    key: EntryKey
    profiles: list[Profile]
    exponent: dict
    approach3: dict
    points: pl.DataFrame  # per-seed points: budget_flops, n_params, tokens, value
    multipliers: list[dict] = field(default_factory=list)
    k_bound: dict | None = None  # where no k interpolates: k(L*) > C_f / C_AR from measured points (module doc)
    l_opt_exponent: dict = field(default_factory=dict)
    l_opt_draws: np.ndarray = field(default_factory=lambda: np.empty((N_DRAWS, 0)))  # [B, ok budgets]

    def __post_init__(self):
        self.key = EntryKey(*self.key)

    def to_json(self) -> dict:
        return {**dict(zip(ENTRY, self.key)), "n_opt_exponent": self.exponent, "l_opt_exponent": self.l_opt_exponent,
                "approach3": self.approach3, "l_opt": [p.to_json() for p in self.profiles],
                "compute_multipliers": self.multipliers, "compute_multiplier_bound": self.k_bound}


def _ok(profiles: list[Profile]) -> list[Profile]:
    return [p for p in profiles if p.status == "ok"]


def _frontier(entry: Entry, flops: str = "charged") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ln C, L_opt, L_opt draws [B, K]) over the ok budgets, C on the `flops` count."""
    ok = _ok(entry.profiles)
    cs = [p.budget_flops if flops == "charged" else p.core_flops for p in ok]
    return np.log(cs), np.array([p.l_opt for p in ok]), entry.l_opt_draws


def _log(v) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(np.asarray(v, float))


def frontier_lines(profiles: list[Profile], rng: np.random.Generator) -> tuple[dict, dict, np.ndarray]:
    """The N_opt and L_opt exponents over the ok budgets, and the L_opt draws k reads (one resample)."""
    ok = _ok(profiles)
    if not ok:
        return _exponent(np.empty(0), np.empty(0), np.empty((N_DRAWS, 0)), ""), {}, np.empty((N_DRAWS, 0))
    lc = _log([p.budget_flops for p in ok])
    ln_n, ln_l = _log([p.n_opt for p in ok]), _log([p.l_opt for p in ok])
    n_draws, n_scale = between_budget_draws(lc, ln_n, _log(np.column_stack([p.n_opt_draws for p in ok])), rng)
    l_draws, l_scale = between_budget_draws(lc, ln_l, _log(np.column_stack([p.l_opt_draws for p in ok])), rng)
    return _exponent(lc, ln_n, n_draws, n_scale), _exponent(lc, ln_l, l_draws, l_scale), np.exp(l_draws)


def _ln_c_at(levels: np.ndarray, ln_c: np.ndarray, l_opt: np.ndarray) -> np.ndarray:
    """ln C where the frontier reaches each level: a monotone cubic (PCHIP) through the budgets'
    (L_opt, ln C) inside their range (straight lines between budgets would cut the frontier's
    curvature: 5 % off k at budgets 3x apart on a planted law), extended linearly from the nearer
    end outside it; NaN when the frontier is not decreasing in C."""
    order = np.argsort(l_opt)
    ls, cs = l_opt[order], ln_c[order]
    if len(ls) < 2 or not np.all(np.isfinite(ls)) or np.any(np.diff(ls) <= 0) or np.any(np.diff(cs) >= 0):
        return np.full(len(levels), np.nan)
    inside = PchipInterpolator(ls, cs)(np.clip(levels, ls[0], ls[-1]))
    slope_lo, slope_hi = (cs[1] - cs[0]) / (ls[1] - ls[0]), (cs[-1] - cs[-2]) / (ls[-1] - ls[-2])
    return np.where(levels < ls[0], cs[0] + (levels - ls[0]) * slope_lo,
                    np.where(levels > ls[-1], cs[-1] + (levels - ls[-1]) * slope_hi, inside))


def multipliers(ref: Entry, other: Entry) -> list[dict]:
    """k = C_other / C_ref at matched loss along the two frontiers, with draw intervals, on each
    FLOP count (`FLOP_COUNTS`)."""
    return [{**k, "flops": flops} for flops in FLOP_COUNTS for k in _multipliers(ref, other, flops)]


def _multipliers(ref: Entry, other: Entry, flops: str) -> list[dict]:
    rc, rl, rd = _frontier(ref, flops)
    oc, ol, od = _frontier(other, flops)
    if len(rl) < 2 or len(ol) < 2 or not (np.all(np.isfinite(rc)) and np.all(np.isfinite(oc))):
        return []
    lo, hi = max(rl.min(), ol.min()), min(rl.max(), ol.max())
    extrapolated = not lo <= hi
    levels = np.array([(lo + hi) / 2] if extrapolated else np.linspace(lo, hi, N_LOSS_LEVELS))
    ln_k = _ln_c_at(levels, oc, ol) - _ln_c_at(levels, rc, rl)
    if not np.all(np.isfinite(ln_k)):  # a frontier whose L_opt does not fall with C: no matched loss
        return []
    draws = np.array([_ln_c_at(levels, oc, od[i]) - _ln_c_at(levels, rc, rd[i])
                      for i in range(min(K_DRAWS, len(od), len(rd)))])
    return [{"loss": float(level), "k": math.exp(ln_k[j]),
             "ci95": [None if v is None else math.exp(v) for v in _ci(draws[:, j])],
             "extrapolated": bool(extrapolated), "reference": REFERENCE_FAMILY,
             "reference_metric": ref.key.metric} for j, level in enumerate(levels)]


def _best_points(entry: Entry) -> list[tuple[float, float, float]]:
    """(budget, best seed-mean loss, its core FLOPs 6·N·D) per measured budget of an entry."""
    cells = (entry.points.group_by("budget_flops", "n_params")
             .agg(pl.col("value").mean(), pl.col("tokens").mean()).sort("budget_flops", "value"))
    firsts = cells.group_by("budget_flops", maintain_order=True).first()
    return [(float(r["budget_flops"]), float(r["value"]), 6.0 * float(r["n_params"]) * float(r["tokens"]))
            for r in firsts.iter_rows(named=True)]


def k_bound(ref: Entry, other: Entry) -> dict | None:
    """A lower bound on k where the family's frontier lies above AR's (module doc); None when some
    pair of measured budgets does not support one (or the frontiers overlap)."""
    best = None
    for p in _ok(other.profiles):
        lo = _ci(p.l_opt_draws)[0]
        if lo is None or not math.isfinite(p.core_flops):
            continue
        for c_ar, l_star, core_ar in _best_points(ref):
            bound = p.budget_flops / c_ar
            if lo > l_star and (best is None or bound > best["k_above"]):
                best = {"k_above": bound, "k_above_core": p.core_flops / core_ar, "loss": l_star,
                        "reference_budget_flops": c_ar, "budget_flops": p.budget_flops,
                        "l_opt": {"value": p.l_opt, "ci95": _ci(p.l_opt_draws)},
                        "reference": REFERENCE_FAMILY, "reference_metric": ref.key.metric}
    return best


def _points(frame: pl.DataFrame) -> pl.DataFrame:
    """Per-seed points (mean over duplicate runs of a size, seed and budget)."""
    return (frame.group_by("budget_flops", "size", "seed")
            .agg(pl.col("n_params").first(), pl.col("tokens").mean(), pl.col("value").mean())
            .sort("budget_flops", "n_params", "seed"))


def entry_for(key: EntryKey, frame: pl.DataFrame, resamples: int, seed: int) -> Entry:
    """Approach 2 and 3 for one entry's records."""
    rng = np.random.default_rng([seed, zlib.crc32(repr(tuple(key)).encode())])  # the plain tuple's repr: same draws
    pts = _points(frame)
    profiles = []
    for (budget,), part in pts.group_by(["budget_flops"], maintain_order=True):
        n = part["n_params"].to_numpy().astype(float)
        prof = fit_profile(float(budget), n, part["value"].to_numpy(), rng)
        prof.core_flops = core_flops_at(prof.n_opt, n, part["tokens"].to_numpy().astype(float), float(budget))
        profiles.append(prof)
    a3 = fit_nd(pts["n_params"].to_numpy().astype(float), pts["tokens"].to_numpy().astype(float),
                pts["value"].to_numpy(), resamples, rng, n_budgets=pts["budget_flops"].n_unique())
    n_exp, l_exp, l_draws = frontier_lines(profiles, rng)
    return Entry(key, profiles, n_exp, a3, pts, l_opt_exponent=l_exp, l_opt_draws=l_draws)


def core_flops_at(n_opt: float, n: np.ndarray, tokens: np.ndarray, budget: float) -> float:
    """One budget's core FLOPs (6·N·D) at its vertex: C times its runs' core-to-charged ratio,
    interpolated linearly in ln N at N_opt (held at the end values outside the runs)."""
    if not math.isfinite(n_opt):
        return math.nan
    order = np.argsort(n)
    ratio = np.log(6.0 * n[order] * tokens[order] / budget)
    return budget * math.exp(float(np.interp(math.log(n_opt), np.log(n[order]), ratio)))


@dataclass(frozen=True)
class Frontier:
    """Every frontier entry of a study plus the warnings it raises."""

    entries: tuple[Entry, ...]
    warnings: tuple[str, ...]


def analyse(reported: pl.DataFrame, resamples: int, seed: int = 0) -> Frontier:
    """Frontier entries of the records planned by budget (none when no run has `budget_flops`)."""
    if "budget_flops" not in reported.columns:
        return Frontier((), ())
    planned = reported.filter(pl.col("budget_flops").is_not_null() & pl.col("m").is_null()
                              & pl.col("value").is_finite() & (pl.col("value") > 0)
                              & ~pl.col("metric").is_in(list(DATA_METRICS)))  # a property of the data: no frontier
    entries = {EntryKey(*k): entry_for(EntryKey(*k), part, resamples, seed)
               for k, part in sorted(planned.group_by(list(ENTRY)), key=lambda kv: tuple(map(str, kv[0])))}
    warnings = []
    for key, e in entries.items():
        # AR's exact likelihood is the reference for each compared metric (as for the per-size gaps)
        ref_metric = REFERENCE_METRIC if key.metric in COMPARED_METRICS else key.metric
        ref = entries.get(EntryKey(REFERENCE_FAMILY, _ref_variant(entries, key), *key.data, ref_metric))
        if ref is not None and key.family != REFERENCE_FAMILY:
            e.multipliers = multipliers(ref, e)
            if not any(not k["extrapolated"] for k in e.multipliers):
                e.k_bound = k_bound(ref, e)
        warnings += [f"{'/'.join(map(str, key))}: isoFLOP minimum at C={p.budget_flops:.3g} lies outside its "
                     "sizes; widen the grid" for p in e.profiles if p.status == "edge"]
        warnings += _rule_warnings(key, e)
    return Frontier(tuple(entries.values()), tuple(warnings))


def _rule_warnings(key: EntryKey, e: Entry) -> list[str]:
    """The shared status rules' notes (analysis.fit.fitstatus) as report warnings: never a silent ok."""
    name = "/".join(map(str, key))
    out = [f"{name}: isoFLOP parabola at C={p.budget_flops:.3g}: {n}" for p in e.profiles for n in p.notes]
    return out + [f"{name}: Approach 3 ({e.approach3['status']}): {n}" for n in e.approach3.get("notes", [])]


def _ref_variant(entries: dict[EntryKey, Entry], key: EntryKey) -> str:
    variants = sorted({k.variant for k in entries if k.family == REFERENCE_FAMILY and k.data == key.data})
    return variants[0] if variants else ""
