"""A frontier study's report leads with its frontier (analysis.report.frontier_lead via the summary), its
figures are legible (log ticks that do not overlap, the records' unit on the y axis), the size-axis
points table keeps budgets apart, and the held-out table compares predictions with measurements."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import json  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pytest  # noqa: E402

from analysis import fit_curves  # noqa: E402
from analysis.compare import ablations, frontier, frontier_plan  # noqa: E402
from analysis.report import figures, frontier_figures, frontier_lead  # noqa: E402
from cli import InputError  # noqa: E402
from tests.analysis import frontier_synth as fs  # noqa: E402

BUDGETS = (1e12, 1e13, 1e14)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lead")
    recs = fs.records(seed=2, seeds=1).filter(pl.col("budget_flops").is_in(list(BUDGETS)))
    recs = recs.with_columns(pl.lit("nats/byte").alias("unit"))
    recs.write_ndjson(tmp / "r.ndjson")
    return fit_curves.run([tmp / "r.ndjson"], tmp / "rep", bootstrap=10)


def test_the_report_of_a_frontier_study_opens_with_the_frontier(report):
    text = (report / "report.md").read_text()
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads[0].startswith("## The frontier first (isoFLOP study; 95 % intervals; losses in nats/byte)")
    lead = text[:text.index(heads[1])]
    assert "k = C_family / C_AR at matched loss, read over L_opt" in lead and "charged FLOPs" in lead
    assert "core FLOPs" in lead and "N_opt ∝ C^a" in lead and "L_opt ∝ C^b" in lead
    assert "bracketed" in lead and "### L_opt and N_opt per budget" in lead
    assert text.index(heads[0]) < text.index("## Summary on") < text.index("## Gap to AR")


def test_the_lead_gives_no_k_where_the_frontiers_share_no_loss_range():
    entry = frontier.Entry(("aogpt", "v", "d", "test", "nll_anyorder"), [], {}, {}, pl.DataFrame(),
                           multipliers=[{"loss": 2.0, "k": 30.0, "ci95": [10.0, 90.0], "extrapolated": True,
                                         "reference": "ar", "reference_metric": "nll_l2r", "flops": "charged"}])
    text = frontier_lead.k_sentence(entry, "nats/byte")
    assert "no compute multiplier inside the data" in text and "30" not in text
    assert text.startswith("aogpt/v nll_anyorder on d/test:")  # a study scores several evaluation sets
    entry.multipliers = [{**entry.multipliers[0], "extrapolated": False, "ci95": [None, None]}]
    text = frontier_lead.k_sentence(entry, "nats/byte")  # inside the data but without an interval
    assert "has no interval" in text and "not quoted" in text and "30" not in text


def test_isoflop_ticks_do_not_overlap_and_the_y_axis_carries_the_records_unit(monkeypatch):
    shown = []
    monkeypatch.setattr(frontier_figures, "_png", lambda fig: shown.append(fig) or b"")
    recs = fs.records(seed=1, seeds=1).filter(pl.col("split") == "test")
    front = frontier.analyse(recs, 20)
    frontier_figures.isoflop_png(front.entries[0], "nats/byte")
    ax = shown[0].axes[0]
    assert ax.get_ylabel() == "nll_l2r (nats/byte)"
    shown[0].canvas.draw()
    renderer = shown[0].canvas.get_renderer()
    labels = [t for t in ax.xaxis.get_ticklabels(minor=False) + ax.xaxis.get_ticklabels(minor=True)
              if t.get_visible() and t.get_text() and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert len(boxes) >= 2 and all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:]))


def test_log_ticks_label_minors_only_on_narrow_axes():
    fig, (narrow, wide) = matplotlib.pyplot.subplots(1, 2)
    narrow.plot([2e4, 1.2e5], [1, 2])
    wide.plot([1e2, 1e8], [1, 2])
    for ax in (narrow, wide):
        ax.set_xscale("log")
        figures.log_ticks(ax, "x")
    fig.canvas.draw()
    assert any(t.get_text() == "50k" for t in narrow.xaxis.get_ticklabels(minor=True))
    assert not any(t.get_text() for t in wide.xaxis.get_ticklabels(minor=True))


def test_the_points_table_keeps_each_budget_its_own_row_and_counts_runs():
    """One size at three budgets (seed 0) and two seeds at one: rows per budget, n = runs there."""
    values = {(1e11, 0): 2.005, (3e11, 0): 1.833, (1e12, 0): 1.780, (1e12, 1): 1.790}
    frame = pl.DataFrame([{"family": "ar", "variant": "base", "size": "2/48/3", "dataset": "d", "split": "test",
                           "metric": "nll_l2r", "m": None, "seed": s, "budget_flops": c, "value": v}
                          for (c, s), v in values.items()])
    table = ablations.variant_table(frame).sort("budget_flops")
    assert table["budget_flops"].to_list() == [1e11, 3e11, 1e12] and table["n"].to_list() == [1, 1, 2]
    assert np.allclose(table["mean"].to_list(), [2.005, 1.833, 1.785])
    one = ablations.variant_table(frame.filter(pl.col("budget_flops") == 1e12))
    assert "budget_flops" not in one.columns and one["n"].to_list() == [2]


def test_the_held_out_table_says_whether_each_interval_covered():
    recs = fs.records(seed=3, seeds=1).filter(pl.col("split") == "test")
    front = frontier.analyse(recs, 20)
    earlier = frontier.analyse(recs.filter(pl.col("budget_flops") < 1e14), 20)
    predicted = frontier_plan.predictions(earlier, [("ar", "v", 1e14)])[1e14]["entries"]
    rows = frontier_lead.heldout_rows(front, predicted)
    assert len(rows) == 1 and rows[0][1] == "shakespeare/test" and rows[0][2] == "1e+14"
    assert rows[0][5] in ("yes", "no") and rows[0][9] == "ok"
    later = frontier_lead.heldout_rows(earlier, predicted)
    assert later[0][9] == "not trained yet" and later[0][5] == "n/a"
    frame = frontier_lead.heldout_frame(front, predicted)  # tables/heldout.csv: the numbers behind the rows
    (r,) = frame.iter_rows(named=True)
    assert r["n_opt_covered"] == ("yes" if r["n_opt_lo"] <= r["n_opt_measured"] <= r["n_opt_hi"] else "no")
    assert r["l_opt_covered"] == ("yes" if r["l_opt_lo"] <= r["l_opt_measured"] <= r["l_opt_hi"] else "no")
    prof = next(p for e in front.entries if e.key.family == "ar" for p in e.profiles if p.budget_flops == 1e14)
    assert r["l_opt_measured"] == prof.l_opt and r["from_budgets"] == "1e+12,3e+12,1e+13,3e+13"


def test_predictions_are_read_through_their_schema_and_a_damaged_file_is_named(tmp_path):
    recs = fs.records(seed=3, seeds=1).filter(pl.col("split") == "test")
    earlier = frontier.analyse(recs.filter(pl.col("budget_flops") < 1e14), 20)
    doc = frontier_plan.predictions(earlier, [("ar", "v", 1e14)])[1e14]
    path = tmp_path / frontier_lead.PREDICTIONS_DIR / "1e14.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    assert frontier_lead.read_predictions(tmp_path) == json.loads(json.dumps(doc["entries"]))
    for damage, key in ((lambda e: e["n_opt"].update(ci95="x"), "entries[0].n_opt.ci95"),
                        (lambda e: e.pop("family"), "entries[0].family is missing"),
                        (lambda e: e.update(budget_flops=-1.0), "entries[0].budget_flops")):
        bad = json.loads(json.dumps(doc))
        damage(bad["entries"][0])
        path.write_text(json.dumps(bad))
        with pytest.raises(InputError, match=rf"1e14\.json: {re.escape(key)}.*move it away") as error:
            frontier_lead.read_predictions(tmp_path)
        assert "\n" not in str(error.value)


def test_the_lr_table_gives_each_cell_the_lr_its_selected_runs_trained_at():
    reported = pl.DataFrame([{"run_id": r, "family": "ar", "variant": "base", "budget_flops": c, "size": size,
                              "n_params": n, "seed": seed, "metric": "nll_l2r"}
                             for r, c, size, n, seed in (("a", 1e12, "2/48/3", 56640, 0), ("b", 1e12, "2/48/3", 56640, 1),
                                                         ("c", 3e12, "2/64/4", 100096, 0))])
    specs = pl.DataFrame({"run_id": ["a", "b", "c"], "lr": [3e-3, 3e-3, 1e-2]})
    rows = frontier_lead.lr_table(reported, specs).rows
    assert rows == (("ar/base", "1e+12", "2/48/3", "5.664e+04", "0.003", "2"),
                    ("ar/base", "3e+12", "2/64/4", "1.001e+05", "0.01", "1"))
