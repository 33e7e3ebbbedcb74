"""Executors: run a study's run directories somewhere, behind one submitit-shaped interface.

An executor has `submit(run_dir) -> handle`; a handle has `done()`, `result()` (the run's final
ledger state) and `state`. `slots` says how many runs the executor trains at once (None: the
scheduler queues them, as Slurm does). Backends are looked up by name in `EXECUTORS` and imported
only when chosen, so `local` never pulls in submitit or Ray.

Every backend runs `run_exclusive(run_dir)`: it takes the run's lock (`jobs.run.lock`, the one
lock `jobs.train` and `jobs.eval.evaluate` take too; non-blocking), counts the attempt in status.json and calls
`jobs.pipeline.execute_run`. The kernel drops a flock when its holder dies, so a killed launcher
or worker never leaves a stale lock, and two launchers can never train one run at the same time.
"""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, Protocol

from cli.environment import pipeline_ref
from jobs.run import files as runfiles
from jobs.run.lock import LOCK_FILE, RunLock, lock_held  # noqa: F401 - re-exported

BUSY = "busy"  # result of a run whose lock another live process holds
FINAL_STATES = ("done", "failed", "preempted", BUSY)
# The callable every backend runs; AOSCALE_PIPELINE=module:function substitutes another pipeline
# (cli.environment: its target is imported when a command starts, so a bad one is refused then).
PIPELINE = pipeline_ref()

# name -> "module:class"; modules are imported on first use only.
EXECUTORS: dict[str, str] = {
    "local": "jobs.executors.local:LocalExecutor",
    "slurm": "jobs.executors.slurm:SlurmExecutor",
    "ray": "jobs.executors.ray_tune:RayExecutor",
}


class Handle(Protocol):
    """A submitted run (submitit's Job shape)."""

    run_dir: Path
    job_id: str

    @property
    def state(self) -> str: ...

    def done(self) -> bool: ...

    def result(self) -> str: ...


class Executor(Protocol):
    """Runs run directories; `slots` = runs at once (None = no limit on submissions)."""

    slots: int | None

    def submit(self, run_dir: str | Path) -> Handle: ...

    def shutdown(self) -> None: ...


def get_executor(name: str, **options: Any) -> Executor:
    """Build the executor registered as `name`; unknown or uninstalled backends -> ValueError."""
    if name not in EXECUTORS:
        raise ValueError(f"backend: unknown backend {name!r}; valid: {', '.join(EXECUTORS)}")
    module_name, _, class_name = EXECUTORS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"backend: {name} is not available ({error}); install aoscale[{name}]") from None
    return getattr(module, class_name)(**options)


def resolve(ref: str) -> Any:
    """The object named by `module:attribute`."""
    module_name, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def one_line(error: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters, for status.json's reason."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def record_failure(run_dir: str | Path, reason: str) -> None:
    """Mark the run failed with `reason` and count the failure (status.json `failures`)."""
    status = runfiles.read_status(run_dir)
    runfiles.write_status(run_dir, "failed", reason=reason, failures=int(status.get("failures", 0)) + 1)


def failure_count(run_dir: str | Path) -> int:
    """How many failures status.json has counted for the run."""
    return int(runfiles.read_status(run_dir).get("failures", 0))


def record_crash(run_dir: str | Path, reason: str, failures_before: int) -> None:
    """Count a worker that ended without reporting (killed, crashed outside the pipeline) as a
    failure, unless the run is done or the worker counted a failure itself since submission
    (`failures_before`). A retried run that was already `failed` must be counted again, or its
    retries never run out."""
    status = runfiles.read_status(run_dir)
    if status.get("state") != "done" and int(status.get("failures", 0)) <= failures_before:
        record_failure(run_dir, reason)


def _count_attempt(run_dir: Path) -> None:
    status = runfiles.read_status(run_dir)
    runfiles.write_status(run_dir, status.get("state", "pending"), attempts=int(status.get("attempts", 0)) + 1)


def run_exclusive(run_dir: str | Path, pipeline: str = PIPELINE, handle_signals: bool = False) -> str:
    """Run the pipeline on `run_dir` under its lock; `BUSY` if another process holds it.

    `handle_signals` is passed on to pipelines that accept it (SIGTERM -> checkpoint and stop).
    """
    run_dir = Path(run_dir)
    lock = RunLock(run_dir)
    if not lock.acquire():
        return BUSY
    try:
        _count_attempt(run_dir)
        try:
            function = resolve(pipeline)
            accepts = "handle_signals" in inspect.signature(function).parameters
            state = function(str(run_dir), **({"handle_signals": handle_signals} if accepts else {}))
        except Exception as error:
            record_failure(run_dir, one_line(error))
            raise
        if state == "failed":
            status = runfiles.read_status(run_dir)
            runfiles.write_status(run_dir, "failed", failures=int(status.get("failures", 0)) + 1)
        return state
    finally:
        lock.release()
