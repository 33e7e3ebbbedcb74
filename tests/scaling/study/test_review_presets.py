"""The CPU-scale review presets (scaling/study/review_presets.py): their design rules, and each one run end
to end (train + evaluate every arm, in process) at 2 steps, 1 seed and its smallest size."""
from __future__ import annotations

import polars as pl
import pytest

from analysis import fit_curves
from analysis.compare import fairness
from analysis.records.read import load
from jobs.executors import run_exclusive
from scaling import launch
from scaling.run import study_ledger
from scaling.plan.dry_run import cpu_hours, plan_rows
from scaling.study.presets import PRESETS
from scaling.study.review_presets import CPU_PRESETS, DECONFOUNDING, EMA_LONG_STEPS, REAL_S_PER_RUN

from models.ema import ema_decay

CPU_NAMES = sorted(set(CPU_PRESETS) - set(DECONFOUNDING))
GPU_TWINS = {"pe-cpu": "pe", "ema-cpu": "ema", "l2r-mix-cpu": "l2r-mix", "factorial-cpu": "factorial"}


def _study(*argv: str):
    args = launch.parser().parse_args(list(argv))
    return launch.study_from_args(args)


@pytest.mark.parametrize("name", CPU_NAMES)
def test_cpu_preset_fits_40_minutes_with_3_seeds_and_2_sizes(name):
    study = _study("--preset", name)
    compared = [c.spec for c in study.cells if c.spec.role == "compared"]
    assert len({s.seed for s in compared}) >= 3 and len({s.size for s in compared}) >= 2
    flops = sum(row.flops for row in plan_rows(study))
    assert cpu_hours(flops, 2) * 60 <= 40  # the dry-run's estimate
    projected_min = cpu_hours(flops, 2) * 60 + len(study.cells) * REAL_S_PER_RUN / 2 / 60
    assert projected_min <= 40  # with start-up and evaluation
    assert {s.tokenizer for s in compared} == {"bytes"}


@pytest.mark.parametrize("name", sorted(GPU_TWINS))
def test_cpu_presets_ask_the_gpu_presets_question_and_leave_them_unchanged(name):
    cpu, gpu = PRESETS[name](), PRESETS[GPU_TWINS[name]]()
    assert [a.label for a in gpu["arms"]] == [a.label for a in cpu["arms"]][: len(gpu["arms"])]
    assert set(gpu) == {"arms"}  # the GPU-scale presets still take sizes and budgets from their base


def test_pe_runs_on_learned_positions_and_the_rest_on_rope():
    for name in sorted(CPU_PRESETS):
        options = {c.spec.options["pos"] for c in _study("--preset", name).cells}
        assert options == ({"learned"} if name.startswith("pe-") else {"rope"})


def _projected_min(study) -> tuple[float, float]:
    """(the dry-run's estimate, with start-up and evaluation) in minutes on 2 cores."""
    minutes = cpu_hours(sum(row.flops for row in plan_rows(study)), 2) * 60
    return minutes, minutes + len(study.cells) * REAL_S_PER_RUN / 2 / 60


@pytest.mark.parametrize("name", ["pe-lr-cpu", "factorial-lr-cpu"])
def test_the_deconfounding_presets_sweep_3_lr_per_arm_and_report_on_test(name):
    study = _study("--preset", name)
    compared = [c.spec for c in study.cells if c.spec.role == "compared"]
    lrs: dict[tuple[str, str], set[float]] = {}
    for spec in compared:
        lrs.setdefault((spec.family, spec.variant), set()).add(spec.lr)
    twin = PRESETS[name.replace("-lr", "")]()
    assert len(lrs) == len(twin["arms"]) and all(len(values) >= 3 for values in lrs.values()), lrs
    for values in lrs.values():  # every arm sweeps the same values, spanning the shared lr (3e-3)
        assert min(values) < twin["lr"] < max(values)
    # each (arm, lr) has every seed: selection reads a seed mean and the verdict pairs by seed
    per_cell: dict[tuple, set[int]] = {}
    for spec in compared:
        per_cell.setdefault((spec.family, spec.variant, spec.lr), set()).add(spec.seed)
    assert all(len(seeds) >= 3 for seeds in per_cell.values())
    from jobs.data.suites import EvalSuite

    assert EvalSuite.parse(PRESETS[name]()["eval_suite"]).suite.test_split  # chosen on validation, reported on test
    # the dry-run's estimate within the hour a section may take; the start-up term errs long (factorial-lr-cpu's
    # 108 runs: 47 min estimated, 74 with it, 22.3 min measured alone, docs/results/review/README.md)
    assert _projected_min(study)[0] <= 60


def test_the_long_ema_study_trains_past_the_step_where_0999_and_09999_part():
    study = _study("--preset", "ema-long-cpu")
    compared = [c.spec for c in study.cells if c.spec.role == "compared"]
    assert {s.ema for s in compared} == {0.999, 0.9999} and len({s.seed for s in compared}) >= 3
    assert len({s.size for s in compared}) == 1
    assert {s.steps for s in compared} == {EMA_LONG_STEPS}
    assert ema_decay(0.999, 8989) == ema_decay(0.9999, 8989)  # one computation up to here
    assert ema_decay(0.9999, EMA_LONG_STEPS - 1) - ema_decay(0.999, EMA_LONG_STEPS - 1) > 3e-4
    assert _projected_min(study)[0] <= 40


def test_factorial_cpu_has_every_cell_and_sigma_gpt():
    study = _study("--preset", "factorial-cpu", "--seeds", "1", "--sizes", "2/48/2")
    cells = {tuple(sorted(c.factors)) for c in study.cells if c.factors}
    assert len(cells) == 8
    assert "sigma_gpt" in {c.spec.family for c in study.cells}


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU_NAMES)
def test_cpu_preset_runs_end_to_end(name, tmp_path):
    """The preset through the launcher's checks and ledger, then its first and last arm trained and
    evaluated by the real pipeline in process (2 steps, 1 seed, smallest size, the quick suite: the
    presets' own suites evaluate ~30 s per run)."""
    sizes = PRESETS[name]()["sizes"]
    args = launch.parser().parse_args(["--preset", name, "--sizes", sizes[0], "--seeds", "1", "--max-steps", "2",
                                       "--eval-suite", "quick", "--study-dir", str(tmp_path / name)])
    study, study_dir, _ = launch._check(args)
    study_ledger.prepare(study_dir, study)
    compared = [c for c in study.cells if c.spec.role == "compared"]
    for cell in (compared[0], compared[-1]):
        run_dir = study_ledger.run_dir(study_dir, cell.spec.run_id)
        assert run_exclusive(run_dir) == "done"
        records = pl.read_parquet(run_dir / "eval.parquet")
        assert "nll_l2r" in set(records["metric"]) and set(records["step"]) == {2}
    _check_scored_weights(study_dir, {c.spec.run_id: c.spec.ema for c in (compared[0], compared[-1])})


def _check_scored_weights(study_dir, rates: dict[str, float]) -> None:
    """The analysis scores each trained run on its own weights when the runs' EMA rates differ
    (an EMA ablation: ema-cpu's first and last arm), else on one kind (analysis.compare.fairness)."""
    a = fit_curves.analyse(load([study_dir]), bootstrap=10)
    per_arm = len(set(rates.values())) > 1
    assert a.weights == (fairness.PER_ARM if per_arm else "ema" if min(rates.values()) > 0 else "raw")
    scored = a.final.filter(pl.col("weights").is_not_null()).group_by("run_id").agg(pl.col("weights").unique())
    for run_id, weights in scored.iter_rows():
        uses_ema = rates[run_id] > 0 if per_arm else min(rates.values()) > 0
        assert weights == ["ema" if uses_ema else "raw"], (run_id, rates)


def test_the_generation_suites_are_the_cpu_suite_plus_infilling_and_generation():
    from dataclasses import replace

    from jobs.data.suites import SUITES

    assert SUITES["cpu-gen"] == replace(SUITES["cpu"], infill_span=8, generate=True)  # as its studies ran
    assert SUITES["cpu-speed"] == replace(SUITES["cpu-gen"], gen_steps=(32, 16, 8),
                                          gen_sampling=((1.0, 1.0), (0.7, 0.95)), gen_repeats=3)
    assert PRESETS["infill-cpu"]()["eval_suite"] == "cpu-speed"
