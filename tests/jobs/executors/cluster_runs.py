"""Helpers shared by the Slurm and Ray integration tests: tiny real runs and what they logged."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.run import files as runfiles
from jobs.run.spec import RunSpec

PIPELINE = "jobs.pipeline:execute_run"


def tiny_spec(seed: int = 0, steps: int = 40, checkpoint_every: int = 0) -> RunSpec:
    """An `ar` 0.1M run on Tiny Shakespeare bytes, seq_len 32: ~100 steps/s on one core."""
    return RunSpec(family="ar", size="0.1M", steps=steps, lr=1e-3, warmup_steps=4, seq_len=32,
                   batch_size=8, seed=seed, eval_batches=2, checkpoint_every=checkpoint_every,
                   log_every=10, study="cluster-test")


def make_run(study_dir: Path, spec: RunSpec) -> Path:
    """A run directory holding only spec.json, as `scaling.launch` prepares it."""
    run_dir = study_dir / "runs" / spec.run_id
    run_dir.mkdir(parents=True)
    runfiles.atomic_write_text(run_dir / runfiles.SPEC_FILE, spec.to_json())
    return run_dir


def status(run_dir: Path) -> dict[str, Any]:
    return runfiles.read_status(run_dir)


def training_starts(run_dir: Path) -> list[int]:
    """`from_step` of every training start the trainer logged (0 = trained from scratch)."""
    return [int(r["from_step"]) for r in runfiles.read_metrics(run_dir, "start")]


def curve(run_dir: Path) -> list[tuple[str, int, float]]:
    """Train losses and validation losses by step: equal bit for bit when resume is exact."""
    train = [("train", int(r["step"]), float(r["loss"])) for r in runfiles.read_metrics(run_dir, "train")]
    val = [("val", int(r["step"]), float(r["val_loss"])) for r in runfiles.read_metrics(run_dir, "val")]
    return sorted(train + val)


def running_at(run_dir: Path, step: int) -> Callable[[], bool]:
    """Predicate: the run is training and has passed `step`."""
    return lambda: status(run_dir).get("state") == "running" and int(status(run_dir).get("step", 0)) >= step


def train_here(run_dir: Path, spec: RunSpec) -> None:
    """Train `spec` to the end in this process with one torch thread, as the jobs do."""
    import torch
    from jobs.train.loop import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train(run_dir, spec) == "done"
    finally:
        torch.set_num_threads(threads)


def reference_curve(study_dir: Path, spec: RunSpec) -> list[tuple[str, int, float]]:
    """The uninterrupted curve of `spec`, trained here with the jobs' single thread."""
    run_dir = make_run(study_dir, spec)
    train_here(run_dir, spec)
    return curve(run_dir)
