"""Evaluation noise in paired gaps (analysis.fit.evalnoise) on planted per-window files."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from analysis.fit import evalnoise
from analysis.fit_curves import analyse
from analysis.records.read import load
from analysis.fit.stats import summarise
from tests.analysis import synth

W = 300  # windows every run scores


def _planted(rng, n_seeds: int, n_windows: int, sd_seed: float, sd_window: float, sd_e: float) -> np.ndarray:
    """d_sw = a_s + b_w + e_sw around a true gap of 0."""
    return (sd_seed * rng.standard_normal((n_seeds, 1)) + sd_window * rng.standard_normal((1, n_windows))
            + sd_e * rng.standard_normal((n_seeds, n_windows)))


def test_the_window_term_is_unbiased_and_the_widened_interval_covers():
    rng = np.random.default_rng(22)
    sd_seed, sd_window, sd_e, replicas = 0.002, 0.3, 0.05, 400
    estimates, covered_seed, covered_both = [], 0, 0
    for _ in range(replicas):
        d = _planted(rng, 3, W, sd_seed, sd_window, sd_e)
        noise = evalnoise.window_noise(d)
        seed_only = summarise(d.mean(axis=1))
        widened = evalnoise.with_window_noise(seed_only, noise)
        estimates.append(noise.var)
        covered_seed += seed_only.lo <= 0 <= seed_only.hi
        covered_both += widened.lo <= 0 <= widened.hi
    truth = sd_window ** 2 / W
    assert np.mean(estimates) == pytest.approx(truth, rel=0.1)  # sd of the mean of 400 estimates: ~4 %
    assert covered_seed / replicas < 0.5  # the seed interval alone misses the common windows' noise
    assert 0.92 <= covered_both / replicas <= 0.98  # binomial 95 % band for n = 400 around 0.95


def test_no_window_effect_adds_about_nothing():
    d = _planted(np.random.default_rng(3), 3, W, 0.01, 0.0, 0.05)
    noise = evalnoise.window_noise(d)
    assert noise.var < 0.05 ** 2 / (3 * W)  # the interaction is already in the seed spread
    assert evalnoise.window_noise(d[:1]) is None and evalnoise.window_noise(d[:, :1]) is None


def _window_files(study, frame: pl.DataFrame, rng) -> dict[str, np.ndarray]:
    """eval_windows.parquet for every run: values averaging exactly to each record's value, with a
    window effect per family (shared by its seeds) and noise per run."""
    effect = {fam: 0.6 * rng.standard_normal(W) for fam in frame["family"].unique().to_list()}
    planted = {}
    for row in frame.iter_rows(named=True):
        v = effect[row["family"]] + 0.05 * rng.standard_normal(W)
        v = row["value"] + v - v.mean()
        planted[(row["run_id"], row["metric"], row["m"])] = v
    for (rid,), part in frame.group_by(["run_id"]):
        rows = [pl.DataFrame({"study": r["study"], "run_id": rid, "family": r["family"], "variant": r["variant"],
                              "size": r["size"], "seed": r["seed"], "weights": "raw", "dataset": r["dataset"],
                              "split": r["split"], "metric": r["metric"], "estimator": "exact", "m": r["m"],
                              "window": np.arange(W), "start": np.arange(W) * 32,
                              "value": planted[(rid, r["metric"], r["m"])]},
                             schema_overrides={"m": pl.Int64, "seed": pl.Int64})
                for r in part.iter_rows(named=True)]
        pl.concat(rows).write_parquet(study / "runs" / rid / evalnoise.WINDOWS_FILE)
    return planted


def test_paired_gaps_carry_the_evaluation_noise_of_planted_window_files(tmp_path):
    sizes = {k: synth.SIZES[k] for k in ("0.1M", "0.3M", "1M")}
    frame = synth.records(sizes=sizes, ms=(1,)).filter(pl.col("metric") != "nll_ensemble")
    plain = analyse(load([synth.write_study(tmp_path / "plain", frame)]), bootstrap=20)
    study = synth.write_study(tmp_path / "windows", frame)
    planted = _window_files(study, frame, np.random.default_rng(5))
    noisy = analyse(load([study]), bootstrap=20)
    checked = widened = 0
    for before, after in zip(plain.gaps, noisy.gaps):
        assert (before.family, before.metric) == (after.family, after.metric)
        for p, q in zip(before.points, after.points):
            assert math.isnan(p.eval_se) and q.n_windows == W and q.delta.mean == p.delta.mean
            d = np.array([planted[(synth.run_id(after.family, "default", q.size, s), after.metric, None)]
                          - planted[(synth.run_id("ar", "default", q.size, s), "nll_l2r", None)] for s in (0, 1, 2)])
            assert q.eval_se == pytest.approx(evalnoise.window_noise(d).se, rel=1e-12) and q.eval_se > 0.02
            assert q.delta.se ** 2 == pytest.approx(p.delta.se ** 2 + q.eval_se ** 2, rel=1e-12)
            assert q.delta.lo <= p.delta.lo and q.delta.hi >= p.delta.hi
            checked += 1
            widened += q.delta.hi - q.delta.lo > p.delta.hi - p.delta.lo
    assert checked == 6 and widened >= 1  # aogpt nll_anyorder and nll_l2r at 3 sizes
