"""The tests' one poll-with-deadline helper."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, *, every_s: float = 0.1,
               alive: subprocess.Popen | None = None) -> float:
    """Poll `predicate` every `every_s` until it holds; the seconds it took. Fails the test naming
    `what` after `timeout_s`, or at once when the process `alive` has ended first (with its stderr
    where it was piped)."""
    started = time.monotonic()
    while not predicate():
        if alive is not None and alive.poll() is not None:
            err = alive.stderr.read() if alive.stderr else ""
            raise AssertionError(f"the process ended (exit {alive.returncode}) before {what}: {err}")
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)
    return time.monotonic() - started
