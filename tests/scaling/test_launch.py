"""The launcher against the real pipeline: idempotent relaunch, SIGKILL recovery, two concurrent
launchers, retries, locks across processes, and the quickstart end to end with its report."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.executors import BUSY, RunLock, lock_held, run_exclusive
from scaling import status
from scaling.run import study_ledger
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--sizes", "0.1M", "--families", "ar,mdm", "--seeds", "2", "--seq-len", "32", "--no-progress", "--no-report"]
TIMEOUT_S = 600


@pytest.fixture(autouse=True)
def _env(cache_dir, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")


def launcher(study_dir: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "scaling.launch", "--study-dir", str(study_dir), *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def starts(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.ndjson"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [row for row in rows if row.get("kind") == "start"]


def views(study_dir: Path) -> dict[str, study_ledger.RunView]:
    return {run_id: study_ledger.view(study_dir, run_id) for run_id in study_ledger.study_run_ids(study_dir)}


def test_relaunch_after_sigkill_finishes_with_no_run_trained_twice(tmp_path):
    study = tmp_path / "study"
    first = launcher(study, *SMALL, "--max-steps", "40", "--max-parallel", "1")
    wait_until(lambda: (study / "study.json").exists()
               and sum(v.state == "done" for v in views(study).values()) >= 1
               and any(v.state == "running" and v.step >= 1 for v in views(study).values()),
               TIMEOUT_S, "one run done and one training")
    done_before = {r for r, v in views(study).items() if v.state == "done"}
    first.send_signal(signal.SIGKILL)
    first.wait()
    # the worker dies with its launcher and releases the run's lock
    wait_until(lambda: not any(lock_held(study_ledger.run_dir(study, r)) for r in views(study)), 60,
               "the killed launcher's worker to end")
    second = launcher(study, *SMALL, "--max-steps", "40", "--max-parallel", "1")
    out, _ = second.communicate(timeout=TIMEOUT_S)
    assert second.returncode == 0, out
    final = views(study)
    assert {v.state for v in final.values()} == {"done"}
    for run_id in done_before:
        assert final[run_id].attempts == 1 and len(starts(study_ledger.run_dir(study, run_id))) == 1
    assert sum(v.attempts for v in final.values()) <= len(final) + 1  # one interrupted run resumed
    assert status.main([str(study)]) == 0


def test_two_concurrent_launches_train_every_run_exactly_once(tmp_path):
    study = tmp_path / "study"
    a = launcher(study, *SMALL, "--max-steps", "6", "--max-parallel", "1")
    b = launcher(study, *SMALL, "--max-steps", "6", "--max-parallel", "1")
    for proc in (a, b):
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0, out
    final = views(study)
    assert len(final) == 4 and {v.state for v in final.values()} == {"done"}
    for run_id, view in final.items():
        assert view.attempts == 1 and len(starts(study_ledger.run_dir(study, run_id))) == 1, run_id


def test_failed_runs_are_retried_then_left_failed_with_their_reason(tmp_path, capsys, monkeypatch):
    from scaling import launch
    from tests.scaling.failing_pipeline import REASON
    monkeypatch.setenv("AOSCALE_PIPELINE", "tests.scaling.failing_pipeline:run")  # read by the workers
    study = tmp_path / "study"
    argv = ["--study-dir", str(study), "--sizes", "0.1M", "--families", "ar", "--seeds", "1",
            "--max-steps", "2", "--no-progress", "--no-report"]
    assert launch.main(argv) == 1
    (view,) = views(study).values()
    assert (view.state, view.attempts, view.failures) == ("failed", 2, 2)
    assert REASON in view.reason
    assert launch.main(argv) == 1  # relaunch: retries are used up, nothing runs again
    (again,) = views(study).values()
    assert (again.attempts, again.failures) == (2, 2)
    assert REASON in capsys.readouterr().out
    assert status.main([str(study)]) == 1
    table = capsys.readouterr().out
    assert "failed" in table and "1 runs: 1 failed" in table


def test_a_relative_study_dir_works_from_any_folder(tmp_path, monkeypatch):
    """Workers run in the repository; the launcher hands them absolute run directories."""
    from scaling import launch
    monkeypatch.chdir(tmp_path)
    assert launch.main(["--study-dir", "study", *SMALL, "--seeds", "1", "--max-steps", "2"]) == 0
    final = views(tmp_path / "study")
    assert len(final) == 2 and {(v.state, v.attempts) for v in final.values()} == {("done", 1)}


def test_a_worker_that_dies_before_writing_anything_is_counted_and_retried_once(tmp_path, capsys):
    """A crash outside the pipeline (here: a worker command that exits 1 at once) is recorded as a
    failure on every attempt, so retries run out even when the run is already marked failed."""
    import threading

    from jobs.executors.local import LocalExecutor
    from scaling.run.scheduler import Scheduler
    from scaling.study.study_spec import build_study

    study_dir = tmp_path / "study"
    study = build_study({"sizes": ["0.1M"], "families": ["ar"], "seeds": 1})
    study_ledger.prepare(study_dir, study)
    scheduler = Scheduler(study_dir, study.run_ids, LocalExecutor(python="false"), max_retries=1,
                          progress=False)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(scheduler.run()), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the scheduler kept retrying a run that always crashes"
    (run_id,) = study.run_ids
    assert result == {run_id: "failed"}
    view = study_ledger.view(study_dir, run_id)
    assert view.failures == 2 and "exited with status 1" in view.reason
    line = capsys.readouterr().err.strip().splitlines()[-1]  # the completion line names the run
    assert line.startswith(f"[1/1] ar base 0.1M s0 failed ({run_id}): ") and "exited with status 1" in line


def test_completion_lines_name_each_run_by_family_variant_size_and_seed(tmp_path, capsys):
    from jobs.run import files as runfiles
    from jobs.executors.local import LocalExecutor
    from scaling.run.scheduler import Scheduler
    from scaling.study.study_spec import build_study

    study_dir = tmp_path / "study"
    study = build_study({"sizes": ["0.1M"], "families": ["ar", "mdm"], "seeds": 2})
    study_ledger.prepare(study_dir, study)
    for run_id in study.run_ids:  # trained, never evaluated: the scheduler reports them as such
        runfiles.write_status(study_ledger.run_dir(study_dir, run_id), "done")
    Scheduler(study_dir, study.run_ids, LocalExecutor(python="false"), progress=False).run()
    lines = capsys.readouterr().err.strip().splitlines()
    names = dict(zip(study.run_ids, ["ar base 0.1M s0", "mdm mdlm 0.1M s0", "ar base 0.1M s1", "mdm mdlm 0.1M s1"]))
    assert [line.split("] ", 1)[0] for line in lines] == [f"[{i}/4" for i in range(1, 5)]
    assert sorted(line.split("] ", 1)[1] for line in lines) == sorted(
        f"{name} trained ({run_id}): trained but not evaluated" for run_id, name in names.items())


def test_run_lock_holds_across_processes_and_dies_with_its_holder(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from jobs.executors import RunLock; "
        f"assert RunLock({str(run_dir)!r}).acquire(); print('held', flush=True); time.sleep(600)")],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert lock_held(run_dir) and not RunLock(run_dir).acquire()
    assert run_exclusive(run_dir, pipeline="json:dumps") == BUSY  # never reaches the pipeline
    assert not (run_dir / "status.json").exists()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert not lock_held(run_dir)
    lock = RunLock(run_dir)
    assert lock.acquire()
    assert lock_held(run_dir)  # another descriptor in the same process sees it too
    lock.release()


@pytest.mark.slow
def test_quickstart_end_to_end_writes_the_report(tmp_path):
    study = tmp_path / "quickstart"
    # the quick suite: the cpu suite's 4,096 windows cost ~150 s here and are covered in jobs/eval
    proc = launcher(study, "--preset", "quickstart", "--max-steps", "2", "--max-parallel", "2",
                    "--eval-suite", "quick", "--no-progress", "--bootstrap", "20")
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, out
    assert f"report: {study / 'report' / 'report.md'}" in out
    assert (study / "report" / "report.md").exists() and (study / "report" / "report.html").exists()
    report = (study / "report" / "report.md").read_text()
    assert report.index("## Summary on shakespeare/validation") < report.index("## Figures") < report.index("## Inputs")
    assert "18 of 18 runs are on the unigram plateau" in report  # 2 steps: nothing learned, and the summary says so
    final = views(study)
    assert len(final) == 18 and {v.state for v in final.values()} == {"done"}
    assert all((study_ledger.run_dir(study, r) / "eval.parquet").exists() for r in final)
    # relaunching is a no-op: nothing is trained again
    again = launcher(study, "--preset", "quickstart", "--max-steps", "2", "--eval-suite", "quick",
                     "--no-progress", "--no-report")
    assert again.wait(TIMEOUT_S) == 0
    assert {v.attempts for v in views(study).values()} == {1}
