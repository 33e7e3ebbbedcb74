"""Plans are capped before they are built (issue 49 item 6): the run count comes from the plan's
numbers (a profile's central sizes at --optimum-seeds), a grid reaching absurd shapes is refused
before a model is built for it, --set given twice is refused, and an unknown fault point is
refused. In-process `main([...])`: exit 2, one line, nothing written."""
from __future__ import annotations

import time

import pytest

from scaling import launch, status
from scaling.study import settings, sweep
from scaling.study.study_spec import build_study
from tests.test_bad_inputs import snapshot


@pytest.mark.parametrize("points, seeds, optimum, span", [(5, 1, 2, 1), (5, 1, 3, 3), (6, 2, 5, 2), (7, 1, 1, 9)])
def test_a_profiles_runs_are_counted_as_budget_points_builds_them(points, seeds, optimum, span):
    built = sum(optimum if sweep.central(i, points, span) else seeds for i in range(points))
    assert sweep.profile_runs(points, seeds, optimum, span) == built


def test_an_isoflop_plans_count_is_the_number_of_runs_it_builds():
    layer = {"families": "ar", "budgets": [1e12, 3e12], "optimum_seeds": 3, "optimum_span": 3}
    study = build_study(layer)
    compared = [c for c in study.cells if c.spec.role == "compared" and not c.spec.branch_from]
    assert settings.load_settings(layer).planned_runs == len(compared) == 2 * (3 * 3 + 2 * 2)  # default seeds: 2


@pytest.mark.parametrize("argv, named", [
    (["--preset", "frontier", "--optimum-seeds", "100000"], "max-runs: the plan has 3,600,144 runs"),
    (["--preset", "frontier", "--grid-step", "1e10"], "grid_step: 1e+10 over 5 sizes reaches"),
    (["--preset", "frontier", "--grid-step", "1e300"], "grid_step: 1e+300 over 5 sizes spans more than"),
    (["--families", "ar", "--sizes", "0.1M", "--set", "seeds=2", "--set", "seeds=3"], "set: seeds is given twice"),
    (["--families", "ar", "--sizes", "0.1M", "--set", "run.beta2=0.9", "--set", "run.beta2=0.95"],
     "set: run.beta2 is given twice by --set")])
def test_a_runaway_or_clashing_plan_is_refused_in_one_line_before_it_is_built(tmp_path, capsys, argv, named):
    before, start = snapshot(tmp_path), time.monotonic()
    assert launch.main([*argv, "--dry-run", "--study-dir", str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err, err
    assert snapshot(tmp_path) == before and time.monotonic() - start < 30


def test_an_unknown_fault_point_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AOSCALE_FAULT", "build_dir.stagd")
    assert status.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "AOSCALE_FAULT='build_dir.stagd'" in err
