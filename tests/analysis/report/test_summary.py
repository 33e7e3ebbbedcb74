"""The report's summary: its numbers and warnings come from the records (planted gap, planted
plateau runs, a planted missing seed), and it opens report.md ahead of the figures and tables."""
from __future__ import annotations

import polars as pl

from analysis import fit_curves
from analysis.report import summary
from analysis.compare.fairness import PLATEAU_MARGIN_NATS
from analysis.records.read import load
from tests.analysis import synth

SIZES = {k: synth.SIZES[k] for k in ("0.1M", "0.3M", "1M")}
UNIGRAM = 8.0  # planted baseline: runs whose nll_l2r exceeds UNIGRAM - 0.1 sit on the plateau


def _planted(tmp_path):
    frame = synth.records(families=("ar", "aogpt"), sizes=SIZES, datasets=("shakespeare",), noise=0.002)
    frame = frame.with_columns(pl.lit("validation").alias("split"))
    frame = frame.filter(~((pl.col("family") == "aogpt") & (pl.col("size") == "1M") & (pl.col("seed") == 2)))
    runs = frame.filter(pl.col("metric") == "nll_l2r")
    unigram = runs.with_columns(pl.lit("nll_unigram").alias("metric"), pl.lit(UNIGRAM).alias("value"))
    frame = pl.concat([frame, unigram])
    return synth.write_study(tmp_path / "study", frame), runs


def _expected_gap(runs: pl.DataFrame, size: str) -> float:
    per = runs.filter(pl.col("size") == size).pivot(on="family", index="seed", values="value").drop_nulls()
    return float((per["aogpt"] - per["ar"]).mean())


def test_summary_states_the_planted_gap_and_warnings(tmp_path):
    study, runs = _planted(tmp_path)
    a = fit_curves.analyse(load([study]), bootstrap=50)
    s = summary.build_summary(a)
    assert (s.dataset, s.split) == ("shakespeare", "validation")
    l2r = next(t for t in s.answer if t.startswith("aogpt/default nll_l2r"))
    for size in SIZES:
        assert f"{size} {summary.signed(_expected_gap(runs, size))} [" in l2r
    # AR 0.1M and AO-GPT 0.1M/0.3M sit above the planted baseline: those sizes are no result
    assert "AR is better at 1M; no result at 0.1M, 0.3M (a run on the unigram plateau)." in l2r
    assert "Trend: none (a run on the unigram plateau). Multiplier k(x): none (a run on the unigram plateau)." in l2r
    assert "(n=2)" in l2r and "(n=3)" in l2r  # the 1M point lost one aogpt seed: paired n is 2
    assert any(t.startswith("Ensemble gain of aogpt/default at 1M: NLL(M=1) − NLL(M=8)") for t in s.answer)
    scored = a.inputs.records.filter(pl.col("metric").is_in(["nll_l2r", "nll_anyorder"]))
    on_plateau = scored.filter(pl.col("value") > UNIGRAM - PLATEAU_MARGIN_NATS)["run_id"].n_unique()
    assert 0 < on_plateau < runs.height
    plateau = next(w for w in s.warnings if "unigram plateau" in w)
    assert plateau.startswith(f"{on_plateau} of {runs.height} runs are on the unigram plateau")
    assert "aogpt/default 0.1M seed 0 (nll_anyorder " in plateau and ", nll_l2r " in plateau
    assert not any("ar 1M seed" in w for w in s.warnings)  # AR at 1M is well below the baseline
    assert any(w == "Sizes missing seeds: aogpt 1M (2/3) on shakespeare." for w in s.warnings)


def test_summary_without_baseline_says_plateau_unchecked(tmp_path):
    frame = synth.records(families=("ar",), sizes=SIZES, seeds=(0, 1))
    a = fit_curves.analyse(load([synth.write_study(tmp_path / "study", frame)]), bootstrap=20)
    s = summary.build_summary(a)
    assert s.answer[0].startswith("No gap to AR")
    assert "No nll_unigram records: whether runs left the unigram plateau is unchecked." in s.warnings


def test_report_md_leads_with_summary_then_figures_then_tables(tmp_path):
    study, _ = _planted(tmp_path)
    text = (fit_curves.run([study], tmp_path / "report", bootstrap=20) / "report.md").read_text()
    order = [text.index(mark) for mark in ("## Summary on shakespeare/validation", "**Warnings:**", "## Figures",
                                           "loss_vs_size_nll_l2r_shakespeare_validation.png",
                                           "loss_vs_flops_shakespeare_validation.png", "gap_vs_size_", "nll_vs_m_",
                                           "## Power-law fits")]
    assert order == sorted(order)
