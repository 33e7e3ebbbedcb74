"""The prepare stage on Ray: `scaling.launch --backend ray` runs the data preparation as a CPU task
before the trials, into the cache beside the study dir; the trials read it with
AOSCALE_REQUIRE_PREPARED=1 (a trial that had to tokenise would be refused), and the study completes."""
from __future__ import annotations

import json

import pytest

from scaling import launch
from tests.jobs.data.test_prepare import webtext_corpus

ray = pytest.importorskip("ray", reason="ray not installed (pip install 'aoscale[ray]')")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture()
def ray_env(monkeypatch):
    monkeypatch.delenv("AOSCALE_CACHE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_a_ray_launch_prepares_in_a_cpu_task_before_the_trials(tmp_path, data_kit, ray_env, capsys):
    corpus = webtext_corpus(data_kit, tmp_path / "webtext")
    study = tmp_path / "studies" / "web"
    assert launch.main(["--backend", "ray", "--ray-num-cpus", "2", "--cpus-per-trial", "1", "--study-dir",
                        str(study), "--corpus", str(corpus), "--sizes", "0.1M", "--families", "ar", "--seeds", "1",
                        "--seq-len", "32", "--max-steps", "2", "--tokenizer", "gpt2", "--batch-size", "4",
                        "--no-progress", "--no-report"]) == 0, capsys.readouterr().err
    cache = tmp_path / "studies" / "aoscale-cache"
    assert json.loads((study / "data.json").read_text())["cache_dir"] == str(cache)
    assert list((cache / "tokens").glob("webtext-gpt2-*/manifest.json"))
    (run_dir,) = (study / "runs").iterdir()
    assert json.loads((run_dir / "status.json").read_text())["state"] == "done"


def test_a_trial_whose_cache_is_missing_refuses_naming_the_prepare_command(tmp_path, data_kit, ray_env):
    from jobs.executors.ray_tune import RayExecutor, RayOptions
    from tests.jobs.executors.cluster_runs import PIPELINE, make_run, status, tiny_spec

    run = make_run(tmp_path, tiny_spec())
    executor = RayExecutor(tmp_path, RayOptions(cpus_per_trial=1, num_cpus=2, max_retries=0), pipeline=PIPELINE)
    executor.use_data(str(tmp_path / "empty-cache"))
    (handle,) = executor.submit_all([run])
    assert handle.result() == "failed"
    assert "is not prepared in" in status(run)["reason"] and "aoscale prepare STUDY_DIR" in status(run)["reason"]
    assert not (tmp_path / "empty-cache" / "tokens").exists()
