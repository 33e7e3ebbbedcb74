"""Selection on validation and the frontier fits on planted (N, D) laws (analysis.selection/frontier)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analysis import frontier, selection
from tests.analysis import frontier_synth as fs


@pytest.fixture(scope="module")
def planted():
    """Seed 2 of the planted study, selected and fitted once for the tests below."""
    sel = selection.select(fs.records(seed=2))
    return sel, frontier.analyse(sel.reported, resamples=25, seed=0)


def _inside(value, ci):
    return ci[0] is not None and ci[0] <= value <= ci[1]


def test_selection_picks_the_best_lr_everywhere_and_reports_test(planted):
    sel, _ = planted
    assert sel.chosen["sweep_lr"].unique().to_list() == [fs.BEST_LR]
    assert sel.chosen["n_candidates"].unique().to_list() == [len(fs.LRS)]
    assert sel.warnings == () and set(sel.reported["split"].unique()) == {"test"}
    assert sel.reported["sweep_lr"].unique().to_list() == [fs.BEST_LR]


def test_selection_uses_only_validation_when_the_splits_disagree():
    # validation favours lr 1e-3, test favours 1e-2: selection must follow validation alone
    shifts = {("validation", 1e-3): -0.05, ("test", 1e-2): -0.08}
    recs = fs.records(seed=1, split_noise=shifts)
    sel = selection.select(recs)
    assert sel.chosen["sweep_lr"].unique().to_list() == [1e-3]
    assert sel.reported["sweep_lr"].unique().to_list() == [1e-3]
    best_test = recs.filter(split="test", sweep_lr=1e-2)["value"].mean()
    assert sel.reported["value"].mean() > best_test  # test numbers were not allowed to choose
    assert len(sel.warnings) == sel.chosen.height and all("widen the sweep" in w and "lowest" in w
                                                          for w in sel.warnings)


def test_approach_2_recovers_the_n_opt_exponent(planted):
    _, front = planted
    assert len(front.entries) == 2
    for entry in front.entries:
        assert entry.exponent["n_budgets"] == len(fs.BUDGETS)
        assert _inside(fs.TRUE_EXPONENT, entry.exponent["ci95"]), entry.exponent
        assert all(p.status == "ok" and p.df == 10 - 3 for p in entry.profiles)


def test_approach_3_recovers_the_law(planted):
    _, front = planted
    truth = {"ar": fs.LAW, "aogpt": {**fs.LAW, "B": fs.LAW["B"] * fs.MULTIPLIER ** fs.LAW["beta"]}}
    for entry in front.entries:
        a3 = entry.approach3
        assert a3["status"] == "ok" and a3["df"] == 50 - 5 and a3["resamples"] == 25
        for name, value in truth[entry.key[0]].items():
            assert _inside(value, a3["params"][name]["ci95"]), (entry.key[0], name, a3["params"][name])


def test_the_compute_multiplier_is_recovered_inside_the_measured_range(planted):
    _, front = planted
    (other,) = [e for e in front.entries if e.key[0] == "aogpt"]
    ks = other.multipliers
    assert len(ks) == frontier.N_LOSS_LEVELS and not any(k["extrapolated"] for k in ks)
    assert all(_inside(fs.MULTIPLIER, k["ci95"]) for k in ks), ks


def test_frontiers_that_do_not_overlap_give_an_extrapolated_k():
    recs = fs.records(seed=0, seeds=1)
    far = recs.filter(~((recs["family"] == "aogpt") & (recs["budget_flops"] < 3e13)))
    far = far.filter(~((far["family"] == "ar") & (far["budget_flops"] > 3e12)))
    front = frontier.analyse(selection.select(far).reported, resamples=0)
    (other,) = [e for e in front.entries if e.key[0] == "aogpt"]
    assert [k["extrapolated"] for k in other.multipliers] == [True]


def test_a_property_of_the_data_is_not_selected_on_and_follows_the_l2r_choice():
    recs = fs.records(seed=2)
    unigram = recs.with_columns(metric=pl.lit("nll_unigram"), value=pl.lit(3.3) + pl.col("sweep_lr"))  # lowest at the edge
    sel = selection.select(pl.concat([recs, unigram]))
    assert set(sel.chosen["metric"]) == {"nll_l2r"} and sel.warnings == ()
    chosen_runs = set(sel.reported.filter(metric="nll_l2r")["run_id"])
    assert set(sel.reported.filter(metric="nll_unigram")["run_id"]) == chosen_runs


def test_approach_3_on_one_budget_is_not_identifiable_and_an_e_at_zero_is_at_its_bound():
    """On one isoFLOP line N and D move together, so the law's two terms cannot be told apart,
    however many sizes and seeds; and a law with no irreducible loss sits on E's bound E -> 0."""
    one = selection.select(fs.records(seed=3).filter(pl.col("budget_flops") == fs.BUDGETS[2])).reported
    for entry in frontier.analyse(one, resamples=5, seed=0).entries:
        assert entry.approach3["status"] == "not_identifiable" and entry.approach3["df"] == 10 - 5
        assert "params" not in entry.approach3
    rng = np.random.default_rng(0)
    n = np.repeat([1e4, 3e4, 1e5, 3e5], 4)
    d = np.tile([1e6, 3e6, 1e7, 3e7], 4)
    no_floor = fs.LAW["A"] * n ** -fs.LAW["alpha"] + fs.LAW["B"] * d ** -fs.LAW["beta"]
    a3 = frontier.fit_nd(n, d, no_floor * np.exp(rng.normal(0, 1e-4, n.size)), 5, rng, n_budgets=4)
    assert a3["status"] == "at_bound" and a3["params"]["E"]["value"] < 1e-3 * no_floor.min(), a3["params"]["E"]
    with_floor = no_floor + fs.LAW["E"]
    a3 = frontier.fit_nd(n, d, with_floor * np.exp(rng.normal(0, 1e-4, n.size)), 5, rng, n_budgets=4)
    assert a3["status"] == "ok" and abs(a3["params"]["E"]["value"] - fs.LAW["E"]) < 0.05, a3["params"]["E"]
