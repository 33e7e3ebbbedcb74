"""Tune the quickstart: which budget takes every family off the unigram plateau on 2 CPU cores?

Trains a grid of (family, size, seed) runs one at a time with `python -m jobs.train` (one
thread each; losses are deterministic, so machine load changes time, never results), scores every
run's left-to-right NLL on the same validation windows, and prints per family and size:

- the validation NLL against the add-one-smoothed unigram cross-entropy of the training split on
  those same windows (the plateau every family starts on),
- AR's gap to each any-order family, paired over windows and seeds (mean and 95 % interval),
- AO-GPT's ensemble gain NLL(M=1) - NLL(M=max) at the largest size (`jobs.evaluate`'s estimator),
- tokens/s of every (family, size) timed side by side in one process (`--speed`), and the wall
  time of the grid projected from those ratios and a reference throughput.

    python bench/tune_quickstart.py --sizes 0.1M,0.3M --families ar,aogpt,mdm --seeds 2 \
        --steps 1000 --lr 3e-3 --warmup 50 --out studies/tune_quickstart

Finished runs are reused (a rerun only prints), so the sweep can be grown a step at a time.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import models
from jobs.data import token_array, val_batches
from jobs.evaluate import evaluate, load_run
from jobs.tokenizers import get_encoding
from models import likelihood as lk

# Model options of each family's quickstart arm (scaling.arms' defaults, EMA left to the study).
FAMILY_OPTIONS = {
    "ar": {},
    "aogpt": {"target_pe": "adaln", "order": "mix:0.1"},
    "sigma_gpt": {"target_pe": "input", "order": "uniform"},
    "mdm": {"loss": "mdlm"},
}
# Reference single-thread throughput on an idle core (issue 14: AO-GPT 1M at seq 64 x batch 16
# trains at ~14k tokens/s); projected times scale it by the ratios timed side by side here.
REFERENCE_TOKENS_PER_S = ("aogpt", "1M", 14_000.0)
START_S = 6.0  # per-run start-up (interpreter, torch import, data map) + quick evaluation, idle box
Z95 = 1.959964  # two-sided 95 % normal quantile


@dataclass(frozen=True)
class Grid:
    """One sweep: the families x sizes x seeds trained with one schedule."""

    families: tuple[str, ...]
    sizes: tuple[str, ...]
    seeds: int
    steps: int
    lr: float
    warmup: int
    seq_len: int
    batch_size: int
    ema: float
    eval_every: int
    val_chunks: int
    ensemble_chunks: int
    m_max: int

    @property
    def tokens(self) -> int:
        """Training tokens per run (equal for every family)."""
        return self.steps * self.batch_size * self.seq_len


def run_name(grid: Grid, family: str, size: str, seed: int) -> str:
    return (f"{family}-{size}-s{seed}-n{grid.steps}-lr{grid.lr:g}-w{grid.warmup}-L{grid.seq_len}"
            f"-b{grid.batch_size}-ema{grid.ema:g}")


def train(grid: Grid, family: str, size: str, seed: int, root: Path) -> Path:
    """Train one run (skipped when its status says done); returns the run directory."""
    run_dir = root / run_name(grid, family, size, seed)
    status = run_dir / "status.json"
    if status.is_file() and json.loads(status.read_text()).get("state") == "done":
        return run_dir
    cmd = [sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir), "--family", family,
           "--size", size, "--steps", str(grid.steps), "--lr", str(grid.lr), "--warmup", str(grid.warmup),
           "--seq-len", str(grid.seq_len), "--batch-size", str(grid.batch_size), "--seed", str(seed),
           "--ema", str(grid.ema), "--eval-every", str(grid.eval_every), "--log-every", "50"]
    for key, value in FAMILY_OPTIONS[family].items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return run_dir


def curve(run_dir: Path) -> tuple[list[tuple[int, float]], float]:
    """(step, val_loss) pairs of the run's training log and its median training tokens/s."""
    rows = [json.loads(line) for line in (run_dir / "metrics.ndjson").read_text().splitlines()]
    vals = [(r["step"], r["val_loss"]) for r in rows if r.get("kind") == "val"]
    speeds = [r["tokens_per_s"] for r in rows if r.get("kind") == "train"]
    return vals, statistics.median(speeds) if speeds else math.nan


def windows(seq_len: int, n: int) -> torch.Tensor:
    """The first n validation windows of Shakespeare bytes (the ones `jobs.evaluate` scores)."""
    return next(val_batches(token_array("shakespeare", "bytes", "validation"), n, seq_len, n_batches=1))


def unigram_nll(chunks: torch.Tensor) -> np.ndarray:
    """Per-window add-one-smoothed unigram cross-entropy of the training split (nats/token)."""
    vocab = get_encoding("bytes").n_vocab
    counts = np.bincount(token_array("shakespeare", "bytes", "train"), minlength=vocab) + 1.0
    logp = np.log(counts / counts.sum())
    return -logp[chunks.numpy()].mean(axis=1)


def window_nll(run_dir: Path, chunks: torch.Tensor) -> np.ndarray:
    """Per-window left-to-right NLL (nats/token) of the run's final raw weights."""
    model, _, _ = load_run(run_dir, "raw")
    with torch.no_grad():
        return torch.cat([lk.l2r_nll(model, b).mean(dim=1) for b in chunks.split(32)]).double().numpy()


def ensemble_gain(grid: Grid, run_dir: Path) -> tuple[float, float]:
    """NLL(M=1) - NLL(M=max) from `jobs.evaluate` and its standard error (paired over windows)."""
    frame = evaluate(run_dir, "quick", m_max=grid.m_max, ensemble_chunks=grid.ensemble_chunks,
                     val_chunks=grid.val_chunks, weights="raw")
    rows = {int(r["m"]): r for r in frame.filter(frame["metric"] == "nll_ensemble").iter_rows(named=True)}
    one, top = rows[1], rows[max(rows)]
    # The sweep shares orders across M, so M=1 and M=max are positively correlated; the sum of
    # variances is a conservative standard error for the difference.
    return one["value"] - top["value"], math.hypot(one["se"], top["se"])


def mean_ci(diffs: np.ndarray) -> tuple[float, float, float]:
    """Mean and normal 95 % interval of paired differences."""
    half = Z95 * diffs.std(ddof=1) / math.sqrt(len(diffs))
    return float(diffs.mean()), float(diffs.mean() - half), float(diffs.mean() + half)


def speed_table(grid: Grid, rounds: int = 3, steps: int = 5) -> dict[tuple[str, str], float]:
    """Training tokens/s of every (family, size) on one thread, interleaved round-robin in one
    process so that load on a shared machine hits all of them alike."""
    torch.manual_seed(0)
    data = token_array("shakespeare", "bytes", "train")
    rng = np.random.default_rng(0)
    built = {}
    for family in grid.families:
        for size in grid.sizes:
            model = models.build_model(family, size, vocab_size=get_encoding("bytes").n_vocab,
                                       seq_len=grid.seq_len, **FAMILY_OPTIONS[family])
            built[family, size] = (model, torch.optim.AdamW(model.parameters(), lr=grid.lr))
    times: dict[tuple[str, str], list[float]] = {key: [] for key in built}
    for _ in range(rounds):
        for key, (model, opt) in built.items():
            starts = rng.integers(0, len(data) - grid.seq_len, size=(steps, grid.batch_size))
            t0 = time.perf_counter()
            for row in starts:
                batch = torch.from_numpy(np.stack([data[s:s + grid.seq_len] for s in row]).astype(np.int64))
                loss = model.loss(batch, torch.Generator().manual_seed(0))
                opt.zero_grad()
                loss.backward()
                opt.step()
            times[key].append(time.perf_counter() - t0)
    per_step = grid.batch_size * grid.seq_len * steps
    return {key: per_step / min(ts) for key, ts in times.items()}


def projected_wall_s(grid: Grid, speeds: dict[tuple[str, str], float], lanes: int = 2) -> float:
    """Wall time of the grid on `lanes` idle cores: reference throughput scaled by the timed ratios."""
    ref_family, ref_size, ref_speed = REFERENCE_TOKENS_PER_S
    scale = ref_speed / speeds[ref_family, ref_size] if (ref_family, ref_size) in speeds else 1.0
    run_s = [grid.tokens / (speeds[f, s] * scale) + START_S
             for f in grid.families for s in grid.sizes for _ in range(grid.seeds)]
    return sum(run_s) / lanes


def report(grid: Grid, root: Path, speed: bool) -> None:
    chunks = windows(grid.seq_len, grid.val_chunks)
    uni = unigram_nll(chunks)
    print(f"grid: {grid}\nunigram baseline on the {len(chunks)} windows: {uni.mean():.4f} nats/byte")
    print("| family | size | seeds | val NLL (L2R) | unigram | below unigram | train tok/s | val_loss curve |")
    print("|---|---|---|---|---|---|---|---|")
    nll: dict[tuple[str, str], np.ndarray] = {}
    for family in grid.families:
        for size in grid.sizes:
            dirs = [root / run_name(grid, family, size, s) for s in range(grid.seeds)]
            nll[family, size] = np.stack([window_nll(d, chunks) for d in dirs])  # [seeds, windows]
            curves = [curve(d) for d in dirs]
            shown = " ".join(f"{step}:{v:.2f}" for step, v in curves[0][0])
            mean = nll[family, size].mean()
            print(f"| {family} | {size} | {grid.seeds} | {mean:.4f} | {uni.mean():.4f} | {uni.mean() - mean:+.3f} "
                  f"| {statistics.median(c[1] for c in curves):,.0f} | {shown} |")
    print("\n| family | size | L2R gap to AR (nats/byte) | 95 % interval (paired over windows x seeds) |")
    print("|---|---|---|---|")
    for family in grid.families[1:]:
        for size in grid.sizes:
            mean, lo, hi = mean_ci((nll[family, size] - nll[grid.families[0], size]).ravel())
            print(f"| {family} | {size} | {mean:+.4f} | [{lo:+.4f}, {hi:+.4f}] |")
    if "aogpt" in grid.families:
        size = grid.sizes[-1]
        gains = [ensemble_gain(grid, root / run_name(grid, "aogpt", size, s)) for s in range(grid.seeds)]
        for seed, (gain, se) in enumerate(gains):
            print(f"\naogpt {size} seed {seed}: ensemble gain NLL(M=1)-NLL(M={grid.m_max}) = {gain:+.4f} "
                  f"[{gain - Z95 * se:+.4f}, {gain + Z95 * se:+.4f}]")
    if speed:
        speeds = speed_table(grid)
        print("\n| family | size | tokens/s (this machine, side by side) |\n|---|---|---|")
        for (family, size), v in speeds.items():
            print(f"| {family} | {size} | {v:,.0f} |")
        wall = projected_wall_s(grid, speeds)
        print(f"\nprojected quickstart wall time on 2 idle cores, 2 runs at a time: {wall / 60:.1f} min "
              f"({grid.tokens:,} tokens per run; reference {REFERENCE_TOKENS_PER_S})")


def parse_args(argv: list[str] | None) -> tuple[Grid, Path, bool, bool]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default="ar,aogpt,mdm", help="first one is the reference (ar)")
    p.add_argument("--sizes", default="0.1M,0.3M")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--ema", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--val-chunks", type=int, default=128)
    p.add_argument("--ensemble-chunks", type=int, default=32)
    p.add_argument("--m-max", type=int, default=4)
    p.add_argument("--out", default="studies/tune_quickstart")
    p.add_argument("--train-only", action="store_true", help="train the grid, print nothing")
    p.add_argument("--speed", action="store_true", help="also time every (family, size) side by side")
    a = p.parse_args(argv)
    grid = Grid(tuple(a.families.split(",")), tuple(a.sizes.split(",")), a.seeds, a.steps, a.lr, a.warmup,
                a.seq_len, a.batch_size, a.ema, a.eval_every, a.val_chunks, a.ensemble_chunks, a.m_max)
    return grid, Path(a.out), a.train_only, a.speed


def main(argv: list[str] | None = None) -> int:
    grid, root, train_only, speed = parse_args(argv)
    for seed in range(grid.seeds):
        for size in grid.sizes:
            for family in grid.families:
                train(grid, family, size, seed, root)
    if not train_only:
        report(grid, root, speed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
