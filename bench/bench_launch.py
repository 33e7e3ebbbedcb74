"""Launcher benchmarks, measured side by side in one run; prints ratios to the targets.

1. Dry-run of a 1,000-run study (factorial preset x 5 CPU rungs x 25 seeds): the whole CLI in a
   fresh interpreter, and the planning alone in-process (target <= 2 s).
2. Per-run overhead of the local executor: submit -> the trainer's first step (its `start`
   event), as a fraction of a 30 s run, beside the same start measured in-process.
3. `--quickstart`: wall time of the full quickstart on this machine (minutes; off by default).

    python bench/bench_launch.py [--quickstart]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DRY_RUN_TARGET_S = 2.0  # issue 6
REFERENCE_RUN_S = 30.0  # issue 6: overhead as a fraction of a 30 s run
QUICKSTART_TARGET_S = 300.0  # issue 6: target 5 min (at most 10) on 2 cores
THOUSAND = ["--preset", "factorial", "--sizes", "0.1M,0.3M,1M,3M,10M", "--seeds", "25"]  # 8 x 5 x 25


def bench_dry_run() -> None:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "scaling.launch", "--dry-run", *THOUSAND], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    cli_s = time.perf_counter() - start
    assert "total: 1000 runs" in out, out[-500:]
    from scaling.launch import main  # imports (torch via models) paid here, outside the timing

    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        start = time.perf_counter()
        main(["--dry-run", *THOUSAND])
        inproc_s = time.perf_counter() - start
        sys.stdout = stdout
    print(f"dry-run 1000 runs: CLI {cli_s:.2f} s ({cli_s / DRY_RUN_TARGET_S:.2f} of the 2 s target), "
          f"planning in-process {inproc_s:.3f} s")


def _start_time(run_dir: Path) -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.ndjson").read_text().splitlines()]
    return next(row["time"] for row in rows if row.get("kind") == "start")


def _one_run_study(root: Path, seed: int):
    from scaling.run import study_ledger
    from scaling.study.study_spec import build_study

    study = build_study({"sizes": "0.1M", "families": "ar", "seeds": seed + 1, "max_steps": 2, "seq_len": 32})
    study_ledger.prepare(root, study)
    return study_ledger.run_dir(root, study.run_ids[seed]), study.cells[seed].spec


def bench_overhead() -> None:
    from jobs.executors.local import LocalExecutor
    from jobs.train.loop import train

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("AOSCALE_CACHE", str(Path(tmp) / "cache"))
        run_dir, spec = _one_run_study(Path(tmp) / "a", 0)
        train(run_dir, spec)  # warm the token cache so both measurements start alike
        run_dir, spec = _one_run_study(Path(tmp) / "b", 1)
        submitted = time.time()
        LocalExecutor(max_parallel=1).submit(run_dir).result()
        sub_s = _start_time(run_dir) - submitted
        run_dir, spec = _one_run_study(Path(tmp) / "c", 1)
        called = time.time()
        train(run_dir, spec)
        inproc_s = _start_time(run_dir) - called
    print(f"launch -> first step: subprocess {sub_s:.2f} s = {sub_s / REFERENCE_RUN_S:.1%} of a 30 s run; "
          f"in-process (imports warm) {inproc_s:.2f} s; ratio {sub_s / max(inproc_s, 1e-9):.1f}x")


def bench_quickstart() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "scaling.launch", "--study-dir", f"{tmp}/qs",
                               "--max-parallel", "2", "--no-progress"], cwd=REPO, capture_output=True, text=True)
        wall_s = time.perf_counter() - start
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:])
    print(f"quickstart: {wall_s:.0f} s on {os.cpu_count()} cores ({wall_s / QUICKSTART_TARGET_S:.2f} of the "
          f"5 min target), exit {proc.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quickstart", action="store_true", help="also time the full quickstart")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    bench_dry_run()
    bench_overhead()
    if args.quickstart:
        bench_quickstart()


if __name__ == "__main__":
    main()
