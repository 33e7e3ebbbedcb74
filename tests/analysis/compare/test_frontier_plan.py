"""The frontier's round planner (analysis.compare.frontier_plan) on planted records: each criterion unmet
in turn plans what fixes it, and a study that meets every criterion plans nothing."""
from __future__ import annotations

import math

import numpy as np
import polars as pl

from analysis.compare import frontier_plan as fp
from tests.analysis import frontier_synth as fs

BUDGETS = (1e12, 3e12, 1e13, 3e13, 1e14)
LRS = (1e-3, 3e-3, 1e-2)
RATIO = 1.6


def planted(families=(("ar", 1.0), ("aogpt", fs.MULTIPLIER)), budgets=BUDGETS, offsets=range(-3, 4), lrs=LRS,
            seeds=2, best_lr=fs.BEST_LR, centre_shift=1.0) -> pl.DataFrame:
    """Validation nll_l2r of every (family, budget, shape, lr, seed) on the planted law, no noise:
    shapes RATIO apart about each budget's true N_opt (times `centre_shift`)."""
    rows = []
    for family, m in families:
        for c in budgets:
            centre = fs.n_opt(c, m) * centre_shift
            for k in offsets:
                n = centre * RATIO ** k
                for lr in lrs:
                    base = fs.loss(n, c / (6 * n), m) + fs.LR_PENALTY * math.log10(lr / best_lr) ** 2
                    rows += [{"family": family, "variant": "v", "budget_flops": c, "n_params": n, "seed": s,
                              "lr": lr, "value": base} for s in range(seeds)]
    return pl.DataFrame(rows)


def _of(plan, criterion):
    return [r for r in plan.runs if r.criterion == criterion]


def test_a_study_meeting_every_criterion_plans_nothing():
    plan = fp.plan_round(planted())
    assert plan.done and plan.runs == () and plan.cost_flops == 0
    assert plan.checks and all(c.met for c in plan.checks), [c for c in plan.checks if not c.met]


def test_an_edge_minimum_gets_shapes_beyond_the_edge():
    """AR's grid at 1e13 placed so its smallest shape is the lowest point: shapes below it."""
    points = planted(families=(("ar", 1.0),), budgets=(1e13,), offsets=range(1, 6), seeds=1)
    plan = fp.plan_round(points)
    added = _of(plan, "bracketed")
    smallest = points["n_params"].min()
    assert len(added) == fp.SIDE_SHAPES and all(r.n_params < smallest for r in added)
    assert np.allclose(sorted(r.n_params for r in added), sorted(smallest / RATIO ** k for k in (1, 2)))
    assert not any(c.met for c in plan.checks if c.criterion == "bracketed")
    assert not _of(plan, "seeds")  # seeds wait for the bracket


def test_non_overlapping_frontiers_get_ar_budgets_downward():
    """An any-order family 30x worse than AR: AR's budgets extend below its smallest."""
    points = planted(families=(("ar", 1.0), ("aogpt", 30.0)), budgets=BUDGETS[2:])
    plan = fp.plan_round(points)
    assert not next(c for c in plan.checks if c.criterion == "overlapping").met
    ar_new = sorted(c for f, _, c in plan.new_budgets if f == "ar")
    assert ar_new and all(c < min(BUDGETS[2:]) for c in ar_new)
    ar_runs = [r for r in plan.runs if r.family == "ar" and r.criterion == "budgets"]
    assert {r.budget_flops for r in ar_runs} == set(ar_new)
    assert len({r.n_params for r in ar_runs if r.budget_flops == ar_new[0]}) == fp.GRID_POINTS


def test_an_edge_lr_widens_the_sweep():
    """The true best lr is 3e-2, above the swept values: the cells near each minimum get 3e-2."""
    points = planted(families=(("ar", 1.0),), budgets=(1e13,), best_lr=3e-2, seeds=1)
    plan = fp.plan_round(points)
    widened = [r for r in _of(plan, "tuned") if "edge" in r.reason]
    assert len(widened) == fp.NEAR_SHAPES and {r.lr for r in widened} == {3e-2}
    assert not _of(plan, "seeds")  # seeds wait for a tuned lr


def test_a_cell_near_the_minimum_with_one_lr_is_tuned_by_the_family_rule():
    """lr swept at one budget, one lr at the others: round 1 checks the rule lr(N) at the top
    budget's minimum (one grid value each side; the other cells wait), round 2 trains the near
    cells at the rule's lr."""
    swept = planted(families=(("ar", 1.0),), budgets=(1e13,), seeds=1)
    carried = planted(families=(("ar", 1.0),), budgets=(3e13, 1e14), lrs=(1e-2,), seeds=1)
    first = fp.plan_round(pl.concat([swept, carried]))
    tuned = _of(first, "tuned")
    assert tuned and all(r.budget_flops == 1e14 and "checks the lr rule" in r.reason for r in tuned)
    assert {r.lr for r in tuned} == {1e-3, 3e-3}  # 1e-2 is trained; the rule's 3e-3 and the value below
    check = pl.concat([planted(families=(("ar", 1.0),), budgets=(1e14,), lrs=(r.lr,), seeds=1)
                       .filter((pl.col("n_params") / r.n_params).log().abs() < 1e-9) for r in tuned])
    second = fp.plan_round(pl.concat([swept, carried, check]))
    assert next(c for c in second.checks if c.subject == "ar/v lr rule").met
    rule_runs = _of(second, "tuned")
    assert rule_runs and all(math.isclose(r.lr, 3e-3) for r in rule_runs)
    assert {r.budget_flops for r in rule_runs} == {3e13, 1e14}


def test_too_few_seeds_near_the_minimum_add_seeds_and_too_few_budgets_add_budgets():
    points = planted(families=(("ar", 1.0),), budgets=BUDGETS[:3], seeds=1)
    plan = fp.plan_round(points)
    seeds = _of(plan, "seeds")
    assert len(seeds) == fp.NEAR_SHAPES * 3 and {r.seed for r in seeds} == {1}
    assert len([b for b in plan.new_budgets if b[0] == "ar"]) == 2


def test_the_planned_runs_are_plain_frozen_values_and_never_ones_already_trained():
    points = planted(families=(("ar", 1.0),), budgets=(1e13,), offsets=range(0, 5), seeds=1)
    plan = fp.plan_round(points)
    trained = {(r["n_params"], r["lr"], r["seed"]) for r in points.iter_rows(named=True)}
    assert all((r.n_params, r.lr, r.seed) not in trained for r in plan.runs)
    assert len({r.key() for r in plan.runs}) == len(plan.runs)
    assert all(isinstance(v, (str, int, float)) for r in plan.runs for v in vars(r).values())


def test_lr_snaps_to_the_sweeps_grid():
    grid = fp.lr_grid(pl.DataFrame({"lr": [1e-3, 3e-3, 1e-2]}), fp.PlanConfig())
    assert math.isclose(fp.snap(2.5e-3, grid), 3e-3) and math.isclose(fp.snap(1e-2, grid, 1), 3e-2)
    assert math.isclose(fp.snap(1e-3, grid, -1), 3e-4)
    assert np.all(np.diff(grid) > 0) and 3e-4 in grid.tolist()  # exact decimal values (they enter run ids)


def test_without_cheaper_budgets_below_the_any_order_budgets_go_up_when_affordable():
    """AR cannot go down (its shapes would fall below `min_params`): the any-order family goes up,
    within the round's FLOP limit; past the limit nothing is added and the check says why."""
    points = planted(families=(("ar", 1.0), ("aogpt", 30.0)), budgets=BUDGETS[2:])
    up = fp.plan_round(points, fp.PlanConfig(min_params=1e12, max_round_flops=1e20))
    new = [(f, c) for f, _, c in up.new_budgets]
    assert any(f == "aogpt" for f, _ in new) and all(c > max(BUDGETS) for _, c in new)
    capped = fp.plan_round(points, fp.PlanConfig(min_params=1e12, max_round_flops=1.0))
    assert capped.new_budgets == () and not next(c for c in capped.checks if c.criterion == "overlapping").met


def test_a_family_without_an_lr_rule_sweeps_each_cell_near_its_minimum():
    """One lr everywhere (no sweep to fit a rule on): each near cell gets one grid value each side."""
    points = planted(families=(("ar", 1.0),), budgets=(1e13,), lrs=(3e-3,))
    plan = fp.plan_round(points)
    tuned = _of(plan, "tuned")
    assert len(tuned) == 2 * fp.NEAR_SHAPES and {r.lr for r in tuned} == {1e-3, 1e-2}
    assert not next(c for c in plan.checks if c.subject == "ar/v lr rule").met
