"""Seed summaries, paired bootstrap draws, factorial effects."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from analysis.compare import ablations
from analysis.fit.stats import bootstrap_means, draw_indices, ols_slopes, summarise


def test_summary_matches_scipy_t_interval():
    v = np.array([3.0, 3.2, 3.1, 2.9])
    s = summarise(v)
    lo, hi = sps.t.interval(0.95, 3, loc=v.mean(), scale=sps.sem(v))
    assert (s.n, s.mean) == (4, pytest.approx(3.05))
    assert (s.lo, s.hi) == (pytest.approx(lo), pytest.approx(hi))
    assert np.isnan(summarise(np.array([1.0])).lo)


def test_draws_are_keyed_by_label_so_cells_pair_by_seed():
    a = draw_indices("1M", 3, 100, seed=7)
    np.testing.assert_array_equal(a, draw_indices("1M", 3, 100, seed=7))
    assert not np.array_equal(a, draw_indices("3M", 3, 100, seed=7))
    means = bootstrap_means([("1M", np.array([1.0, 2.0, 3.0]))], 100, seed=7)
    np.testing.assert_allclose(means[:, 0], (a + 1).mean(1))


def test_ols_slopes_exact():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert ols_slopes(x, np.array([[1.0, 3.0, 5.0, 7.0]]))[0] == pytest.approx(2.0)


def test_factorial_effects_recover_planted_main_effects_and_interaction():
    rows = []
    for a in (False, True):
        for b in (False, True):
            for seed, noise in enumerate((-0.01, 0.0, 0.01)):
                value = 3.0 - 0.2 * a + 0.1 * b + 0.05 * (a and b) + noise
                rows.append({"family": "aogpt", "size": "1M", "dataset": "d", "split": "test", "metric": "nll_anyorder",
                             "m": None, "seed": seed, "value": value, "factor_adaln": a, "factor_ema": b})
    table = ablations.factorial_table(pl.DataFrame(rows))
    effects = {r["effect"]: r for r in table.iter_rows(named=True)}
    # coded +-1 effects: mean(+) - mean(-)
    assert effects["adaln"]["estimate"] == pytest.approx(-0.2 + 0.025)
    assert effects["ema"]["estimate"] == pytest.approx(0.1 + 0.025)
    assert effects["adaln:ema"]["estimate"] == pytest.approx(0.025)
    assert effects["adaln"]["lo"] < effects["adaln"]["estimate"] < effects["adaln"]["hi"]
    assert effects["adaln"]["dof"] == 8


def test_a_trend_reports_its_change_over_the_measured_span_as_the_report_quotes_it():
    from analysis.fit.stats import ols_trend

    t = ols_trend(np.array([1e4, 3e4, 1e5]), np.array([0.50, 0.62, 0.70]))
    span = t.to_dict()["change_over_span"]
    assert span["value"] == t.slope * t.span_decades and span["ci95"] == [t.lo * t.span_decades, t.hi * t.span_decades]
    assert t.span_decades == 1.0 and t.df == 1 and span["ci95"][0] < span["value"] < span["ci95"][1]
    from analysis.fit.stats import Trend

    assert Trend(math.nan, math.nan, math.nan, 2, "not_identifiable").over_span() == {"value": None, "ci95": [None, None]}
