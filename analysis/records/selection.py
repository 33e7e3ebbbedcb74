"""Best-per-cell selection over swept run settings, on the validation split only.

A study that sweeps run settings (scaling.study.sweep: `sweep_<name>` record columns) trains several
candidates per cell. A cell is (family, variant, dataset, metric, size, budget): the budget is
the run's `budget_flops` when its plan set one, else the tokens its plan asked for
(`plan_tokens`), else its tokens. A candidate is one setting: the effective values of the run
settings (`SETTING_FIELDS`: lr, warm-up, batch, ...) the run trained with, read from its spec.json
(`settings`, analysis.records.read) and, where a run has none, from its `sweep_<name>` tags; so
a run at a carried or rule lr and a swept run at the same lr are seeds of one candidate, however
each was planned. Per cell and metric the candidate with the lowest seed-mean value (the mean
over seeds of each seed's mean) on `SELECTION_SPLIT` of the study's corpus is chosen
(metrics measured per M, and properties of the data such as nll_unigram, follow the choice made on
FALLBACK_METRIC); its runs' values on every *other*
split are what gets reported and fitted, so selection cannot flatter them. A chosen value at
either end of its swept range is a warning naming the cell ("widen the sweep").
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SELECTION_SPLIT = "validation"
SWEEP_PREFIX = "sweep_"
CELL = ("family", "variant", "dataset", "metric", "size", "cell_budget")
# Metrics with no selection of their own (the ensemble's per-M rows, and DATA_METRICS) follow the runs
# chosen on this one.
FALLBACK_METRIC = "nll_l2r"
# Properties of the evaluation data, the same for every candidate: nothing to choose on them (and a
# "widen the sweep" warning on them would be noise).
DATA_METRICS = ("nll_unigram",)
# The run settings a candidate is made of, by the names scaling.study.sweep.SWEEPABLE sweeps them
# under (its `sweep_<name>` tags), each with the spec.json field it is read from (jobs.run.spec.RunSpec).
SETTING_FIELDS = {"lr": "lr", "warmup": "warmup_steps", "batch_size": "batch_size", "beta1": "beta1",
                  "beta2": "beta2", "weight_decay": "weight_decay", "min_lr_ratio": "min_lr_ratio"}


@dataclass(frozen=True)
class Selection:
    """The chosen candidate per cell, the records to report, and warnings."""

    chosen: pl.DataFrame  # one row per cell: CELL, sweep_* values, val_mean, n_seeds, n_runs, n_candidates
    reported: pl.DataFrame  # records of the chosen runs on the reported split(s)
    warnings: tuple[str, ...]
    notes: tuple[str, ...]


def sweep_columns(frame: pl.DataFrame) -> list[str]:
    """The swept settings present in the records."""
    return sorted(c for c in frame.columns if c.startswith(SWEEP_PREFIX))


def with_cell_budget(frame: pl.DataFrame) -> pl.DataFrame:
    """Add `cell_budget`: budget_flops, else plan_tokens, else tokens (as a float)."""
    parts = [pl.col(c).cast(pl.Float64) for c in ("budget_flops", "plan_tokens") if c in frame.columns]
    return frame.with_columns(pl.coalesce(*parts, pl.col("tokens").cast(pl.Float64)).alias("cell_budget"))


def cell_label(row: dict) -> str:
    """How warnings name a cell: family/variant size budget metric (dataset)."""
    budget = f"C={row['cell_budget']:.3g}" if row.get("budget_flops") is not None else f"D={row['cell_budget']:.3g}"
    return f"{row['family']}/{row['variant']} {row['size']} {budget} {row['metric']} ({row['dataset']})"


def _edges(chosen: pl.DataFrame, candidates: pl.DataFrame, sweeps: list[str]) -> list[str]:
    """'widen the sweep' warnings: a chosen value at an end of the values swept in its cell."""
    out = []
    ranges = candidates.group_by(CELL).agg(*[pl.col(s).min().alias(f"{s}_lo") for s in sweeps],
                                           *[pl.col(s).max().alias(f"{s}_hi") for s in sweeps],
                                           *[pl.col(s).n_unique().alias(f"{s}_n") for s in sweeps])
    for row in chosen.join(ranges, on=list(CELL), nulls_equal=True).iter_rows(named=True):
        for s in sweeps:
            value, lo, hi, n = row[s], row[f"{s}_lo"], row[f"{s}_hi"], row[f"{s}_n"]
            if value is not None and n > 1 and value in (lo, hi):
                side = "lowest" if value == lo else "highest"
                out.append(f"{cell_label(row)}: best {s[len(SWEEP_PREFIX):]}={value:g} is the {side} value swept; "
                           "widen the sweep")
    return out


def _reported_rows(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Per dataset, its rows on splits other than SELECTION_SPLIT, or its SELECTION_SPLIT rows
    when it has no other split (noted: those numbers are the ones a sweep's selection minimised)."""
    parts, bare = [], []
    for (dataset,), part in frame.group_by(["dataset"], maintain_order=True):
        other = part.filter(pl.col("split") != SELECTION_SPLIT)
        parts.append(other if not other.is_empty() else part)
        bare += [] if not other.is_empty() else [str(dataset)]
    return (pl.concat(parts, how="diagonal_relaxed") if parts else frame), bare


def effective_settings(frame: pl.DataFrame, settings: pl.DataFrame | None) -> pl.DataFrame:
    """`frame` with each run's effective settings as `sweep_<name>` columns: the value its spec.json
    holds (`settings`: run_id + sweep_<name>, analysis.records.read), else its sweep tag."""
    if settings is None or settings.is_empty():
        return frame
    names = [c for c in settings.columns if c.startswith(SWEEP_PREFIX)]
    spec = settings.select("run_id", *[pl.col(c).cast(pl.Float64).alias(f"spec_{c}") for c in names])
    frame = frame.join(spec.unique("run_id", keep="first"), on="run_id", how="left")
    return frame.with_columns([pl.coalesce(pl.col(f"spec_{c}"), *([pl.col(c)] if c in frame.columns else []))
                               .alias(c) for c in names]).drop([f"spec_{c}" for c in names])


def candidates_of(val: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per (cell, setting): the mean over seeds of each seed's mean value (`val_mean`),
    its seeds, runs and run ids; best first within each cell."""
    budget = pl.col("budget_flops").first() if "budget_flops" in val.columns else pl.lit(None).alias("budget_flops")
    per_seed = val.group_by([*CELL, *keys, "seed"]).agg(pl.col("value").mean(), pl.col("run_id").unique(), budget)
    run_ids = pl.col("run_id").list.explode(keep_nulls=False, empty_as_null=False).unique().alias("run_ids")
    return (per_seed.group_by([*CELL, *keys]).agg(pl.col("value").mean().alias("val_mean"),
                                                   pl.col("seed").n_unique().alias("n_seeds"), run_ids,
                                                   pl.col("budget_flops").first())
            .with_columns(pl.col("run_ids").list.len().alias("n_runs"))
            .sort([*CELL, "val_mean", *keys], nulls_last=True))


def _shown(candidates: pl.DataFrame, keys: list[str], swept: list[str]) -> list[str]:
    """The settings a chosen row names: those swept, and any other that differs within a cell."""
    varies = candidates.group_by(CELL).agg(*[pl.col(k).n_unique().alias(k) for k in keys])
    return [k for k in keys if k in swept or (not varies.is_empty() and varies[k].max() > 1)]


def select(final: pl.DataFrame, settings: pl.DataFrame | None = None) -> Selection:
    """Choose per cell on SELECTION_SPLIT of the study's corpus (the dataset with the most
    SELECTION_SPLIT records); report the chosen runs on every dataset's other splits. A candidate
    is one setting, its seeds pooled: `settings` (run_id + sweep_<name> read from the runs' specs)
    gives every run's effective values; without it the sweep tags alone make the setting."""
    frame = with_cell_budget(final)
    swept = sweep_columns(frame)
    reported, bare = _reported_rows(frame)
    val = frame.filter(pl.col("split") == SELECTION_SPLIT)
    if not swept or val.is_empty():
        return Selection(pl.DataFrame(), reported.drop("cell_budget"), (), ())
    notes = [f"{', '.join(bare)}: no split beside {SELECTION_SPLIT}, so its reported values are the ones "
             "selection minimised (optimistic); evaluate a test split"] if bare else []
    corpus = val.group_by("dataset").len().sort(["len", "dataset"], descending=[True, False])["dataset"][0]
    val = val.filter((pl.col("dataset") == corpus) & pl.col("m").is_null() & ~pl.col("metric").is_in(DATA_METRICS))
    val = effective_settings(val, settings)
    keys = [c for c in sweep_columns(val) if val[c].is_not_null().any()]
    candidates = candidates_of(val, keys)
    counts = candidates.group_by(CELL).agg(pl.len().alias("n_candidates"))
    chosen = candidates.group_by(CELL, maintain_order=True).first().join(counts, on=list(CELL), nulls_equal=True)
    keep = chosen.select("metric", pl.col("run_ids").alias("run_id")).explode("run_id")
    fallback = keep.filter(pl.col("metric") == FALLBACK_METRIC).select("run_id")
    selected = reported.filter(pl.col("metric").is_in(keep["metric"].unique().to_list()))
    reported = pl.concat([selected.join(keep, on=["run_id", "metric"], how="semi"),
                          reported.join(selected.select("metric").unique(), on="metric", how="anti")
                          .join(fallback, on="run_id", how="semi")], how="diagonal_relaxed")
    shown = _shown(candidates, keys, swept)
    chosen = chosen.drop("run_ids", *[k for k in keys if k not in shown])
    return Selection(chosen.sort(["family", "variant", "dataset", "metric", "cell_budget", "size"]),
                     reported.drop("cell_budget"),
                     tuple(_edges(chosen, candidates, [s for s in swept if s in keys])), tuple(notes))


def one_budget(final: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The records the size-axis sections (power-law fits, per-size gaps, ensembles) may read.

    In a study planned at several compute budgets one size is trained at several budgets, with
    other token counts: pooling them as seeds of one size would mix compute. Those sections then
    read one budget, the one with the most records (ties: the middle budget), and a note says so;
    the frontier section reads every budget. Studies with at most one budget are unchanged."""
    if "budget_flops" not in final.columns:
        return final, []
    counts = (final.filter(pl.col("budget_flops").is_not_null()).group_by("budget_flops").len()
              .sort("budget_flops"))
    if counts.height < 2:
        return final, []
    budgets, sizes = counts["budget_flops"].to_list(), counts["len"].to_list()
    middle = (len(budgets) - 1) / 2
    keep = min((i for i, n in enumerate(sizes) if n == max(sizes)), key=lambda i: (abs(i - middle), i))
    chosen = budgets[keep]
    note = (f"isoFLOP study: the size-axis fits, per-size gaps and ensembles read budget C={chosen:.3g} FLOPs "
            f"only (of {len(budgets)}: one size at several budgets has other token counts); the tuned "
            "frontier section reads every budget")
    return final.filter(pl.col("budget_flops").is_null() | (pl.col("budget_flops") == chosen)), [note]
