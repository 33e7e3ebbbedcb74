"""Evaluation windows: which windows of a split every run of a study scores, and the per-window
losses behind each record (`<run>/eval_windows.parquet`).

A split is tiled into non-overlapping `seq_len` windows laid from a seeded phase (so every token
offset is equally likely to be covered). A suite whose budget holds every tile scores them all;
otherwise it scores `n` tiles drawn uniformly without replacement, sorted by offset. The draw is a
pure function of (evaluation seed, split tokens, seq_len): every run of a study (one corpus,
tokenizer, sequence length and evaluation seed) scores the same windows, so per-window losses of
two runs pair, and a larger budget scores a superset of a smaller one's windows (the first `n` of
one seeded permutation). The ensemble scores a uniform subsample of those windows, of at least
`MIN_ENSEMBLE_WINDOWS` (or all of them).

A record's value is the mean of its per-window values (each the mean over the window's tokens and
Monte-Carlo draws), and its `se` the sampling standard error of that mean over windows,
sd(per-window) / sqrt(n): it counts the choice of windows and the Monte-Carlo draws together,
treating windows as independent draws from the text (no finite-population correction).
"""
from __future__ import annotations

import io
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch

from jobs.eval.records import merge_records
from jobs.run.files import atomic_write_bytes

WINDOWS_FILE = "eval_windows.parquet"
MIN_ENSEMBLE_WINDOWS = 256  # the ensemble scores at least this many of the windows (or all)
PAYLOAD = "_windows"  # a row's per-window values before they go to WINDOWS_FILE (never a record column)
# Columns of WINDOWS_FILE: who and what (as in the records), then the window and its value.
WINDOW_SCHEMA: dict[str, pl.DataType] = {
    "study": pl.String, "run_id": pl.String, "family": pl.String, "variant": pl.String, "size": pl.String,
    "seed": pl.Int64, "weights": pl.String, "dataset": pl.String, "split": pl.String, "metric": pl.String,
    "estimator": pl.String, "m": pl.Int64, "window": pl.Int64, "start": pl.Int64, "value": pl.Float64,
}


@dataclass(frozen=True)
class Tiling:
    """The windows chosen from one split: `starts` (token offsets, sorted) of `seq_len` tokens."""

    starts: np.ndarray
    seq_len: int
    split_tokens: int
    n_tiles: int  # non-overlapping windows the split holds
    phase: int  # offset of the first tile

    @property
    def coverage_tokens(self) -> int:
        """Tokens scored: windows x seq_len."""
        return len(self.starts) * self.seq_len

    @property
    def ids(self) -> np.ndarray:
        """Each window's tile index in the split's tiling (stable across budgets)."""
        return (self.starts - self.phase) // self.seq_len

    def describe(self, split: str) -> str:
        """The `chunking` text of its records."""
        share = f"{self.coverage_tokens / self.split_tokens:.1%}" if self.split_tokens else "0%"
        which = ("all" if len(self.starts) == self.n_tiles else
                 f"{len(self.starts)} drawn uniformly without replacement (evaluation seed) of the")
        return (f"{which} {self.n_tiles} non-overlapping {self.seq_len}-token windows of the {split} split "
                f"(documents joined by <|endoftext|>; first window at token {self.phase}): "
                f"{self.coverage_tokens} of {self.split_tokens} tokens ({share})")


def _rng(seed: int, *words: object) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(str(w).encode()) for w in words)])


def draw_windows(split_tokens: int, seq_len: int, n: int, seed: int) -> Tiling:
    """`n` windows spread uniformly over a split of `split_tokens` tokens (all when it holds <= n)."""
    if seq_len < 1 or split_tokens < seq_len:
        raise ValueError(f"split of {split_tokens} tokens holds no {seq_len}-token window; use a shorter "
                         "seq_len or a larger corpus")
    rng = _rng(seed, "windows", split_tokens, seq_len)
    n_tiles = split_tokens // seq_len
    phase = int(rng.integers(0, split_tokens - n_tiles * seq_len + 1))
    tiles = np.sort(rng.permutation(n_tiles)[:n])
    return Tiling(phase + tiles * seq_len, seq_len, split_tokens, n_tiles, phase)


def consecutive(n_windows: int, seq_len: int, split_tokens: int) -> Tiling:
    """The first `n_windows` tiles from offset 0 (zero-shot sets, cut by jobs.data.datasets)."""
    return Tiling(np.arange(n_windows) * seq_len, seq_len, split_tokens, split_tokens // seq_len, 0)


def ensemble_subset(n_windows: int, n: int, seed: int) -> np.ndarray:
    """Sorted indices of `n` of `n_windows` windows drawn uniformly (all when n >= n_windows)."""
    if n >= n_windows:
        return np.arange(n_windows)
    return np.sort(_rng(seed, "ensemble", n_windows).permutation(n_windows)[:n])


def mean_se(per_window: torch.Tensor | np.ndarray) -> tuple[float, float | None]:
    """Mean of per-window values and its standard error over windows (None for one window)."""
    v = np.asarray(torch.as_tensor(per_window).double().cpu().numpy(), dtype=np.float64)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size >= 2 else None
    return float(v.mean()), se


def attach(row: dict, ids: np.ndarray, starts: np.ndarray, values: torch.Tensor | np.ndarray) -> dict:
    """The row with its per-window values attached (taken off again by `take`)."""
    values = np.asarray(torch.as_tensor(values).double().cpu().numpy(), dtype=np.float64)
    return {**row, PAYLOAD: (np.asarray(ids, np.int64), np.asarray(starts, np.int64), values)}


def take(rows: list[dict]) -> pl.DataFrame:
    """Pop every row's per-window values into one WINDOW_SCHEMA frame."""
    parts = []
    for row in rows:
        payload = row.pop(PAYLOAD, None)
        if payload is None:
            continue
        ids, starts, values = payload
        n = len(values)
        columns = {name: [row.get(name)] * n for name in WINDOW_SCHEMA if name not in ("window", "start", "value")}
        parts.append(pl.DataFrame({**columns, "window": ids, "start": starts, "value": values},
                                  schema=WINDOW_SCHEMA))
    return pl.concat(parts) if parts else pl.DataFrame(schema=WINDOW_SCHEMA)


def read_windows(run_dir: str | Path) -> pl.DataFrame:
    """The run's per-window losses (an empty frame when there are none)."""
    path = Path(run_dir) / WINDOWS_FILE
    return pl.read_parquet(path) if path.exists() else pl.DataFrame(schema=WINDOW_SCHEMA)


def write_windows(run_dir: str | Path, new: pl.DataFrame, fresh: bool = False) -> None:
    """Merge `new` into run_dir/eval_windows.parquet (an evaluation replaces the windows of the
    records it replaces: same key as jobs.eval.records.REPLACE_KEY), atomically; `fresh` replaces
    them all, as write_records(fresh=True) does the records."""
    merged = new if fresh else merge_records(read_windows(run_dir), new)
    buffer = io.BytesIO()
    merged.write_parquet(buffer)
    atomic_write_bytes(Path(run_dir) / WINDOWS_FILE, buffer.getvalue())
