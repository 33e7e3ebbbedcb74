"""The frontier in the report: fits.json entries, the chosen-settings table and the figures."""
from __future__ import annotations

import json

from analysis import fit_curves
from tests.analysis import frontier_synth as fs


def test_fit_curves_writes_frontier_entries_tables_and_figures(tmp_path):
    recs = fs.records(seed=2, seeds=1).filter(fs_budget_filter())
    recs.write_ndjson(tmp_path / "r.ndjson")
    out = fit_curves.run([tmp_path / "r.ndjson"], tmp_path / "rep", bootstrap=10)
    doc = json.loads((out / "fits.json").read_text())
    entries = {e["family"]: e for e in doc["frontier"]}
    assert set(entries) == {"ar", "aogpt"} and {e["split"] for e in doc["frontier"]} == {"test"}
    assert entries["ar"]["n_opt_exponent"]["ci95"][0] is not None
    assert [p["budget_flops"] for p in entries["ar"]["l_opt"]] == [1e12, 1e13, 1e14]
    assert entries["aogpt"]["compute_multipliers"] and entries["ar"]["compute_multipliers"] == []
    assert {c["sweep_lr"] for c in doc["selection"]["chosen"]} == {fs.BEST_LR}
    assert all(f["split"] == "test" for f in doc["fits"])  # every fit uses test, never validation
    report = (out / "report.md").read_text()
    assert "Chosen settings per cell (on validation)" in report and "isoflop_ar_v_shakespeare_test_nll_l2r.png" in report
    assert {p.name for p in (out / "figures").iterdir()} >= {"l_opt_vs_c_test.png", "k_vs_loss_test.png"}


def fs_budget_filter():
    import polars as pl
    return pl.col("budget_flops").is_in([1e12, 1e13, 1e14])
