"""A held-out budget predicted first (analysis.compare.frontier_plan.predict_at): on planted isoFLOP laws in
the `frontier` preset's thin design (3 budgets 3x apart, 5 shapes, one seed, noise between budgets
as in test_frontier_coverage), the 95 % predictive interval for the next budget up (3x beyond the
measured range) covers the vertex that budget then measures at the nominal rate. 200 replicas,
fixed seeds."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.compare import frontier, frontier_plan
from tests.analysis import frontier_synth as fs
from tests.analysis.compare.test_frontier_coverage import NOMINAL, _covers, _tolerance

BUDGETS = (1e12, 3e12, 1e13)
HELD_OUT = 3e13
REPLICAS = 200
DRAWS = 400
TILT, SHIFT, SEED_NOISE = 0.02, 0.02, 0.003


def _profile(rng: np.random.Generator, c: float, opt: float) -> frontier.Profile:
    n = opt * 1.15 * 2.0 ** np.arange(-2, 3)
    x = np.log(n / opt)
    loss = (fs.loss(n, c / (6 * n)) + TILT * rng.standard_normal() * x + SHIFT * rng.standard_normal()
            + SEED_NOISE * rng.standard_normal(n.size))
    return frontier.fit_profile(c, n, loss, rng)


@pytest.fixture(scope="module")
def replicas():
    """Per replica: (prediction at HELD_OUT from the 3 budgets, the held-out budget's measured profile)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(frontier, "N_DRAWS", DRAWS)
    rng = np.random.default_rng(4)
    opt = {c: fs.n_opt(c) for c in (*BUDGETS, HELD_OUT)}
    out = []
    with np.errstate(all="ignore"):
        for _ in range(REPLICAS):
            profiles = [_profile(rng, c, opt[c]) for c in BUDGETS]
            predicted = frontier_plan.predict_at(profiles, HELD_OUT, rng)
            out.append((predicted, _profile(rng, HELD_OUT, opt[HELD_OUT])))
    mp.undo()
    return out


@pytest.mark.parametrize("quantity", ["n_opt", "l_opt"])
def test_the_held_out_interval_covers_the_measured_vertex_at_its_nominal_rate(replicas, quantity):
    pairs = [(p[quantity]["ci95"], getattr(m, quantity)) for p, m in replicas
             if m.status == "ok" and p[quantity]["ci95"][0] is not None]
    assert len(pairs) >= 0.9 * REPLICAS
    cover = np.mean([_covers(v, ci) for ci, v in pairs])
    assert abs(cover - NOMINAL) <= _tolerance(len(pairs)), (cover, len(pairs))


def test_the_prediction_is_the_line_through_the_vertices_and_says_its_interval():
    rng = np.random.default_rng(0)
    opt = {c: fs.n_opt(c) for c in BUDGETS}
    profiles = [_profile(rng, c, opt[c]) for c in BUDGETS]
    got = frontier_plan.predict_at(profiles, HELD_OUT, rng)
    lc = np.log(BUDGETS)
    line = np.polyfit(lc, np.log([p.n_opt for p in profiles]), 1)
    assert np.isclose(got["n_opt"]["value"], np.exp(np.polyval(line, np.log(HELD_OUT))))
    assert got["interval"].startswith("t(1) predictive") and got["from_budgets"] == list(BUDGETS)
    two = frontier_plan.predict_at(profiles[:2], HELD_OUT, rng)
    assert two["n_opt"]["value"] is not None and two["n_opt"]["ci95"] == [None, None]
