"""Checking a records frame (eval.parquet, records.parquet) against cli.schema.RECORD_COLUMNS.

Apart from cli.schema so that what reads only JSON files (a worker writing status.json) does not
load polars.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from cli import InputError, schema
from cli.schema import Column


def _kind_ok(dtype: pl.DataType, col: Column) -> bool:
    if dtype == pl.Null:
        return True  # an all-null column: `check_records` refuses it where the column needs values
    if col.kind == "level":
        return not dtype.is_nested()
    if col.kind == "str":
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    return dtype.is_integer() if col.kind == "int" else dtype.is_float() or dtype.is_integer()


def record_dtype_problem(dtypes: Mapping[str, pl.DataType]) -> str | None:
    """Why a records file's column types break the schema (a missing contract column, a column of
    the wrong kind), or None."""
    for name, col in schema.RECORD_COLUMNS.items():
        if col.contract and name not in dtypes:
            return f"column '{name}' ({col.kind}) is missing"
    for name, dtype in dtypes.items():
        col = schema.column(name)
        if col is not None and not _kind_ok(dtype, col):
            return f"column '{name}' has type {dtype}, expected {col.kind}"
    return None


def _bad(col: Column, value: pl.Expr) -> pl.Expr:
    """Rows whose non-null value breaks `col`'s range or choices (null where fine)."""
    if col.choices:
        return ~value.is_in(list(col.choices))
    if col.kind in ("str", "level"):
        return pl.lit(False)
    bad = ~value.cast(pl.Float64).is_finite()
    if col.low is not None:
        bad = bad | ((value <= col.low) if col.low_open else (value < col.low))
    return bad | (value > col.high) if col.high is not None else bad


def check_records(frame: pl.DataFrame, source: str) -> None:
    """Refuse (InputError: one line naming the column and the first bad row) a records frame whose
    columns break cli.schema.RECORD_COLUMNS: wrong kind, null where a value is needed, out of range or
    choices."""
    problem = record_dtype_problem(frame.schema)
    if problem:
        raise InputError(f"{source}: {problem}; fix the records")
    for name in frame.columns:
        col = schema.column(name)
        if col is None:
            continue
        value = pl.col(name)
        bad = value.is_null() if not col.nullable else pl.lit(False)
        if frame.schema[name] != pl.Null:
            bad = bad | (value.is_not_null() & _bad(col, value))
        row = first_bad(frame, bad)
        if row is not None:
            shown = "null" if row[name] is None else repr(row[name])
            raise InputError(f"{source}: column '{name}' holds {shown} at {where(row)}, expected "
                             f"{'a value' if row[name] is None else col.expected()}; fix or drop the row")


def first_bad(frame: pl.DataFrame, bad: pl.Expr) -> dict | None:
    """The first row where `bad` holds, with its index as `_row`; None when there is none."""
    rows = frame.with_row_index("_row").filter(bad.fill_null(False)).head(1).to_dicts()
    return rows[0] if rows else None


def where(row: dict) -> str:
    """A bad row as a reader finds it: its index, run and metric."""
    return f"row {row['_row']} (run_id {row.get('run_id')}, metric {row.get('metric')})"
