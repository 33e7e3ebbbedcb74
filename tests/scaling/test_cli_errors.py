"""Bad input to `scaling.launch`: exit 2, one clear line on stderr, nothing created."""
from __future__ import annotations

import pytest

from scaling import launch
from scaling.run import study_ledger
from scaling.study.study_spec import build_study


def listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def run_cli(argv, capsys):
    code = launch.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, field", [
    (["--sizes", "12X"], "size"),
    (["--families", "ar,transformerxl"], "families"),
    (["--seeds", "0"], "seeds"),
    (["--seeds", "two"], "argument --seeds"),
    (["--preset", "huge"], "preset"),
    (["--backend", "kubernetes"], "backend"),
    (["--engine", "jax"], "engine"),
    (["--sizes", "760M", "--seeds", "1", "--families", "ar"], "budget"),
])
def test_bad_flags_exit_2_with_one_line_and_write_nothing(argv, field, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(argv + ["--no-progress"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"launch: {field}"), err
    assert listing(tmp_path) == []


@pytest.mark.parametrize("workers", ["two", "0", "1.5", "-1"])
def test_a_bad_analysis_worker_count_is_refused_before_training(workers, tmp_path, monkeypatch, capsys):
    """The report reads AOSCALE_ANALYSIS_WORKERS after training: the launcher refuses it first."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AOSCALE_ANALYSIS_WORKERS", workers)
    code, out, err = run_cli(["--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"launch: AOSCALE_ANALYSIS_WORKERS={workers!r}: expected a whole number >= 1"), err
    assert listing(tmp_path) == []


def test_malformed_toml_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.toml").write_text("[run\nlr = 1\n")
    code, _, err = run_cli(["--spec", "study.toml"], capsys)
    assert code == 2 and err.startswith("launch: spec:") and len(err.strip().splitlines()) == 1
    assert listing(tmp_path) == ["study.toml"]


def test_study_dir_holding_a_different_study_exits_2(tmp_path, capsys):
    study_dir = tmp_path / "s"
    study_ledger.prepare(study_dir, build_study({"sizes": "0.1M", "seeds": 1, "families": "ar"}))
    before = listing(tmp_path)
    code, _, err = run_cli(["--study-dir", str(study_dir), "--sizes", "0.1M", "--seeds", "2",
                            "--families", "ar"], capsys)
    assert code == 2 and err.startswith("launch: study-dir:") and "different study" in err
    assert listing(tmp_path) == before


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["--dry-run"], capsys)
    assert code == 0 and listing(tmp_path) == []
    study = build_study({})
    for run_id in study.run_ids:
        assert run_id in out
    assert f"total: {len(study.run_ids)} runs" in out and "GPU-hours on H100 SXM bf16" in out and "40% MFU" in out


def test_big_plan_is_planned_but_refused_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["--sizes", "125M,350M,760M", "--seeds", "3", "--dry-run"], capsys)
    assert code == 0 and "total: 36 runs" in out
    code, _, err = run_cli(["--sizes", "125M,350M,760M", "--seeds", "3"], capsys)
    assert code == 2 and "hours on" in err and "--backend slurm" in err and "--force" in err
    assert listing(tmp_path) == []
