"""Values records must hold before any analysis uses them, each rule refused with one line naming
the file, the column and the first bad row (its index, run and metric), before anything is written.

Within one file (`check_values`): every column typed and ranged by `cli.schema.RECORD_COLUMNS`, the
optional ones included (finite numbers, counts >= 0, `budget_flops` and `sweep_lr` > 0, `top_p` in
(0, 1], splits and units from their known sets). Across all the records given (`check_together`):
one unit per metric in a study, one run per `run_id` (its family, variant, size and seed), no row
given twice (the same measurement of the same run), and a study that sweeps a setting holds the
validation split its selection chooses on.
"""
from __future__ import annotations

import polars as pl

from cli import InputError, record_checks, schema

UNITS = schema.UNITS  # jobs.eval.records.UNITS: the contract
SPLITS = schema.SPLITS
SELECTION_SPLIT = "validation"  # analysis.records.selection chooses swept settings on it
RUN_COLUMNS = ("family", "variant", "size", "seed")  # what one run id stands for
# one measurement: a run's metric at one step under one estimator and condition (jobs.eval.records)
MEASUREMENT = ("study", "run_id", "step", "dataset", "split", "metric", "estimator", "weights", "m", "evaluator",
               "k_mc", "n_targets", "steps", "tokens_per_step", "temperature", "top_p", "chunking", "eval_seed")


def check_values(frame: pl.DataFrame, source: str) -> None:
    """Refuse (InputError) a column of the wrong type, a null where a value is needed, a value
    out of its range or choices (cli.record_checks.check_records)."""
    record_checks.check_records(frame, source)


def check_together(frame: pl.DataFrame, sources: str) -> None:
    """Refuse (InputError) records that are each valid but contradict each other (see the module
    docstring); `sources` names the files or studies they came from."""
    for check in (_one_unit_per_metric, _one_run_per_id, _no_row_twice, _selection_has_validation):
        problem = check(frame)
        if problem:
            raise InputError(f"{sources}: {problem}")


def _one_unit_per_metric(frame: pl.DataFrame) -> str | None:
    mixed = (frame.group_by("study", "metric").agg(pl.col("unit").unique().sort())
             .filter(pl.col("unit").list.len() > 1).sort("study", "metric").head(1).to_dicts())
    if not mixed:
        return None
    row = mixed[0]
    return (f"metric {row['metric']} of study {row['study']} is in {len(row['unit'])} units ({', '.join(row['unit'])}); "
            "one metric has one unit: convert the values or analyse the records apart")


def _one_run_per_id(frame: pl.DataFrame) -> str | None:
    runs = frame.select("run_id", *RUN_COLUMNS).unique().sort("run_id", *RUN_COLUMNS)
    shared = runs.filter(pl.col("run_id").is_duplicated()).head(2).to_dicts()
    if not shared:
        return None
    a, b = ({k: r[k] for k in RUN_COLUMNS} for r in shared)
    return (f"run_id {shared[0]['run_id']} names two runs ({_run(a)} and {_run(b)}); a run id names one run: "
            "fix the run_id column")


def _run(row: dict) -> str:
    return f"{row['family']} {row['variant'] or 'base'} {row['size']} s{row['seed']}"


def _no_row_twice(frame: pl.DataFrame) -> str | None:
    key = [c for c in MEASUREMENT if c in frame.columns]
    row = record_checks.first_bad(frame, ~pl.struct(key).is_first_distinct())
    if row is None:
        return None
    return (f"{record_checks.where(row)} is given twice (the same {row['dataset']} {row['split']} measurement of the run "
            "at the same step); pass each records file or study once, or drop the repeated rows")


def _selection_has_validation(frame: pl.DataFrame) -> str | None:
    sweeps = [c for c in frame.columns if c.startswith(schema.SWEEP_PREFIX)]
    if not sweeps:
        return None
    swept = (frame.group_by("study").agg(*[pl.col(c).drop_nulls().n_unique().alias(c) for c in sweeps],
                                         (pl.col("split") == SELECTION_SPLIT).any().alias("has_validation"))
             .filter(~pl.col("has_validation") & pl.any_horizontal(pl.col(c) > 1 for c in sweeps)).sort("study"))
    if swept.is_empty():
        return None
    row = swept.row(0, named=True)
    axis = next(c for c in sweeps if row[c] > 1)
    return (f"study {row['study']} sweeps {axis} but holds no {SELECTION_SPLIT} records; selection chooses swept "
            f"settings on {SELECTION_SPLIT} only (never on the reported split): evaluate the {SELECTION_SPLIT} split")
