"""fit_curves refuses bad record values (non-finite numbers, negative seeds or counts, unknown
units: cli.schema.RECORD_COLUMNS) with one line naming the column, a row and what was expected,
before it writes anything."""
from __future__ import annotations

import polars as pl
import pytest

from analysis import fit_curves
from tests.analysis import synth

SIZES = {"0.1M": 1e5, "0.3M": 3e5, "1M": 1e6}


def _spoil(frame: pl.DataFrame, column: str, value) -> pl.DataFrame:
    """Row 3 of `frame` gets `value` in `column`."""
    index = pl.int_range(pl.len()) == 3
    return frame.with_columns(pl.when(index).then(pl.lit(value)).otherwise(pl.col(column)).alias(column))


@pytest.mark.parametrize("column,value,said", [
    ("value", float("nan"), "holds nan"), ("value", float("inf"), "holds inf"),
    ("flops", float("nan"), "holds nan"), ("flops", float("-inf"), "holds -inf"),
    ("se", float("inf"), "holds inf"),
    ("seed", -1, "holds -1"), ("n_samples", -8, "holds -8"), ("tokens", -5, "holds -5"),
    ("step", -2, "holds -2"), ("unit", "furlongs", "holds 'furlongs'"),
])
@pytest.mark.parametrize("form", ["study", "file"])
def test_bad_values_are_refused_naming_column_and_row_before_writing(tmp_path, capsys, column, value, said, form):
    frame = synth.records(families=("ar", "aogpt"), sizes=SIZES, ms=())
    frame = _spoil(frame.with_columns(pl.col("se").cast(pl.Float64)), column, value)
    if form == "study":
        path = synth.write_study(tmp_path / "study", frame)
    else:
        path = tmp_path / "r.parquet"
        frame.write_parquet(path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert fit_curves.main([str(path), "--bootstrap", "10", "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"column '{column}'" in err[0] and said in err[0] and "row " in err[0], err
    assert "Traceback" not in err[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
