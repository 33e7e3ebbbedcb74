"""The orchestrator's own cost at 100 / 1,000 / 10,000 runs, on synthetic studies in aoscale's formats.

A template study of one run (AR 0.1M, 2 steps, the quick suite) is trained for real; each synthetic
study of N runs is then the same flags with `--seeds N`: its ledger is written by
`scaling.run.study_ledger.prepare` (timed: "ledger"), and every run folder gets the template's files
(status, metrics, numerics, manifest, records rewritten to its run id and seed; the checkpoint
hard-linked). Then, each in a fresh interpreter: `scaling.status` ("status"), the same launch again
with nothing to do ("relaunch") and `analysis.fit_curves` ("report", 100 resamples). Prints each
command's seconds and its ratio to the 100-run time. Run it alone and give the load average.

    python bench/bench_orchestrator.py [--sizes 100,1000,10000] [--report-max N] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FLAGS = ["--families", "ar", "--sizes", "0.1M", "--max-steps", "2", "--eval-suite", "quick", "--max-runs", "100000"]
TARGETS_S = {"status": 5.0, "ledger": 20.0, "relaunch": 10.0, "report": 90.0}  # issue 48, at 10,000 runs
COPIED = ("status.json", "metrics.ndjson", "numerics.json", "manifest.json")


def _run(env: dict, *args: str) -> float:
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.perf_counter() - began


def template(env: dict, root: Path) -> Path:
    """One real run: trained, evaluated, with every file a run folder holds."""
    study = root / "template"
    _run(env, "-m", "scaling.launch", *FLAGS, "--seeds", "1", "--no-report", "--no-progress", "--study-dir", str(study))
    return next((study / "runs").iterdir())


def build(n: int, root: Path, source: Path) -> tuple[Path, float]:
    """A study of `n` runs in aoscale's formats; the seconds its ledger write took."""
    import polars as pl

    from scaling import launch
    from scaling.run import study_ledger

    study_dir = root / f"study-{n}"
    args = launch.parser().parse_args([*FLAGS, "--seeds", str(n), "--study-dir", str(study_dir)])
    study = launch.study_from_args(args)
    began = time.perf_counter()
    study_ledger.prepare(study_dir, study)
    ledger_s = time.perf_counter() - began
    records = pl.read_parquet(source / "eval.parquet")
    windows = source / "eval_windows.parquet"
    for cell in study.cells:
        folder = study_ledger.run_dir(study_dir, cell.run_id)
        for name in COPIED:
            shutil.copy(source / name, folder / name)
        records.with_columns(pl.lit(cell.run_id).alias("run_id"), pl.lit(cell.spec.seed).alias("seed")).write_parquet(
            folder / "eval.parquet")
        if windows.exists():
            os.link(windows, folder / windows.name)
        for file in (source / "ckpt").rglob("*"):
            target = folder / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if file.is_file():
                os.link(file, target)
    return study_dir, ledger_s


def measure(env: dict, n: int, study_dir: Path, ledger_s: float, report_max: int) -> dict[str, float]:
    out = {"ledger": ledger_s, "report": float("nan")}
    out["status"] = _run(env, "-m", "scaling.status", str(study_dir))
    out["relaunch"] = _run(env, "-m", "scaling.launch", *FLAGS, "--seeds", str(n), "--no-report", "--no-progress",
                           "--study-dir", str(study_dir))
    if n <= report_max:
        out["report"] = _run(env, "-m", "analysis.fit_curves", str(study_dir), "--bootstrap", "100")
    return out


def _verdict(name: str, took_s: float, target_s: float) -> str:
    if took_s != took_s:  # NaN: not timed at this size (--report-max)
        return f"{name} not timed / {target_s:.0f} s"
    return f"{name} {took_s:.1f} s / {target_s:.0f} s ({'met' if took_s <= target_s else 'missed'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="runs per synthetic study, comma-separated")
    parser.add_argument("--report-max", type=int, default=10_000, help="time the report only up to this many runs")
    parser.add_argument("--keep", default="", help="build the studies in this folder and keep them")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(args.keep or tempfile.mkdtemp(prefix="aos-orch-"))
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AOSCALE_CACHE": str(root / "cache"), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    os.environ.update(AOSCALE_CACHE=env["AOSCALE_CACHE"])
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    source = template(env, root)
    rows = {}
    for n in sizes:
        study_dir, ledger_s = build(n, root, source)
        rows[n] = measure(env, n, study_dir, ledger_s, args.report_max)
        print(f"{n:>6} runs: " + "  ".join(f"{k} {v:7.2f} s" for k, v in rows[n].items()), flush=True)
    base = rows[sizes[0]]
    print(f"\nratio to the {sizes[0]}-run time, and the target at 10,000 runs")
    for n in sizes:
        print(f"{n:>6} runs: " + "  ".join(f"{k} x{rows[n][k] / base[k]:6.1f}" for k in TARGETS_S))
    if 10000 in rows:
        print("at 10,000: " + "  ".join(_verdict(k, rows[10000][k], t) for k, t in TARGETS_S.items()))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
