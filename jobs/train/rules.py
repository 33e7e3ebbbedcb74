"""Checks a run makes before it touches its directory: the spec's fields, and that the directory
holds this run (same run id, checkpoints from the same engine). Each failure is a ValueError
naming the field and the fix."""
from __future__ import annotations

from pathlib import Path

from jobs.train import checkpoint as ckpt
from jobs.run.files import SPEC_FILE
from jobs.run.spec import COMPILE_SETTINGS, ENGINES, PRECISIONS, SCHEDULES, ZERO_STAGES, RunSpec



def validate(spec: RunSpec) -> None:
    """Raise ValueError naming the first bad field and how to fix it."""
    checks = [
        (spec.engine in ENGINES, "engine", f"{spec.engine!r} is unknown; use one of {list(ENGINES)}"),
        (spec.zero_stage in ZERO_STAGES, "zero_stage", f"{spec.zero_stage} is invalid; use 1, 2 or 3"),
        (spec.precision in PRECISIONS, "precision", f"{spec.precision!r} is unknown; use {list(PRECISIONS)}"),
        (spec.compile in COMPILE_SETTINGS, "compile", f"{spec.compile!r} is unknown; use {list(COMPILE_SETTINGS)}"),
        (spec.steps > 0, "steps", f"{spec.steps} must be a positive number of optimizer steps"),
        (spec.lr > 0, "lr", f"{spec.lr} must be positive"),
        (spec.warmup_steps >= 0, "warmup_steps", f"{spec.warmup_steps} must be >= 0"),
        (spec.seq_len >= 2, "seq_len", f"{spec.seq_len} must be >= 2"),
        (spec.batch_size > 0, "batch_size", f"{spec.batch_size} must be positive"),
        (spec.micro_batch_size >= 0 and spec.micro_batch > 0 and spec.batch_size % spec.micro_batch == 0,
         "micro_batch_size",
         f"{spec.micro_batch_size} must divide batch_size {spec.batch_size} (0 = no accumulation)"),
        (0.0 <= spec.ema < 1.0, "ema", f"{spec.ema} must be in [0, 1) (0 = off)"),
        (0.0 <= spec.min_lr_ratio <= 1.0, "min_lr_ratio", f"{spec.min_lr_ratio} must be in [0, 1]"),
        (spec.schedule in SCHEDULES, "schedule", f"{spec.schedule!r} is unknown; use one of {list(SCHEDULES)}"),
        (0.0 < spec.decay_fraction <= 1.0, "decay_fraction", f"{spec.decay_fraction} must be in (0, 1]"),
        (spec.grad_clip > 0, "grad_clip", f"{spec.grad_clip} must be positive"),
        (spec.keep_checkpoints >= 1, "keep_checkpoints", f"{spec.keep_checkpoints} must be >= 1"),
        (spec.checkpoint_every >= 0, "checkpoint_every", f"{spec.checkpoint_every} must be >= 0"),
        (spec.eval_every >= 0, "eval_every", f"{spec.eval_every} must be >= 0"),
        (spec.log_every >= 1, "log_every", f"{spec.log_every} must be >= 1"),
        (spec.eval_batches >= 1, "eval_batches", f"{spec.eval_batches} must be >= 1"),
    ]
    for ok, name, message in checks:
        if not ok:
            raise ValueError(f"{name}: {message}")


def check_run_dir(run_dir: Path, spec: RunSpec) -> None:
    """A run directory holds one run: refuse a spec.json with another run id."""
    path = run_dir / SPEC_FILE
    if not path.exists():
        return
    try:
        existing = RunSpec.load(path)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"run_dir: {path} is unreadable ({error}); use a fresh --run-dir") from None
    if existing.run_id != spec.run_id:
        raise ValueError(f"run_dir: {run_dir} holds run {existing.run_id}, not {spec.run_id}; "
                         "use a fresh --run-dir or the same spec")
    saved = ckpt.checkpoint_dirs(run_dir)
    engine = _saved_engine(saved[-1]) if saved else spec.engine
    if engine is not None and engine != spec.engine:
        raise ValueError(f"engine: the checkpoints in {run_dir} were written by engine {engine!r}; "
                         f"rerun with --engine {engine}")


def _saved_engine(path: Path) -> str | None:
    try:
        return ckpt.read_meta(path)["engine"]
    except (OSError, ValueError, KeyError):
        return None  # a corrupt checkpoint: resume() reports it and falls back
