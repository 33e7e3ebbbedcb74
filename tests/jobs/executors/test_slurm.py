"""Slurm backend against the real single-node cluster (scripts/slurm-cluster.sh start).

Real tiny CPU runs go through submitit job arrays; preemption (a `high` partition job,
`scancel --signal=USR2` and `scancel --signal=TERM`) must give checkpoint -> requeue -> resume with the same curve as an
uninterrupted run; a job killed without a result must come back as failed.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess

import pytest

from cli import Busy
from jobs.executors import slurm
from jobs.executors.slurm import (SlurmExecutor, SlurmOptions, parse_additional, parse_time_min,
                                  queue_states, submitit_parameters, validate_slurm_options)
from tests.jobs.executors import cluster_runs
from tests.jobs.executors.cluster_runs import PIPELINE, curve, make_run, running_at, status, tiny_spec, training_starts
from tests.polling import wait_until


def _cluster_problem() -> str:
    if shutil.which("sinfo") is None:
        return "sinfo not found (run scripts/slurm-cluster.sh start)"
    proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        return f"Slurm cluster not up: {proc.stderr.strip()[:200]}"
    if "high" not in proc.stdout:
        return "no 'high' partition (scripts/slurm-cluster.sh configures debug + high)"
    return ""


PROBLEM = _cluster_problem()
cluster = pytest.mark.skipif(bool(PROBLEM), reason=PROBLEM)
pytestmark = pytest.mark.slurm
LONG_STEPS = 300  # ~10 s on one core: long enough for a signal to land mid-training
JOB_TIMEOUT_S = 240


def node_cpus() -> int:
    return int(subprocess.check_output(["sinfo", "-h", "-o", "%c"], text=True).split()[0])


@pytest.fixture()
def one_thread(monkeypatch):
    """Jobs inherit the submitting environment (sbatch --export=ALL)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")


@pytest.fixture(scope="module")
def reference_curve(tmp_path_factory, data_kit) -> list:
    """The uninterrupted curve of the long run."""
    return cluster_runs.reference_curve(tmp_path_factory.mktemp("reference"), tiny_spec(seed=3, steps=LONG_STEPS))


@cluster
def test_study_runs_as_one_job_array(tmp_path, data_kit, one_thread):
    runs = [make_run(tmp_path, tiny_spec(seed=s)) for s in range(3)]
    handles = SlurmExecutor(tmp_path, SlurmOptions(partition="debug", time_min=10),
                            pipeline=PIPELINE).submit_all(runs)
    array_ids = {h.job_id.split("_")[0] for h in handles}
    assert len(array_ids) == 1 and all("_" in h.job_id for h in handles)
    assert [h.result() for h in handles] == ["done"] * 3
    for handle, run in zip(handles, runs):
        assert status(run)["state"] == "done" and status(run)["job_id"] == handle.job_id
        assert training_starts(run) == [0]
        assert (run / "eval.parquet").exists()
    # the result is written just before the task exits; the queue catches up a moment later
    completed = {r.name: "COMPLETED" for r in runs}
    wait_until(lambda: {k: q["queue_state"] for k, q in queue_states(tmp_path).items()} == completed,
               30, "sacct to show the array COMPLETED")
    assert {k: q["job_id"] for k, q in queue_states(tmp_path).items()} == {r.name: h.job_id for r, h in zip(runs, handles)}
    assert list((tmp_path / "logs" / "slurm").glob("*/*/*.out")), "job logs live in the study dir"


def _preempt_by_high_partition(job_id: str) -> None:
    cpus = str(node_cpus())
    subprocess.run(["sbatch", "-p", "high", "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 1"],
                   check=True, capture_output=True)


def _send_usr2(job_id: str) -> None:
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)


def _send_term(job_id: str) -> None:
    """SIGTERM to the job's tasks, as a cluster that preempts without `preempt_send_user_signal`
    sends it (then SIGKILL after its GraceTime); submitit alone ignores it."""
    subprocess.run(["scancel", "--signal=TERM", job_id], check=True)


@cluster
@pytest.mark.parametrize("interrupt", [_send_usr2, _send_term, _preempt_by_high_partition],
                         ids=["usr2", "sigterm", "preemption"])
def test_signal_checkpoints_requeues_and_resumes_exactly(tmp_path, data_kit, one_thread, reference_curve,
                                                         interrupt):
    run = make_run(tmp_path, tiny_spec(seed=3, steps=LONG_STEPS))
    # the whole node, so a `high` job can only start by preempting this one
    options = SlurmOptions(partition="debug", time_min=10, cpus_per_task=node_cpus())
    handle = SlurmExecutor(tmp_path, options, pipeline=PIPELINE).submit(run)
    wait_until(running_at(run, 20), JOB_TIMEOUT_S, "the run to train 20 steps")
    interrupt(handle.job_id)
    assert handle.result() == "done"
    starts = training_starts(run)
    assert len(starts) == 2 and starts[0] == 0 and 20 <= starts[1] < LONG_STEPS, starts
    assert status(run)["attempts"] == 2 and status(run)["job_id"] == handle.job_id
    assert curve(run) == reference_curve


def kill_job_processes(job_id: str) -> None:
    """SIGKILL every process of the job's steps (`scontrol listpids`), like the OOM killer would."""
    listing = subprocess.run(["scontrol", "listpids", job_id], capture_output=True, text=True, check=True).stdout
    pids = [int(line.split()[0]) for line in listing.splitlines()[1:] if line.split() and line.split()[0].isdigit()]
    assert pids, listing
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@cluster
def test_job_killed_without_result_is_failed(tmp_path, data_kit, one_thread):
    run = make_run(tmp_path, tiny_spec(seed=4, steps=LONG_STEPS))
    handle = SlurmExecutor(tmp_path, SlurmOptions(partition="debug", time_min=10), pipeline=PIPELINE).submit(run)
    wait_until(running_at(run, 5), JOB_TIMEOUT_S, "the run to start training")
    kill_job_processes(handle.job_id)  # dies as an OOM kill would: no result, no checkpoint
    assert handle.result() == "failed"
    assert handle.state == "failed"
    assert status(run)["state"] == "failed" and handle.job_id in status(run)["reason"]


@cluster
def test_cancelled_task_of_an_already_failed_run_counts_another_failure(tmp_path, data_kit, one_thread):
    """A retried run is `failed` from its last attempt; a task lost before it reports (here
    cancelled while queued) must still count, or the retries of that run never run out."""
    from jobs.executors import record_failure

    run = make_run(tmp_path, tiny_spec(seed=6))
    record_failure(run, "an earlier attempt failed")
    handle = SlurmExecutor(tmp_path, SlurmOptions(partition="debug", time_min=10), pipeline=PIPELINE).submit(run)
    subprocess.run(["scancel", handle.job_id], check=True)
    assert handle.result() == "failed"
    assert status(run)["failures"] == 2 and handle.job_id in status(run)["reason"]


@cluster
def test_unknown_partition_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^slurm_partition: unknown partition 'nope'.*debug"):
        validate_slurm_options(SlurmOptions(partition="nope"))


@pytest.fixture()
def silent_controller(tmp_path, monkeypatch):
    """A real Slurm configuration whose controller and accounting do not answer: sacct fails at once."""
    if shutil.which("sacct") is None or shutil.which("squeue") is None:
        pytest.skip("sacct/squeue not installed")
    conf = tmp_path / "silent" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=silent\nSlurmctldHost=localhost\nSlurmctldPort=9\n"
                    "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=localhost Default=YES\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setattr(slurm, "QUEUE_POLL_S", 0.05)
    study = tmp_path / "study"
    (study / "logs" / "slurm").mkdir(parents=True)
    (study / "logs" / "slurm" / slurm.JOBS_FILE).write_text(json.dumps({"aaaaaaaaaaaa": "41_0"}))
    return study


def test_a_queue_that_does_not_answer_is_never_read_as_empty(silent_controller):
    study = silent_controller
    assert queue_states(study, strict=False) is None
    assert queue_states(study) == {"aaaaaaaaaaaa": {"job_id": "41_0", "queue_state": "UNKNOWN"}}  # status's view
    # a relaunch would resubmit a job it cannot see: it refuses instead, having submitted nothing
    with pytest.raises(Busy, match=r"^slurm: squeue or sacct failed 5 times.*nothing was submitted"):
        SlurmExecutor(study, SlurmOptions()).attach([study / "runs" / "aaaaaaaaaaaa"])
    # a waiter keeps its last view of the queue (a RUNNING job stays running) instead of calling it gone
    poller = slurm._QueuePoller(study)
    poller._states, poller._at = {"aaaaaaaaaaaa": {"job_id": "41_0", "queue_state": "RUNNING"}}, float("-inf")
    handle = slurm.QueuedHandle(poller, study / "runs" / "aaaaaaaaaaaa", "41_0")
    assert handle.queue_state == "RUNNING" and not handle.done()
    assert poller._at > float("-inf")  # it did ask


def test_bad_resources_are_refused_before_slurm_is_asked():
    with pytest.raises(ValueError, match=r"^gpus_per_node: -1 must be an integer >= 0"):
        validate_slurm_options(SlurmOptions(gpus_per_node=-1))
    with pytest.raises(ValueError, match=r"^nodes: 0"):
        validate_slurm_options(SlurmOptions(nodes=0))
    with pytest.raises(ValueError, match=r"^mem: "):
        validate_slurm_options(SlurmOptions(mem="lots"))


def test_time_and_additional_parsing():
    assert [parse_time_min(t) for t in ("90", "01:30", "1:30:01", "2-00:00")] == [90, 90, 91, 2880]
    with pytest.raises(ValueError, match="^slurm_time: "):
        parse_time_min("soon")
    assert parse_additional(["mail-type=END", "exclusive="]) == (("exclusive", ""), ("mail_type", "END"))
    with pytest.raises(ValueError, match="^slurm_additional: "):
        parse_additional(["novalue"])


def test_multi_gpu_options_become_one_srun_task_per_gpu():
    opts = SlurmOptions(partition="gpu", nodes=2, gpus_per_node=8, cpus_per_task=10, mem="200G",
                        additional=(("exclusive", ""),))
    params = submitit_parameters(opts, "study")
    assert (params["nodes"], params["ntasks_per_node"], params["gpus_per_node"]) == (2, 8, 8)
    assert params["partition"] == "gpu" and params["mem"] == "200G"
    assert params["additional_parameters"] == {"exclusive": ""} and "account" not in params
