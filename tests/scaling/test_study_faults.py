"""Faults around a study's evaluation and report, each in real processes: a worker killed while it
evaluates a finished run, a relaunch with another suite or name, a kill and a full disk while
the report is written, a deleted ckpt/ and a truncated eval.parquet, a full disk that used up a
run's retries. Every run is evaluated in the end and none is trained twice (one `start` event in
its metrics.ndjson, its final checkpoint untouched). A kill stops its process at a named fault point
(`AOSCALE_FAULT`, cli.faults), not in a window found by polling."""
from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from analysis import fit_curves
from cli.faults import FAULT_ENV
from jobs.data.suites import SUITES
from jobs.run.files import read_metrics, read_status
from scaling import launch, status
from scaling.run import study_ledger
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0


def flags(seeds: int = 2) -> list[str]:
    """A study of `seeds` tiny AR runs, trained side by side."""
    return ["--families", "ar", "--sizes", "0.1M", "--seeds", str(seeds), "--max-steps", "6", "--seq-len", "32",
            "--no-progress", "--max-parallel", str(seeds)]


FLAGS = flags()

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """One token cache for the module's processes; one thread each; no zero-shot data."""
    cache = tmp_path_factory.mktemp("cache")
    out = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "AOSCALE_CACHE": str(cache)}
    out.pop("AOSCALE_DATA", None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(cache))
        mp.delenv("AOSCALE_DATA", raising=False)
        yield out


def _cli(env: dict, module: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=240, **kw)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, env) -> Path:
    """A 2-run study, trained and evaluated with the quick suite, with its report (the workers
    are real processes; the launcher is this one)."""
    study = tmp_path_factory.mktemp("evaluated") / "study"
    assert launch.main(["--study-dir", str(study), *FLAGS, "--bootstrap", "10"]) == 0
    return study


def _copy(study: Path, tmp_path: Path) -> Path:
    out = tmp_path / "study"
    shutil.copytree(study, out)
    return out


def _runs(study: Path) -> list[Path]:
    return [study_ledger.run_dir(study, r) for r in study_ledger.study_run_ids(study)]


def _starts(run_dir: Path) -> int:
    return len(read_metrics(run_dir, "start"))


def _final_ckpt(run_dir: Path) -> tuple[str, int]:
    (path,) = sorted((run_dir / "ckpt").glob("step_*"))[-1:]
    return path.name, (path / "model.pt").stat().st_mtime_ns


def _suites(run_dir: Path) -> set[str]:
    return set(pl.read_parquet(run_dir / "eval.parquet")["suite"].to_list())


def _wait_unlocked(run_dirs: list[Path], timeout_s: float = 30) -> None:
    """Until no worker holds a run (the killed launcher's workers are dying)."""
    from jobs.run.lock import lock_held

    wait_until(lambda: not any(lock_held(d) for d in run_dirs), timeout_s, "the killed launcher's workers to end",
               every_s=0.05)


def _status_json(env: dict, study: Path) -> dict:
    proc = _cli(env, "scaling.status", str(study), "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return {run["run_id"]: run for run in json.loads(proc.stdout)["runs"]}


def test_a_worker_killed_while_evaluating_leaves_trained_runs_that_the_relaunch_evaluates(tmp_path, env):
    study = tmp_path / "study"
    args = ["--study-dir", str(study), *FLAGS, "--no-report"]
    # each worker dies (SIGKILL) with its run trained and its metrics computed, before any record is written
    killed = _cli({**env, FAULT_ENV: "evaluate.before_records"}, "scaling.launch", *args)
    assert "Traceback" not in killed.stderr, killed.stderr[-2000:]
    _wait_unlocked(_runs(study))
    rows = _status_json(env, study)
    assert {row["state"] for row in rows.values()} == {"trained"}, rows  # not `done`: no records
    assert not [d for d in _runs(study) if (d / "eval.parquet").exists()]
    before = {d.name: _final_ckpt(d) for d in _runs(study)}
    assert launch.main(args) == 0  # the relaunch evaluates every run and trains none again
    for run_dir in _runs(study):
        assert read_status(run_dir)["state"] == "done" and _suites(run_dir) == {"quick"}
        assert _starts(run_dir) == 1 and _final_ckpt(run_dir) == before[run_dir.name], run_dir
    assert {study_ledger.view(study, d.name).state for d in _runs(study)} == {"done"}


def test_a_relaunch_with_another_suite_evaluates_every_run_again_and_another_name_is_refused(
        tmp_path, env, evaluated, capsys):
    study = _copy(evaluated, tmp_path)
    before = {d.name: _final_ckpt(d) for d in _runs(study)}
    assert all(_suites(d) == {"quick"} for d in _runs(study))
    doc = study_ledger.read_study(study)
    capsys.readouterr()
    assert launch.main(["--study-dir", str(study), *FLAGS, "--name", "renamed", "--no-report"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "name:" in lines[0] and doc["name"] in lines[0], lines
    assert study_ledger.read_study(study) == doc
    assert launch.main(["--study-dir", str(study), *FLAGS, "--eval-suite", "cpu", "--no-report"]) == 0
    assert study_ledger.read_study(study)["settings"]["eval_suite"] == "cpu"
    for run_dir in _runs(study):
        assert study_ledger.load_spec(study, run_dir.name).eval_suite == "cpu"
        records = pl.read_parquet(run_dir / "eval.parquet")
        assert set(records["suite"]) == {"cpu"}  # replaced, not merged with the quick suite's rows
        l2r = records.filter((pl.col("metric") == "nll_l2r") & (pl.col("split") == "validation"))
        assert l2r["n_samples"].to_list() == [SUITES["cpu"].val_chunks]  # the cpu suite's windows (quick: 8)
        assert _starts(run_dir) == 1 and _final_ckpt(run_dir) == before[run_dir.name]


def _report_bytes(report: Path) -> dict[str, bytes]:
    return {str(p.relative_to(report)): p.read_bytes() for p in sorted(report.rglob("*")) if p.is_file()}


def test_a_kill_during_the_report_leaves_the_previous_report_and_the_next_write_cleans_up(tmp_path, env, evaluated):
    study = _copy(evaluated, tmp_path)
    report = study / "report"
    previous = _report_bytes(report)
    assert "report.md" in previous and "fits.json" in previous
    # the writer dies with the new report staged in full beside the old one, not yet swapped in
    killed = _cli({**env, FAULT_ENV: "build_dir.staged"}, "analysis.fit_curves", str(study), "--bootstrap", "10")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert _report_bytes(report) == previous
    (staged,) = study.glob(".report.tmp-*")  # the dead writer's leftovers ...
    assert set(_report_bytes(staged)) == set(previous)
    assert fit_curves.main([str(study), "--bootstrap", "10"]) == 0
    assert not list(study.glob(".report.*"))  # ... are removed by the next write
    assert set(_report_bytes(report)) == set(previous)


def _limit_file_size(max_bytes: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return apply


def _assert_one_line_and_previous_report(returncode: int, stderr: str, report: Path, previous: dict) -> None:
    lines = stderr.strip().splitlines()
    assert returncode == 1 and len(lines) == 1, stderr[-2000:]
    assert "Traceback" not in stderr and "previous report there is intact" in lines[0], lines
    assert _report_bytes(report) == previous
    assert not list(report.parent.glob(f".{report.name}.*"))


def test_a_file_size_limit_during_the_report_leaves_the_previous_report(tmp_path, env, evaluated):
    study = _copy(evaluated, tmp_path)
    previous = _report_bytes(study / "report")
    proc = _cli(env, "analysis.fit_curves", str(study), "--bootstrap", "10", preexec_fn=_limit_file_size(20_000))
    _assert_one_line_and_previous_report(proc.returncode, proc.stderr, study / "report", previous)


@pytest.fixture()
def small_disk(tmp_path):
    """A 4 MiB tmpfs (root only)."""
    if not IS_ROOT:
        pytest.skip("a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=False).returncode:
        pytest.skip("tmpfs cannot be mounted here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path, leave_bytes: int = 0) -> None:
    """Write `path` until the file system is full, then free `leave_bytes` again."""
    with open(path, "wb", buffering=0) as handle:
        try:
            while handle.write(b"\0" * 4096):
                pass
        except OSError as error:
            assert error.errno == errno.ENOSPC
    os.truncate(path, max(0, path.stat().st_size - leave_bytes))


def test_a_full_disk_during_the_report_leaves_the_previous_report(tmp_path, env, evaluated, small_disk, capsys):
    study = _copy(evaluated, tmp_path)
    report = small_disk / "report"
    shutil.copytree(study / "report", report)
    previous = _report_bytes(report)
    fill(small_disk / "filler", leave_bytes=100_000)
    capsys.readouterr()
    code = fit_curves.main([str(study), "--bootstrap", "10", "--out", str(report), "--force"])  # a copied report
    _assert_one_line_and_previous_report(code, capsys.readouterr().err, report, previous)
    (small_disk / "filler").unlink()
    assert fit_curves.main([str(study), "--bootstrap", "10", "--out", str(report), "--force"]) == 0


def test_a_deleted_ckpt_and_a_truncated_eval_parquet_show_in_status_and_fit_curves(tmp_path, env, evaluated, capsys):
    study = _copy(evaluated, tmp_path)
    gone, torn = _runs(study)
    shutil.rmtree(gone / "ckpt")
    data = (torn / "eval.parquet").read_bytes()
    (torn / "eval.parquet").write_bytes(data[: len(data) // 2])
    human = _cli(env, "scaling.status", str(study))
    assert human.returncode == 1 and "Traceback" not in human.stderr
    header, *lines = human.stdout.splitlines()
    assert header.split()[-2:] == ["files", "numerics"]  # progress holds a space: read from both ends
    table = {cells[0]: cells for cells in map(str.split, lines[:-1])}
    assert table[gone.name][5] == "done" and table[gone.name][-2] == "ckpt-missing"
    assert table[torn.name][5] == "trained" and table[torn.name][-2] == "eval-unreadable"
    assert f"run {gone.name}: done, but it has no checkpoint left" in human.stderr
    assert f"run {torn.name}: {torn / 'eval.parquet'} is unreadable" in human.stderr
    capsys.readouterr()
    assert status.main([str(study), "--json"]) == 1
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert (rows[gone.name]["files"], rows[torn.name]["files"]) == ("ckpt-missing", "eval-unreadable")
    assert "no checkpoint left" in rows[gone.name]["warnings"][0] and "unreadable" in rows[torn.name]["warnings"][0]
    assert fit_curves.main([str(study), "--bootstrap", "10"]) == 0
    warnings = (study / "report" / "report.md").read_text().split("**Warnings:**")[1].split("#")[0]
    assert f"run {gone.name}: its checkpoints are missing" in warnings
    assert f"run {torn.name}: eval.parquet is unreadable" in warnings
    before = _final_ckpt(torn)
    assert launch.main(["--study-dir", str(study), *FLAGS, "--no-report"]) == 0  # evaluates it again
    assert _starts(torn) == 1 and _final_ckpt(torn) == before and _suites(torn) == {"quick"}


def test_a_corrupt_final_checkpoint_shows_in_status_json_and_in_the_report(tmp_path, env, evaluated, capsys):
    study = _copy(evaluated, tmp_path)
    run_dir = _runs(study)[0]
    model = max((run_dir / "ckpt").glob("step_*")) / "model.pt"
    model.write_bytes(model.read_bytes()[:-4] + b"oops")
    capsys.readouterr()
    assert status.main([str(study), "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows[run_dir.name]["files"] == "ckpt-corrupt" and "is corrupt" in rows[run_dir.name]["warnings"][0]
    assert fit_curves.main([str(study), "--bootstrap", "10"]) == 0
    md = (study / "report" / "report.md").read_text()
    assert f"run {run_dir.name}: its final checkpoint step_00000006 is corrupt (model.pt fails its sha256 check)" in md


def test_after_a_full_disk_used_up_the_retries_retry_failed_retries(tmp_path, env, small_disk, capsys, monkeypatch):
    study = small_disk / "study"
    argv = ["--study-dir", str(study), *flags(1), "--no-report", "--max-retries", "0"]
    study_ledger.prepare(study, launch.study_from_args(launch.parser().parse_args(argv)))
    fill(small_disk / "filler", leave_bytes=200_000)  # room for the run's files, not its checkpoint
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert launch.main(argv) == 1
    (run_dir,) = _runs(study)
    failed = read_status(run_dir)
    assert failed["state"] == "failed" and failed["failures"] == 1 and "No space left" in failed["reason"]
    assert "--retry-failed" in capsys.readouterr().out
    assert status.main([str(study)]) == 1
    assert "relaunch the study with --retry-failed" in capsys.readouterr().err
    (small_disk / "filler").unlink()
    assert launch.main(argv) == 1 and read_status(run_dir)["failures"] == 1  # retries used up: nothing runs
    assert launch.main([*argv, "--retry-failed"]) == 0
    assert read_status(run_dir)["state"] == "done" and (run_dir / "eval.parquet").exists()


def test_records_of_an_edited_suite_are_not_its_result_and_the_relaunch_evaluates_them_again(tmp_path, env, evaluated):
    """Rows stamped with another fingerprint of their suite (its definition changed since, or
    overrides) leave the run `trained`; the relaunch evaluates it again and never retrains it."""
    study = _copy(evaluated, tmp_path)
    run_dir = _runs(study)[0]
    before = _final_ckpt(run_dir)
    records = pl.read_parquet(run_dir / "eval.parquet")
    assert set(records["suite_hash"]) == {SUITES["quick"].fingerprint}
    assert study_ledger.view(study, run_dir.name).state == "done"
    records.with_columns(suite_hash=pl.lit("0123456789ab")).write_parquet(run_dir / "eval.parquet")
    view = study_ledger.view(study, run_dir.name)
    assert view.state == "trained" and "earlier definition of suite quick" in view.reason
    records.drop("suite_hash").write_parquet(run_dir / "eval.parquet")  # rows from before the column: kept
    assert study_ledger.view(study, run_dir.name).state == "done"
    records.with_columns(suite_hash=pl.lit("0123456789ab")).write_parquet(run_dir / "eval.parquet")
    assert launch.main(["--study-dir", str(study), *FLAGS, "--no-report"]) == 0
    again = pl.read_parquet(run_dir / "eval.parquet")
    assert set(again["suite_hash"]) == {SUITES["quick"].fingerprint} and study_ledger.view(study, run_dir.name).state == "done"
    assert _starts(run_dir) == 1 and _final_ckpt(run_dir) == before  # evaluated again, not trained again


def test_a_suite_fingerprint_moves_with_what_it_measures_only():
    from dataclasses import replace

    from jobs.data.suites import EvalSuite

    cpu = SUITES["cpu"]
    assert cpu.fingerprint == "66804d8e867a"  # pinned: an edit to the cpu suite must be deliberate
    assert replace(cpu, gen_repeats=1, gen_steps=(64,)).fingerprint == cpu.fingerprint  # defaults add nothing
    assert replace(cpu, val_chunks=1024).fingerprint != cpu.fingerprint
    assert len({s.fingerprint for s in SUITES.values()}) == len(SUITES)
    assert EvalSuite.parse("paper:wikitext2").suite.fingerprint != SUITES["paper"].fingerprint
    assert EvalSuite.parse("paper").suite.fingerprint == SUITES["paper"].fingerprint
