"""Several studies given to fit_curves stay apart: each is fitted alone, with a `study` column."""
from __future__ import annotations

import json

import polars as pl

from analysis import fit_curves
from tests.analysis import synth

BOOT = 50  # resamples; the comparisons below are exact, whatever the count
SIZES = {k: synth.SIZES[k] for k in ("0.1M", "0.3M", "1M")}


def _study(root, name: str, scale: float):
    """A synthetic study whose every value is `scale` x the planted one (so pooling would show)."""
    frame = synth.records(families=("ar", "aogpt"), sizes=SIZES, ms=(), study=name)
    return synth.write_study(root / name, frame.with_columns(pl.col("value") * scale), study_json={"name": name})


def _fits(report) -> list[dict]:
    return json.loads((report / "fits.json").read_text())["fits"]


def test_two_studies_are_fitted_apart_exactly_as_each_alone(tmp_path):
    low, high = _study(tmp_path, "low", 1.0), _study(tmp_path, "high", 1.5)
    assert fit_curves.main([str(low), str(high), "--out", str(tmp_path / "both"), "--bootstrap", str(BOOT)]) == 0
    assert fit_curves.main([str(low), "--out", str(tmp_path / "alone"), "--bootstrap", str(BOOT)]) == 0
    both = {(f["study"], f["family"], f["metric"]): f for f in _fits(tmp_path / "both")}
    alone = {(f["family"], f["metric"]): f for f in _fits(tmp_path / "alone")}
    assert {k[0] for k in both} == {"low", "high"} and len(both) == 2 * len(alone)
    for (family, metric), fit in alone.items():
        twin = both[("low", family, metric)]
        assert twin["variant"] == f"low:{fit['variant']}"
        assert twin["params"] == fit["params"]  # the other study took no part in this fit
        assert both[("high", family, metric)]["params"]["A"]["value"] > fit["params"]["A"]["value"]
    table = pl.read_parquet(tmp_path / "both" / "tables" / "fits.parquet")
    assert table.columns[0] == "study" and sorted(table["study"].unique().to_list()) == ["high", "low"]
    gaps = pl.read_parquet(tmp_path / "both" / "tables" / "gap.parquet")
    assert sorted(gaps["study"].unique().to_list()) == ["high", "low"]  # each against its own AR
    points = pl.read_parquet(tmp_path / "both" / "tables" / "points.parquet")
    assert points.group_by("study").len().sort("study")["len"].to_list() == [points.height // 2] * 2
