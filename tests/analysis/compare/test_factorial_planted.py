"""The 2x2x2 factorial (analysis.compare.ablations.factorial_table) on planted records: the factorial-cpu
preset's factor levels, known main effects and interactions, exact without noise and with 95 %
intervals that cover the planted values at their nominal rate (fixed seeds)."""
from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from analysis.compare import ablations

LEVELS = {"factor_pe": ("adaln", "input"), "factor_ema": (0.0, 0.9999), "factor_l2r_mix": (0.0, 0.1)}
# planted effects (mean at the second level - mean at the first, in nats), every subset of factors
# (interactions are named in the table's order: factors sorted by name)
PLANTED = {"pe": 0.30, "ema": -0.05, "l2r_mix": 0.08, "ema:pe": 0.02, "l2r_mix:pe": -0.04, "ema:l2r_mix": 0.0,
           "ema:l2r_mix:pe": 0.01}
NAMES = ("pe", "ema", "l2r_mix")  # the order of LEVELS (cell codes)


def _cell_mean(codes: tuple[int, ...]) -> float:
    """3.0 + 1/2 sum_S effect_S prod_{j in S} x_j (x = -1 / +1): then effect_S = mean(+) - mean(-)."""
    total = 3.0
    for effect, size in PLANTED.items():
        subset = [NAMES.index(f) for f in effect.split(":")]
        total += 0.5 * size * np.prod([codes[j] for j in subset])
    return total


def _records(seeds: int, noise_sd: float, rng: np.random.Generator) -> pl.DataFrame:
    rows = []
    for codes in itertools.product((-1, 1), repeat=3):
        levels = {f: LEVELS[f][(c + 1) // 2] for f, c in zip(LEVELS, codes)}
        for seed in range(seeds):
            rows.append({"family": "aogpt", "size": "0.1M", "dataset": "shakespeare", "split": "validation",
                         "metric": "nll_anyorder", "m": None, "seed": seed, "run_id": f"{codes}{seed}",
                         "value": _cell_mean(codes) + noise_sd * rng.standard_normal(), **levels})
    return pl.DataFrame(rows)


def _effects(frame: pl.DataFrame) -> dict[str, dict]:
    return {r["effect"]: r for r in ablations.factorial_table(frame).iter_rows(named=True)}


def test_noise_free_records_give_the_planted_effects_exactly():
    effects = _effects(_records(3, 0.0, np.random.default_rng(0)))
    assert set(effects) == set(PLANTED)
    for name, size in PLANTED.items():
        assert effects[name]["estimate"] == pytest.approx(size, abs=1e-12)
        assert effects[name]["se"] == pytest.approx(0.0, abs=1e-12)
        assert (effects[name]["n"], effects[name]["dof"]) == (24, 16)
    assert effects["pe"]["contrast"] == "pe=input vs adaln"
    assert effects["ema:l2r_mix"]["contrast"] == "ema=0.9999 vs 0.0, l2r_mix=0.1 vs 0.0"


def test_intervals_cover_the_planted_effects_at_95_percent():
    rng, sd, reps = np.random.default_rng(20261201), 0.05, 400
    hits = {name: 0 for name in PLANTED}
    se_ratio = []
    for _ in range(reps):
        effects = _effects(_records(3, sd, rng))
        for name, size in PLANTED.items():
            hits[name] += effects[name]["lo"] <= size <= effects[name]["hi"]
        se_ratio.append(effects["pe"]["se"] / (sd * np.sqrt(4 / 24)))  # se of a 2^3 effect: 2 sd / sqrt(N)
    for name in PLANTED:  # binomial(400, 0.95): sd 0.011; 3.5 sd either side
        assert 0.91 <= hits[name] / reps <= 0.99, (name, hits[name])
    assert 0.935 <= sum(hits.values()) / (reps * len(PLANTED)) <= 0.965
    assert np.mean(se_ratio) == pytest.approx(1.0, abs=0.03)  # the pooled se estimates the true one


def test_an_unbalanced_or_incomplete_design_gives_no_table():
    frame = _records(3, 0.05, np.random.default_rng(1))
    missing = frame.filter(~((pl.col("factor_pe") == "input") & (pl.col("factor_ema") == 0.9999)
                             & (pl.col("factor_l2r_mix") == 0.1)))
    assert ablations.factorial_table(missing) is None
