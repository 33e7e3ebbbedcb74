"""Tune the quickstart: which budget takes every family off the unigram plateau on 2 CPU cores?

Trains a grid of (family, size, seed) runs one at a time with `python -m jobs.train` (one
thread each; losses are deterministic, so machine load changes time, never results), scores every
run's left-to-right NLL on the same validation windows, and prints per family and size:

- the validation NLL against the add-one-smoothed unigram cross-entropy of the training split on
  those same windows (the plateau every family starts on),
- AR's gap to each any-order family, paired over windows and seeds (mean and 95 % interval),
- AO-GPT's ensemble gain NLL(M=1) - NLL(M=max) at the largest size (`jobs.eval.evaluate`'s estimator),
- tokens/s of every (family, size) timed side by side in one process (`--speed`), and the wall
  time of the grid projected from those ratios and a reference throughput.

    python -m reference.tune_quickstart --families ar,aogpt,mdm --sizes 0.1M,0.3M --seeds 2 \
        --steps 2000 --warmup 100 --lr 3e-3 --seq-len 32 --batch-size 32 --out studies/tune_quickstart \
        --speed-sizes 0.1M,0.3M,4/112/4,1M

Finished runs are reused (a rerun only prints), so the sweep can be grown a step at a time;
`--no-train` prints what is done without training (`--no-report --speed-sizes ...` times only).
The measurements and the choice they led
to are in docs/design-log/quickstart-tuning.md.
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
from jobs.data import unigram
from jobs.data.corpus import token_array, val_batches
from jobs.eval.evaluate import load_run
from jobs.data.tokenizers import get_encoding
from models import likelihood as lk
from models.ladder import core_params, get_shape

# Model options of each family's quickstart arm: its declared default arm (scaling.study.arms'
# DEFAULT_ARMS), EMA left to the study.
FAMILY_OPTIONS = {name: dict(cls.SPEC.default_arm) for name, cls in models.FAMILIES.items()}
# Projections use the speeds measured in this run as they are: an earlier reference of 14k tokens/s
# for AO-GPT 1M (issue 14's side run) was not reproducible and made every projection 3.5-4x short.
# On a loaded machine the measured speeds, and so the projections, are pessimistic.
START_S = 30.0  # per-run start-up + `cpu`-suite evaluation: 2/48/2 runs of ~18 s of training took ~50 s in the laptop study
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
    pos: str = "learned"  # every family's position encoding (the shared `pos` model option)

    @property
    def tokens(self) -> int:
        """Training tokens per run (equal for every family)."""
        return self.steps * self.batch_size * self.seq_len


def run_name(grid: Grid, family: str, size: str, seed: int) -> str:
    pos = "" if grid.pos == "learned" else f"-{grid.pos}"  # learned runs keep their names
    return (f"{family}-{size}-s{seed}-n{grid.steps}-lr{grid.lr:g}-w{grid.warmup}-L{grid.seq_len}"
            f"-b{grid.batch_size}-ema{grid.ema:g}{pos}")


def family_options(grid: Grid, family: str) -> dict:
    """The family's quickstart options with the grid's position encoding (learned: left at the default)."""
    return {**FAMILY_OPTIONS[family], **({} if grid.pos == "learned" else {"pos": grid.pos})}


def train(grid: Grid, family: str, size: str, seed: int, root: Path) -> Path:
    """Train one run (skipped when its status says done); returns the run directory."""
    run_dir = root / run_name(grid, family, size, seed)
    if done(run_dir):
        return run_dir
    cmd = [sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir), "--family", family,
           "--size", size, "--steps", str(grid.steps), "--lr", str(grid.lr), "--warmup-steps", str(grid.warmup),
           "--seq-len", str(grid.seq_len), "--batch-size", str(grid.batch_size), "--seed", str(seed),
           "--ema", str(grid.ema), "--eval-every", str(grid.eval_every), "--log-every", "50"]
    for key, value in family_options(grid, family).items():
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
    """The first n validation windows of Shakespeare bytes (the ones `jobs.eval.evaluate` scores)."""
    return next(val_batches(token_array("shakespeare", "bytes", "validation"), n, seq_len, n_batches=1))


def unigram_nll(chunks: torch.Tensor) -> np.ndarray:
    """Per-window `nll_unigram` (jobs.data.unigram: add-one-smoothed training-split unigram), nats/token."""
    logp = unigram.log_probs(unigram.train_counts("shakespeare", "bytes", get_encoding("bytes").n_vocab))
    return -logp[chunks.numpy()].mean(axis=1)


def window_nll(run_dir: Path, chunks: torch.Tensor) -> np.ndarray:
    """Per-window left-to-right NLL (nats/token) of the run's final raw weights."""
    model, _, _ = load_run(run_dir, "raw")
    with torch.no_grad():
        return torch.cat([lk.l2r_nll(model, b).mean(dim=1) for b in chunks.split(32)]).double().numpy()


def ensemble_gain(grid: Grid, run_dir: Path, chunks: torch.Tensor) -> np.ndarray:
    """Per-window NLL(M=1) - NLL(M=m_max) of context-order ensembling (`jobs.eval.evaluate`'s estimator:
    n_targets = the whole window, one uniform base order per target, shared across M)."""
    model, _, _ = load_run(run_dir, "raw")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        logp = torch.cat([lk.ensemble_logprobs(model, b, grid.m_max, None, g)[0]
                          for b in chunks[:grid.ensemble_chunks].split(8)])
    return (lk.ensemble_losses(logp, 1) - lk.ensemble_losses(logp, grid.m_max)).mean(dim=1).numpy()


def mean_ci(diffs: np.ndarray) -> tuple[float, float, float]:
    """Mean and normal 95 % interval of paired differences."""
    half = Z95 * diffs.std(ddof=1) / math.sqrt(len(diffs))
    return float(diffs.mean()), float(diffs.mean() - half), float(diffs.mean() + half)


def speed_table(grid: Grid, sizes: tuple[str, ...], rounds: int = 3, steps: int = 5) -> dict[tuple[str, str], float]:
    """Training tokens/s of every (family, size) on one thread, interleaved round-robin in one
    process so that load on a shared machine hits all of them alike (best round of each)."""
    torch.manual_seed(0)
    data = token_array("shakespeare", "bytes", "train")
    rng = np.random.default_rng(0)
    built = {}
    for family in grid.families:
        for size in sizes:
            model = models.build_model(family, size, vocab_size=get_encoding("bytes").n_vocab,
                                       seq_len=grid.seq_len, **family_options(grid, family))
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


def projected_wall_s(speeds: dict[tuple[str, str], float], tokens: dict[str, float], seeds: int,
                     lanes: int = 2) -> float:
    """Wall time of every family in `speeds` (tokens/s) x the sizes in `tokens` (training tokens per
    run) x seeds on `lanes` idle cores, START_S per run included."""
    run_s = [tokens[s] / v + START_S for (_, s), v in speeds.items() if s in tokens]
    return seeds * sum(run_s) / lanes


def laptop_tokens(sizes: tuple[str, ...], tokens_per_param: float) -> dict[str, float]:
    """Compute-optimal-style budgets: tokens_per_param x the core parameters of each size."""
    return {s: tokens_per_param * core_params(get_shape(s)) for s in sizes}


def done(run_dir: Path) -> bool:
    status = run_dir / "status.json"
    return status.is_file() and json.loads(status.read_text()).get("state") == "done"


def report(grid: Grid, root: Path) -> None:
    """Per family and size: validation NLL vs unigram; AR's paired gaps; AO-GPT's ensemble gain.
    Uses the seeds whose runs are done (a sweep still under way reports what it has)."""
    chunks = windows(grid.seq_len, grid.val_chunks)
    uni = unigram_nll(chunks)
    print(f"grid: {grid}\nunigram baseline on the {len(chunks)} windows: {uni.mean():.4f} nats/byte")
    print("| family | size | seeds | val NLL (L2R) | unigram | below unigram | train tok/s | val_loss curve (seed 0) |")
    print("|---|---|---|---|---|---|---|---|")
    nll: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    for family in grid.families:
        for size in grid.sizes:
            dirs = {s: root / run_name(grid, family, size, s) for s in range(grid.seeds)}
            dirs = {s: d for s, d in dirs.items() if done(d)}
            if not dirs:
                continue
            nll[family, size] = {s: window_nll(d, chunks) for s, d in dirs.items()}
            curves = [curve(d) for d in dirs.values()]
            shown = " ".join(f"{step}:{v:.2f}" for step, v in curves[0][0])
            mean = float(np.mean(list(nll[family, size].values())))
            print(f"| {family} | {size} | {len(dirs)} | {mean:.4f} | {uni.mean():.4f} | {uni.mean() - mean:+.3f} "
                  f"| {statistics.median(c[1] for c in curves):,.0f} | {shown} |")
    print("\n| family | size | L2R gap to AR (nats/byte) | 95 % interval (paired over windows x seeds) | seeds |")
    print("|---|---|---|---|---|")
    for family in grid.families[1:]:
        for size in grid.sizes:
            fam, ref = nll.get((family, size), {}), nll.get((grid.families[0], size), {})
            seeds = sorted(set(fam) & set(ref))
            if seeds:
                mean, lo, hi = mean_ci(np.concatenate([fam[s] - ref[s] for s in seeds]))
                print(f"| {family} | {size} | {mean:+.4f} | [{lo:+.4f}, {hi:+.4f}] | {len(seeds)} |")
    size = grid.sizes[-1]
    seeds = sorted(nll.get(("aogpt", size), {}))
    if seeds:
        gains = np.concatenate([ensemble_gain(grid, root / run_name(grid, "aogpt", size, s), chunks) for s in seeds])
        mean, lo, hi = mean_ci(gains)
        print(f"\naogpt {size}: ensemble gain NLL(M=1) - NLL(M={grid.m_max}) = {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] "
              f"(paired over {grid.ensemble_chunks} windows x {len(seeds)} seed(s), every slot a target)")


def print_speeds(grid: Grid, sizes: tuple[str, ...], laptop: tuple[float, int], cache: Path, reuse: bool) -> None:
    """Side-by-side tokens/s, the grid's projected wall time and the laptop preset's."""
    if reuse and cache.is_file():
        speeds = {tuple(k.split("|")): v for k, v in json.loads(cache.read_text()).items()}
    else:
        speeds = speed_table(grid, sizes)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"|".join(k): v for k, v in speeds.items()}, indent=1))
    print("\n| family | size | tokens/s (this machine, side by side) |")
    print("|---|---|---|")
    for key, v in speeds.items():
        print(f"| {key[0]} | {key[1]} | {v:,.0f} |")
    wall = projected_wall_s(speeds, {s: grid.tokens for s in grid.sizes}, grid.seeds)
    print(f"\nprojected wall time of this grid on 2 idle cores, 2 runs at a time: {wall / 60:.1f} min "
          f"({grid.tokens:,} tokens per run, {START_S:g} s start-up + evaluation per run)")
    per_param, seeds = laptop
    tokens = laptop_tokens(sizes, per_param)
    wall = projected_wall_s(speeds, tokens, seeds)
    print(f"projected laptop preset ({per_param:g} tokens/param, {seeds} seeds, sizes {', '.join(sizes)}): "
          f"{wall / 3600:.2f} h; tokens per run " + ", ".join(f"{s} {t / 1e6:.2f}M" for s, t in tokens.items()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default="ar,aogpt,mdm", help="first one is the reference (ar)")
    p.add_argument("--sizes", default="0.1M,0.3M")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup-steps", "--warmup", dest="warmup", type=int, default=50)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--ema", type=float, default=0.0)
    p.add_argument("--pos", default="learned", help="position encoding of every family: learned or rope")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--val-chunks", type=int, default=1024)
    p.add_argument("--ensemble-chunks", type=int, default=32)
    p.add_argument("--m-max", type=int, default=4)
    p.add_argument("--out", default="studies/tune_quickstart")
    p.add_argument("--no-report", action="store_true", help="train the grid, print no table")
    p.add_argument("--speed-sizes", default="", help="time these sizes side by side and "
                   "project the grid's and the laptop preset's wall time")
    p.add_argument("--laptop", default="20,3", help="tokens per parameter, seeds of the projected laptop preset")
    p.add_argument("--no-train", action="store_true", help="train nothing; tables of the runs already done")
    p.add_argument("--reuse-speeds", action="store_true", help="reprint the speeds saved in OUT/speeds.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    grid = Grid(tuple(a.families.split(",")), tuple(a.sizes.split(",")), a.seeds, a.steps, a.lr, a.warmup,
                a.seq_len, a.batch_size, a.ema, a.eval_every, a.val_chunks, a.ensemble_chunks, a.m_max, a.pos)
    root = Path(a.out)
    for seed in range(0 if a.no_train else grid.seeds):
        for size in grid.sizes:
            for family in grid.families:
                train(grid, family, size, seed, root)
    if not a.no_report:
        report(grid, root)
    if a.speed_sizes:
        per_param, seeds = a.laptop.split(",")
        print_speeds(grid, tuple(a.speed_sizes.split(",")), (float(per_param), int(seeds)), root / "speeds.json",
                     a.reuse_speeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
