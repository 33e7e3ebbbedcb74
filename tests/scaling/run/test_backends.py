"""`scaling.launch --backend slurm|ray` and `scaling.status` on cluster studies.

Bad input exits 2 with one line and creates nothing; a real tiny study goes through each backend
end to end (Slurm: the local cluster of scripts/slurm-cluster.sh, skipped when it is not up; Ray:
a local 2-CPU Ray started and shut down by the launcher).
"""
from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.run import files as runfiles
from scaling import launch, status
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.jobs.executors.cluster_runs import training_starts
from tests.polling import wait_until
from tests.jobs.executors.test_slurm import PROBLEM as SLURM_PROBLEM

REPO = Path(__file__).resolve().parents[3]
cluster = pytest.mark.skipif(bool(SLURM_PROBLEM), reason=SLURM_PROBLEM or "cluster up")
# two tiny runs (0.1M and 0.3M, so the report has a curve to fit)
TINY = ["--sizes", "0.1M,0.3M", "--families", "ar", "--seeds", "1", "--max-steps", "4", "--seq-len", "32",
        "--no-progress", "--bootstrap", "20"]
TIMEOUT_S = 240


@pytest.fixture()
def env(cache_dir, monkeypatch):
    """Jobs and trials inherit this environment (sbatch --export=ALL, Ray workers)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = launch.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, start", [
    (["--backend", "slurm", "--gpus-per-node", "-1"], "gpus_per_node: -1 must be an integer >= 0"),
    (["--backend", "slurm", "--nodes", "0"], "nodes: 0 must be a positive integer"),
    (["--backend", "slurm", "--slurm-time", "soon"], "slurm_time: 'soon' is not a time"),
    (["--backend", "slurm", "--mem", "lots"], "mem: 'lots' is not a size"),
    (["--backend", "slurm", "--slurm-additional", "exclusive"], "slurm_additional: 'exclusive' is not key=value"),
    (["--backend", "slurm", "--nodes", "2", "--gpus-per-node", "4", "--engine", "torch"], "engine: torch"),
    (["--backend", "slurm", "--nodes", "two"], "argument --nodes: 'two' is not an integer"),
    (["--backend", "slurm", "--slurm-mail-type", "END,LUNCH"], "slurm_mail_type: unknown type 'LUNCH'"),
    (["--backend", "slurm", "--slurm-time", "5", "--slurm-signal-delay", "300"], "slurm_signal_delay: 300 s"),
    (["--backend", "slurm", "--slurm-setup", " "], "slurm_setup: ' ' must be one non-empty shell line"),
    (["--backend", "ray", "--ray-address", "127.0.0.1:1"], "ray_address: cannot reach 127.0.0.1:1"),
    (["--backend", "ray", "--ray-address", "nowhere"], "ray_address: 'nowhere' is not host:port"),
    (["--backend", "ray", "--cpus-per-trial", "0"], "cpus_per_trial: 0.0 must be > 0"),
    (["--backend", "ray", "--gpus-per-trial", "8"], "gpus_per_trial: 8 GPUs for a trial that trains in one process"),
    (["--backend", "ray", "--ray-env", "NOVALUE"], "ray_env: 'NOVALUE' is not KEY=VALUE"),
    (["--backend", "ray", "--max-concurrent-trials", "-1"], "max_concurrent_trials: -1 must be >= 0"),
    (["--backend", "ray", "--wait"], "wait: --backend ray always waits"),
    (["--slurm-partition", "debug"], "slurm-partition: only used with --backend slurm"),
    (["--backend", "ray", "--gpus-per-node", "1"], "gpus-per-node: only used with --backend slurm"),
])
def test_bad_backend_flags_exit_2_with_one_line_and_create_nothing(argv, start, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = run_cli([*argv, "--study-dir", "study", *TINY], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"launch: {start}"), err
    assert "fix:" in err or "see --help" in err, err
    assert list(tmp_path.iterdir()) == []


SLURM_HABITS = ["--slurm-partition", "gpu", "--nodes", "2", "--gpus-per-node", "8", "--slurm-time", "2:00:00",
                "--slurm-setup", "module load cuda/12.4", "--slurm-setup", "source ~/venv/bin/activate",
                "--slurm-exclusive", "--slurm-signal-delay", "300", "--slurm-mail-type", "end,fail",
                "--slurm-mail-user", "me@lab.org"]


def test_slurm_dry_run_renders_the_script_and_array_plan_without_a_controller(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # no sinfo, sbatch, squeue
    assert launch.main(["--backend", "slurm", *SLURM_HABITS, "--study-dir", "study", "--dry-run", *TINY]) == 0
    out = capsys.readouterr().out
    assert "slurm: one job array of 2 task(s) (runs not done), at most 2 at once; each task 2 node(s) x 8 srun task(s)" in out
    flags = [line for line in out.splitlines() if line.startswith("#SBATCH")]
    for flag in ("--array=0-1%2", "--exclusive", "--mail-type=END,FAIL", "--mail-user=me@lab.org", "--nodes=2",
                 "--ntasks-per-node=8", "--gpus-per-node=8", "--partition=gpu", "--signal=USR2@300", "--time=120"):
        assert f"#SBATCH {flag}" in flags, flag
    setup = out.split("# setup\n", 1)[1].splitlines()
    assert setup[:2] == ["module load cuda/12.4", "source ~/venv/bin/activate"]  # before aoscale's own line
    assert "srun --unbuffered" in out
    assert list(tmp_path.iterdir()) == []


@cluster
def test_unknown_partition_is_refused_naming_the_valid_ones(tmp_path, capsys):
    code, err = run_cli(["--backend", "slurm", "--slurm-partition", "nope", "--study-dir", str(tmp_path / "s"),
                         *TINY], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("launch: slurm_partition: unknown partition 'nope'; fix: use one of debug")
    assert not (tmp_path / "s").exists()


def test_ray_address_auto_without_a_cluster_exits_2_naming_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    code, err = run_cli(["--backend", "ray", "--ray-address", "auto", *TINY], capsys)
    assert code == 2 and err == ("launch: ray_address: auto found no Ray cluster on this machine; fix: start one "
                                 "with `ray start --head` (or give host:port)\n")
    assert list(tmp_path.iterdir()) == []


def test_ray_backend_without_ray_exits_2(tmp_path):
    """A Python that cannot import ray (None in sys.modules blocks the import, as for an absent
    package; `python -S` as in tests/jobs/executors/test_ray.py would hide torch too) runs the real CLI."""
    code = ("import sys; sys.modules['ray'] = None; sys.path.insert(0, sys.argv.pop(1));"
            "from scaling.launch import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO), "--backend", "ray",
                           "--study-dir", str(tmp_path / "s"), *TINY], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("launch: backend: ray is not installed; fix: pip install 'aoscale[ray]'")
    assert list(tmp_path.iterdir()) == []


@cluster
def test_multi_gpu_slurm_runs_use_deepspeed_under_the_same_run_ids():
    args = launch.parser().parse_args(["--backend", "slurm", "--nodes", "2", "--gpus-per-node", "4", *TINY])
    study, _, options = launch._check(args)
    plain, _, _ = launch._check(launch.parser().parse_args(TINY))
    assert (options.nodes, options.gpus_per_node) == (2, 4)
    assert study.run_ids == plain.run_ids
    assert {c.spec.engine for c in study.cells} == {"deepspeed"} and {c.spec.engine for c in plain.cells} == {"torch"}


def _status(study: Path, path_env: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if path_env is not None:
        env["PATH"] = path_env
    return subprocess.run([sys.executable, "-m", "scaling.status", str(study)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def _table(out: str) -> list[dict[str, str]]:
    """The status table's rows as dicts, cut at the header's (fixed-width) column starts; the table
    ends at its first line that does not start with a run id (the counts, then one line per path)."""
    lines = out.strip().splitlines()
    names = lines[0].split()
    starts = [lines[0].index(f"{name}") for name in names] + [None]
    rows = list(itertools.takewhile(lambda line: re.match(r"[0-9a-f]{12}  ", line), lines[1:]))
    return [{name: line[a:b].strip() for name, a, b in zip(names, starts, starts[1:])} for line in rows]


def test_status_shows_the_queue_column_only_for_slurm_studies_and_survives_without_slurm(tmp_path, capsys):
    study = tmp_path / "s"
    spec = build_study({"sizes": "0.1M", "seeds": 2, "families": "ar"})
    study_ledger.prepare(study, spec)
    assert status.main([str(study)]) == 1
    assert "queue" not in capsys.readouterr().out.splitlines()[0].split()
    first = spec.run_ids[0]
    runfiles.atomic_write_json(study / "logs" / "slurm" / "jobs.json", {first: "999999_0"})
    proc = _status(study, path_env="/nonexistent")  # no squeue / sacct on PATH
    assert proc.returncode == 1, proc.stderr
    rows = _table(proc.stdout)
    assert [(r["run_id"], r["state"], r["queue"]) for r in rows] == [
        (first, "pending", "UNKNOWN"), (spec.run_ids[1], "pending", "-")]


def _launcher(study: Path, *argv: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "scaling.launch", "--study-dir", str(study), *argv, *TINY]
    # own session: the launcher and whatever it starts (Ray) can be killed as one group
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


@cluster
@pytest.mark.slurm
def test_slurm_launch_submits_one_array_and_returns_then_wait_writes_the_report(tmp_path, data_kit, env):
    study = tmp_path / "study"
    slurm = ["--backend", "slurm", "--slurm-partition", "debug", "--slurm-time", "10"]
    first = _launcher(study, *slurm)
    out = _finish(first)
    assert first.returncode == 0, out
    assert "submitted 2 runs as job" in out
    # launch returned at submission: the jobs cannot all have trained yet (each starts a Python with
    # torch); read their states at once (a scaling.status process may start after tiny jobs finish)
    states = [runfiles.read_status(study_ledger.run_dir(study, r)).get("state", "pending")
              for r in study_ledger.study_run_ids(study)]
    assert not all(state == "done" for state in states), states
    jobs = json.loads((study / "logs" / "slurm" / "jobs.json").read_text())
    assert sorted(jobs) == sorted(study_ledger.study_run_ids(study))
    assert len({j.split("_")[0] for j in jobs.values()}) == 1 and all("_" in j for j in jobs.values())

    waiter = _launcher(study, *slurm, "--wait")  # waits on the queued array instead of resubmitting
    out = _finish(waiter)
    assert waiter.returncode == 0, out
    assert f"report: {study / 'report' / 'report.md'}" in out
    assert json.loads((study / "logs" / "slurm" / "jobs.json").read_text()) == jobs
    for run_id in jobs:
        assert training_starts(study_ledger.run_dir(study, run_id)) == [0]
    # the result is written just before the task exits; sacct catches up later (slurmdbd's agent
    # queue: seconds here, tens of seconds on a loaded machine), so the wait names what it last saw
    seen: list[set[str]] = []

    def completed() -> bool:
        seen.append({r["queue"] for r in _table(_status(study).stdout)})
        return seen[-1] == {"COMPLETED"}

    try:
        wait_until(completed, 180, "sacct to show the array COMPLETED")
    except AssertionError as error:
        raise AssertionError(f"{error}; queue states seen last: {seen[-1]}") from None
    proc = _status(study)
    assert proc.returncode == 0 and {r["state"] for r in _table(proc.stdout)} == {"done"}


@pytest.mark.ray
def test_ray_launch_blocks_until_done_writes_the_report_and_relaunch_trains_nothing(tmp_path, data_kit, env):
    pytest.importorskip("ray", reason="ray not installed (pip install 'aoscale[ray]')")
    study = tmp_path / "study"
    ray_flags = ["--backend", "ray", "--ray-num-cpus", "2"]
    first = _launcher(study, *ray_flags)
    out = _finish(first)
    assert first.returncode == 0, out
    assert f"report: {study / 'report' / 'report.md'}" in out
    run_ids = study_ledger.study_run_ids(study)
    assert {study_ledger.view(study, r).state for r in run_ids} == {"done"}
    experiment = json.loads((study / "ray" / "experiment.json").read_text())
    assert sorted(experiment["runs"]) == sorted(str(study_ledger.run_dir(study, r).resolve()) for r in run_ids)
    again = _launcher(study, *ray_flags)
    out = _finish(again)
    assert again.returncode == 0, out
    for run_id in run_ids:
        assert training_starts(study_ledger.run_dir(study, run_id)) == [0]
        assert study_ledger.view(study, run_id).attempts == 1
