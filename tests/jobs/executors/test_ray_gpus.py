"""Ray's GPUs per trial: by default 1 when the Ray cluster has GPUs (a trial with none would train
on CPU beside idle GPUs) and 0 on a CPU cluster; a given `--gpus-per-trial` is kept."""
from __future__ import annotations

import json

import pytest

from jobs.executors.ray_tune import EXPERIMENT_FILE, RayExecutor, RayOptions, trial_gpus
from tests.jobs.executors.cluster_runs import PIPELINE, make_run, status, tiny_spec


@pytest.mark.parametrize("given, cluster, wanted", [
    (None, {"CPU": 64.0, "GPU": 8.0, "memory": 1e12}, 1.0),  # a GPU cluster: one GPU per trial
    (None, {"CPU": 2.0, "memory": 1e9}, 0.0),  # a CPU cluster
    (None, {"CPU": 2.0, "GPU": 0.0}, 0.0),
    (None, {"CPU": 8.0, "GPU": 0.5}, 0.0),  # less than one whole GPU: no default share of it
    (0.0, {"CPU": 64.0, "GPU": 8.0}, 0.0),  # asked for CPU trials on a GPU cluster
    (0.5, {"CPU": 64.0, "GPU": 8.0}, 0.5),
])
def test_the_default_follows_the_clusters_gpus(given, cluster, wanted):
    assert trial_gpus(given, cluster) == wanted


@pytest.mark.ray
def test_this_cpu_ray_gives_trials_no_gpu_and_records_it(tmp_path, data_kit, monkeypatch):
    ray = pytest.importorskip("ray", reason="ray not installed (pip install 'aoscale[ray]')")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    run = make_run(tmp_path / "study", tiny_spec(seed=7, steps=2))
    try:
        handle = RayExecutor(tmp_path / "study", RayOptions(num_cpus=1), pipeline=PIPELINE).submit_all([run])[0]
        assert handle.result() == "done" and status(run)["state"] == "done"
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert json.loads((tmp_path / "study" / "ray" / EXPERIMENT_FILE).read_text())["gpus_per_trial"] == 0.0
