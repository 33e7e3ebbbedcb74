"""From validated records to fit cells: latest step per run, NaNs dropped with a note, seeds
grouped per size. A cell is one (family, variant, metric, dataset, split, m, steps, tokens_per_step,
temperature, top_p) curve: a metric measured under several conditions (ensemble size, generation
steps, parallel tokens per step, sampling setting) is one curve per condition."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from analysis.records.read import CAST, CONDITION_COLUMNS

CONDITION_TYPES = {"m": CAST["int"], **{name: CAST[kind] for name, kind in CONDITION_COLUMNS.items()}}
CONDITION_KEYS = tuple(CONDITION_TYPES)  # m, then the records' optional condition columns
CELL_KEYS = ("family", "variant", "metric", "dataset", "split", *CONDITION_KEYS)
RUN_METRIC_KEYS = ("run_id", "metric", "dataset", "split", *CONDITION_KEYS)


CONDITION_LABELS = {"m": "M={}", "steps": "steps={}", "tokens_per_step": "{} tokens/step", "temperature": "T={}",
                    "top_p": "top-p={}"}


def condition_text(conditions: dict) -> str:
    """' M=4', ' steps=8 4 tokens/step T=0.7 top-p=0.95', or '' for a metric measured under no condition."""
    return "".join(f" {CONDITION_LABELS[k].format(v)}" for k, v in conditions.items() if v is not None)


def conditioned(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every condition column (null where a records source had none)."""
    missing = [c for c in CONDITION_KEYS if c not in frame.columns]
    return frame.with_columns([pl.lit(None, CONDITION_TYPES[c]).alias(c) for c in missing]) if missing else frame


@dataclass(frozen=True)
class Point:
    """One x on a curve: per-seed values (seeds sorted); `draw_key` names its bootstrap draws."""

    label: str  # the size's name (`0.1M`, `2/48/2`) or the ensemble's `M=4`
    x: float  # the curve's x: core parameters, FLOPs or tokens, as the fit was asked
    seeds: tuple[int, ...]  # sorted
    values: tuple[float, ...]  # one per seed, in `seeds` order
    draw_key: str  # points sharing a key share their bootstrap draws (one model's metrics)

    @property
    def array(self) -> np.ndarray:
        """Per-seed values as floats."""
        return np.asarray(self.values, dtype=float)


class CellKey(NamedTuple):
    """What one curve is: who (family, variant), what was measured where (metric, dataset, split)
    and under which conditions (None where the metric has none). A tuple of CELL_KEYS in order, so
    it hashes, compares and sorts as the plain tuple did."""

    family: str
    variant: str
    metric: str
    dataset: str
    split: str
    m: int | None = None
    steps: int | None = None
    tokens_per_step: int | None = None
    temperature: float | None = None
    top_p: float | None = None

    @property
    def data(self) -> tuple[str, str]:
        """(dataset, split): where the curve was measured."""
        return self.dataset, self.split

    @property
    def conditions(self) -> tuple:
        """The condition values, in CONDITION_KEYS order."""
        return tuple(self[5:])


if CellKey._fields != CELL_KEYS:
    raise ImportError(f"CellKey's fields {CellKey._fields} differ from the records' cell columns {CELL_KEYS}")


@dataclass(frozen=True)
class Cell:
    """One curve's data, points sorted by x."""

    key: CellKey
    points: tuple[Point, ...]

    def __post_init__(self):
        if not isinstance(self.key, CellKey):
            object.__setattr__(self, "key", CellKey(*self.key))

    def as_dict(self) -> dict:
        """The key as {column: value}."""
        return dict(zip(CELL_KEYS, self.key))


def latest(records: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Rows at each run's last evaluated step, finite values only; notes say what was dropped."""
    records = conditioned(records)
    final = records.filter(pl.col("step") == pl.col("step").max().over(list(RUN_METRIC_KEYS)))
    bad = final.filter(pl.col("value").is_null() | ~pl.col("value").is_finite())
    notes = [f"{row['run_id']} {row['metric']}/{row['dataset']}: value {row['value']} (NaN/inf) dropped"
             for row in bad.head(20).iter_rows(named=True)]
    if bad.height > 20:
        notes.append(f"... and {bad.height - 20} more NaN/inf values dropped")
    return final.filter(pl.col("value").is_finite()), notes


def per_seed(final: pl.DataFrame, x: str) -> pl.DataFrame:
    """One row per (cell, size, seed): value averaged over duplicate runs, x per size."""
    keys = [*CELL_KEYS, "size", "seed"]
    return (conditioned(final).group_by(keys).agg(pl.col("value").mean(), pl.col(x).cast(pl.Float64).median().alias("x"),
                                     pl.len().alias("n_runs"))
            .sort(keys, nulls_last=True))


def build_cells(final: pl.DataFrame, x: str) -> list[Cell]:
    """All cells of the latest records, with x taken from column `x` (median over a size's runs)."""
    grouped = (per_seed(final, x).group_by([*CELL_KEYS, "size"], maintain_order=True)
               .agg(pl.col("seed"), pl.col("value"), pl.col("x").median()))
    cells: dict[CellKey, list[Point]] = {}
    for row in grouped.iter_rows(named=True):
        key = CellKey(*(row[k] for k in CELL_KEYS))
        point = Point(row["size"], float(row["x"]), tuple(row["seed"]), tuple(row["value"]), row["size"])
        cells.setdefault(key, []).append(point)
    return [Cell(k, tuple(sorted(v, key=lambda p: (p.x, p.label)))) for k, v in
            sorted(cells.items(), key=lambda kv: tuple("" if v is None else str(v) for v in kv[0]))]
