"""A selection candidate is one setting, its seeds pooled however each run was planned (issue 47
item 1): a run at a carried lr (no `sweep_lr` tag) and a later round's swept run at the same lr are
two seeds of one candidate, read from the runs' spec.json (analysis.records.read -> settings)."""
from __future__ import annotations

import json

import polars as pl
import pytest

from analysis.records.read import RecordsError, load
from analysis.records.selection import SETTING_FIELDS, select
from tests.analysis.synth import write_study

BUDGET = 3e12
# run -> (seed, lr it trained with, its sweep_lr tag or None (carried), warm-up steps, validation value)
CARRIED = {"carried": (0, 3e-3, None, 10, 2.10), "swept": (1, 3e-3, 3e-3, 10, 2.14),
           "other": (0, 1e-3, 1e-3, 10, 2.11)}


def _records(runs: dict) -> pl.DataFrame:
    rows = []
    for run, (seed, _, tag, _, value) in runs.items():
        for split, shift in (("validation", 0.0), ("test", 0.01)):
            rows.append({"study": "s", "run_id": run, "family": "ar", "variant": "v", "size": "2/48/3",
                         "n_params": 55296, "n_params_family": 55296, "tokens": 1000, "flops": 6e12, "seed": seed,
                         "step": 1, "dataset": "shakespeare", "split": split, "metric": "nll_l2r", "m": None,
                         "unit": "nats/token", "value": value + shift, "se": None, "n_samples": 1,
                         "budget_flops": BUDGET, "plan_tokens": 1000, "sweep_lr": tag})
    return pl.DataFrame(rows, schema_overrides={"m": pl.Int64, "se": pl.Float64, "sweep_lr": pl.Float64})


def _settings(runs: dict) -> pl.DataFrame:
    return pl.DataFrame({"run_id": list(runs), "sweep_lr": [r[1] for r in runs.values()],
                         "sweep_warmup": [float(r[3]) for r in runs.values()]})


def test_a_carried_and_a_swept_run_at_one_lr_are_two_seeds_of_one_candidate():
    sel = select(_records(CARRIED), _settings(CARRIED))
    (row,) = sel.chosen.to_dicts()
    # lr 3e-3 pools seeds 0 (carried) and 1 (swept): mean of 2.10 and 2.14 = 2.12 > 2.11 of lr 1e-3
    assert row["n_candidates"] == 2
    assert (row["sweep_lr"], row["n_seeds"], row["n_runs"], row["val_mean"]) == (1e-3, 1, 1, pytest.approx(2.11))
    assert "sweep_warmup" not in sel.chosen.columns  # the same warm-up everywhere: not a choice
    assert set(sel.reported["run_id"]) == {"other"} and set(sel.reported["split"]) == {"test"}


def test_the_pooled_candidate_wins_with_both_seeds_reported():
    runs = {**CARRIED, "other": (0, 1e-3, 1e-3, 10, 2.13)}
    (row,) = select(_records(runs), _settings(runs)).chosen.to_dicts()
    assert (row["sweep_lr"], row["n_seeds"], row["n_candidates"], row["val_mean"]) == (3e-3, 2, 2, pytest.approx(2.12))
    reported = select(_records(runs), _settings(runs)).reported
    assert sorted(reported["run_id"]) == ["carried", "swept"]


def test_without_the_specs_the_tags_alone_split_the_carried_run_off():
    # the winner's curse the settings remove: the carried run (no tag) is a rival candidate of its own
    (row,) = select(_records(CARRIED)).chosen.to_dicts()
    assert row["n_candidates"] == 3 and row["n_seeds"] == 1 and row["val_mean"] == pytest.approx(2.10)


def test_two_lrs_stay_two_candidates_and_a_warmup_apart_is_a_setting_apart():
    runs = {"a": (0, 1e-3, 1e-3, 10, 2.2), "b": (1, 1e-3, 1e-3, 10, 2.3), "c": (0, 3e-3, None, 10, 2.1),
            "d": (1, 3e-3, 3e-3, 20, 2.0)}
    sel = select(_records(runs), _settings(runs))
    (row,) = sel.chosen.to_dicts()
    assert row["n_candidates"] == 3  # (1e-3, 10) with two seeds, (3e-3, 10) and (3e-3, 20)
    assert (row["sweep_lr"], row["sweep_warmup"], row["n_seeds"]) == (3e-3, 20.0, 1)
    assert list(sel.reported["run_id"]) == ["d"]


def _study(tmp_path, runs: dict, spec_extra=None):
    root = write_study(tmp_path / "study", _records(runs), curves=False)
    for run, (_, lr, _, warmup, _) in runs.items():
        path = root / "runs" / run / "spec.json"
        spec = json.loads(path.read_text())
        path.write_text(json.dumps({**spec, "lr": lr, "warmup_steps": warmup, "batch_size": 64, "seq_len": 32,
                                    **(spec_extra or {}).get(run, {})}))
    return root


def test_a_study_directory_pools_the_carried_run_through_its_spec(tmp_path):
    runs = {**CARRIED, "other": (0, 1e-3, 1e-3, 10, 2.13)}
    inputs = load([_study(tmp_path, runs)])
    assert dict(zip(inputs.settings["run_id"], inputs.settings["sweep_lr"])) == {r: v[1] for r, v in runs.items()}
    (row,) = select(inputs.records, inputs.settings).chosen.to_dicts()
    assert (row["sweep_lr"], row["n_seeds"], row["n_candidates"]) == (3e-3, 2, 2)


def test_a_setting_that_is_no_number_is_refused_naming_the_field(tmp_path):
    root = _study(tmp_path, CARRIED, {"swept": {"warmup_steps": "ten"}})
    with pytest.raises(RecordsError, match=r"swept/spec.json: warmup_steps: 'ten' must be a finite number"):
        load([root])


def test_the_settings_are_the_ones_a_study_sweeps():
    from scaling.study.sweep import SWEEPABLE  # noqa: PLC0415 - scaling may import analysis, not the reverse

    assert SETTING_FIELDS == {name: field for name, (_, field) in SWEEPABLE.items()}
