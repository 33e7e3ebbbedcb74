"""Executor overheads, measured side by side in one run.

1. Submission time of a 100-run Slurm job array (submitted, then cancelled before it runs).
2. Per-run scheduling overhead of Slurm and Ray relative to the local executor: N copies of an
   already finished tiny run (execute_run returns "done" at once, so all time is overhead:
   scheduling, process start, imports, bookkeeping), run through each backend.

Needs the local Slurm cluster (scripts/slurm-cluster.sh start) for the Slurm figures; without
it they are skipped. Parallelism differs by design: local runs 2 at once (one per core), the
test cluster's node advertises 4 CPUs per core (8 runs at once), Ray has num_cpus=2; Ray's
figure includes starting the local Ray once.
`python bench/bench_executors.py [--runs 8] [--array 100]`
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
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from jobs.executors.local import LocalExecutor  # noqa: E402
from jobs.executors.slurm import SlurmExecutor, SlurmOptions, slurm_partitions  # noqa: E402
from jobs.pipeline import execute_run  # noqa: E402
from tests.jobs.executors.cluster_runs import make_run, tiny_spec  # noqa: E402


def finished_run(root: Path) -> Path:
    """One tiny run trained and evaluated here, to be copied into each backend's study."""
    run_dir = make_run(root / "template", tiny_spec(seed=0, steps=20))
    assert execute_run(run_dir) == "done"
    return run_dir


def copies(template: Path, study: Path, n: int) -> list[Path]:
    """n copies of the finished run in one study (a run directory's name is free)."""
    runs = [study / "runs" / f"r{i:03d}" for i in range(n)]
    for target in runs:
        shutil.copytree(template, target)
    return runs


def timed_results(executor_factory, runs: list[Path]) -> float:
    """Wall seconds to submit every run and collect every result (all must be "done")."""
    start = time.perf_counter()
    executor = executor_factory()
    handles = [executor.submit(r) for r in runs] if not hasattr(executor, "submit_all") else executor.submit_all(runs)
    states = [h.result() for h in handles]
    elapsed = time.perf_counter() - start
    assert states == ["done"] * len(runs), states
    return elapsed


def array_submission_s(root: Path, n: int) -> float:
    """Seconds for SlurmExecutor.submit_all of n runs (one array); the array is cancelled at once."""
    runs = [root / "array" / "runs" / f"r{i:03d}" for i in range(n)]
    for run in runs:
        run.mkdir(parents=True)
    start = time.perf_counter()
    handles = SlurmExecutor(root / "array", SlurmOptions(partition="debug", time_min=5)).submit_all(runs)
    elapsed = time.perf_counter() - start
    subprocess.run(["scancel", handles[0].job_id.split("_")[0]], check=True)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--array", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-executors-"))
    try:
        template = finished_run(root)
        per_run = {"local": timed_results(lambda: LocalExecutor(max_parallel=2), copies(template, root / "local", args.runs))}
        try:
            slurm_partitions()
            slurm = True
        except ValueError as error:
            print(f"slurm: skipped ({error})")
            slurm = False
        if slurm:
            print(f"slurm: submit_all of a {args.array}-run array: {array_submission_s(root, args.array):.2f} s")
            per_run["slurm"] = timed_results(lambda: SlurmExecutor(root / "slurm", SlurmOptions(partition="debug")),
                                             copies(template, root / "slurm", args.runs))
        from jobs.executors.ray_tune import RayExecutor, RayOptions

        per_run["ray"] = timed_results(lambda: RayExecutor(root / "ray", RayOptions(num_cpus=2)),
                                       copies(template, root / "ray", args.runs))
        report(per_run, args.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def report(total_s: dict[str, float], n: int) -> None:
    """Seconds per run (Ray's includes starting a local Ray once) and the ratio to local."""
    local = total_s["local"] / n
    for name, seconds in total_s.items():
        per = seconds / n
        print(f"{name:6s} {per:6.2f} s per finished run ({n} runs, {seconds:.1f} s total)  x{per / local:.1f} local")


if __name__ == "__main__":
    sys.exit(main())
