"""The interface explains itself: presets described in --help, example study files that plan,
`scaling.status --json`, one bootstrap default."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import DEFAULT_BOOTSTRAP, fit_curves
from jobs.run import files as runfiles
from scaling import launch, status
from scaling.run import study_ledger
from scaling.study.presets import PRESETS
from scaling.study.study_spec import build_study

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def test_help_describes_every_preset_in_one_line(capsys):
    assert launch.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, function in PRESETS.items():
        line = next(line for line in out.splitlines() if line.split()[:1] == [name])
        assert line.split(None, 1)[1] == function.__doc__.strip().splitlines()[0]


def test_the_examples_are_a_quickstart_a_cluster_study_and_an_ablation():
    assert [p.name for p in EXAMPLES] == ["ablation.toml", "cluster.toml", "quickstart.toml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_dry_runs_and_writes_nothing(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert launch.main(["--spec", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("study ") and " runs" in out.splitlines()[0]
    assert list(tmp_path.iterdir()) == []


def test_the_quickstart_example_is_the_quickstart_preset():
    from scaling.study.study_spec import load_toml

    example = build_study({}, load_toml(REPO / "examples" / "quickstart.toml"))
    preset = build_study({"preset": "quickstart"})
    assert sorted(example.run_ids) == sorted(preset.run_ids) and example.name == preset.name


def test_status_json_gives_every_run_with_typed_fields_and_the_counts(tmp_path, capsys):
    study_dir = tmp_path / "s"
    spec = build_study({"sizes": "0.1M", "seeds": 2, "families": "ar"})
    study_ledger.prepare(study_dir, spec)
    first = spec.run_ids[0]
    runfiles.write_status(study_ledger.run_dir(study_dir, first), "done")  # trained, but no records yet
    assert status.main([str(study_dir), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"pending": 1, "trained": 1}
    runs = {run["run_id"]: run for run in doc["runs"]}
    assert list(runs) == spec.run_ids
    assert runs[first]["state"] == "trained" and runs[first]["family"] == "ar" and runs[first]["size"] == "0.1M"
    assert "not evaluated" in runs[first]["warnings"][-1]
    assert [run["seed"] for run in doc["runs"]] == [0, 1]
    assert runs[spec.run_ids[1]]["loss"] is None and runs[spec.run_ids[1]]["eta"] is None
    assert set(runs[first]) == {*status.COLUMNS, "warnings"}


def test_one_bootstrap_default_for_launch_and_fit_curves():
    assert launch.parser().parse_args([]).bootstrap == DEFAULT_BOOTSTRAP
    assert fit_curves.run.__kwdefaults__["bootstrap"] == DEFAULT_BOOTSTRAP
