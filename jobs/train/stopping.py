"""When a training or evaluation call stops early: a stop request (a signal, a scheduler's hook),
or the job's deadline coming closer than a save and a step.

Both are process-wide: a signal handler or another thread asks (`request_stop`), the loop reads
(`stop_requested`) between steps and checkpoints before it returns "preempted". The Slurm
executor's hooks name `jobs.train.stopping:request_stop` and `jobs.train.stopping:stop_before`.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

_STOP = threading.Event()
_DEADLINE: list[float] = []  # the job's end (epoch seconds) where a scheduler told it
RESERVE_FACTOR = 2.0  # a save may take twice the slowest measured one (a busier filesystem)
RESERVE_MARGIN_S = 30.0  # then requeue and exit: `scontrol requeue` answers within seconds


def request_stop() -> None:
    """Ask every training loop in this process to checkpoint after its current step and return
    "preempted" (safe to call from a signal handler or another thread)."""
    _STOP.set()


def stop_requested() -> bool:
    """Whether a stop was asked (`request_stop`, a stop signal) since the last training call began
    (evaluation stops between its sets on it: jobs.eval.evaluate)."""
    return _STOP.is_set()


def clear_stop() -> None:
    """Forget an earlier stop request (a command that starts afresh: jobs.eval.evaluate's CLI)."""
    _STOP.clear()


def stop_before(deadline_epoch_s: float) -> None:
    """Checkpoint and stop ("preempted") once the time left before `deadline_epoch_s` (a Slurm job's
    end) is no more than the reserve: RESERVE_FACTOR x the slowest save measured (this call's, or
    the newest checkpoint's meta.json) + one step + RESERVE_MARGIN_S. Before any save was measured
    the scheduler's own signal (USR2 `--slurm-signal-delay` s before the end) is the only one."""
    _DEADLINE[:] = [deadline_epoch_s]


def reserve_s(save_s: float, step_s: float) -> float:
    """Seconds to keep before the deadline: the save (with its factor), the next step (the slowest
    of this call), the margin."""
    return RESERVE_FACTOR * save_s + step_s + RESERVE_MARGIN_S


def near_deadline(rank0: bool, slowest_save_s: float, step_s: float) -> bool:
    """Rank 0's view: whether the next step would eat into the reserve (False without a deadline
    or a measured save)."""
    if not _DEADLINE or not rank0 or slowest_save_s <= 0:
        return False
    return time.time() + reserve_s(slowest_save_s, step_s) >= _DEADLINE[0]


STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT")


@contextlib.contextmanager
def stop_on_signals(enabled: bool) -> Iterator[None]:
    """While training, SIGTERM/SIGUSR1/SIGUSR2/SIGINT ask for a checkpoint and a preempted stop
    (a second SIGINT interrupts at once); the previous handlers come back afterwards. Only the
    main thread can set handlers: elsewhere this does nothing."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    def handler(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and _STOP.is_set():
            raise KeyboardInterrupt
        request_stop()

    names = [n for n in STOP_SIGNALS if hasattr(signal, n)]
    previous = {n: signal.signal(getattr(signal, n), handler) for n in names}
    try:
        yield
    finally:
        for name, old in previous.items():
            signal.signal(getattr(signal, name), old)
