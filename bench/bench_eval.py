"""Evaluation cost per run of the quickstart's families and sizes, settings timed side by side.

Trains each quickstart run of seed 0 for a few steps (evaluation cost does not depend on how long a
run trained), then times `jobs.eval.evaluate.evaluate` on it under each setting, interleaved so that
load changes hit every setting alike. One thread, as the quickstart's runs use. Prints seconds per
(family, size, setting) and the evaluation time the quickstart would spend (x seeds, / parallel runs).

    python bench/bench_eval.py                                  # the cpu suite as it is
    python bench/bench_eval.py --setting val_chunks=1024,ensemble_chunks=32 --setting k_mc=2
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.data.suites import EvalSuite  # noqa: E402  (after the path insert)
from jobs.eval.evaluate import evaluate  # noqa: E402
from jobs.train.loop import train  # noqa: E402
from scaling.study.study_spec import build_study  # noqa: E402


def parse_setting(text: str) -> dict[str, int]:
    """`key=value,key=value` as evaluate() overrides (integers)."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    return {key.strip(): int(value) for key, value in pairs}


def quickstart_runs(root: Path, steps: int, sizes: list[str]) -> list[tuple[str, str, Path]]:
    """(family, size, run dir) of the quickstart's seed-0 runs at `sizes`, trained for `steps` steps."""
    out = []
    for cell in build_study({"preset": "quickstart"}).cells:
        spec = cell.spec
        if spec.seed != 0 or spec.size not in sizes:
            continue
        spec = spec.replace(steps=steps, warmup_steps=1, eval_every=0, checkpoint_every=0)
        run_dir = root / spec.run_id
        train(run_dir, spec)
        out.append((spec.family, spec.size, run_dir))
    return out


def suite_arg(text: str) -> EvalSuite:
    """argparse type: the suite, parsed once (its one-line refusal as argparse's error)."""
    try:
        return EvalSuite.parse(text, "--eval-suite")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints a table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--setting", action="append", default=[], help="evaluate() overrides, key=value,...")
    p.add_argument("--eval-suite", "--suite", dest="eval_suite", type=suite_arg, default=EvalSuite("cpu"))
    p.add_argument("--steps", type=int, default=10, help="training steps per run (cost is independent)")
    p.add_argument("--rounds", type=int, default=1, help="timings per (run, setting); the minimum is kept")
    p.add_argument("--seeds", type=int, default=2, help="quickstart seeds (for the projected total)")
    p.add_argument("--parallel", type=int, default=2, help="runs evaluated at a time (for the total)")
    p.add_argument("--sizes", default="0.1M,0.3M", help="quickstart sizes to time")
    args = p.parse_args(argv)
    settings = [parse_setting(s) for s in args.setting] or [{}]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("AOSCALE_CACHE", str(Path(tmp) / "cache"))
        runs = quickstart_runs(Path(tmp) / "runs", args.steps, args.sizes.split(","))
        evaluate(runs[0][2], args.eval_suite, **settings[0])  # token cache, unigram counts, allocator warm-up
        seconds = {}
        for _ in range(args.rounds):
            for family, size, run_dir in runs:
                for i, setting in enumerate(settings):
                    wall, cpu = time.perf_counter(), time.process_time()
                    evaluate(run_dir, args.eval_suite, **setting)
                    took = (time.perf_counter() - wall, time.process_time() - cpu)
                    key = (family, size, i)
                    seconds[key] = min(seconds.get(key, took), took)
    print("seconds per run, wall / cpu (cpu: this process's CPU time, less sensitive to a busy machine)")
    print(f"{'family':8} {'size':6} " + " ".join(f"{'setting ' + str(i):>16}" for i in range(len(settings))))
    for family, size, _ in runs:
        print(f"{family:8} {size:6} " + " ".join("{:>7.1f} / {:>6.1f}".format(*seconds[(family, size, i)])
                                                 for i in range(len(settings))))
    for i, setting in enumerate(settings):
        wall, cpu = (sum(seconds[(f, s, i)][j] for f, s, _ in runs) * args.seeds / args.parallel for j in (0, 1))
        print(f"setting {i} ({args.eval_suite} {setting or 'as is'}): quickstart evaluation ~{wall:.0f} s wall, "
              f"~{cpu:.0f} s of CPU per core ({args.seeds} seeds, {args.parallel} at a time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
