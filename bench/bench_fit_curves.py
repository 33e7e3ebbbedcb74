"""Benchmark: fit_curves on ~10,000 synthetic records with 1,000 bootstrap resamples.

Target (issue 5): the whole report in <= 10 s on 2 cores. Prints the fit part alone (loading +
all fits, gaps, ensemble and ablation tables), the figures, the writing, and the total, plus the
per-fit cost of the batched bootstrap against per-resample L-BFGS-B measured side by side.

    python bench/bench_fit_curves.py [--bootstrap 1000] [--records 10000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from analysis import fit_curves  # noqa: E402
from analysis.fit import powerlaw  # noqa: E402
from analysis.records.read import load  # noqa: E402
from tests.analysis import synth  # noqa: E402

FAMILIES = ("ar", "aogpt", "sigma_gpt", "mdm")
DATASETS = ("wikitext2", "ptb")
SOLVER_SAMPLE = 50  # L-BFGS-B calls timed for the per-resample comparison


def build_study(root: Path, n_records: int) -> int:
    """4 families x 6 sizes x 3 seeds x 2 datasets, evaluated at enough steps to reach n_records."""
    per_step = synth.records(families=FAMILIES, datasets=DATASETS).height
    steps = tuple(range(100, 100 * (max(1, round(n_records / per_step)) + 1), 100))
    frame = synth.records(families=FAMILIES, datasets=DATASETS, steps=steps)
    synth.write_study(root, frame)
    return frame.height


def time_solvers(resamples: int) -> tuple[float, float]:
    """CPU seconds for one fit's resamples: the batched grid + polish vs one scipy least_squares
    call per resample (a sample of SOLVER_SAMPLE, scaled)."""
    from scipy.optimize import least_squares
    rng = np.random.default_rng(0)
    x = np.array(list(synth.SIZES.values()))
    lx = np.log(x / np.exp(np.log(x).mean()))
    w = np.full(x.size, 3.0)
    y = np.log(1.8 + 400 * x ** -0.34) + 0.003 * rng.standard_normal((resamples, x.size))
    t0 = time.process_time()
    theta, _ = powerlaw.solve(lx, y, w)
    t1 = time.process_time()
    lo, hi = powerlaw._bounds()
    for row, start in zip(y[:SOLVER_SAMPLE], theta[:SOLVER_SAMPLE]):
        least_squares(lambda t: np.sqrt(w) * (np.logaddexp(t[0], t[1] - t[2] * lx) - row),
                      np.clip(start, lo + 1e-9, hi - 1e-9), bounds=(lo, hi))
    return t1 - t0, (time.process_time() - t1) * resamples / SOLVER_SAMPLE


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study"
        n = build_study(study, args.records)
        t0, c0 = time.perf_counter(), time.process_time()
        analysis = fit_curves.analyse(load([study]), bootstrap=args.bootstrap)
        t1, c1 = time.perf_counter(), time.process_time()
        figs = fit_curves.make_figures(analysis)
        t2, c2 = time.perf_counter(), time.process_time()
        fit_curves.run([study], Path(tmp) / "report", bootstrap=args.bootstrap)
        t3, c3 = time.perf_counter(), time.process_time()
    n_fits = len(analysis.fit.fits) + sum(len(s.fits) for s in analysis.ensembles)
    print(f"records={n} fits={n_fits} bootstrap={args.bootstrap} cores={os.cpu_count()}")
    print(f"load average {os.getloadavg()[0]:.1f}: wall times inflate when other jobs share the cores")
    print(f"fit part (load + all fits/gaps/tables): wall {t1 - t0:.2f} s, cpu {c1 - c0:.2f} s")
    print(f"figures ({len(figs)} PNG):                  wall {t2 - t1:.2f} s, cpu {c2 - c1:.2f} s")
    print(f"full run() incl. figures and writes:    wall {t3 - t2:.2f} s, cpu {c3 - c2:.2f} s  (target <= 10 s)")
    batched, per_call = time_solvers(args.bootstrap)
    print(f"one fit's resamples (cpu): batched grid + polish {batched * 1e3:.0f} ms vs per-resample scipy least_squares "
          f"{per_call * 1e3:.0f} ms  (ratio {per_call / batched:.1f}x)")


if __name__ == "__main__":
    main()
