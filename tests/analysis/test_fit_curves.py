"""End to end: `python -m analysis.fit_curves` on synthetic studies and records files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from analysis import fit_curves
from tests.analysis import synth

REPO = Path(__file__).resolve().parents[2]
BOOT = 200  # resamples in tests (the default is 1000; the bench uses 1000)
SMALL_SIZES = {k: synth.SIZES[k] for k in ("0.1M", "0.3M", "1M", "3M")}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    frame = synth.records(families=("ar", "aogpt", "mdm"), sizes=SMALL_SIZES)
    return synth.write_study(tmp_path_factory.mktemp("s") / "study", frame)


@pytest.fixture(scope="module")
def report(study) -> Path:
    assert fit_curves.main([str(study), "--bootstrap", str(BOOT)]) == 0
    return study / "report"


def fits_doc(report: Path) -> dict:
    return json.loads((report / "fits.json").read_text())


def test_outputs_exist(report, study):
    for name in ("fits.json", "report.md", "report.html", "study.json", "tables/fits.parquet", "tables/fits.csv",
                 "tables/gap.parquet", "tables/points.csv", "figures/training_curves.png"):
        assert (report / name).is_file(), name
    assert (report / "study.json").read_bytes() == (study / "study.json").read_bytes()
    assert list((report / "figures").glob("loss_vs_size_*.png")) and list((report / "figures").glob("gap_vs_size_*.png"))
    assert list((report / "figures").glob("nll_vs_m_*.png"))


def test_fits_json_schema_and_gap(report):
    doc = fits_doc(report)
    fit = next(f for f in doc["fits"] if f["family"] == "ar" and f["metric"] == "nll_l2r")
    assert {"family", "variant", "metric", "dataset", "x", "form", "params", "n_points", "n_seeds_min", "status"} <= set(fit)
    assert fit["status"] in ("ok", "reduced") and fit["n_points"] == 4 and fit["n_seeds_min"] == 3
    assert fit["df_resid"] == (1 if fit["status"] == "ok" else 2) and fit["df_pure_error"] == 8
    assert set(fit["lack_of_fit"]) == {"F", "p", "df"} and fit["resamples"] == BOOT
    assert set(fit["params"]) == {"E", "A", "alpha"}
    lo, hi = fit["params"]["alpha"]["ci95"]
    assert not any(f["metric"].startswith("bpb_") for f in doc["fits"])  # a unit conversion is not refitted
    assert lo <= fit["params"]["alpha"]["value"] <= hi
    gaps = {(g["family"], g["metric"]): g for g in doc["gaps"]}
    assert set(gaps) == {("aogpt", "nll_anyorder"), ("aogpt", "nll_l2r"), ("mdm", "nll_anyorder"), ("mdm", "nll_l2r")}
    pt = gaps[("aogpt", "nll_anyorder")]["points"][0]
    assert pt["paired"] and pt["n"] == 3 and pt["mean"] > 0  # aogpt planted above AR
    assert gaps[("aogpt", "nll_anyorder")]["multipliers"][0]["k"] > 1


def test_ensemble_gain_is_positive(report):
    ens = fits_doc(report)["ensemble"]
    assert {e["family"] for e in ens} == {"aogpt", "mdm"}
    gain = ens[0]["gains"][0]
    assert gain["m_min"] == 1 and gain["m_max"] == 8 and gain["lo"] > 0 and gain["n"] == 3
    assert ens[0]["fits"][0]["x"] == "m" and set(ens[0]["fits"][0]["params"]) == {"c", "b", "gamma"}


def test_report_shows_intervals_and_n(report):
    md = (report / "report.md").read_text()
    assert "(n=3)" in md and "paired by seed" in md and "nll_anyorder vs ar/default nll_l2r" in md
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(list((report / "figures").glob("*.png")))
    assert "src='http" not in html and 'src="http' not in html


def test_deterministic_fits_json(study, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    fit_curves.run([study], a, bootstrap=50, seed=3)
    fit_curves.run([study], b, bootstrap=50, seed=3)
    assert (a / "fits.json").read_bytes() == (b / "fits.json").read_bytes()
    fit_curves.run([study], b, bootstrap=50, seed=4)
    assert (a / "fits.json").read_bytes() != (b / "fits.json").read_bytes()


def test_records_files_and_x_flag(tmp_path):
    frame = synth.records(families=("ar", "aogpt"), sizes=SMALL_SIZES, ms=())
    frame.write_ndjson(tmp_path / "r.ndjson")
    out = fit_curves.run([tmp_path / "r.ndjson"], tmp_path / "rep", bootstrap=50, x="flops")
    fits = fits_doc(out)["fits"]
    assert {f["x"] for f in fits} == {"flops"} and all(f["status"] in ("ok", "reduced") for f in fits)


def test_edge_cases_are_stated_not_crashed(tmp_path):
    frame = synth.records(families=("aogpt",), sizes=SMALL_SIZES, seeds=(0,))
    study = synth.write_study(tmp_path / "study", frame)
    (study / "runs" / "deadbeef0000").mkdir()
    (study / "runs" / "deadbeef0000" / "status.json").write_text('{"state": "failed"}')
    assert fit_curves.main([str(study), "--bootstrap", "20"]) == 0
    md = (study / "report" / "report.md").read_text()
    assert "only one family present (aogpt)" in md
    assert "run without eval.parquet: deadbeef0000 (failed)" in md
    assert "no gap: no 'ar' runs" in md
    doc = fits_doc(study / "report")
    assert {f["status"] for f in doc["fits"]} == {"not_identifiable"}
    assert "has 1 seed(s)" in doc["fits"][0]["reason"]


def test_too_few_sizes_not_identifiable(tmp_path):
    frame = synth.records(families=("ar",), sizes={"0.1M": 1e5, "1M": 1e6})
    frame.write_parquet(tmp_path / "r.parquet")
    doc = fits_doc(fit_curves.run([tmp_path / "r.parquet"], tmp_path / "rep", bootstrap=20))
    assert doc["fits"][0]["status"] == "not_identifiable" and "need >= 3" in doc["fits"][0]["reason"]


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis.fit_curves", *args], cwd=REPO, capture_output=True, text=True)


@pytest.mark.parametrize("case", ["missing_column", "wrong_dtype", "no_files", "no_records", "bad_x"])
def test_bad_input_exits_2_one_line_nothing_written(tmp_path, case):
    frame = synth.records(families=("ar",), sizes=SMALL_SIZES, ms=())
    path, expect = tmp_path / "r.parquet", ""
    if case == "missing_column":
        frame.drop("seed").write_parquet(path)
        expect = "'seed'"
    elif case == "wrong_dtype":
        frame.with_columns(pl.col("n_params").cast(pl.String)).write_parquet(path)
        expect = "'n_params'"
    elif case == "no_files":
        expect = str(path)
    elif case == "no_records":
        (tmp_path / "runs").mkdir()
        path, expect = tmp_path, "runs/*/eval.parquet"
    else:
        frame.write_parquet(path)
        expect = "--x"
    extra = ["--x", "params"] if case == "bad_x" else []
    out = tmp_path / "out"
    proc = _cli([str(path), "--out", str(out), *extra])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], proc.stderr
    assert not out.exists() and not (tmp_path / "report").exists()


def test_option_and_factorial_tables_from_spec_and_factor_columns(tmp_path):
    frames = []
    for order, adaln in (("uniform", True), ("mix:0.1", True), ("uniform", False), ("mix:0.1", False)):
        f = synth.records(families=("aogpt",), sizes={"1M": 1e6}, ms=(), variant=f"{order}+{adaln}", rng_seed=len(frames))
        frames.append(f.with_columns(pl.lit(order == "mix:0.1").alias("factor_mix"), pl.lit(adaln).alias("factor_adaln")))
    frame = pl.concat(frames)
    options = {r["run_id"]: {"order": r["variant"].split("+")[0]} for r in frame.iter_rows(named=True)}
    study = synth.write_study(tmp_path / "study", frame, options=options)
    out = fit_curves.run([study], tmp_path / "rep", bootstrap=20)
    order = pl.read_parquet(out / "tables" / "option_order.parquet")
    assert set(order["order"]) == {"uniform", "mix:0.1"} and set(order["metric"]) == {"nll_anyorder", "nll_l2r"}
    fact = pl.read_parquet(out / "tables" / "factorial.parquet")
    assert set(fact["effect"]) == {"adaln", "mix", "adaln:mix"} and (fact["n"] == 12).all()
    md = (out / "report.md").read_text()
    assert "Training orders (L2R-mix sweep" in md and "main effects and interactions" in md
