"""The frontier presets: the design the issue asks for, a laptop-sized estimate, unchanged old ids."""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from scaling.plan.dry_run import RUN_OVERHEAD_S, cpu_hours, gpu_hours, plan_rows
from scaling.study.presets import FRONTIER_BUDGETS
from scaling.study.study_spec import build_study

LAPTOP_PLATEAU = Path(__file__).parents[3] / "docs" / "results" / "laptop" / "tables" / "plateau.csv"


def _tags(cell):
    return dict(cell.spec.tracking)


def test_frontier_preset_has_the_design_and_fits_two_hours_on_two_cores():
    study = build_study({"preset": "frontier"})
    budgets = sorted({_tags(c)["budget_flops"] for c in study.cells})
    assert len(budgets) >= 3 and math.log10(budgets[-1] / budgets[0]) >= 1
    sizes, lrs, seeds = defaultdict(set), defaultdict(set), defaultdict(set)
    for c in study.cells:
        key = (c.spec.family, _tags(c)["budget_flops"])
        sizes[key].add(c.spec.size)
        lrs[key].add(c.spec.lr)
        seeds[(*key, c.spec.size)].add(c.spec.seed)
    families = {c.spec.family for c in study.cells}
    assert families == {"ar", "aogpt", "mdm"}
    assert all(len(v) >= 5 for v in sizes.values()) and len(sizes) == 3 * len(budgets)
    assert all(len(lrs[(f, FRONTIER_BUDGETS[1])]) >= 3 for f in families)
    assert all(len(lrs[(f, b)]) == 1 for f in families for b in (FRONTIER_BUDGETS[0], FRONTIER_BUDGETS[2]))
    for (family, budget), names in sizes.items():  # two seeds at the central (predicted optimum) size
        centre = sorted(names, key=lambda s: [int(v) for v in s.split("/")])[len(names) // 2]
        assert len(seeds[(family, budget, centre)]) >= 2
    rows = plan_rows(study)
    wall_h = cpu_hours(sum(r.flops for r in rows), 2) + len(rows) * RUN_OVERHEAD_S / 2 / 3600
    assert wall_h <= 2.0


def test_frontier_gpu_preset_plans_marin_budgets_in_gpu_hours():
    study = build_study({"preset": "frontier-gpu", "families": "ar"})  # one family: deep meta models take 0.1 s
    rows = plan_rows(study)
    assert sorted({_tags(c)["budget_flops"] for c in study.cells}) == [1e18, 1e19, 1e20]
    assert 100 < gpu_hours(sum(r.flops for r in rows)) < 10_000
    assert all(abs(r.flops / _tags(c)["budget_flops"] - 1) < 0.01 for r, c in zip(rows, study.cells))


def test_the_laptop_reference_runs_keep_their_ids():
    with LAPTOP_PLATEAU.open() as handle:
        recorded = {row["run_id"] for row in csv.DictReader(handle)}
    assert recorded and recorded <= set(build_study({"preset": "laptop"}).run_ids)


@pytest.mark.slow
def test_frontier_preset_smoke_runs_end_to_end(tmp_path, monkeypatch):
    """One budget of the preset for AR (6 runs of 2 steps, one lr): records carry the plan and both
    splits, and the report has its frontier entry and chosen-settings table."""
    from scaling import launch
    monkeypatch.chdir(tmp_path)
    argv = ["--preset", "frontier", "--families", "ar", "--budgets", "1e12", "--sweep", "lr=3e-3",
            "--max-steps", "2", "--study-dir", "s", "--no-progress", "--bootstrap", "10", "--max-parallel", "2"]
    assert launch.main(argv) == 0
    doc = json.loads((tmp_path / "s" / "report" / "fits.json").read_text())
    assert {e["split"] for e in doc["frontier"]} == {"test"} and doc["selection"]["chosen"]
    records = pl.concat([pl.read_parquet(p) for p in (tmp_path / "s" / "runs").glob("*/eval.parquet")],
                        how="diagonal_relaxed")
    assert set(records["split"]) >= {"validation", "test"} and set(records["sweep_lr"]) == {3e-3}
    assert set(records["budget_flops"]) == {1e12}
