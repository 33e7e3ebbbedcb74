"""The status rules every fit shares (analysis.fit.fitstatus): resamples at a bound and lack of fit."""
from __future__ import annotations

import numpy as np
import statsmodels.api as sm

from analysis.fit import fitstatus, scalefit
from analysis.compare import frontier
from tests.analysis import frontier_synth as fs
from tests.analysis.fit.test_calibration import X4, _planted


def test_more_than_5_percent_of_resamples_at_a_bound_is_unstable_never_ok():
    # AO-GPT's Approach 3 on main: 48 of 200 at a bound, called ok
    status, notes = fitstatus.judge("ok", resamples=200, at_bound=48)
    assert status == fitstatus.UNSTABLE and "48 of 200 resamples end at a bound" in notes[0]
    assert fitstatus.judge("ok", resamples=200, at_bound=10) == ("ok", [])  # 5 % exactly: kept
    assert fitstatus.judge("reduced", resamples=100, at_bound=6)[0] == fitstatus.UNSTABLE
    assert fitstatus.judge("at_bound", resamples=100, at_bound=50)[0] == "at_bound"  # the solver's own status wins


def test_a_lack_of_fit_is_a_named_warning_on_every_status():
    # the laptop's AR fit on main: lack-of-fit p = 0.037, 165 of 1,000 resamples at a bound
    status, notes = fitstatus.judge("ok", resamples=1000, at_bound=165, lof_p=0.037)
    assert status == fitstatus.UNSTABLE and len(notes) == 2 and notes[1].startswith(fitstatus.LACK_OF_FIT_NOTE)
    status, notes = fitstatus.judge("ok", lof_p=0.037)
    assert status == "ok" and notes and "p = 0.037" in notes[0]
    assert fitstatus.judge("ok", lof_p=0.2) == ("ok", []) and fitstatus.judge("ok", lof_p=None) == ("ok", [])


def test_the_lack_of_fit_p_is_statsmodels_f_test_of_the_line_against_one_mean_per_size():
    rng = np.random.default_rng(0)
    x = np.repeat(np.arange(5.0), 3)
    y = 0.3 * x + 0.05 * x ** 2 + rng.normal(0, 0.05, x.size)
    line = sm.OLS(y, sm.add_constant(x)).fit()
    means = sm.OLS(y, (x[:, None] == np.unique(x)[None, :]).astype(float)).fit()
    _, p_sm, _ = means.compare_f_test(line)
    ss_pure, df_pure = float(means.ssr), int(means.df_resid)
    assert np.isclose(fitstatus.lack_of_fit_p(float(line.ssr), int(line.df_resid), ss_pure, df_pure), p_sm)
    assert fitstatus.lack_of_fit_p(1.0, 3, 0.0, 0) is None  # no seeds: no test


def test_a_size_fit_with_many_resamples_at_a_bound_is_unstable_and_says_so():
    fit = scalefit.fit_power_law(X4, _planted(np.random.default_rng(2), X4, sigma=0.005, tau=0.005),
                                 resamples=100, seed=0, key="k")
    assert fit.status == fitstatus.UNSTABLE and fit.at_bound > 5 and "resamples end at a bound" in fit.reason


def test_approach_3_with_many_resamples_at_a_bound_is_unstable():
    rng = np.random.default_rng(1)
    n, d = np.repeat([1e4, 3e4, 1e5, 3e5], 2), np.tile([3e6, 1e7, 3e7, 1e8], 2)
    a3 = frontier.fit_nd(n, d, fs.loss(n, d) * np.exp(rng.normal(0, 0.03, n.size)), 40, rng, n_budgets=4)
    assert a3["status"] == fitstatus.UNSTABLE and a3["resamples_at_bound"] > 2, a3


def test_approach_3_and_parabolas_that_miss_their_seed_means_warn_of_lack_of_fit():
    rng = np.random.default_rng(3)
    n, d = np.tile(np.repeat([1e4, 3e4, 1e5, 3e5], 4), 2), np.tile(np.tile([3e6, 1e7, 3e7, 1e8], 4), 2)
    bump = 0.05 * np.sin(3 * np.log(n) + np.log(d))  # no (N, D) law has this
    a3 = frontier.fit_nd(n, d, (fs.loss(n, d) + bump) * np.exp(rng.normal(0, 1e-4, n.size)), 5, rng, n_budgets=4)
    assert any(w.startswith(fitstatus.LACK_OF_FIT_NOTE) for w in a3["notes"]), a3
    sizes = np.repeat(np.geomspace(1e4, 1e6, 6), 2)
    wiggly = 2.0 + 0.05 * np.log(sizes / 1e5) ** 2 + 0.02 * np.sin(4 * np.log(sizes)) + rng.normal(0, 1e-4, sizes.size)
    prof = frontier.fit_profile(1e13, sizes, wiggly, rng)
    assert prof.status == "ok" and prof.notes and prof.notes[0].startswith(fitstatus.LACK_OF_FIT_NOTE)
    entry = frontier.Entry(("ar", "v", "d", "test", "nll_l2r"), [prof], {}, a3, None)
    warnings = frontier._rule_warnings(entry.key, entry)
    assert any("isoFLOP parabola" in w for w in warnings) and any("Approach 3" in w for w in warnings)
