"""Each arm scored on its own weights when EMA is an arm difference (analysis.compare.fairness): planted
records of an adaLN x EMA factorial whose EMA arms' EMA weights beat their raw ones by a known
amount. The factorial's EMA effect recovers it; the old one-kind-of-weights rule gives exactly 0."""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from analysis import fit_curves
from analysis.compare import fairness
from analysis.records.read import Inputs
from tests.analysis import synth

EMA_GAIN = -0.05  # planted: EMA weights - raw weights of an EMA arm, nats
SIZES = {k: synth.SIZES[k] for k in ("0.1M", "0.3M")}
ARMS = [(pe, rate) for pe in ("adaln", "input") for rate in (0.0, 0.9999)]


def _study(rng_seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Records (raw rows for every run, EMA rows for EMA arms) and the runs' spec.json ema option.
    Raw weights depend on (pe, size, seed) only, as equal seeds train equal raw weights."""
    rng = np.random.default_rng(rng_seed)
    frames, options = [], []
    for pe, rate in ARMS:
        variant = f"{pe}+ema{rate:g}"
        raw = (synth.records(families=("aogpt",), sizes=SIZES, variant=variant, noise=0.001,
                             rng_seed=int(pe == "input"))
               .filter(pl.col("metric").is_in(["nll_l2r", "nll_anyorder"]))
               .with_columns(weights=pl.lit("raw"), factor_pe=pl.lit(pe), factor_ema=pl.lit(f"{rate:g}")))
        frames.append(raw)
        if rate > 0:
            noise = 0.005 * rng.standard_normal(raw.height)
            frames.append(raw.with_columns(weights=pl.lit("ema"), value=pl.col("value") + EMA_GAIN + noise))
        options += [{"run_id": r, fairness.EMA_OPTION: str(rate)} for r in raw["run_id"].unique().to_list()]
    return pl.concat(frames), pl.DataFrame(options)


def _ema_effects(a) -> pl.DataFrame:
    return a.factorial.filter(pl.col("effect") == "ema")


def test_each_arm_is_scored_on_its_own_weights_when_ema_is_an_arm_difference():
    records, options = _study()
    chosen, kind, notes = fairness.choose_weights(records, options)
    assert kind == fairness.PER_ARM
    by_run = chosen.group_by("run_id").agg(pl.col("weights").unique()).join(options, on="run_id")
    for row in by_run.iter_rows(named=True):
        assert row["weights"] == (["ema"] if float(row[fairness.EMA_OPTION]) > 0 else ["raw"])
    arms = fairness.arm_weights(chosen)
    assert dict(zip(arms["variant"], arms["weights"])) == {f"{pe}+ema{r:g}": "ema" if r else "raw" for pe, r in ARMS}
    assert "ema rates 0, 0.9999" in notes[0] and "input+ema0.9999" in notes[0]


def test_one_shared_ema_rate_keeps_one_kind_of_weights():
    records, options = _study()
    ema_runs = options.filter(pl.col(fairness.EMA_OPTION) != "0.0")["run_id"]
    only_ema = records.filter(pl.col("run_id").is_in(ema_runs.implode()))
    assert fairness.choose_weights(only_ema, options)[1] == "ema"  # every run has EMA weights, one rate
    assert fairness.choose_weights(records, None)[1] == "raw"  # no spec.json rates: today's rule


def test_the_factorial_reports_the_planted_ema_effect_and_the_old_rule_zero():
    records, options = _study()
    a = fit_curves.analyse(Inputs(records, None, ("planted",), options=options), bootstrap=50)
    assert a.weights == fairness.PER_ARM
    effects = _ema_effects(a)
    assert effects.height == 4  # 2 sizes x 2 metrics
    for row in effects.iter_rows(named=True):
        assert row["lo"] <= EMA_GAIN <= row["hi"] and row["hi"] < 0, row
        assert row["estimate"] == pytest.approx(EMA_GAIN, abs=0.01)
    old = fit_curves.analyse(Inputs(records, None, ("planted",)), bootstrap=50)  # no rates: one kind (raw)
    assert old.weights == "raw"
    assert _ema_effects(old)["estimate"].to_list() == pytest.approx([0.0] * 4, abs=1e-12)
    paired = a.ema.filter(pl.col("variant").str.ends_with("ema0.9999"))  # the EMA - raw table still works
    assert paired.height == 8 and (paired["lo"] <= EMA_GAIN).all() and (paired["hi"] >= EMA_GAIN).all()


def test_the_report_names_the_weights_each_arm_was_scored_on():
    from analysis.report import sections

    records, options = _study()
    a = fit_curves.analyse(Inputs(records, None, ("planted",), options=options), bootstrap=50)
    blocks = sections.protocol_section(records, options, a.weights, a.final)
    assert "own weights" in blocks[1].text
    (tbl,) = [b for b in blocks if getattr(b, "rows", None)]
    assert "scored on" in tbl.headers
    assert {(r[1], r[-2]) for r in tbl.rows} == {(f"{pe}+ema{r:g}", "ema" if r else "raw") for pe, r in ARMS}
    doc = json.loads(fit_curves.fits_json(a))  # and fits.json (the results book quotes it)
    assert doc["weights"] == "per-arm"
    assert {(r["variant"], r["weights"], r["runs"]) for r in doc["arm_weights"]} == {
        (f"{pe}+ema{r:g}", "ema" if r else "raw", 6) for pe, r in ARMS}
