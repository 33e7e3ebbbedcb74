"""The sharded token cache: a corpus tokenised in parallel into one folder per (corpus, text
field, tokenizer), resumable after a kill, with a manifest.

A source split is cut into jobs of `SHARD_DOCS` consecutive documents. Each job (in a worker
process, one per core by default) writes its tokens as shard files, each renamed into place when
complete, and then a small JSON marker; only a job with a marker counts as done, so a half-written
shard is never read and a rerun after a kill redoes only the unfinished jobs. When every job is
done the shards are concatenated, in order, into `train.bin` and `validation.bin`, the manifest
is written last, and the shards are removed. Memory stays flat: a worker holds one job's text, the
assembly copies in fixed-size blocks, and documents are never collected in one list.

Every document is preceded by end-of-text in its shard; the first token of each split is dropped
at assembly, so a split is its documents joined by end-of-text (empty documents are skipped).

Held-out split: when the corpus has no validation split, a document is validation when
h / 2^64 < p, with h the first 8 bytes (big-endian) of blake2b(UTF-8 text) and
p = min(HELD_OUT_MAX_SHARE, max(HELD_OUT_FRACTION, HELD_OUT_MIN_DOCS / n_documents)). The rule
depends on the text alone, so every machine holds out the same documents (and duplicates of a
held-out document are held out too). Its parameters and the sizes are in the manifest.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import pickle
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from cli.faults import fault_point
from jobs.run.files import atomic_write
from jobs.data.tokenizers import get_encoding, token_dtype

SHARD_DOCS = 1024  # documents per job: ~5 MB of web text (OpenWebText: ~8k jobs), ~2 MB of tokens
COPY_BLOCK_BYTES = 16 << 20  # assembly copies shards in blocks of this size
HELD_OUT_FRACTION = 0.0005  # nanoGPT's OpenWebText validation share (data/openwebtext/prepare.py)
HELD_OUT_MIN_DOCS = 1000  # at least this many documents are held out ...
HELD_OUT_MAX_SHARE = 0.5  # ... but never more than half the corpus (a small corpus keeps training data)
MIN_JOBS_FOR_POOL = 4  # fewer jobs run in this process: starting workers would cost more
PROGRESS_MIN_JOBS = 20  # corpora with fewer jobs tokenise without progress lines (unless asked)
PROGRESS_EVERY_S = 2.0  # a progress line at most this often (and at the last shard)
MANIFEST = "manifest.json"
SPLITS = ("train", "validation")


class TextSource(Protocol):
    """A split's documents, readable by row range; must pickle cheaply (sent to workers)."""

    def __len__(self) -> int: ...

    def texts(self, start: int, stop: int) -> list[str | None]: ...


@dataclass(frozen=True)
class ListSource:
    """Documents already in memory (the built-in Shakespeare corpus)."""

    documents: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.documents)

    def texts(self, start: int, stop: int) -> list[str | None]:
        return list(self.documents[start:stop])


class DatasetSource:
    """One text column of a `datasets.Dataset` (memory-mapped Arrow; pickles by file reference).

    Each read maps the Arrow files afresh and unmaps them after: pages of a map that stays open
    count in the process's resident memory, which would then grow with the corpus read so far."""

    def __init__(self, dataset: Any, text_field: str) -> None:
        self._pickled = pickle.dumps(dataset.select_columns([text_field]))
        self._len = len(dataset)
        self.text_field = text_field

    def __len__(self) -> int:
        return self._len

    def texts(self, start: int, stop: int) -> list[str | None]:
        dataset = pickle.loads(self._pickled)
        try:
            texts = dataset[start:stop][self.text_field]
        finally:
            del dataset
        for row, text in enumerate(texts, start):
            if not isinstance(text, str):
                raise ValueError(f"corpus: row {row}: text field {self.text_field!r} is "
                                 f"{'null' if text is None else type(text).__name__}, not a string; every "
                                 "record needs a text string (or pass --text-field NAME)")
        return texts


def held_out_p(n_documents: int) -> float:
    """Share of documents the held-out rule selects for a corpus of `n_documents`."""
    return min(HELD_OUT_MAX_SHARE, max(HELD_OUT_FRACTION, HELD_OUT_MIN_DOCS / max(n_documents, 1)))


def is_held_out(text: str, p: float) -> bool:
    """The held-out rule for one document (see the module docstring)."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    return h < p * 2**64


def held_out_rule(n_documents: int) -> dict[str, Any]:
    """The held-out rule and its parameters, as recorded in the manifests."""
    return {"source": "held-out slice of train",
            "rule": "blake2b-64(text) / 2^64 < p, p = min(max_share, max(fraction, min_docs / n))",
            "fraction": HELD_OUT_FRACTION, "min_docs": HELD_OUT_MIN_DOCS,
            "max_share": HELD_OUT_MAX_SHARE, "n": n_documents, "p": held_out_p(n_documents)}


@dataclass(frozen=True)
class Job:
    """Documents [start, stop) of source split `source`; its outputs go to `routes`' splits."""

    source: str
    index: int
    start: int
    stop: int

    @property
    def stem(self) -> str:
        return f"{self.source}-{self.index:06d}"


@dataclass(frozen=True)
class Plan:
    """What to tokenise: the source splits and where their documents go."""

    sources: dict[str, TextSource]
    tokenizer: str
    held_out_p: float | None  # None: the corpus has its own validation split

    def jobs(self) -> list[Job]:
        return [Job(name, i, start, min(start + SHARD_DOCS, len(source)))
                for name, source in self.sources.items()
                for i, start in enumerate(range(0, len(source), SHARD_DOCS))]

    def route(self, source: str, text: str) -> str:
        if self.held_out_p is None:
            return source
        return "validation" if is_held_out(text, self.held_out_p) else "train"


# ---------------------------------------------------------------------------------------------
# Workers

_WORKER: dict[str, Any] = {}


def _init_worker(plan: Plan, shard_dir: str) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per worker
    _WORKER.update(plan=plan, shard_dir=Path(shard_dir), enc=get_encoding(plan.tokenizer))


def _encode(texts: list[str], enc: Any) -> np.ndarray:
    dtype = token_dtype(enc.n_vocab)
    parts = []
    # One document at a time: tiktoken's batch call runs its own thread pool (8 threads), so one
    # "worker" would already occupy every core and added workers would only contend for them.
    for text in texts:
        parts += [np.array([enc.eot_token], dtype=dtype), np.asarray(enc.encode_ordinary(text), dtype=dtype)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def run_job(job: Job) -> tuple[str, int]:
    """Tokenise one job into its shard files and marker (in a worker, after `_init_worker`);
    returns the job's stem and its token count."""
    plan, shard_dir, enc = _WORKER["plan"], _WORKER["shard_dir"], _WORKER["enc"]
    routed: dict[str, list[str]] = {split: [] for split in SPLITS}
    for text in plan.sources[job.source].texts(job.start, job.stop):
        if text:
            routed[plan.route(job.source, text)].append(text)
    marker = {}
    for split, texts in routed.items():
        tokens = _encode(texts, enc)
        atomic_write(shard_dir / f"{job.stem}.{split}.bin", lambda out: out.write(tokens.tobytes()))
        marker[split] = {"documents": len(texts), "tokens": int(tokens.size)}
    atomic_write(shard_dir / f"{job.stem}.json", lambda out: out.write(json.dumps(marker).encode()))
    return job.stem, sum(split["tokens"] for split in marker.values())


Progress = Callable[[str, int], None]  # called with each finished job's stem and token count


def _run_jobs(plan: Plan, jobs: list[Job], shard_dir: Path, workers: int, progress: Progress | None) -> None:
    if not jobs:
        return
    if workers <= 1 or len(jobs) < MIN_JOBS_FOR_POOL:
        _init_worker(plan, str(shard_dir))
        _collect(map(run_job, jobs), progress)
        return
    context = multiprocessing.get_context("spawn")  # no fork of a process holding torch threads
    with context.Pool(min(workers, len(jobs)), _init_worker, (plan, str(shard_dir))) as pool:
        _collect(pool.imap_unordered(run_job, jobs), progress)


def _collect(done: Iterator[tuple[str, int]], progress: Progress | None) -> None:
    """Take each finished job (its shard and marker written) as it comes. Fault point
    `tokencache.shard_done`: the builder dies with a shard done and the others not."""
    for stem, tokens in done:
        progress and progress(stem, tokens)
        fault_point("tokencache.shard_done")


def _progress_printer(corpus: object, total: int, done: int, always: bool) -> Progress | None:
    """Prints "tokenising CORPUS: k/n shards, T tokens, R tokens/s" on stderr at most every
    PROGRESS_EVERY_S seconds and at the last shard; R counts this call's shards over its wall
    time. Without `always`, only for corpora of PROGRESS_MIN_JOBS shards or more to do."""
    if not always and total - done < PROGRESS_MIN_JOBS:
        return None
    start = last = time.monotonic()
    count, tokens = [done], [0]

    def report(_: str, n_tokens: int) -> None:
        nonlocal last
        count[0] += 1
        tokens[0] += n_tokens
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S or count[0] == total:
            last = now
            rate = tokens[0] / max(now - start, 1e-9)
            print(f"tokenising {corpus}: {count[0]}/{total} shards, {tokens[0]:,} tokens, {rate:,.0f} tokens/s",
                  file=sys.stderr, flush=True)

    return report

# ---------------------------------------------------------------------------------------------
# Assembly


def _assemble(folder: Path, shard_dir: Path, jobs: list[Job], split: str,
              dtype: np.dtype) -> dict[str, Any]:
    """Concatenate the split's shards in job order, dropping the leading end-of-text."""
    digest, n_docs, n_tokens = hashlib.sha256(), 0, 0
    skip_bytes = dtype.itemsize  # the first document's leading end-of-text

    def write(out) -> None:
        nonlocal skip_bytes, n_docs, n_tokens
        for job in jobs:
            n_docs += json.loads((shard_dir / f"{job.stem}.json").read_text())[split]["documents"]
            with open(shard_dir / f"{job.stem}.{split}.bin", "rb") as shard:
                while block := shard.read(COPY_BLOCK_BYTES):
                    block, skip_bytes = block[skip_bytes:], max(skip_bytes - len(block), 0)
                    digest.update(block)
                    out.write(block)
                    n_tokens += len(block) // dtype.itemsize

    atomic_write(folder / f"{split}.bin", write, mode=0o644)
    return {"documents": n_docs, "tokens": n_tokens, "sha256": digest.hexdigest()}


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The cache folder's manifest, or None while the cache is not complete."""
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def build(folder: Path, plan: Plan, describe: dict[str, Any], *, workers: int | None = None,
          progress: Progress | None = None, report: bool = False) -> dict[str, Any]:
    """Build the cache in `folder` unless complete; returns its manifest.

    One builder at a time per folder (a file lock; others wait and then find it complete).
    `describe` (corpus, tokenizer, ...) is written into the manifest. `workers`: processes,
    default one per usable core. Progress lines (`_progress_printer`) for big corpora, or
    always with `report`; `progress` replaces them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = read_manifest(folder)
        if manifest is None:
            manifest = _build_locked(folder, plan, describe, workers, progress, report)
    return manifest


def _build_locked(folder: Path, plan: Plan, describe: dict[str, Any], workers: int | None,
                  progress: Progress | None, report: bool) -> dict[str, Any]:
    shard_dir = folder / "shards"
    shard_dir.mkdir(exist_ok=True)
    jobs = plan.jobs()
    todo = [job for job in jobs if not (shard_dir / f"{job.stem}.json").exists()]
    _run_jobs(plan, todo, shard_dir, workers or len(os.sched_getaffinity(0)),
              progress or _progress_printer(describe.get("corpus"), len(jobs), len(jobs) - len(todo), report))
    enc = get_encoding(plan.tokenizer)
    dtype = token_dtype(enc.n_vocab)
    splits = {split: _assemble(folder, shard_dir, jobs, split, dtype) for split in SPLITS}
    empty = [split for split in SPLITS if splits[split]["documents"] == 0]
    if empty:
        for split in SPLITS:
            (folder / f"{split}.bin").unlink(missing_ok=True)
        raise ValueError(f"corpus {describe.get('corpus')!r}: the {empty[0]} split has no documents "
                         f"(text field {describe.get('text_field')!r}); give a corpus with "
                         f"non-empty documents in both splits")
    manifest = {**describe, "dtype": dtype.name, "eot_token": int(enc.eot_token),
                "shard_docs": SHARD_DOCS, "splits": splits,
                "validation": (held_out_rule(len(plan.sources["train"]))
                               if plan.held_out_p is not None else {"source": "validation split"})}
    atomic_write(folder / MANIFEST, lambda out: out.write(
        (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()), mode=0o644)
    shutil.rmtree(shard_dir, ignore_errors=True)
    return manifest
