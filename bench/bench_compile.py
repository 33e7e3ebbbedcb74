"""Does `torch.compile` pay on the CPU? End to end, compile time included, per rung and family.

Each cell trains one quickstart-style run (the quickstart's network, batch, sequence length, lr;
seed 0) for `--steps` steps in a fresh `python -m jobs.train` process with one thread, three
times: compile off, compile on with an empty inductor cache (`cold`: a study's first run of a
family and size) and compile on again with that cache (`warm`: its other seeds). From each
process it takes the wall time and the steady step time (the trainer's logged throughput, the
first `--skip` steps left out), so that

    wall(S steps) = fixed_s + S * step_s

where fixed_s holds start-up, compilation (first forward and backward, and the validation pass)
and the end-of-run validation. It prints fixed_s and step_s per setting, the break-even number
of steps (compile's extra fixed time over its per-step saving) and the projected end-to-end
wall time at `--budget` steps. `jobs/cpu_compile.py` holds the measured table and the rule that
`compile = auto` applies on the CPU.

    python bench/bench_compile.py                                   # 0.1M, 0.3M, 1M, 3M; ar, aogpt, mdm
    python bench/bench_compile.py --sizes 0.1M --families aogpt --steps 60
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.run.files import read_metrics  # noqa: E402
from scaling.study.presets import QUICKSTART_STEPS  # noqa: E402
from scaling.study.study_spec import build_study  # noqa: E402

SETTINGS = ("off", "cold", "warm")


def quickstart_spec(family: str, size: str, steps: int):
    """The quickstart's seed-0 run of `family` at `size`, cut to `steps` steps, logging every step."""
    study = build_study({"preset": "quickstart", "sizes": [size]})
    spec = next(c.spec for c in study.cells if c.spec.family == family and c.spec.seed == 0)
    return spec.replace(steps=steps, warmup_steps=min(spec.warmup_steps, steps // 2), log_every=1,
                        checkpoint_every=0, eval_every=0)


def train_once(spec, compile_setting: str, inductor_dir: Path, skip: int) -> tuple[float, float]:
    """(process wall s, steady step s) of one run in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, run_dir = Path(tmp) / "spec.json", Path(tmp) / "run"
        spec_path.write_text(spec.replace(compile=compile_setting).to_json())
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
               "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir)}
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir), "--spec", str(spec_path)],
                       env=env, cwd=REPO, check=True, capture_output=True)
        wall_s = time.perf_counter() - start
        rows = read_metrics(run_dir, "train")[skip:]
        step_s = spec.batch_size * spec.seq_len / statistics.median(r["tokens_per_s"] for r in rows)
    return wall_s, step_s


def measure(family: str, size: str, args) -> dict:
    """fixed_s and step_s for each of off / cold / warm."""
    spec = quickstart_spec(family, size, args.steps)
    out = {"family": family, "size": size, "steps": args.steps, "batch_tokens": spec.batch_size * spec.seq_len}
    with tempfile.TemporaryDirectory() as inductor:
        for setting in SETTINGS:
            wall_s, step_s = train_once(spec, "off" if setting == "off" else "on", Path(inductor), args.skip)
            out[f"{setting}_fixed_s"], out[f"{setting}_step_s"] = wall_s - args.steps * step_s, step_s
    return out


def summarise(row: dict, budget: int) -> str:
    saving_s = row["off_step_s"] - row["warm_step_s"]
    parts = [f"{row['size']:>5} {row['family']:6}"]
    for setting in SETTINGS:
        parts.append(f"{row[f'{setting}_fixed_s']:7.1f} {1e3 * row[f'{setting}_step_s']:7.1f}")
    for setting in ("cold", "warm"):
        extra_s = row[f"{setting}_fixed_s"] - row["off_fixed_s"]
        parts.append(f"{extra_s / saving_s:9.0f}" if saving_s > 0 else f"{'never':>9}")
    walls = [row[f"{s}_fixed_s"] + budget * row[f"{s}_step_s"] for s in SETTINGS]
    parts.append(" ".join(f"{w:7.1f}" for w in walls))
    return " ".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="0.1M,0.3M,1M,3M")
    p.add_argument("--families", default="ar,aogpt,mdm")
    p.add_argument("--steps", type=int, default=120, help="steps per measured run")
    p.add_argument("--skip", type=int, default=5, help="first logged steps left out of the steady step time")
    p.add_argument("--budget", type=int, default=QUICKSTART_STEPS, help="steps to project the end-to-end wall at")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    if args.steps <= args.skip + 2:
        p.error(f"--steps: must exceed --skip + 2 ({args.skip + 2}), got {args.steps}")
    print(f"# one thread per run; quickstart spec (seed 0) cut to {args.steps} steps; fixed_s = wall - steps x step_s;"
          f" break-even: steps after which compile's extra fixed time is paid back; wall at {args.budget} steps")
    print(f"{'size':>5} {'family':6} {'off fixed_s step_ms':>15} {'cold fixed_s step_ms':>15} "
          f"{'warm fixed_s step_ms':>15} {'even_cold':>9} {'even_warm':>9} {'wall off cold warm':>23}")
    rows = []
    for size in args.sizes.split(","):
        for family in args.families.split(","):
            rows.append(measure(family, size, args))
            print(summarise(rows[-1], args.budget), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
