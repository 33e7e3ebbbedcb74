"""Generation records under several conditions: one curve per condition, never their mean, and the
joint-vs-marginal error of parallel decoding, paired within each run, on planted records."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from analysis.compare import ablations, generation
from analysis.records.cells import build_cells, condition_text
from analysis.records.read import validate

from tests.analysis.synth import run_id

KS = (1, 2, 4, 8)
PLANTED = {2: 0.01, 4: 0.09, 8: 0.38}  # gen_self_nll(k) - gen_self_nll(1), per run


def planted(seeds=(0, 1, 2), sizes=("0.1M", "1M"), noise=0.02, rng_seed=0) -> pl.DataFrame:
    """gen_self_nll per tokens-per-step k of two sampling settings; a run's k = 1 value is drawn with
    seed noise, the other k add PLANTED[k] (+ a small per-row noise)."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for size, n in zip(sizes, (1e5, 1e6)):
        for seed in seeds:
            for temperature, top_p in ((1.0, 1.0), (0.7, 0.95)):
                base_value = 2.8 - 0.3 * (temperature < 1) + noise * rng.standard_normal()
                for k in KS:
                    value = base_value + PLANTED.get(k, 0.0) + (0.002 * rng.standard_normal() if k > 1 else 0.0)
                    rows.append({"study": "g", "run_id": run_id("aogpt", size, seed), "family": "aogpt",
                                 "variant": "base", "size": size, "n_params": int(n), "n_params_family": int(n),
                                 "tokens": int(20 * n), "flops": 120.0 * n * n, "seed": seed, "step": 100,
                                 "dataset": "generated", "split": "samples", "metric": "gen_self_nll",
                                 "value": value, "se": 0.01, "n_samples": 16, "m": None, "unit": "nats/token",
                                 "steps": 32 // k, "tokens_per_step": k, "temperature": temperature,
                                 "top_p": top_p})
    return validate(pl.DataFrame(rows, schema_overrides={"m": pl.Int64}), "planted")


def test_each_condition_is_its_own_cell_and_its_own_seed_summary():
    frame = planted()
    cells = build_cells(frame, "n_params")
    assert len(cells) == len(KS) * 2  # k x sampling setting, never pooled
    table = ablations.variant_table(frame)
    assert len(table) == len(KS) * 2 * 2  # ... x size
    for r in table.iter_rows(named=True):
        rows = frame.filter((pl.col("size") == r["size"]) & (pl.col("tokens_per_step") == r["tokens_per_step"])
                            & (pl.col("temperature") == r["temperature"]))
        assert r["n"] == 3 and r["mean"] == pytest.approx(rows["value"].mean(), abs=1e-12)


def test_records_without_condition_columns_read_as_no_condition():
    frame = planted().drop("steps", "tokens_per_step", "temperature", "top_p")
    again = validate(frame, "old")
    assert again.select("steps", "tokens_per_step", "temperature", "top_p").null_count().row(0) == (len(frame),) * 4


def test_a_condition_column_of_the_wrong_type_is_refused_naming_it():
    with pytest.raises(Exception, match="'temperature'.*expected float"):
        validate(planted().with_columns(pl.col("temperature").cast(pl.String)), "bad")


def test_the_parallel_error_is_the_paired_difference_with_a_t_interval_over_seeds():
    frame = planted()
    table = generation.parallel_error(frame)
    assert len(table) == 3 * 2 * 2  # k > 1 x sampling x size
    for r in table.iter_rows(named=True):
        sel = lambda k: frame.filter((pl.col("size") == r["size"]) & (pl.col("temperature") == r["temperature"])  # noqa: E731
                                     & (pl.col("tokens_per_step") == k)).sort("seed")["value"].to_numpy()
        diff = sel(r["tokens_per_step"]) - sel(1)
        half = sps.t.ppf(0.975, 2) * diff.std(ddof=1) / np.sqrt(3)
        assert r["n"] == 3 and r["steps"] == 32 // r["tokens_per_step"]
        assert r["mean"] == pytest.approx(diff.mean(), abs=1e-12)
        assert (r["lo"], r["hi"]) == pytest.approx((diff.mean() - half, diff.mean() + half), abs=1e-12)


def test_pairing_removes_the_seed_noise_the_unpaired_difference_carries():
    """Planted seed noise 0.05 between runs, 0.002 within: the paired intervals cover the planted
    rise in >= 90 % of 200 replicas and are far narrower than the unpaired spread."""
    covered, widths = 0, []
    for rep in range(200):
        table = generation.parallel_error(planted(noise=0.05, rng_seed=rep, sizes=("0.1M",)))
        rows = table.filter(pl.col("temperature") == 1.0)
        for r in rows.iter_rows(named=True):
            covered += r["lo"] <= PLANTED[r["tokens_per_step"]] <= r["hi"]
            widths.append(r["hi"] - r["lo"])
    assert covered / (200 * 3) >= 0.90
    assert np.median(widths) < 0.05  # an unpaired difference's interval would be ~0.25 wide


def test_no_pair_no_table_and_the_labels_name_every_condition():
    frame = planted().filter(pl.col("tokens_per_step") > 1)
    assert generation.parallel_error(frame) is None
    assert condition_text({"m": None, "steps": 8, "tokens_per_step": 4, "temperature": 0.7, "top_p": 0.95}) == \
        " steps=8 4 tokens/step T=0.7 top-p=0.95"


def test_the_repeat_spread_is_the_median_over_runs_of_the_repeats_std():
    rows = [dict(family="mdm", variant="v", size="1M", estimator="ancestral", steps=32, temperature=0.7, top_p=0.95,
                 seed=seed, run_id=f"r{seed}", metric="gen_time_s", value=0.05, se=se, repeats=4)
            for seed, se in enumerate((0.001, 0.002, 0.004))]
    spread = generation.repeat_spread(pl.DataFrame(rows))
    assert spread["repeat_sd"].to_list() == pytest.approx([0.004])  # median se 0.002 x sqrt(4)
    assert generation.repeat_spread(pl.DataFrame(rows).drop("repeats")).is_empty()
