"""Ablation tables: seed summaries per variant, per run option (from spec.json), and the 2^k
factorial with main effects and interactions (from optional `factor_<name>` record columns).

Labels are never parsed: options come from each run's spec.json (`opt_*` columns) and factor
levels from `factor_*` columns; without them the `variant` label is an opaque group."""
from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
from scipy import stats as sps

from analysis.records.cells import CONDITION_KEYS, conditioned
from analysis.records.read import FACTOR_PREFIX, OPTION_PREFIX
from analysis.fit.stats import Q_HI

SIDE_BY_SIDE = ("nll_anyorder", "nll_l2r")  # any-order and L2R loss side by side in option tables
OPTION_TITLES = {  # spec option -> table title; other varying options get "option <name>"
    "order": "Training orders (L2R-mix sweep: mix:p)",
    "ema": "EMA rates",
    "target_pe": "Target-position injection (PE variants)",
    "norm": "Normalisation",
    "qk_norm": "QK-norm",
    "tie_head": "Tied vs untied head",
    "loss": "MDM objective",
}
GROUP = ("family", "size", "dataset", "split", "metric", *CONDITION_KEYS)


def seed_table(final: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """mean, std, se, t-interval and n over seeds for each group of `keys` (runs averaged per seed)."""
    per_seed = conditioned(final).group_by([*keys, "seed"]).agg(pl.col("value").mean())
    out = per_seed.group_by(keys).agg(pl.col("value").mean().alias("mean"), pl.col("value").std().alias("std"),
                                      pl.len().alias("n")).sort(keys, nulls_last=True)
    n = out["n"].to_numpy()
    tq = np.where(n > 1, sps.t.ppf(Q_HI, np.maximum(n - 1, 1)), np.nan)
    se = out["std"].to_numpy() / np.sqrt(n)
    mean = out["mean"].to_numpy()
    return out.with_columns(se=pl.Series(se), lo=pl.Series(mean - tq * se), hi=pl.Series(mean + tq * se))


BUDGET = "budget_flops"  # an isoFLOP study's compute budget: a size at another budget is another point


def budget_keys(final: pl.DataFrame) -> list[str]:
    """[budget_flops] when the records hold several budgets (a size trained at each is one row per
    budget, n its runs there, never the mean over budgets), else []."""
    return [BUDGET] if BUDGET in final.columns and final[BUDGET].drop_nulls().n_unique() > 1 else []


def variant_table(final: pl.DataFrame) -> pl.DataFrame:
    """Every (family, variant, size, [budget,] dataset, split, metric, m) summarised over seeds."""
    return seed_table(final, ["family", "variant", "size", *budget_keys(final), *GROUP[2:]])


def option_tables(final: pl.DataFrame, options: pl.DataFrame | None) -> dict[str, pl.DataFrame]:
    """One table per spec option that varies within a family: rows (option value, variant)."""
    if options is None or options.is_empty():
        return {}
    joined = final.filter(pl.col("metric").is_in(SIDE_BY_SIDE)).join(options, on="run_id", how="left")
    tables = {}
    for col in sorted(c for c in options.columns if c.startswith(OPTION_PREFIX)):
        varying = joined.group_by("family").agg(pl.col(col).drop_nulls().n_unique().alias("k")).filter(pl.col("k") > 1)
        if varying.is_empty():
            continue
        rows = joined.filter(pl.col("family").is_in(varying["family"].to_list()))
        name = col[len(OPTION_PREFIX):]
        tables[name] = seed_table(rows.with_columns(pl.col(col).alias(name)),
                                  ["family", name, "variant", "size", *budget_keys(final), *GROUP[2:]])
    return tables


def option_title(name: str) -> str:
    """Display title of an option table."""
    return OPTION_TITLES.get(name, f"option {name}")


def factorial_table(final: pl.DataFrame) -> pl.DataFrame | None:
    """Main effects and interactions of a two-level factorial (`factor_*` columns), per group."""
    factors = sorted(c for c in final.columns if c.startswith(FACTOR_PREFIX))
    if not factors:
        return None
    rows = []
    for key, group in conditioned(final).drop_nulls(factors).group_by(list(GROUP), maintain_order=True):
        rows += _effects(dict(zip(GROUP, key)), group, factors)
    return pl.DataFrame(rows) if rows else None


def _effects(labels: dict, group: pl.DataFrame, factors: list[str]) -> list[dict]:
    levels = {f: sorted(group[f].cast(pl.String).unique().to_list()) for f in factors}
    if any(len(v) != 2 for v in levels.values()):
        return []
    codes = np.stack([np.where(group[f].cast(pl.String).to_numpy() == levels[f][1], 1.0, -1.0) for f in factors], 1)
    y = group["value"].to_numpy()
    cells = {tuple(c): y[(codes == c).all(1)] for c in np.unique(codes, axis=0)}
    if len(cells) != 2 ** len(factors):
        return []
    mean = {c: v.mean() for c, v in cells.items()}
    dof = sum(v.size - 1 for v in cells.values())
    pooled = sum(((v - v.mean()) ** 2).sum() for v in cells.values()) / dof if dof > 0 else math.nan
    scale = 2.0 / len(cells)  # effect = mean(+) - mean(-) over a balanced design of cell means
    out = []
    for order in range(1, len(factors) + 1):
        for subset in itertools.combinations(range(len(factors)), order):
            sign = {c: np.prod([c[j] for j in subset]) for c in cells}
            est = scale * sum(sign[c] * mean[c] for c in cells)
            se = scale * math.sqrt(sum(pooled / cells[c].size for c in cells)) if dof > 0 else math.nan
            half = float(sps.t.ppf(Q_HI, dof)) * se if dof > 0 else math.nan
            name = ":".join(factors[j][len(FACTOR_PREFIX):] for j in subset)
            contrast = ", ".join(f"{factors[j][len(FACTOR_PREFIX):]}={levels[factors[j]][1]} vs {levels[factors[j]][0]}"
                                 for j in subset)
            out.append({**labels, "effect": name, "contrast": contrast, "estimate": est, "se": se,
                        "lo": est - half, "hi": est + half, "n": int(y.size), "dof": dof})
    return out
