"""Planted (N, D) laws for the frontier tests: records of an isoFLOP study with an lr sweep."""
from __future__ import annotations

import math

import numpy as np
import polars as pl

LAW = {"E": 1.0, "A": 40.0, "alpha": 0.4, "B": 300.0, "beta": 0.35}
BUDGETS = (1e12, 3e12, 1e13, 3e13, 1e14)
LRS = (1e-3, 3e-3, 1e-2)
BEST_LR = 3e-3
LR_PENALTY = 0.05  # nats per (decade of lr away from the best)^2
MULTIPLIER = 2.0  # aogpt needs this many times AR's data (and so compute) for AR's loss
TRUE_EXPONENT = LAW["beta"] / (LAW["alpha"] + LAW["beta"])


def loss(n, d, data_factor=1.0):
    """The planted law; `data_factor` m makes a family see D/m effective tokens."""
    return LAW["E"] + LAW["A"] * n ** -LAW["alpha"] + LAW["B"] * (d / data_factor) ** -LAW["beta"]


def n_opt(c, data_factor=1.0):
    """True compute-optimal N at C = 6 N D, by a fine grid."""
    grid = np.exp(np.linspace(math.log(1e2), math.log(1e9), 200001))
    return float(grid[np.argmin(loss(grid, c / (6 * grid), data_factor))])


def records(noise=0.003, seeds=2, split_noise=None, seed=0, lrs=LRS) -> pl.DataFrame:
    """Records on validation and test of every (family, budget, size, lr, seed)."""
    rng = np.random.default_rng(seed)
    rows = []
    for family, m in (("ar", 1.0), ("aogpt", MULTIPLIER)):
        for c in BUDGETS:
            centre = n_opt(c, m) * 1.15
            for i in range(-2, 3):
                n = int(centre * 2.0 ** i)
                d = int(c / (6 * n))
                for lr in lrs:
                    for s in range(seeds):
                        base = loss(n, d, m) + LR_PENALTY * math.log10(lr / BEST_LR) ** 2
                        run = f"{family}-{c:g}-{n}-{lr:g}-{s}"
                        for split in ("validation", "test"):
                            shift = (split_noise or {}).get((split, lr), 0.0)
                            rows.append({"study": "s", "run_id": run, "family": family, "variant": "v",
                                         "size": f"n{n}", "n_params": n, "n_params_family": n, "tokens": d,
                                         "flops": 6.0 * n * d, "seed": s, "step": 1, "dataset": "shakespeare",
                                         "split": split, "metric": "nll_l2r", "m": None, "unit": "nats/token",
                                         "value": base + shift + rng.normal(0, noise), "se": None,
                                         "n_samples": 1, "budget_flops": c, "plan_tokens": d, "sweep_lr": lr})
    return pl.DataFrame(rows, infer_schema_length=None)
