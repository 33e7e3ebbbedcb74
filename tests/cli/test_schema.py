"""cli.schema (the JSON files aoscale reads back) and cli.record_checks (records frames): each
refusal is one line naming the file or column, the value and the fix."""
from __future__ import annotations

import json

import polars as pl
import pytest

from cli import InputError, record_checks, schema


def test_a_status_json_key_that_breaks_its_rule_is_named_with_the_file(tmp_path):
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"state": "done", "step": "x"}))
    with pytest.raises(InputError, match=r"status\.json.*step"):
        schema.load_json(path, schema.STATUS)
    path.write_text('{"state": "runn')
    with pytest.raises(InputError, match="not readable JSON"):
        schema.load_json(path, schema.STATUS)
    assert schema.load_json(tmp_path / "absent.json", schema.STATUS, default={}) == {}
    path.write_text(json.dumps({"state": "done", "step": 3}))
    assert schema.load_json(path, schema.STATUS)["step"] == 3


def test_a_folder_where_a_file_belongs_is_refused_by_kind(tmp_path):
    (tmp_path / "fits.json").mkdir()
    with pytest.raises(InputError, match="is a folder, not a regular file.*fit_curves"):
        schema.load_json(tmp_path / "fits.json", schema.FITS)


def _row(**changes) -> dict:
    row = {name: None for name in schema.RECORD_COLUMNS}
    row.update(study="s", run_id="r", family="ar", variant="base", size="0.1M", n_params=10, n_params_family=10,
               tokens=100, flops=1e6, seed=0, step=1, dataset="d", split="validation", metric="loss",
               value=3.0, se=0.1, n_samples=5, m=1, unit="nats/token")
    row.update(changes)
    return row


def _frame(*rows: dict) -> pl.DataFrame:
    dtypes = {"str": pl.String, "int": pl.Int64, "float": pl.Float64}
    return pl.DataFrame(list(rows), schema={n: dtypes[c.kind] for n, c in schema.RECORD_COLUMNS.items()})


def test_records_within_their_ranges_pass_and_the_first_bad_row_is_named():
    record_checks.check_records(_frame(_row(), _row(run_id="q")), "eval.parquet")
    with pytest.raises(InputError, match=r"column 'n_params' holds 0 at row 1 \(run_id q.*expected > 0"):
        record_checks.check_records(_frame(_row(), _row(run_id="q", n_params=0)), "eval.parquet")
    with pytest.raises(InputError, match="column 'unit' holds 'furlongs'.*one of nats/token"):
        record_checks.check_records(_frame(_row(unit="furlongs")), "eval.parquet")
    with pytest.raises(InputError, match="column 'value' holds null"):
        record_checks.check_records(_frame(_row(value=None)), "eval.parquet")


def test_a_missing_contract_column_or_a_string_value_is_a_type_problem():
    frame = _frame(_row())
    assert record_checks.record_dtype_problem(frame.schema) is None
    assert record_checks.record_dtype_problem(frame.drop("flops").schema) == "column 'flops' (float) is missing"
    strings = frame.with_columns(pl.col("value").cast(pl.String))
    assert record_checks.record_dtype_problem(strings.schema) == "column 'value' has type String, expected float"
