"""Values records must hold before any analysis uses them: finite numbers, no negative seeds or
counts, known units. `check_values` raises one line naming the file, the column and the first bad
row (its index, run and metric), so a bad record is refused before anything is written.
"""
from __future__ import annotations

import polars as pl

from cli import InputError

UNITS = ("nats/token", "nats/byte", "bits/byte", "ppl", "s", "fraction")  # jobs.eval.records.UNITS: the contract
FINITE = ("value", "flops", "se")  # se may be null (exact values), never NaN or inf
NON_NEGATIVE = ("seed", "n_samples", "tokens", "step", "m", "flops", "se", "n_params_family")


def _first_bad(frame: pl.DataFrame, bad: pl.Expr) -> dict | None:
    rows = frame.with_row_index("_row").filter(bad).head(1).to_dicts()
    return rows[0] if rows else None


def _refuse(source: str, column: str, row: dict, problem: str, fix: str) -> InputError:
    where = f"row {row['_row']} (run_id {row.get('run_id')}, metric {row.get('metric')})"
    return InputError(f"{source}: column '{column}' {problem} at {where}; {fix}")


def check_values(frame: pl.DataFrame, source: str) -> None:
    """Refuse non-finite numbers, negative seeds and counts, and unknown units (InputError)."""
    for column in FINITE:
        values = pl.col(column)
        row = _first_bad(frame, values.is_not_null() & ~values.is_finite() if column == "se"
                         else values.is_null() | ~values.is_finite())
        if row is not None:
            raise _refuse(source, column, row, f"holds {row[column]}", "every number must be finite; fix or drop the row")
    for column in NON_NEGATIVE:
        row = _first_bad(frame, pl.col(column) < 0)
        if row is not None:
            raise _refuse(source, column, row, f"is negative ({row[column]})", "seeds and counts are >= 0; fix the row")
    row = _first_bad(frame, ~pl.col("unit").is_in(list(UNITS)))
    if row is not None:
        raise _refuse(source, "unit", row, f"holds the unknown unit {row['unit']!r}", f"use one of {', '.join(UNITS)}")
