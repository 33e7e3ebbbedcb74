"""Drive a study's runs through an executor until each is done or out of retries.

Idempotent by construction: every decision is re-read from the ledger. Done runs are skipped,
interrupted and preempted runs are resubmitted (the trainer resumes from its last checkpoint),
trained runs (records missing or outdated) are submitted to be evaluated (never trained again),
failed runs are retried while `failures <= max_retries` (with `retry_failed`, a run that had used
up its retries when the launch began gets `max_retries` more tries), and a run whose lock another live
process holds (a second launcher) is set aside and looked at again once that lock is released.
Runs decided in one pass go to the executor together (`submit_all`, e.g. one Slurm job array),
and runs an earlier launch left queued (`attached` handles) are waited on, not resubmitted.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path

from tqdm import tqdm

from jobs.executors import BUSY, Executor, Handle, lock_held

from . import study_ledger

POLL_S = 0.25


def is_final(run: study_ledger.RunView, max_retries: int) -> bool:
    """Done, or failed more often than retries allow."""
    return run.state == "done" or (run.state == "failed" and run.failures > max_retries)


def retry_allowance(views: list[study_ledger.RunView], max_retries: int, retry_failed: bool) -> dict[str, int]:
    """Per run, the failures its retries may reach: `max_retries`, or with `retry_failed`
    `max_retries` more than a failed run that has used up its retries already has."""
    return {v.run_id: max_retries + (v.failures if retry_failed and v.state == "failed" and v.failures > max_retries
                                     else 0) for v in views}


def to_submit(run: study_ledger.RunView, max_retries: int) -> bool:
    """Whether the run still has to be trained and nobody is training it now."""
    return not is_final(run, max_retries) and run.state != "running"


def submit_runs(executor: Executor, run_dirs: list[Path]) -> list[Handle]:
    """Submit together (`executor.submit_all`, one job array or Tune grid) where the executor can."""
    submit_all = getattr(executor, "submit_all", None)
    return list(submit_all(run_dirs)) if submit_all else [executor.submit(d) for d in run_dirs]


class Scheduler:
    """One launch over one study directory."""

    def __init__(self, study_dir: str | Path, run_ids: list[str], executor: Executor,
                 max_retries: int = 1, progress: bool | None = None,
                 attached: dict[str, Handle] | None = None, retry_failed: bool = False) -> None:
        self.study_dir = Path(study_dir)
        self.executor = executor
        self.max_retries = max_retries
        self.allowed = (retry_allowance([study_ledger.view(self.study_dir, r) for r in run_ids], max_retries, True)
                        if retry_failed else {})
        attached = attached or {}
        self.queue: deque[str] = deque(r for r in run_ids if r not in attached)
        self.active: dict[str, Handle] = {r: h for r, h in attached.items() if r in run_ids}
        self.waiting: set[str] = set()  # held by another process
        self.final: dict[str, str] = {}
        self.names = study_ledger.run_names(self.study_dir)  # run_id -> "family variant size s<seed>"
        self.trained: list[str] = []  # runs this launch submitted
        disable = None if progress is None else not progress
        self.bar = tqdm(total=len(run_ids), desc="study", unit="run", file=sys.stderr, disable=disable)
        self.run_bars: dict[str, tqdm] = {}
        self._disable = disable

    def run(self) -> dict[str, str]:
        """Loop until nothing is queued, running or waiting; returns run_id -> final state."""
        try:
            while self.queue or self.active or self.waiting:
                self._fill()
                self._reap()
                self._wake()
                self._refresh_bars()
                if self.active or self.waiting:
                    time.sleep(POLL_S)
        finally:
            self.executor.shutdown()
            for bar in self.run_bars.values():
                bar.close()
            self.bar.close()
        return self.final

    def _has_slot(self, batch: int) -> bool:
        slots = getattr(self.executor, "slots", None)
        return slots is None or len(self.active) + batch < slots

    def _fill(self) -> None:
        batch: list[str] = []
        while self.queue and self._has_slot(len(batch)):
            run_id = self.queue.popleft()
            if self._decide(run_id):
                batch.append(run_id)
        if batch:
            handles = submit_runs(self.executor, [study_ledger.run_dir(self.study_dir, r) for r in batch])
            self.active.update(zip(batch, handles))
            self.trained.extend(batch)

    def _decide(self, run_id: str) -> bool:
        """Skip or set aside one run from what the ledger says now; True when it is to be submitted."""
        run = study_ledger.view(self.study_dir, run_id)
        retries = self.allowed.get(run_id, self.max_retries)
        if is_final(run, retries) or (run.state == "trained" and run_id in self.trained):
            self._finalize(run_id, run.state, run.reason)  # evaluated once this launch: not looped
            return False
        if run.state == "running":
            self.waiting.add(run_id)
        return to_submit(run, retries)

    def _reap(self) -> None:
        for run_id, handle in list(self.active.items()):
            if not handle.done():
                continue
            del self.active[run_id]
            self._close_bar(run_id)
            if handle.result() == BUSY:
                self.waiting.add(run_id)
            else:
                self.queue.appendleft(run_id)  # re-read: done, retry, or resume after preemption

    def _wake(self) -> None:
        for run_id in [r for r in self.waiting if not lock_held(study_ledger.run_dir(self.study_dir, r))]:
            self.waiting.discard(run_id)
            self.queue.append(run_id)

    def _finalize(self, run_id: str, state: str, reason: str) -> None:
        if run_id in self.final:
            return
        self.final[run_id] = state
        self.bar.update(1)
        note = f": {reason}" if state in ("failed", "trained") and reason else ""
        line = f"[{len(self.final)}/{self.bar.total}] {self.name(run_id)} {state} ({run_id}){note}"
        tqdm.write(line, file=sys.stderr)

    def name(self, run_id: str) -> str:
        """`family variant size s<seed>` of a run (its id where study.json lacks it)."""
        return self.names.get(run_id, run_id)

    def _refresh_bars(self) -> None:
        if self._disable is True or (self._disable is None and not sys.stderr.isatty()):
            return
        for run_id in self.active:
            run = study_ledger.view(self.study_dir, run_id)
            bar = self.run_bars.get(run_id)
            if bar is None and run.steps:
                bar = tqdm(total=run.steps, desc=self.name(run_id), unit="step", leave=False, file=sys.stderr,
                           position=len(self.run_bars) + 1)
                self.run_bars[run_id] = bar
            if bar is not None:
                bar.n = run.step
                bar.refresh()

    def _close_bar(self, run_id: str) -> None:
        bar = self.run_bars.pop(run_id, None)
        if bar is not None:
            bar.close()
