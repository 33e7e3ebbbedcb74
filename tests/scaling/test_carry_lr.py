"""The lr chosen at one swept budget carried to a study's other budgets (analysis.records.carry,
scaling.study.sweep's carry_lr, `scaling.launch --carry-lr-from`): chosen on validation only, refused on
an edge choice or a missing report, and carried as an ordinary run field."""
from __future__ import annotations

import polars as pl
import pytest

from analysis import fit_curves
from analysis.report import atomic, frontier_figures
from analysis.records.carry import carried_lr, study_note
from analysis.records.read import Inputs
from cli import InputError
from scaling import launch, status
from scaling.run import study_ledger
from scaling.study.presets import FRONTIER_BUDGETS
from scaling.study.study_spec import StudyError, build_study
from tests.analysis import frontier_synth

LRS = (1e-3, 3e-3, 1e-2, 3e-2)
SWEPT = FRONTIER_BUDGETS[1]  # the frontier preset's swept budget (one of frontier_synth's)


def _source(tmp_path, lr_bonus: dict[tuple[str, str, float], float]):
    """A study dir whose report (the real fits.json writer) chose lr at SWEPT only: the other
    budgets ran BEST_LR alone. `lr_bonus[(family, split, lr)]` is added to those records."""
    frame = frontier_synth.records(lrs=LRS)
    frame = frame.filter((pl.col("budget_flops") == SWEPT) | (pl.col("sweep_lr") == frontier_synth.BEST_LR))
    for (family, split, lr), bonus in lr_bonus.items():
        hit = (pl.col("family") == family) & (pl.col("split") == split) & (pl.col("sweep_lr") == lr)
        frame = frame.with_columns(value=pl.when(hit).then(pl.col("value") + bonus).otherwise(pl.col("value")))
    a = fit_curves.analyse(Inputs(frame, None, ("planted",)), bootstrap=10)
    front = frontier_figures.build(a.selection, a.final, a.bootstrap, a.seed)
    atomic.write_text(tmp_path / "report" / "fits.json", fit_curves.fits_json(a, front.doc))
    return tmp_path


def test_each_family_carries_its_validation_choice_never_the_test_one(tmp_path):
    # aogpt's validation optimum moves to 1e-2 (inside the sweep); test favours 1e-3 for both families
    bonus = {("aogpt", "validation", 1e-2): -0.2, ("aogpt", "test", 1e-2): -0.2,
             ("ar", "test", 1e-3): -1.0, ("aogpt", "test", 1e-3): -1.0}
    carry = carried_lr(_source(tmp_path, bonus))
    assert carry.by_family == {"ar": 3e-3, "aogpt": 1e-2} and carry.budget_flops == SWEPT
    assert "ar 0.003" in carry.describe("src") and f"{SWEPT:.3g}" in carry.describe("src")


def test_an_edge_choice_or_a_missing_report_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"carry-lr-from: aogpt/v .* best lr=0.03 is the highest value swept; "
                                         "widen the sweep before carrying it"):
        carried_lr(_source(tmp_path / "edge", {("aogpt", "validation", 3e-2): -0.5}))
    with pytest.raises(InputError, match="has no readable report/fits.json"):
        carried_lr(tmp_path / "none")


def test_carrying_sets_the_outer_budgets_lr_as_an_ordinary_run_field(tmp_path, capsys):
    plain = build_study({"preset": "frontier"})
    same = build_study({"preset": "frontier", "carry_lr": {"ar": 3e-3, "aogpt": 3e-3, "mdm": 3e-3}})
    assert same.run_ids == plain.run_ids  # the preset's own value carried: the preset's runs exactly
    moved = build_study({"preset": "frontier", "carry_lr": {"ar": 3e-3, "aogpt": 1e-2, "mdm": 1e-3}})
    for old, new in zip(plain.cells, moved.cells):
        budget = dict(new.spec.tracking)["budget_flops"]
        if budget == FRONTIER_BUDGETS[1] or new.spec.family == "ar":  # the swept budget, or an unchanged lr
            assert new.run_id == old.run_id
        else:
            assert new.spec.lr == {"aogpt": 1e-2, "mdm": 1e-3}[new.spec.family] and new.run_id != old.run_id
    assert dict(moved.settings)["carry_lr"] == {"ar": 3e-3, "aogpt": 1e-2, "mdm": 1e-3}  # in study.json
    study_ledger.prepare(tmp_path, moved)
    shown = "aogpt 0.01, ar 0.003, mdm 0.001"
    assert study_note(tmp_path) == [f"lr carried from the swept budget to the others (scaling.launch "
                                    f"--carry-lr-from; analysis.records.carry): {shown}"]  # a report note
    assert status.main([str(tmp_path)]) == 1 and capsys.readouterr().out.rstrip().endswith(shown)
    assert study_note(tmp_path / "elsewhere") == []


def test_a_carry_without_every_family_or_without_a_one_budget_sweep_is_refused():
    with pytest.raises(StudyError, match="carry_lr: no lr for mdm; give one per family"):
        build_study({"preset": "frontier", "carry_lr": {"ar": 3e-3, "aogpt": 3e-3}})
    with pytest.raises(StudyError, match="carry_lr: needs budgets and a sweep at one of them"):
        build_study({"preset": "quickstart", "carry_lr": {"ar": 3e-3, "aogpt": 3e-3, "mdm": 3e-3}})


def test_launch_carries_from_a_study_and_refuses_with_exit_2(tmp_path, capsys):
    source = _source(tmp_path / "src", {})
    argv = ["--preset", "frontier", "--families", "ar,aogpt", "--carry-lr-from", str(source), "--dry-run",
            "--study-dir", str(tmp_path / "new")]
    assert launch.main(argv) == 0
    assert f"lr carried from {source}" in capsys.readouterr().out and not (tmp_path / "new").exists()
    argv[argv.index("ar,aogpt")] = "ar,aogpt,mdm"
    assert launch.main(argv) == 2
    assert capsys.readouterr().err.strip() == "launch: carry_lr: no lr for mdm; give one per family of the study"


def _args(*argv: str):
    return launch.parser().parse_args(list(argv))


def test_carrying_into_the_swept_studys_own_directory_keeps_its_runs_and_adds_the_rest(tmp_path):
    """Stage 1 sweeps the middle budget; stage 2 (--carry-lr-from its own directory) keeps every
    stage-1 run under the stage-1 name and adds the outer budgets at the carried lr; relaunching
    stage 2 is idempotent, and a carry from another budget is refused."""
    first, first_dir, _ = launch._check(_args("--preset", "frontier", "--families", "ar,aogpt", "--budgets",
                                              f"{SWEPT:g}", "--study-dir", str(tmp_path / "s")))
    study_ledger.prepare(first_dir, first)
    bonus = {("aogpt", "validation", 1e-2): -0.2, ("aogpt", "test", 1e-2): -0.2}
    _source(first_dir, bonus)  # stands in for stage 1's report (the planted choice: ar 3e-3, aogpt 1e-2)
    carry = ["--preset", "frontier", "--families", "ar,aogpt", "--carry-lr-from", str(first_dir),
             "--study-dir", str(first_dir)]
    second, second_dir, _ = launch._check(_args(*carry))
    assert set(first.run_ids) < set(second.run_ids) and second.name == first.name
    for cell in second.cells:
        if dict(cell.spec.tracking)["budget_flops"] != SWEPT:
            assert cell.spec.lr == {"ar": 3e-3, "aogpt": 1e-2}[cell.spec.family]
    study_ledger.prepare(second_dir, second, extending=True)
    assert study_ledger.read_study(second_dir)["hash"] == second.study_hash
    assert launch._check(_args(*carry))[0].run_ids == second.run_ids  # the relaunch: same plan, same dir
    with pytest.raises(StudyError, match="holds a different study"):  # stage 1 again: not the dir's plan now
        launch._check(_args("--preset", "frontier", "--families", "ar,aogpt", "--budgets", f"{SWEPT:g}",
                            "--study-dir", str(first_dir)))
    other = tmp_path / "other.toml"
    other.write_text("[sweep]\nlr = [1e-3, 3e-3, 1e-2]\nat_budget = 3e12\n")
    with pytest.raises(InputError, match=r"chose lr at 1e\+12 FLOPs but this study sweeps at 3e\+12"):
        launch._check(_args(*carry, "--spec", str(other)))
