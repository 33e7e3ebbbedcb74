"""Selection on validation and the frontier fits on planted (N, D) laws (analysis.records.selection,
analysis.compare.frontier)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from analysis.records import selection
from analysis.compare import frontier
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
    assert len(ks) == frontier.N_LOSS_LEVELS * len(frontier.FLOP_COUNTS) and not any(k["extrapolated"] for k in ks)
    assert all(_inside(fs.MULTIPLIER, k["ci95"]) for k in ks), ks


def test_frontiers_that_do_not_overlap_give_an_extrapolated_k():
    recs = fs.records(seed=0, seeds=1)
    far = recs.filter(~((recs["family"] == "aogpt") & (recs["budget_flops"] < 3e13)))
    far = far.filter(~((far["family"] == "ar") & (far["budget_flops"] > 3e12)))
    front = frontier.analyse(selection.select(far).reported, resamples=0)
    (other,) = [e for e in front.entries if e.key[0] == "aogpt"]
    assert [k["extrapolated"] for k in other.multipliers] == [True] * len(frontier.FLOP_COUNTS)


def test_where_no_k_interpolates_a_bound_is_read_off_measured_points_only(planted):
    """Planted aogpt shifted up by `shift` nats: its frontier lies above AR's. The bound is the largest
    C_f / C_AR whose AR best point lies below the whole interval of the family's L_opt at C_f."""
    _, overlapping = planted
    (other,) = [e for e in overlapping.entries if e.key[0] == "aogpt"]
    assert other.k_bound is None  # k interpolates: no bound is given
    recs = fs.records(seed=3, seeds=1)
    for shift, want in ((1.0, 1e14 / 1e12), (0.05, None)):
        moved = recs.with_columns(pl.when(pl.col("family") == "aogpt").then(pl.col("value") + shift)
                                  .otherwise(pl.col("value")).alias("value"))
        front = frontier.analyse(selection.select(moved).reported, resamples=0)
        (ar,) = [e for e in front.entries if e.key[0] == "ar"]
        (other,) = [e for e in front.entries if e.key[0] == "aogpt"]
        b = other.k_bound
        if any(not k["extrapolated"] for k in other.multipliers):
            assert b is None  # a k interpolates: no bound is given
        if want is not None:
            assert b["k_above"] == pytest.approx(want) and b["budget_flops"] == 1e14
            assert b["reference_budget_flops"] == 1e12 and b["loss"] < b["l_opt"]["ci95"][0]
            best_ar = ar.points.filter(pl.col("budget_flops") == 1e12)["value"].min()
            assert b["loss"] == pytest.approx(best_ar)  # one seed: AR's best point at its lowest budget
            p = next(q for q in other.profiles if q.budget_flops == 1e14)
            assert 1.0 < b["k_above_core"] and b["k_above_core"] == pytest.approx(
                p.core_flops / (6 * ar.points.filter(pl.col("budget_flops") == 1e12).sort("value")
                                .select(pl.col("n_params") * pl.col("tokens")).item(0, 0)))


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


def test_a_data_property_has_no_frontier_and_a_frontier_that_does_not_fall_has_no_k():
    """nll_unigram is the same at every size and budget (no frontier); a family whose L_opt does
    not fall with C has no loss to match AR's at: no k, and fits.json stays valid JSON."""
    import json
    recs = fs.records(seed=4, seeds=1)
    flat = recs.filter(family="aogpt").with_columns(value=pl.lit(3.0) + 0.01 * (pl.col("n_params").log() - 9) ** 2)
    unigram = recs.with_columns(metric=pl.lit("nll_unigram"), value=pl.lit(3.33))
    front = frontier.analyse(selection.select(pl.concat([recs.filter(family="ar"), flat, unigram])).reported,
                             resamples=0)
    assert {e.key[4] for e in front.entries} == {"nll_l2r"}
    (other,) = [e for e in front.entries if e.key[0] == "aogpt"]
    assert other.multipliers == []
    json.dumps([e.to_json() for e in front.entries], allow_nan=False)


def test_the_size_axis_reads_one_budget_of_an_isoflop_study():
    """One size at several budgets is several token counts: the size-axis sections read the
    budget with the most records (ties: the middle one), with a note; one budget is untouched."""
    recs = selection.select(fs.records(seed=5, seeds=1)).reported
    sized, notes = selection.one_budget(recs)
    assert sized["budget_flops"].unique().to_list() == [fs.BUDGETS[2]]
    assert len(notes) == 1 and "C=1e+13" in notes[0] and "frontier section reads every budget" in notes[0]
    heavy = pl.concat([recs, recs.filter(pl.col("budget_flops") == fs.BUDGETS[0]).with_columns(seed=pl.lit(7, dtype=pl.Int64))])
    assert selection.one_budget(heavy)[0]["budget_flops"].unique().to_list() == [fs.BUDGETS[0]]
    single = recs.filter(pl.col("budget_flops") == fs.BUDGETS[1])
    assert selection.one_budget(single) == (single, [])


def test_a_power_law_over_one_isoflop_budgets_flops_is_not_identifiable():
    """Training FLOPs of one budget's sizes agree to rounding: no curve along that axis."""
    from analysis.records.cells import Point
    from analysis.fit.fits import MIN_SPAN_DECADES, POWER_NAMES, fit_points
    xs = (9.999999e12, 1.0e13, 1.0000001e13, 1.0000002e13)
    points = tuple(Point(f"s{i}", x, (0, 1), (0.8 + 0.01 * i, 0.81 + 0.01 * i), f"s{i}") for i, x in enumerate(xs))
    fit = fit_points(points, labels={}, x="flops", form="power", names=POWER_NAMES, resamples=10, seed=0)
    assert fit.status == "not_identifiable" and f"need >= {MIN_SPAN_DECADES}" in fit.reason


def test_an_any_order_frontier_is_matched_against_ars_exact_likelihood():
    """AO-GPT's any-order bound has no AR counterpart of its own name: its k is read against AR's
    nll_l2r, as the per-size gaps are, and recovers the planted multiplier."""
    recs = fs.records(seed=2)
    anyorder = recs.with_columns(metric=pl.when(pl.col("family") == "aogpt").then(pl.lit("nll_anyorder"))
                                 .otherwise(pl.col("metric")))
    front = frontier.analyse(selection.select(anyorder).reported, resamples=0)
    (other,) = [e for e in front.entries if e.key[0] == "aogpt"]
    assert other.key[4] == "nll_anyorder" and len(other.multipliers) == frontier.N_LOSS_LEVELS * len(frontier.FLOP_COUNTS)
    assert all(k["reference_metric"] == "nll_l2r" and _inside(fs.MULTIPLIER, k["ci95"]) for k in other.multipliers)


def test_an_entry_key_is_read_by_name_and_stays_the_plain_tuple():
    entry = frontier.Entry(("mdm", "v", "owt", "test", "nll_elbo"), [], {}, {}, pl.DataFrame())
    assert isinstance(entry.key, frontier.EntryKey) and frontier.EntryKey._fields == frontier.ENTRY
    assert (entry.key.family, entry.key.data, entry.key.metric) == ("mdm", ("owt", "test"), "nll_elbo")
    assert entry.key == ("mdm", "v", "owt", "test", "nll_elbo") and hash(entry.key) == hash(tuple(entry.key))
