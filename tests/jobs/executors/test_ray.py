"""Ray backend: real tiny runs as a Tune grid on a local 2-CPU Ray.

A trial whose worker is killed is retried (FailureConfig) and resumes from the run's checkpoint
with the uninterrupted curve; a driver killed mid-study is relaunched, restores the experiment,
and no run trains twice.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.executors.cluster_runs import (PIPELINE, curve, make_run, reference_curve,
                                               running_at, status, tiny_spec, training_starts)
from tests.polling import wait_until

ray = pytest.importorskip("ray", reason="ray not installed (pip install 'aoscale[ray]')")
from jobs.executors.ray_tune import EXPERIMENT_FILE, RayExecutor, RayOptions, validate_ray_options  # noqa: E402

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[3]
STEPS = 240
TIMEOUT_S = 240


@pytest.fixture()
def one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_crashed_trial_is_retried_from_its_checkpoint(tmp_path, data_kit, one_thread):
    run = make_run(tmp_path / "study", tiny_spec(seed=5, steps=STEPS, checkpoint_every=20))
    options = RayOptions(cpus_per_trial=1, num_cpus=2, max_retries=1)
    handle = RayExecutor(tmp_path / "study", options, pipeline=PIPELINE).submit_all([run])[0]
    wait_until(running_at(run, 50), TIMEOUT_S, "the trial to pass step 50")
    os.kill(int(status(run)["worker_pid"]), signal.SIGKILL)  # the trial's worker dies (like an OOM kill)
    assert handle.result() == "done"
    starts = training_starts(run)
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 40 and starts[1] % 20 == 0, starts
    assert status(run)["attempts"] == 2
    assert curve(run) == reference_curve(tmp_path / "reference", tiny_spec(seed=5, steps=STEPS, checkpoint_every=20))
    assert not ray.is_initialized(), "the executor shuts down the Ray it started"


def _driver(study: Path, runs: list[Path]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jobs.executors.ray_tune", str(study), *map(str, runs),
           "--ray-num-cpus", "2", "--cpus-per-trial", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # its own session: the driver and the Ray daemons it starts form one group we can kill
    return subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def test_killed_driver_relaunch_restores_and_trains_nothing_twice(tmp_path, data_kit, one_thread):
    study = tmp_path / "study"
    runs = [make_run(study, tiny_spec(seed=s, steps=STEPS, checkpoint_every=20)) for s in range(3)]
    driver = _driver(study, runs)
    try:
        wait_until(lambda: any(status(r).get("state") == "done" for r in runs)
                   and any(running_at(r, 30)() for r in runs), TIMEOUT_S, "one run done, one mid-way")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finished_before = {r.name for r in runs if status(r).get("state") == "done"}
    experiment = json.loads((study / "ray" / EXPERIMENT_FILE).read_text())["name"]
    relaunch = _driver(study, runs)
    out, _ = relaunch.communicate(timeout=TIMEOUT_S)
    assert relaunch.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == {r.name: "done" for r in runs}
    assert json.loads((study / "ray" / EXPERIMENT_FILE).read_text())["name"] == experiment
    for run in runs:
        starts = training_starts(run)
        assert starts.count(0) == 1, (run.name, starts)  # never trained from scratch twice
        if run.name in finished_before:
            assert starts == [0], (run.name, starts)  # a finished run is not touched again
    assert finished_before and len(finished_before) < len(runs)


def test_unreachable_address_is_refused():
    with pytest.raises(ValueError, match=r"^ray_address: cannot reach 127\.0\.0\.1:1 "):
        validate_ray_options(RayOptions(address="127.0.0.1:1"))
    with pytest.raises(ValueError, match=r"^ray_address: 'nowhere' is not host:port"):
        validate_ray_options(RayOptions(address="nowhere"))
    with pytest.raises(ValueError, match=r"^cpus_per_trial: 0"):
        validate_ray_options(RayOptions(cpus_per_trial=0))


def test_a_driver_joining_a_cluster_ships_this_checkout_and_the_environment(monkeypatch):
    from jobs.executors.ray_tune import parse_env, runtime_env

    monkeypatch.setenv("AOSCALE_CACHE", "/shared/cache")
    monkeypatch.setenv("UNRELATED_SECRET", "x")
    env = runtime_env(RayOptions(address="auto", env=parse_env(["HF_HOME=/shared/hf", "EMPTY="])))
    assert env["working_dir"] == str(REPO) and ".git" in env["excludes"]
    assert env["env_vars"]["AOSCALE_CACHE"] == "/shared/cache" and env["env_vars"]["HF_HOME"] == "/shared/hf"
    assert env["env_vars"]["EMPTY"] == "" and "UNRELATED_SECRET" not in env["env_vars"]


def test_missing_ray_is_refused():
    """Without site-packages (python -S) Ray is not importable: validation says so."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from jobs.executors.ray_tune import RayOptions, validate_ray_options;"
            "validate_ray_options(RayOptions())")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("ValueError: backend: ray is not installed")
