"""analysis.compare.multiplier: the implied family x inverts the power law exactly, an unreachable loss
is inf, and the headline k is the largest in-range one on its axis."""
from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.compare.multiplier import Multiplier, axis_multipliers, headline, implied_x, inside
from analysis.fit.powerlaw import predict

REF = np.array([1.0, 10.0, 0.5])  # L = 1 + 10 x^-0.5
FAM = np.array([1.0, 20.0, 0.5])  # twice AR's A: k = (20 / 10)^(1 / 0.5) = 4 at every x


@pytest.mark.parametrize("x", [100.0, 1e4, 1e6])
def test_the_implied_x_of_a_doubled_amplitude_is_four_times_ars(x):
    target = predict(REF, x)
    assert implied_x(FAM, target)[0] / x == pytest.approx(4.0, rel=1e-12)
    assert predict(FAM, implied_x(FAM, target))[0] == pytest.approx(target[0], rel=1e-12)


def test_a_loss_at_or_below_the_familys_floor_is_never_reached():
    rows = np.array([FAM, [2.0, 20.0, 0.5]])
    assert implied_x(rows, np.array([2.0, 2.0])).tolist() == [400.0, math.inf]  # (20 / 1)^2
    assert implied_x(FAM, np.array([0.5]))[0] == math.inf


def test_inside_the_measured_range_allows_round_off_only():
    xs = (10.0, 100.0)
    assert inside(10.0 * (1 - 1e-12), xs) and inside(100.0, xs)
    assert not inside(9.99, xs) and not inside(101.0, xs) and not inside(math.inf, xs)


def test_the_headline_is_the_largest_finite_in_range_k_on_its_axis():
    mults = (Multiplier(10, 2.0, 1.5, 2.5, 0.0), Multiplier(100, 3.0, 2.0, 4.0, 0.0),
             Multiplier(1000, 5.0, 4.0, 6.0, 0.0, extrapolated=True),
             Multiplier(1e4, 9.0, 8.0, 10.0, 0.0, axis="flops"), Multiplier(500, math.inf, 1.0, math.inf, 0.6))
    assert headline(mults, "n_params") == mults[1] and headline(mults, "flops") == mults[3]
    assert headline(mults, "family_params") is None
    assert mults[4].to_json() == {"axis": "n_params", "x": 500, "k": None, "ci95": [1.0, None], "unreached": 0.6,
                                  "x_family": None, "extrapolated": False}


def test_no_multiplier_without_both_fits():
    assert axis_multipliers(None, None, "n_params") == ((), "needs both power-law fits usable (status ok or reduced)")
