"""The prepare stage on the real Slurm test cluster: `scaling.launch --backend slurm` submits the
data preparation as a CPU job of its own and the run array depends on it (afterok, read back from
squeue), the cache goes beside the study dir, and the study completes; a run job whose cache is
missing refuses in one line naming `aoscale prepare` (it never tokenises)."""
from __future__ import annotations

import json
import subprocess

import pytest

from jobs.executors.slurm import SlurmExecutor, SlurmOptions
from scaling import launch
from tests.jobs.data.test_prepare import webtext_corpus
from tests.jobs.executors.cluster_runs import PIPELINE, make_run, status, tiny_spec
from tests.jobs.executors.test_slurm import cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
STUDY = ["--sizes", "0.1M", "--families", "ar", "--seeds", "1", "--seq-len", "32", "--max-steps", "2",
         "--tokenizer", "gpt2", "--batch-size", "4", "--eval-suite", "quick", "--no-progress", "--no-report"]


@pytest.fixture()
def cluster_env(monkeypatch):
    """Jobs inherit the submitting environment (sbatch --export=ALL); no AOSCALE_CACHE: the default."""
    monkeypatch.delenv("AOSCALE_CACHE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")


def squeue(job_id: str, fields: str) -> str:
    return subprocess.run(["squeue", "-h", "-r", "-j", job_id, "-o", fields], capture_output=True, text=True,
                          timeout=20).stdout


@cluster
def test_a_slurm_launch_prepares_in_a_cpu_job_that_the_run_array_depends_on(tmp_path, data_kit, cluster_env, capsys):
    corpus = webtext_corpus(data_kit, tmp_path / "webtext")
    study = tmp_path / "studies" / "web"
    flags = ["--backend", "slurm", "--slurm-partition", "debug", "--slurm-time", "15", "--slurm-prepare-cpus", "2",
             "--study-dir", str(study), "--corpus", str(corpus), *STUDY]
    assert launch.main(flags) == 0  # submits and returns
    prepare = json.loads((study / "logs/slurm/prepare.json").read_text())
    (array,) = {job.split("_")[0] for job in json.loads((study / "logs/slurm/jobs.json").read_text()).values()}
    assert f"afterok:{prepare['job_id']}" in squeue(array, "%E")  # the runs wait for the data
    assert squeue(prepare["job_id"], "%C|%b").strip() in ("2|N/A", "2|")  # 2 CPUs, no GPU
    cache = tmp_path / "studies" / "aoscale-cache"
    assert prepare["cache_dir"] == str(cache)
    assert json.loads((study / "data.json").read_text())["cache_dir"] == str(cache)
    assert launch.main([*flags, "--wait"]) == 0  # waits for the queued runs: the study completes
    (run_dir,) = (study / "runs").iterdir()
    assert status(run_dir)["state"] == "done"
    assert list((cache / "tokens").glob("webtext-gpt2-*/manifest.json"))
    logs = "".join(p.read_text() for p in (study / "logs/slurm").glob("*-prepare-*/*/*.out"))
    assert "tokens/s" in logs and "prepare: " in logs
    scripts = "".join(p.read_text() for p in (study / "logs/slurm").glob("*/*/*.sh"))
    assert "export AOSCALE_REQUIRE_PREPARED=1" in scripts and f"export AOSCALE_CACHE={cache}" in scripts
    assert "submitted 1 runs" in capsys.readouterr().out


@cluster
def test_a_run_job_whose_cache_is_missing_refuses_naming_the_prepare_command(tmp_path, data_kit, cluster_env):
    run = make_run(tmp_path, tiny_spec())
    executor = SlurmExecutor(tmp_path, SlurmOptions(partition="debug", time_min=10), pipeline=PIPELINE)
    executor.use_data(str(tmp_path / "empty-cache"))
    (handle,) = executor.submit_all([run])
    assert handle.result() == "failed"
    reason = status(run)["reason"]
    assert reason.startswith("InputError: corpus: shakespeare (tokenizer bytes, text field text) is not prepared in "
                             f"{tmp_path / 'empty-cache'}") and "aoscale prepare STUDY_DIR" in reason
    assert not (tmp_path / "empty-cache" / "tokens").exists()  # the job tokenised nothing
