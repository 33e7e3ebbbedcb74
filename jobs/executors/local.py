"""The local executor: runs on this machine, one subprocess per run.

A crash in one run never takes the launcher down, and `max_parallel` runs train side by side
with `OMP_NUM_THREADS = cores // max_parallel` each; where GPUs exist each run gets one
(`CUDA_VISIBLE_DEVICES`). Workers die with the launcher: each asks the kernel for SIGTERM when its
parent dies (`PR_SET_PDEATHSIG`, Linux) as it starts, and exits at once if the launcher is already
gone, so a launcher killed even with SIGKILL leaves no training behind (SIGTERM checkpoints and
stops a training run, or ends a branch's wait for its trunk, as `preempted`); the relaunch resumes
those runs from their last checkpoint.

`python -m jobs.executors.local <run_dir> [<launcher pid>]` is the worker: `run_exclusive` on one
run directory.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from jobs.run import files as runfiles
from jobs.executors import BUSY, FINAL_STATES, failure_count, lock_held, record_crash, run_exclusive
from jobs.run.lock import EXIT_BUSY

REPO = Path(__file__).resolve().parents[2]
WORKER_LOG = "worker.log"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 0.2


def visible_gpus() -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`, else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def check_max_parallel(max_parallel: int | None, gpus: list[str]) -> None:
    """Where GPUs are visible each run trains on one of its own, so at most one run per GPU
    (`max_parallel <= len(gpus)`); ValueError naming the flag and the fix."""
    if gpus and max_parallel is not None and max_parallel > len(gpus):
        raise ValueError(f"max-parallel: {max_parallel} runs at once but {len(gpus)} GPU(s) visible, and each run "
                         f"trains on a GPU of its own; fix: --max-parallel {len(gpus)} or less (or make more GPUs "
                         "visible in CUDA_VISIBLE_DEVICES)")


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to send this process SIGTERM when its parent (thread) dies (Linux
    `prctl(PR_SET_PDEATHSIG)`; elsewhere nothing), and exit now if the parent `parent_pid` died
    before the request took effect (this process was already handed to another parent)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        print(f"worker: launcher {parent_pid} is gone; not starting", file=sys.stderr, flush=True)
        raise SystemExit(1)


class LocalJob:
    """Handle of one run on this machine: `state`, `done()`, `result()` like submitit's Job."""

    def __init__(self, executor: LocalExecutor, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.job_id = ""
        self.returncode: int | None = None
        self.gpu: str | None = None
        self.failures_before = 0  # the run's failure count when its worker started
        self._executor = executor
        self._state = "pending"
        self.proc: subprocess.Popen | None = None

    @property
    def state(self) -> str:
        """pending (queued here), running, or the final ledger state."""
        self._executor.poll()
        return self._state

    def done(self) -> bool:
        """Whether the run has reached a final state."""
        return self.state in FINAL_STATES

    def result(self) -> str:
        """Block until the run is final and return its state (done, failed, preempted, busy)."""
        while not self.done():
            time.sleep(POLL_S)
        return self._state


class LocalExecutor:
    """Runs `max_parallel` runs at once as subprocesses (default: one per GPU, else one per core
    with one thread each: small CPU runs scale better side by side than across threads)."""

    def __init__(self, max_parallel: int | None = None, threads_per_run: int | None = None,
                 gpus: list[str] | None = None, python: str = sys.executable) -> None:
        self.gpus = visible_gpus() if gpus is None else list(gpus)
        check_max_parallel(max_parallel, self.gpus)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.slots = max(1, max_parallel or len(self.gpus) or cores)
        self.threads_per_run = threads_per_run or max(1, cores // self.slots)
        self.python = python
        self._queue: deque[LocalJob] = deque()
        self._running: list[LocalJob] = []

    def submit(self, run_dir: str | Path) -> LocalJob:
        """Queue a run; it starts as soon as a slot is free. Workers run in the repository
        (so a user's own `models/` or `jobs/` folder cannot shadow ours): they get absolute paths."""
        job = LocalJob(self, Path(run_dir).resolve())
        self._queue.append(job)
        self.poll()
        return job

    def poll(self) -> None:
        """Reap finished workers and start queued runs on free slots."""
        for job in [j for j in self._running if j.proc.poll() is not None]:
            self._running.remove(job)
            self._finish(job)
        while self._queue and len(self._running) < self.slots:
            self._start(self._queue.popleft())

    def _env(self, job: LocalJob) -> dict[str, str]:
        env = dict(os.environ)
        threads = str(self.threads_per_run)
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        if self.gpus:
            busy = {j.gpu for j in self._running}
            job.gpu = next(g for g in self.gpus if g not in busy)
            env["CUDA_VISIBLE_DEVICES"] = job.gpu
        elif "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _start(self, job: LocalJob) -> None:
        cmd = [self.python, "-m", "jobs.executors.local", str(job.run_dir), str(os.getpid())]
        job.failures_before = failure_count(job.run_dir)
        with open(job.run_dir / WORKER_LOG, "ab") as log:
            job.proc = subprocess.Popen(cmd, cwd=REPO, env=self._env(job), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT)
        job.job_id = f"pid:{job.proc.pid}"
        job._state = "running"
        self._running.append(job)

    def _finish(self, job: LocalJob) -> None:
        """The run's final state: busy, or what status.json says (a crash is recorded as failed)."""
        job.returncode = job.proc.returncode
        if job.returncode == EXIT_BUSY:
            job._state = BUSY
            return
        if job.returncode != 0 and not lock_held(job.run_dir):
            record_crash(job.run_dir, f"worker exited with status {job.returncode}; see {WORKER_LOG}",
                         job.failures_before)
        state = runfiles.read_status(job.run_dir).get("state", "pending")
        job._state = state if state in FINAL_STATES else "failed"

    def shutdown(self) -> None:
        """Stop queued and running work (SIGTERM, then SIGKILL after 10 s)."""
        self._queue.clear()
        for job in self._running:
            job.proc.terminate()
        deadline = time.time() + 10
        for job in self._running:
            try:
                job.proc.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                job.proc.kill()
                job.proc.wait()
        self._running.clear()


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: train and evaluate one run directory under its lock."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2) or not all(p.isdigit() for p in argv[1:]):
        print("usage: python -m jobs.executors.local <run_dir> [<launcher pid>]", file=sys.stderr)
        return 2
    if argv[1:]:
        die_with_parent(int(argv[1]))
    state = run_exclusive(argv[0], handle_signals=True)
    print(f"run {argv[0]}: {state}", flush=True)
    return EXIT_BUSY if state == BUSY else 0


if __name__ == "__main__":
    sys.exit(main())
