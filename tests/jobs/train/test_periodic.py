"""Periodic checkpoints by wall time (`checkpoint_minutes`): rank 0's clock decides for every
rank, each rank checksums its own files, the save's size and speed are recorded, and a 2-rank
DeepSpeed run killed with SIGKILL resumes from its last periodic checkpoint with the losses of
an unkilled run (TOLERANCE as tests/jobs/train/test_move.py: fp32, only sum orders differ)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from jobs.train import checkpoint as ckpt
from jobs.train import stopping
from jobs.run.files import read_metrics, read_status
from jobs.run.spec import RunSpec
from jobs.train.loop import train

REPO = Path(__file__).resolve().parents[3]
TOLERANCE = 1e-4


def spec(**changes) -> RunSpec:
    base = RunSpec(family="ar", size="0.1M", steps=40, lr=3e-3, warmup_steps=2, seq_len=32, batch_size=8,
                   micro_batch_size=2, eval_batches=2, log_every=1, checkpoint_minutes=0.01, keep_checkpoints=2)
    return base.replace(**changes)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (torchrun starts its ranks in sessions of their own)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(c) for c in (task / "children").read_text().split()]
    return [p for child in children for p in (child, *descendants(child))]


def one_thread_train(run_dir: Path, run: RunSpec, **kwargs) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(run_dir, run, **kwargs)
    finally:
        torch.set_num_threads(threads)


def test_saves_follow_the_clock_and_record_their_speed(tmp_path, cache_dir, monkeypatch):
    """With 0.6 s between saves and a step slowed to 0.25 s, saves land every 3rd step or so
    (never at a step multiple the spec names: checkpoint_every is 0), each with its size, time
    and speed in meta.json; checksums of every file, verified."""
    import jobs.train.loop as loop

    real_step = loop.train_step

    def slow_step(run):
        time.sleep(0.25)
        return real_step(run)

    monkeypatch.setattr(loop, "train_step", slow_step)
    run = spec(steps=12, keep_checkpoints=20)
    assert one_thread_train(tmp_path / "run", run) == "done"
    steps = [ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path / "run")]
    assert 3 <= len(steps) <= 7 and steps[-1] == 12, steps  # 12 x 0.25 s / 0.6 s = 5, and the final one
    assert all(b - a >= 2 for a, b in zip(steps[:-2], steps[1:-1])), steps  # >= 0.6 s apart
    for path in ckpt.checkpoint_dirs(tmp_path / "run"):
        meta = ckpt.read_meta(path)
        assert ckpt.verify(path) is None
        assert meta["bytes"] == sum(p.stat().st_size for p in path.rglob("*") if p.name != ckpt.META_FILE)
        assert meta["save_s"] > 0
        assert abs(meta["write_bytes_per_s"] - meta["bytes"] / meta["save_s"]) / meta["write_bytes_per_s"] < 0.01


def test_off_means_only_the_step_rules(tmp_path, cache_dir):
    assert one_thread_train(tmp_path / "run", spec(steps=6, checkpoint_minutes=0.0, checkpoint_every=4)) == "done"
    assert [ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path / "run")] == [4, 6]


def test_owner_of_each_staged_file():
    assert [ckpt.owner(n) for n in ("zero_pp_rank_3_mp_rank_00_optim_states.pt", "rank_0002.pt",
                                    "mp_rank_00_model_states.pt", "model.pt", "rank_0000.pt")] == [3, 2, 0, 0, 0]


@pytest.mark.slow
def test_a_killed_two_rank_deepspeed_run_resumes_from_its_last_periodic_checkpoint(tmp_path, cache_dir):
    pytest.importorskip("deepspeed")
    reference = tmp_path / "reference"
    assert one_thread_train(reference, spec(engine="torch", checkpoint_minutes=0.0)) == "done"
    run, run_dir = spec(engine="deepspeed", zero_stage=2), tmp_path / "run"
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(run.to_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "jobs.train", "--run-dir", str(run_dir), "--spec", str(spec_path)]
    job = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not (ckpt.checkpoint_dirs(run_dir) and read_status(run_dir).get("step", 0) >= 15):
            assert job.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
    finally:
        for pid in [*descendants(job.pid), job.pid]:  # the ranks and torchrun at once, as a node failure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        job.communicate()
    killed_at = read_status(run_dir)["step"]
    last = ckpt.latest_valid(run_dir)
    assert read_status(run_dir)["state"] == "running" and last is not None
    saved_step = ckpt.step_of(last)
    assert 0 < saved_step < run.steps and ckpt.read_meta(last)["layout"]["world_size"] == 2

    resumed = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["from_step"] for r in read_metrics(run_dir, "start")] == [0, saved_step]
    assert saved_step <= killed_at
    moved = {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}
    ref = {r["step"]: r["loss"] for r in read_metrics(reference, "train")}
    assert sorted(moved) == list(range(1, run.steps + 1)) == sorted(ref)
    worst = max(abs(moved[s] - ref[s]) for s in ref)
    assert worst < TOLERANCE, worst
    assert read_status(run_dir)["state"] == "done"


def test_a_run_told_its_end_keeps_its_measured_save_time(tmp_path, cache_dir, monkeypatch):
    """Told the job ends in 12 s (jobs.executors.slurm reads it from squeue), with no margin: after
    its first periodic save is measured the run checkpoints and stops ("preempted") once the time
    left is within 2 x that save + its slowest step, and a rerun resumes there. (When exactly
    depends on this machine's load; the rule itself: test_the_reserve_rule.)"""
    import jobs.train.loop as loop

    real_step = loop.train_step

    def slow_step(run):
        time.sleep(0.25)
        return real_step(run)

    monkeypatch.setattr(loop, "train_step", slow_step)
    monkeypatch.setattr(stopping, "RESERVE_MARGIN_S", 0.0)
    monkeypatch.setattr(stopping, "_DEADLINE", [])
    run = spec(steps=200)
    deadline = time.time() + 12.0
    stopping.stop_before(deadline)
    assert one_thread_train(tmp_path / "run", run) == "preempted"
    status = read_status(tmp_path / "run")
    newest = ckpt.checkpoint_dirs(tmp_path / "run")[-1]
    assert status["state"] == "preempted" and ckpt.step_of(newest) == status["step"] < run.steps
    assert status["step"] >= 2  # it trained until the reserve, then saved and stopped
    monkeypatch.setattr(stopping, "_DEADLINE", [])
    monkeypatch.setattr(loop, "train_step", real_step)
    assert one_thread_train(tmp_path / "run", run.replace(checkpoint_minutes=0.0)) == "done"
    assert [r["from_step"] for r in read_metrics(tmp_path / "run", "start")] == [0, status["step"]]


def test_squeue_time_left_in_seconds():
    from jobs.executors.slurm import parse_time_left

    assert [parse_time_left(t) for t in ("1-02:03:04", "02:03:04", "05:00", "59", "UNLIMITED", "NOT_SET", "")] == [
        93784, 7384, 300, 59, None, None, None]


def test_the_reserve_rule(monkeypatch):
    """Stop once now + 2 x the slowest save + the slowest step + the margin reaches the end; not
    before a save was measured, and never without a deadline."""
    monkeypatch.setattr(stopping, "_DEADLINE", [])
    assert stopping.reserve_s(10.0, 2.0) == 2 * 10.0 + 2.0 + stopping.RESERVE_MARGIN_S
    assert not stopping.near_deadline(True, 10.0, 2.0)  # no deadline
    stopping.stop_before(time.time() + 2 * 10.0 + 2.0 + stopping.RESERVE_MARGIN_S + 5)
    assert not stopping.near_deadline(True, 10.0, 2.0)
    assert stopping.near_deadline(True, 10.0, 7.5)
    assert not stopping.near_deadline(True, 0.0, 1e6)  # no save measured yet
    assert not stopping.near_deadline(False, 10.0, 1e6)  # only rank 0 decides
