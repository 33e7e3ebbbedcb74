"""analysis.compare.distinct: a bits-per-byte metric and a metric equal to a compared one in every run are
left out of the fits, each with its note; a metric that differs in one run is kept."""
from __future__ import annotations

import polars as pl

from analysis.compare.distinct import conversions, fitted_records, identical


def records(rows: list[tuple[str, str, float]]) -> pl.DataFrame:
    """Final records of one MDM cell on shakespeare/validation: (run_id, metric, value) rows."""
    return pl.DataFrame({"family": "mdm", "variant": "", "dataset": "shakespeare", "split": "validation",
                         "run_id": [r for r, _, _ in rows], "metric": [m for _, m, _ in rows],
                         "value": [v for _, _, v in rows], "m": pl.Series([None] * len(rows), dtype=pl.Int64)})


FINAL = records([("a", "nll_anyorder", 2.0), ("a", "nll_elbo_mdlm", 2.0), ("a", "bpb_anyorder", 2.9),
                 ("a", "nll_elbo_kdce", 2.1), ("b", "nll_anyorder", 1.5), ("b", "nll_elbo_mdlm", 1.5),
                 ("b", "bpb_anyorder", 2.2), ("b", "nll_elbo_kdce", 1.5)])


def test_a_bits_per_byte_metric_is_a_conversion_of_its_nll():
    drop, notes = conversions(FINAL)
    assert drop == {"bpb_anyorder"}
    assert notes == ["bpb_anyorder is nll_anyorder converted to bits per byte: a unit conversion, shown in the "
                     "tables, not fitted a second time"]


def test_a_metric_equal_in_every_run_is_fitted_once_under_the_compared_name():
    drop, notes = identical(FINAL.filter(pl.col("metric") != "bpb_anyorder"))
    assert drop == {("mdm", "", "shakespeare", "validation"): {"nll_elbo_mdlm"}}  # kdce differs in run a
    assert notes == ["mdm nll_elbo_mdlm equals nll_anyorder in every run on shakespeare/validation: fitted once "
                     "(as nll_anyorder)"]


def test_the_fitted_records_leave_out_both_with_their_notes():
    out, notes = fitted_records(FINAL)
    assert sorted(set(out["metric"])) == ["nll_anyorder", "nll_elbo_kdce"] and out.height == 4
    assert len(notes) == 2
