"""Evaluation windows (jobs.eval.windows): spread over the whole split, the same for every run of a
study, and the per-window losses behind every record."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import torch

from jobs.eval import evaluate as ev
from jobs.eval import windows as ew
from jobs.run.spec import RunSpec
from jobs.data.suites import SUITES
from jobs.train.loop import train

SPLIT_TOKENS = 447_731  # about the Shakespeare validation split in bytes
L = 32


def test_windows_span_the_whole_split_and_do_not_overlap():
    t = ew.draw_windows(SPLIT_TOKENS, L, 4096, ev.EVAL_SEED)
    assert len(t.starts) == 4096 == len(set(t.starts.tolist()))
    assert np.all(np.diff(t.starts) >= L) and t.starts[0] >= 0 and t.starts[-1] + L <= SPLIT_TOKENS
    assert t.starts.min() < 0.1 * SPLIT_TOKENS and t.starts.max() > 0.9 * SPLIT_TOKENS
    # uniform over the split: each tenth holds about a tenth of the windows (chi-square, 9 df, p > 0.001)
    counts = np.bincount(t.starts * 10 // SPLIT_TOKENS, minlength=10)
    assert ((counts - 409.6) ** 2 / 409.6).sum() < 27.9
    assert t.coverage_tokens == 4096 * L and t.split_tokens == SPLIT_TOKENS
    assert np.array_equal(t.ids * L + t.phase, t.starts)


def test_windows_are_fixed_by_the_seed_and_a_larger_budget_scores_a_superset():
    a, b = (ew.draw_windows(SPLIT_TOKENS, L, 1024, ev.EVAL_SEED) for _ in range(2))
    assert np.array_equal(a.starts, b.starts)
    other = ew.draw_windows(SPLIT_TOKENS, L, 1024, ev.EVAL_SEED + 1)
    assert not np.array_equal(a.starts, other.starts)
    assert set(a.starts) <= set(ew.draw_windows(SPLIT_TOKENS, L, 4096, ev.EVAL_SEED).starts)


def test_a_budget_that_holds_the_split_scores_every_window():
    t = ew.draw_windows(1000, L, 10_000, 3)
    assert len(t.starts) == t.n_tiles == 31 and 0 <= t.phase <= 1000 - 31 * L
    assert np.array_equal(np.diff(t.starts), np.full(30, L)) and "all 31" in t.describe("validation")
    with pytest.raises(ValueError, match="seq_len"):
        ew.draw_windows(10, L, 4, 0)


def test_every_suite_ensembles_at_least_256_of_its_windows_or_all():
    for name, suite in SUITES.items():
        assert suite.ensemble_chunks >= min(ew.MIN_ENSEMBLE_WINDOWS, suite.val_chunks), name
    sub = ew.ensemble_subset(4096, 256, ev.EVAL_SEED)
    assert len(sub) == 256 == len(set(sub.tolist())) and np.all(np.diff(sub) > 0) and sub.max() > 3686
    assert np.array_equal(ew.ensemble_subset(100, 256, 0), np.arange(100))


def test_mean_se_is_the_standard_error_over_windows():
    v = np.array([1.0, 2.0, 4.0, 7.0])
    mean, se = ew.mean_se(torch.tensor(v))
    assert mean == 3.5 and se == pytest.approx(np.std(v, ddof=1) / 2, rel=1e-15)
    assert ew.mean_se(np.array([2.0])) == (2.0, None)


# ---- on trained runs ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An AR and an AO-GPT run of one study, and an MDM run, evaluated with 64 windows."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("AOSCALE_DATA", raising=False)
        torch.set_num_threads(1)
        root = tmp_path_factory.mktemp("study") / "runs"
        out = {}
        for family in ("ar", "aogpt", "mdm"):
            spec = RunSpec(family=family, size="0.1M", steps=4, lr=3e-3, warmup_steps=1, seq_len=L, batch_size=8,
                           eval_batches=1, log_every=1, study="t", variant=family)
            run_dir = root / spec.run_id
            assert train(run_dir, spec) == "done"
            ev.evaluate(run_dir, "quick", val_chunks=64, ensemble_chunks=16, zero_shot=())
            out[family] = run_dir
        yield out


def _windows(run_dir) -> pl.DataFrame:
    return pl.read_parquet(run_dir / ew.WINDOWS_FILE)


def test_per_window_losses_average_to_every_record_and_se_is_finite(runs):
    for run_dir in runs.values():
        records, windows = pl.read_parquet(run_dir / "eval.parquet"), _windows(run_dir)
        for row in records.iter_rows(named=True):
            if row["n_samples"] >= 2:
                assert row["se"] is not None and math.isfinite(row["se"]) and row["se"] > 0, row["metric"]
            if row["metric"] == "bpb_l2r":
                continue  # a unit conversion of nll_l2r, no windows of its own
            mine = windows.filter((pl.col("metric") == row["metric"]) & (pl.col("estimator") == row["estimator"])
                                  & pl.col("m").eq_missing(row["m"]))
            assert len(mine) == row["n_samples"], row["metric"]
            assert math.fsum(mine["value"].to_list()) / len(mine) == pytest.approx(row["value"], rel=1e-14, abs=0)
            assert mine["value"].std() / math.sqrt(len(mine)) == pytest.approx(row["se"], rel=1e-12)
            assert row["coverage_tokens"] == len(mine) * L and row["split_tokens"] > 100_000


def test_every_run_of_a_study_scores_the_same_windows_and_they_span_the_split(runs):
    starts = [_windows(r).filter(pl.col("metric") == "nll_l2r")["start"].to_list() for r in runs.values()]
    assert starts[0] == starts[1] == starts[2] and len(starts[0]) == 64
    split = pl.read_parquet(runs["ar"] / "eval.parquet")["split_tokens"][0]
    assert min(starts[0]) < 0.1 * split and max(starts[0]) > 0.9 * split
    ensemble = _windows(runs["aogpt"]).filter(pl.col("metric") == "nll_ensemble")
    assert set(ensemble["window"]) < set(_windows(runs["aogpt"]).filter(pl.col("metric") == "nll_l2r")["window"])
    assert ensemble.filter(pl.col("m") == 1).height == 16


def test_another_evaluation_seed_scores_other_windows(runs, tmp_path):
    import shutil

    run_dir = shutil.copytree(runs["ar"], tmp_path / runs["ar"].name)
    ev.evaluate(run_dir, "quick", val_chunks=64, zero_shot=(), seed=ev.EVAL_SEED + 1)
    mine = _windows(run_dir).filter(pl.col("metric") == "nll_l2r")["start"].to_list()
    assert len(mine) == 64 and mine != _windows(runs["ar"]).filter(pl.col("metric") == "nll_l2r")["start"].to_list()
