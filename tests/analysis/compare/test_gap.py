"""analysis.compare.gap on hand-built cells: the paired and Welch intervals equal scipy's, sizes
only one side trained are left out, the trend is OLS over the gap means, and the reference is the
AR variant with most runs."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as sps

from analysis.compare.gap import compute_gaps
from analysis.records.cells import Cell, CellKey, Point

SIZES = (("0.1M", 1e5), ("0.3M", 3e5), ("1M", 1e6))


def cell(family: str, variant: str, metric: str, values: dict[str, dict[int, float]]) -> Cell:
    points = tuple(Point(label, x, tuple(sorted(values[label])), tuple(values[label][s] for s in sorted(values[label])),
                         f"{family}/{variant}/{label}") for label, x in SIZES if label in values)
    return Cell(CellKey(family, variant, metric, "shakespeare", "validation"), points)


AR = {"0.1M": {0: 2.9, 1: 3.0, 2: 3.15}, "0.3M": {0: 2.5, 1: 2.6, 2: 2.62}, "1M": {0: 2.2, 1: 2.21, 2: 2.3}}
AO = {"0.1M": {0: 3.1, 1: 3.25, 2: 3.3}, "0.3M": {0: 2.7, 1: 2.75, 2: 2.9}, "1M": {0: 2.3, 1: 2.35, 2: 2.36},
      "10M": {0: 1.9}}


def gaps_of(cells):
    gaps, notes = compute_gaps(cells, {}, resamples=200, seed=0)
    return {(g.family, g.metric): g for g in gaps}, notes


def test_a_paired_gap_is_scipys_paired_t_interval_per_size():
    gaps, notes = gaps_of([cell("ar", "", "nll_l2r", AR), cell("aogpt", "", "nll_anyorder", AO)])
    assert notes == []
    gap = gaps["aogpt", "nll_anyorder"]
    assert [p.size for p in gap.points] == ["0.1M", "0.3M", "1M"]  # 10M: AR never trained it
    for point in gap.points:
        fam, ref = [AO[point.size][s] for s in range(3)], [AR[point.size][s] for s in range(3)]
        want = sps.ttest_rel(fam, ref).confidence_interval(0.95)
        assert point.paired and point.n_family == point.n_reference == 3
        assert point.delta.mean == pytest.approx(np.mean(np.subtract(fam, ref)), abs=1e-12)
        assert (point.delta.lo, point.delta.hi) == pytest.approx((want.low, want.high), abs=1e-12)
    means = [p.delta.mean for p in gap.points]
    assert gap.trend.slope == pytest.approx(np.polyfit(np.log10([x for _, x in SIZES]), means, 1)[0], abs=1e-12)
    assert gap.trend.n_points == 3 and gap.multipliers == ()  # no fits given: no k


def test_disjoint_seeds_give_welchs_interval():
    shifted = {size: {s + 10: v for s, v in by_seed.items()} for size, by_seed in AO.items()}
    gaps, _ = gaps_of([cell("ar", "", "nll_l2r", AR), cell("mdm", "mdlm", "nll_l2r", shifted)])
    for point in gaps["mdm", "nll_l2r"].points:
        fam, ref = list(AO[point.size].values()), list(AR[point.size].values())
        want = sps.ttest_ind(fam, ref, equal_var=False).confidence_interval(0.95)
        assert not point.paired
        assert (point.delta.lo, point.delta.hi) == pytest.approx((want.low, want.high), abs=1e-9)


def test_the_reference_is_the_ar_variant_with_most_runs_and_ar_is_never_compared_with_itself():
    few = {"0.1M": {0: 9.0, 1: 9.0}}
    cells = [cell("ar", "few", "nll_l2r", few), cell("ar", "", "nll_l2r", AR), cell("aogpt", "", "nll_l2r", AO),
             cell("aogpt", "", "nll_ensemble", AO)]  # not a compared metric
    gaps, _ = gaps_of(cells)
    assert set(gaps) == {("aogpt", "nll_l2r")}
    gap = gaps["aogpt", "nll_l2r"]
    assert gap.reference_key == ("ar", "") and gap.reference == "ar/ nll_l2r"
    assert gap.points[0].delta.mean == pytest.approx(np.mean([0.2, 0.25, 0.15]), abs=1e-12)


def test_without_ar_there_is_no_gap_and_a_note_says_why():
    gaps, notes = gaps_of([cell("aogpt", "", "nll_anyorder", AO)])
    assert gaps == {} and notes == ["no gap: no 'ar' runs with metric 'nll_l2r'"]


def test_one_seed_a_side_gives_a_mean_and_no_interval():
    one = {size: {0: by_seed[0]} for size, by_seed in AO.items()}
    gaps, _ = gaps_of([cell("ar", "", "nll_l2r", {s: {0: v[0]} for s, v in AR.items()}),
                       cell("aogpt", "", "nll_anyorder", one)])
    point = gaps["aogpt", "nll_anyorder"].points[0]
    assert point.delta.mean == pytest.approx(AO["0.1M"][0] - AR["0.1M"][0], abs=1e-12)
    assert math.isnan(point.delta.lo) and math.isnan(point.delta.hi) and point.delta.n == 1
    assert gaps["aogpt", "nll_anyorder"].trend.n_points == 0  # sizes under MIN_SEEDS enter no trend
