"""Synthetic records with planted power laws and seed noise, and study directories holding them.

Reused by the analysis tests and bench/bench_fit_curves.py.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl

SIZES = {"0.1M": 1e5, "0.3M": 3e5, "1M": 1e6, "3M": 3e6, "10M": 1e7, "30M": 3e7}
TRUTH = {  # (E, A, alpha) of nll = E + A n^-alpha; any-order families sit above AR
    "ar": (1.8, 400.0, 0.34),
    "aogpt": (1.9, 520.0, 0.34),
    "sigma_gpt": (2.0, 600.0, 0.33),
    "mdm": (1.95, 560.0, 0.33),
}
ENSEMBLE_GAIN = (0.08, 0.7)  # nll_ensemble(M) = nll_anyorder - g (1 - M^-gamma), g at the smallest size


def run_id(*parts: object) -> str:
    """A stable 12-hex run id."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def _row(base: dict, metric: str, value: float, m: int | None = None, unit: str = "nats/token") -> dict:
    return {**base, "metric": metric, "value": float(value), "se": 0.001, "n_samples": 1000, "m": m, "unit": unit}


def records(families=("ar", "aogpt"), sizes=None, seeds=(0, 1, 2), datasets=("wikitext2",), ms=(1, 2, 4, 8),
            noise: float = 0.005, rng_seed: int = 0, variant: str = "default", study: str = "synth",
            steps=(100,)) -> pl.DataFrame:
    """Records for every family x size x seed: nll_l2r, nll_anyorder (non-AR), nll_ensemble per M."""
    rng = np.random.default_rng(rng_seed)
    sizes = sizes or SIZES
    rows = []
    for fam in families:
        e, a, alpha = TRUTH[fam]
        for size, n in sizes.items():
            for seed in seeds:
                for step in steps:
                    base = {"study": study, "run_id": run_id(fam, variant, size, seed), "family": fam,
                            "variant": variant, "size": size, "n_params": int(n), "n_params_family": int(n * 1.1),
                            "tokens": int(20 * n), "flops": 6.0 * n * 20 * n, "seed": seed, "step": step,
                            "split": "test"}
                    for ds in datasets:
                        rows += _run_rows({**base, "dataset": ds}, fam, e + a * n ** -alpha, n, ms, noise, rng)
    return pl.DataFrame(rows, schema_overrides={"m": pl.Int64, "se": pl.Float64})


def _run_rows(base: dict, fam: str, truth: float, n: float, ms, noise: float, rng) -> list[dict]:
    l2r = truth * (1 + noise * rng.standard_normal())
    if fam == "ar":
        return [_row(base, "nll_l2r", l2r)]
    anyorder = truth * (1 + noise * rng.standard_normal())
    g = ENSEMBLE_GAIN[0] * (min(SIZES.values()) / n) ** 0.1
    out = [_row(base, "nll_l2r", l2r * 1.05), _row(base, "nll_anyorder", anyorder)]
    out += [_row(base, "nll_ensemble", anyorder - g * (1 - m ** -ENSEMBLE_GAIN[1]) + 1e-3 * rng.standard_normal(), m)
            for m in ms]
    return out


def write_study(root: Path, frame: pl.DataFrame, options: dict[str, dict] | None = None,
                curves: bool = True, study_json: dict | None = None) -> Path:
    """A study directory: runs/<run_id>/{eval.parquet, spec.json, status.json, metrics.ndjson}, study.json."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "study.json").write_text(json.dumps(study_json or {"name": "synth"}))
    for (rid,), part in frame.group_by(["run_id"], maintain_order=True):
        run = root / "runs" / rid
        run.mkdir(parents=True, exist_ok=True)
        part.write_parquet(run / "eval.parquet")
        first = part.row(0, named=True)
        spec = {"family": first["family"], "size": first["size"], "seed": first["seed"], "ema": 0.0,
                "model_options": (options or {}).get(rid, {})}
        (run / "spec.json").write_text(json.dumps(spec))
        (run / "status.json").write_text(json.dumps({"state": "done"}))
        if curves:
            lines = [json.dumps({"kind": "train", "step": s, "tokens": s * 1000, "loss": 5.0 / (1 + s) ** 0.3})
                     for s in range(0, 100, 10)]
            (run / "metrics.ndjson").write_text("\n".join(lines) + "\n")
    return root
