"""WSD cooldown branches: several data budgets from one warmup-stable run (the OLMo-core ladder's
trick).

A trunk trains with `schedule = "wsd"` and keeps a copy of its checkpoint at each of its
`snapshot_steps` under `snapshots/` (never pruned). A branch is a run with `branch_from` (the
trunk's run id, a sibling folder) and `branch_step`: on its first start it takes the trunk's
snapshot at that step as its own checkpoint, then trains on to `steps` with the lr decaying
linearly from the peak to the floor (`jobs.train.loop.lr_at`). Batches are a function of (seed, step),
so the branch sees the data the trunk would have; it resumes from its own checkpoints like any
run. Its run id hashes the trunk's id and the branch step; its cost is its decay tokens only.

A branch that starts before its trunk got there waits for it, saying what it waits for. The wait
ends with the snapshot, with a stop request (SIGTERM: the branch is preempted, a rerun waits
again), or with `NoTrunk` (the run fails) as soon as the trunk can never get there: no such run
in the study, a trunk that keeps no snapshot at that step, a trunk done or failed without it, or
a trunk that made no progress for `AOSCALE_BRANCH_WAIT_S` seconds (default an hour).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cli.environment import BY_NAME
from cli.paths import within
from jobs.run import files as runfiles
from jobs.run.lock import lock_held
from jobs.train import checkpoint as ckpt

SNAPSHOTS = "snapshots"
WAIT_POLL_S = 0.5
BRANCH_WAIT = "AOSCALE_BRANCH_WAIT_S"  # seconds a branch waits for a trunk that makes no progress
DEFAULT_BRANCH_WAIT_S = BY_NAME[BRANCH_WAIT].default  # cli.environment's table: a trunk writes its status every step


class NoTrunk(ValueError):
    """The trunk can never reach the branch's step: the branch fails with this one line."""


def snapshot_steps(spec) -> frozenset[int]:
    """The trunk steps to keep a snapshot of (empty for other runs)."""
    return parse_steps(spec.snapshot_steps)


def parse_steps(text: object) -> frozenset[int]:
    """`"25,50"` as steps (ValueError for anything else)."""
    return frozenset(int(s) for s in str(text).split(",") if s.strip())


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


def branch_wait_s() -> float:
    """`AOSCALE_BRANCH_WAIT_S`: seconds without trunk progress a branch waits (positive, finite), by
    cli.environment's rule (InputError, one line, otherwise; scaling.launch refuses it at start-up)."""
    return BY_NAME[BRANCH_WAIT].read()


def trunk_dir(run_dir: Path, spec) -> Path:
    """The trunk's run folder: `branch_from` is a run id of the same study (a sibling folder)."""
    return within("branch_from", Path(run_dir).parent, spec.branch_from)


def adopt_trunk(run_dir: Path, spec, stopped: Callable[[], bool] = lambda: False,
                wait_s: float | None = None) -> bool:
    """A branch without a checkpoint of its own starts from its trunk's snapshot at branch_step,
    waiting for the trunk to get there (see the module docstring; `wait_s` overrides
    AOSCALE_BRANCH_WAIT_S). False when `stopped()` came true first (nothing adopted); NoTrunk
    when the trunk can never get there."""
    if ckpt.checkpoint_dirs(run_dir):
        return True
    source = snapshot_dir(trunk_dir(run_dir, spec), spec.branch_step)
    if not source.is_dir() and not _wait(source, spec, stopped, branch_wait_s() if wait_s is None else wait_s):
        return False
    target = ckpt.step_dir(run_dir, spec.branch_step)
    temp = target.with_name(target.name + ".tmp")
    shutil.rmtree(temp, ignore_errors=True)
    shutil.copytree(source, temp)
    os.replace(temp, target)
    return True


def _wait(source: Path, spec, stopped: Callable[[], bool], stall_s: float) -> bool:
    """Poll until `source` exists (True) or `stopped()` (False); NoTrunk when the trunk can never
    get there or has shown no progress (state, step) for `stall_s` seconds."""
    trunk, seen, since = source.parents[1], None, time.monotonic()
    while not source.is_dir():
        if stopped():
            return False
        progress = trunk_progress(trunk, spec)
        if progress != seen:
            if seen is None or progress[0] != seen[0]:
                print(f"branch {spec.run_id}: waiting for trunk {spec.branch_from} ({progress[0]}, step "
                      f"{progress[1]}) to reach step {spec.branch_step}; giving up after {stall_s:g} s without "
                      f"progress ({BRANCH_WAIT})", file=sys.stderr, flush=True)
            seen, since = progress, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise NoTrunk(f"branch_from: trunk {spec.branch_from} made no progress for {stall_s:g} s ({seen[0]} at "
                          f"step {seen[1]}) and has no snapshot at step {spec.branch_step}; train the trunk, "
                          f"then relaunch (or raise {BRANCH_WAIT})")
        time.sleep(WAIT_POLL_S)
    return True


def trunk_progress(trunk: Path, spec) -> tuple[str, int]:
    """The trunk's (state, step) while it may still reach the branch's step; NoTrunk when it
    never can (not a run of the study, no snapshot planned at that step, done or failed)."""
    who = f"branch_from: trunk {spec.branch_from}"
    try:
        planned = runfiles.read_json(trunk / runfiles.SPEC_FILE)
        steps = parse_steps(planned.get("snapshot_steps", ""))
    except (OSError, ValueError, AttributeError):
        raise NoTrunk(f"{who} is not a run of this study ({trunk / runfiles.SPEC_FILE} is missing or "
                      "unreadable); relaunch the study that plans it") from None
    if spec.branch_step not in steps:
        raise NoTrunk(f"{who} keeps no snapshot at step {spec.branch_step} (snapshot_steps: "
                      f"{planned.get('snapshot_steps') or 'none'}); plan branches with `branches = [...]`")
    status = runfiles.read_status(trunk)
    state, step = str(status.get("state", "pending")), status.get("step", 0)
    if state in ("done", "failed") and not lock_held(trunk):
        fix = ("relaunch with --retry-failed" if state == "failed" else
               "its snapshot was removed: launch the study into a new --study-dir")
        raise NoTrunk(f"{who} is {state} without a snapshot at step {spec.branch_step}"
                      + (f" ({status.get('reason')})" if status.get("reason") else "") + f"; {fix}")
    return state, step if isinstance(step, int) else 0
