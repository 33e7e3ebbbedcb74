"""Preparing a study's data before any GPU job: every (corpus, tokenizer, text field) its runs
read, tokenised with N processes into the token cache (`jobs.data.tokencache`), on the machine
that runs this (a login node, a CPU job of its own under Slurm, a Ray CPU task).

`prepare(corpora, workers=N)` is idempotent: a corpus whose cache is complete (its manifest
written; the folder's name hashes the corpus's content, text field, tokenizer and DATA_VERSION)
is not tokenised again. Progress lines carry tokens/s; each corpus ends with one summary line.

The stop signals (SIGTERM, SIGUSR2, SIGINT) end it cleanly: `stopping()` turns them into
`Stopped` in the main process, the worker pool is terminated, and what is on disk is only whole
shard files (each renamed into place when complete, with its marker) and never a manifest of an
incomplete cache, so the next call redoes only the unfinished shards.

`PrepareJob` is the same work as a picklable callable for the cluster executors: a submitit
job (checkpointable: on USR2 it is requeued and resumes from the finished shards) or a Ray task.
It sets AOSCALE_CACHE to the study's cache folder for its own process.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from jobs.data import corpus as data

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT)
EXIT_STOPPED = 3  # `scaling.prepare` stopped by a signal: the finished shards are kept


@dataclass(frozen=True, order=True)
class Corpus:
    """One token cache a study's runs read: (corpus, tokenizer, text field)."""

    corpus: str
    tokenizer: str
    text_field: str = data.DEFAULT_TEXT_FIELD

    def __str__(self) -> str:
        return f"{self.corpus} ({self.tokenizer}, text field {self.text_field})"

    def manifest(self) -> dict[str, Any] | None:
        """The complete cache's manifest in the current cache root, or None."""
        return data.prepared_manifest(self.corpus, self.tokenizer, self.text_field)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived while preparing (an interrupt: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stopping() -> Iterator[dict[int, Any]]:
    """Inside the block, SIGTERM/SIGUSR2/SIGINT raise `Stopped` in the main thread (then the
    previous handlers, which the block gets, come back). Off the main thread it does nothing."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _raise_stopped)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield {}
        return
    try:
        yield previous
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _raise_stopped(signum: int, frame: Any) -> None:
    raise Stopped(signum)


def default_workers() -> int:
    """Worker processes by default: the CPUs this process may use (its affinity: Slurm's
    cgroup, taskset), not the machine's."""
    return len(os.sched_getaffinity(0))


def prepare(corpora: Sequence[Corpus], *, workers: int | None = None, out: TextIO | None = None) -> list[dict]:
    """Tokenise each corpus not yet prepared into the cache (`data.cache_root()`), with `workers`
    processes (default `default_workers()`); returns the manifests, in order. One line per
    corpus: already prepared, or its tokens, wall time and tokens/s."""
    out = out or sys.stderr
    workers = workers or default_workers()
    manifests = []
    for item in sorted(set(corpora)):
        manifest = item.manifest()
        if manifest is not None:
            print(f"prepare: {item}: already prepared ({_tokens(manifest):,} tokens) in "
                  f"{data.cache_folder(item.corpus, item.tokenizer, item.text_field)}", file=out, flush=True)
        else:
            start = time.monotonic()
            manifest = data.token_cache(item.corpus, item.tokenizer, item.text_field, workers=workers,
                                        report=True, require_prepared=False)
            wall_s = time.monotonic() - start
            print(f"prepare: {item}: {_tokens(manifest):,} tokens in {wall_s:.1f} s "
                  f"({_tokens(manifest) / max(wall_s, 1e-9):,.0f} tokens/s, {workers} worker(s)) into "
                  f"{data.cache_folder(item.corpus, item.tokenizer, item.text_field)}", file=out, flush=True)
        manifests.append(manifest)
    return manifests


def _tokens(manifest: dict[str, Any]) -> int:
    return sum(split["tokens"] for split in manifest["splits"].values())


@dataclass(frozen=True)
class PrepareJob:
    """`prepare(corpora)` into `cache_dir`, as a picklable job (submitit or Ray). `workers` 0:
    the CPUs the job may use."""

    cache_dir: str
    corpora: tuple[Corpus, ...]
    workers: int = 0

    def __call__(self) -> str:
        os.environ["AOSCALE_CACHE"] = self.cache_dir
        previous: dict[int, Any] = {}
        try:
            with stopping() as previous:
                prepare(self.corpora, workers=self.workers or None, out=sys.stdout)
        except Stopped as stop:  # the pool is down and the shards whole; now the job's own handler
            handler = previous.get(stop.signum)
            if callable(handler):  # submitit's USR2 handler: checkpoint(), requeue, exit
                handler(stop.signum, None)
            raise
        return "prepared"

    def checkpoint(self) -> Any:
        """submitit: on USR2 before the time limit, requeue the same job (finished shards are kept)."""
        import submitit  # noqa: PLC0415 - optional (the slurm extra)

        return submitit.helpers.DelayedSubmission(self)

    def describe(self) -> str:
        """One line: what the job prepares, and where."""
        return f"{len(self.corpora)} corpus cache(s) into {self.cache_dir}: " + "; ".join(map(str, self.corpora))
