"""The one run lock: an exclusive `fcntl.flock` on `<run_dir>/.lock`.

`jobs.train`, `jobs.eval.evaluate` and every executor take it before touching a run directory, so two
processes never train or evaluate one run at the same time. The kernel drops a flock when its
holder dies, so a killed process never leaves a stale lock. Within one process the lock is
re-entrant (an executor's worker holds it while the pipeline it calls takes it again for
training and evaluation); a second process gets `RunBusy`, or waits with `wait_s`.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from cli.paths import special_kind
from cli import EXIT_BUSY, Busy, InputError  # noqa: F401 - EXIT_BUSY re-exported for the executors

LOCK_FILE = ".lock"
POLL_S = 0.2

_HELD: dict[str, list[int]] = {}  # resolved lock path -> [descriptor, depth] held by this process
_GUARD = threading.Lock()


class RunBusy(Busy):
    """Another live process holds the run's lock."""


def _key(run_dir: str | Path) -> str:
    return str((Path(run_dir) / LOCK_FILE).resolve())


def _try_flock(path: str) -> int | None:
    kind = special_kind(path) or ("folder" if os.path.isdir(path) else None)
    if kind:  # no process can hold a lock there: it is damage, named rather than a traceback
        raise InputError(f"{path}: is a {kind}, not a lock file; remove it (no process holds a lock there)")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class RunLock:
    """The run's lock: `acquire()` (non-blocking, re-entrant in this process) and `release()`."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._mine = False

    def acquire(self) -> bool:
        """Take the lock; False when another process holds it."""
        if self._mine:
            return True
        key = _key(self.run_dir)
        with _GUARD:
            if key in _HELD:
                _HELD[key][1] += 1
            else:
                fd = _try_flock(key)
                if fd is None:
                    return False
                _HELD[key] = [fd, 1]
        self._mine = True
        return True

    def release(self) -> None:
        """Drop this holder's claim; the flock goes when the last holder in the process releases."""
        if not self._mine:
            return
        key = _key(self.run_dir)
        with _GUARD:
            entry = _HELD[key]
            entry[1] -= 1
            if entry[1] == 0:
                os.close(entry[0])
                del _HELD[key]
        self._mine = False


def lock_held(run_dir: str | Path) -> bool:
    """Whether some live process (this one included) holds the run's lock."""
    if not (Path(run_dir) / LOCK_FILE).exists():
        return False
    key = _key(run_dir)
    with _GUARD:
        if key in _HELD:
            return True
    fd = _try_flock(key)
    if fd is None:
        return True
    os.close(fd)
    return False


@contextlib.contextmanager
def holding(run_dir: str | Path, wait_s: float = 0.0) -> Iterator[RunLock]:
    """Hold the run's lock for the block (the run directory must exist); `RunBusy` when another
    process still holds it after `wait_s` seconds."""
    lock, deadline = RunLock(run_dir), time.monotonic() + wait_s
    while not lock.acquire():
        if time.monotonic() >= deadline:
            raise RunBusy(f"run_dir: {run_dir} is in use by another process (its lock {lock.path} is held); "
                          "wait for it to finish or use another --run-dir")
        time.sleep(POLL_S)
    try:
        yield lock
    finally:
        lock.release()


@contextlib.contextmanager
def exclusive(path: str | Path) -> Iterator[None]:
    """A blocking flock on the file `path` for the block (e.g. one report writer per study)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
