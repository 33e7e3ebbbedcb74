"""WSD cooldown branches: several data budgets from one warmup-stable run (the OLMo-core ladder's
trick).

A trunk trains with `schedule = "wsd"` and keeps a copy of its checkpoint at each of its
`snapshot_steps` under `snapshots/` (never pruned). A branch is a run with `branch_from` (the
trunk's run id, a sibling folder) and `branch_step`: on its first start it takes the trunk's
snapshot at that step as its own checkpoint, then trains on to `steps` with the lr decaying
linearly from the peak to the floor (`jobs.train.loop.lr_at`). Batches are a function of (seed, step),
so the branch sees the data the trunk would have; it resumes from its own checkpoints like any
run. Its run id hashes the trunk's id and the branch step; its cost is its decay tokens only.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from jobs.train import checkpoint as ckpt

SNAPSHOTS = "snapshots"
WAIT_POLL_S = 2.0


def snapshot_steps(spec) -> frozenset[int]:
    """The trunk steps to keep a snapshot of (empty for other runs)."""
    return frozenset(int(s) for s in str(spec.snapshot_steps).split(",") if s.strip())


def snapshot_dir(trunk_dir: Path, step: int) -> Path:
    """Where the trunk keeps its state at `step`."""
    return Path(trunk_dir) / SNAPSHOTS / ckpt.step_dir(trunk_dir, step).name


def keep_snapshot(run_dir: Path, step: int) -> None:
    """Copy the just-committed checkpoint of `step` to the snapshots (temp copy, then rename)."""
    target = snapshot_dir(run_dir, step)
    if target.exists():
        return
    temp = target.with_name(target.name + ".tmp")
    shutil.rmtree(temp, ignore_errors=True)
    shutil.copytree(ckpt.step_dir(run_dir, step), temp)
    os.replace(temp, target)


def adopt_trunk(run_dir: Path, spec, wait_s: float | None = None) -> None:
    """A branch without a checkpoint of its own starts from its trunk's snapshot at branch_step,
    waiting for the trunk to get there (up to `wait_s`, default AOSCALE_BRANCH_WAIT_S or a day)."""
    if ckpt.checkpoint_dirs(run_dir):
        return
    source = snapshot_dir(Path(run_dir).parent / spec.branch_from, spec.branch_step)
    limit = float(os.environ.get("AOSCALE_BRANCH_WAIT_S", "86400")) if wait_s is None else wait_s
    deadline = time.monotonic() + limit
    if not source.is_dir():
        print(f"branch {spec.run_id}: waiting for trunk {spec.branch_from} to reach step {spec.branch_step}",
              file=sys.stderr, flush=True)
    while not source.is_dir():
        if time.monotonic() > deadline:
            raise ValueError(f"branch_from: trunk {spec.branch_from} has no snapshot at step {spec.branch_step} "
                             f"({source}); train the trunk first")
        time.sleep(WAIT_POLL_S)
    target = ckpt.step_dir(run_dir, spec.branch_step)
    temp = target.with_name(target.name + ".tmp")
    shutil.rmtree(temp, ignore_errors=True)
    shutil.copytree(source, temp)
    os.replace(temp, target)
