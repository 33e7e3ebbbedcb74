"""Evaluation that resumes per set: each finished set's rows are kept until the run's records are
written, so a preempted evaluation scores only the sets it had not finished.

An evaluation is a list of sets (jobs.eval.evaluate: one per weights x dataset, infilling, LAMBADA,
generation). As each finishes, rank 0 writes its record rows and per-window values to
`<run>/eval_progress/<n>.parquet` and `<n>.windows.parquet` and names it in `meta.json`, beside
the key of what is being evaluated (the suite, its fingerprint, seed, weights, sequence length,
data folder, checkpoint and placement). A rerun with the same key takes the finished sets' rows
from there; another key starts afresh. The run's `eval.parquet` is written only when every set is
done (then the folder goes), so it never holds a partial evaluation and `jobs.eval.state` reads
it as before.
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import polars as pl

from jobs.run.files import atomic_write_bytes

PROGRESS_DIR = "eval_progress"
META_FILE = "meta.json"


def progress_key(**what) -> str:
    """16 hex digits of what an evaluation measures (JSON of `what`, keys sorted)."""
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Progress:
    """The finished sets of one evaluation (`key`) of the run in `run_dir`."""

    def __init__(self, run_dir: str | Path, key: str):
        self.folder = Path(run_dir) / PROGRESS_DIR
        self.key = key
        self.done: dict[str, str] = {}  # set name -> file stem
        self.notes: dict[str, list[str]] = {}  # set name -> its warnings (a set that could not be had)
        meta = self._meta()
        if meta.get("key") == key:
            self.done = {name: stem for name, stem in meta.get("done", {}).items()
                         if (self.folder / f"{stem}.parquet").is_file()}
            self.notes = {name: meta.get("notes", {}).get(name, []) for name in self.done}

    def _meta(self) -> dict:
        try:
            return json.loads((self.folder / META_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def load(self, name: str) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
        """(record rows, per-window values, warnings) of a finished set."""
        stem = self.folder / self.done[name]
        return pl.read_parquet(f"{stem}.parquet"), pl.read_parquet(f"{stem}.windows.parquet"), self.notes[name]

    def save(self, name: str, records: pl.DataFrame, windows: pl.DataFrame, notes: list[str]) -> None:
        """Keep a finished set's rows (atomically: the set counts only once both files are whole)."""
        if self._meta().get("key") != self.key:  # another evaluation's leftovers: start afresh
            shutil.rmtree(self.folder, ignore_errors=True)
            self.done, self.notes = {}, {}
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = f"{len(self.done):03d}"
        for suffix, frame in ((".windows.parquet", windows), (".parquet", records)):
            buffer = io.BytesIO()
            frame.write_parquet(buffer)
            atomic_write_bytes(self.folder / f"{stem}{suffix}", buffer.getvalue())
        self.done[name], self.notes[name] = stem, list(notes)
        meta = json.dumps({"key": self.key, "done": self.done, "notes": self.notes}, indent=1).encode()
        atomic_write_bytes(self.folder / META_FILE, meta)

    def clear(self) -> None:
        """Drop the folder (the run's records now hold every set)."""
        shutil.rmtree(self.folder, ignore_errors=True)
