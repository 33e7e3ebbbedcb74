"""scaling.rounds records each round once (issue 49): one `scaling.rounds` per study, round numbers
from the highest recorded round, a recorded round never replaced, a damaged or inconsistent round
stops the loop in one line, a pass that changes nothing ends it; the planner's verdict is the
planner's; the study's rounds/ and predictions/ stay inside it. In-process (`main([...])`) on the
planted-law study of tests/scaling/test_rounds.py: no model trains here."""
# ruff: noqa: F811 - `study`, the fixture imported from tests/scaling/test_rounds.py
from __future__ import annotations

import json
import os

import polars as pl
import pytest

from analysis.compare import frontier, frontier_plan
from cli import InputError
from scaling import rounds
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.analysis import frontier_synth as fs
from tests.scaling.test_rounds import study  # noqa: F401 - the fixture
from tests.test_bad_inputs import snapshot


def refused(capsys, argv, named):
    """`scaling.rounds argv` exits 2 with one line on stderr holding `named`."""
    assert rounds.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err, err
    return err


def one_round(study_dir):
    assert rounds.main([str(study_dir), "--no-report", "--max-rounds", "1"]) == 0
    return study_dir / "rounds" / "round-1.json"


def test_a_second_rounds_on_the_study_is_refused_while_the_first_trains(study, monkeypatch, capsys):
    study_dir, _ = study
    trains, seen = rounds._train, []

    def second_meanwhile(*args):
        before = snapshot(study_dir)
        assert rounds.main([str(study_dir), "--no-report", "--max-rounds", "2"]) == 2
        seen.append(capsys.readouterr().err)
        assert snapshot(study_dir) == before
        return trains(*args)

    monkeypatch.setattr(rounds, "_train", second_meanwhile)
    assert rounds.main([str(study_dir), "--no-report", "--max-rounds", "1"]) == 0
    assert len(seen[0].strip().splitlines()) == 1 and "another scaling.rounds is extending" in seen[0]
    assert [p.name for p in rounds.round_files(study_dir)] == ["round-1.json"]
    assert rounds.main([str(study_dir), "--dry-run"]) == 0  # the lock went with the first


def test_round_numbers_come_from_the_highest_round_and_a_recorded_round_is_never_replaced(study):
    study_dir, _ = study
    first = one_round(study_dir)
    doc = json.loads(first.read_text())
    second = first.with_name("round-2.json")
    second.write_text(json.dumps({**doc, "round": 2}))
    first.unlink()
    kept = second.read_bytes()
    assert rounds.main([str(study_dir), "--no-report", "--max-rounds", "2"]) == 0
    assert [p.name for p in rounds.round_files(study_dir)] == ["round-2.json", "round-3.json"]
    assert second.read_bytes() == kept and json.loads(first.with_name("round-3.json").read_text())["round"] == 3
    with pytest.raises(InputError, match="is already recorded; it is never replaced"):
        rounds.write_once(second, {"round": 2})
    assert second.read_bytes() == kept and sorted(p.name for p in second.parent.iterdir()) == [
        "round-2.json", "round-3.json"]


def _damage(doc, how):
    runs = doc["runs"]
    if how == "run_id":
        runs[0]["run_id"] = "nosuchrun"  # a done run's spec under another id: the round would never end
    elif how == "seed":
        runs[0]["seed"] += 7
    elif how == "lr":
        runs[1]["lr"] *= 2
    return doc


@pytest.mark.parametrize("how, named", [
    ("run_id", "runs[0].run_id: 'nosuchrun' is not its spec's"), ("seed", "runs[0].seed: 7 is not its spec's 0"),
    ("lr", "runs[1].lr: "), ("cut", "round-1.json: not readable JSON"),
    ("name", "round-\u00b2.json is not a round file (round-<n>.json, n >= 1)"),
    ("number", "round-2.json: round: 1 is not the file's number 2")])
def test_a_damaged_or_inconsistent_round_stops_in_one_line_and_nothing_is_written(study, capsys, how, named):
    study_dir, _ = study
    path = one_round(study_dir)
    doc = json.loads(path.read_text())
    if how == "cut":  # beside a valid later round: not skipped in silence
        path.with_name("round-2.json").write_text(json.dumps({**doc, "round": 2}))
        path.write_text(path.read_text()[:40])
    elif how in ("name", "number"):
        path.rename(path.with_name("round-\u00b2.json" if how == "name" else "round-2.json"))
    else:
        path.write_text(json.dumps(_damage(doc, how)))
    capsys.readouterr()
    before = snapshot(study_dir)
    for argv in (["--dry-run"], ["--no-report", "--max-rounds", "3"]):
        refused(capsys, [str(study_dir), *argv], named)
    assert snapshot(study_dir) == before


def test_a_pass_that_trains_nothing_and_changes_nothing_ends_the_loop(study, monkeypatch, capsys):
    study_dir, _ = study
    calls = []
    monkeypatch.setattr(rounds, "_train", lambda *args: calls.append(1) or 0)  # trains nothing, says 0
    assert rounds.main([str(study_dir), "--no-report", "--max-rounds", "3"]) == 1
    err = capsys.readouterr().err
    assert len(calls) == 1 and "a pass trained none of its unfinished runs and changed nothing" in err
    assert [p.name for p in rounds.round_files(study_dir)] == ["round-1.json"]


def test_the_dry_run_prints_the_planners_unmet_checks_not_every_criterion_met(study, monkeypatch, capsys):
    study_dir, _ = study
    unmet = frontier_plan.Check("bracketed", "ar/base C=1e+12", False, "lowest point at an edge")
    met = frontier_plan.Check("seeds", "ar/base", True, "2 seeds")
    monkeypatch.setattr(frontier_plan, "plan_round", lambda *a: frontier_plan.RoundPlan((), (unmet, met), ()))
    assert rounds.main([str(study_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "every criterion met" not in out and "1 of 2 checks unmet" in out
    assert "  unmet: bracketed ar/base C=1e+12: lowest point at an edge" in out
    monkeypatch.setattr(frontier_plan, "plan_round", lambda *a: frontier_plan.RoundPlan((), (met,), ()))
    assert rounds.main([str(study_dir), "--dry-run"]) == 0
    assert "every criterion met after 0 round(s)" in capsys.readouterr().out


def test_no_round_flops_and_a_study_that_is_not_isoflop_are_refused_before_anything_is_written(study, tmp_path, capsys):
    study_dir, _ = study
    before = snapshot(tmp_path)
    for value in ("0", "-1"):
        refused(capsys, [str(study_dir), "--max-round-flops", value], f"--max-round-flops: {value} must be")
    plain = tmp_path / "plain"
    study_ledger.prepare(plain, build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2,
                                             "seq_len": 32}))
    before = snapshot(tmp_path)
    refused(capsys, [str(plain), "--no-report"], "is not an isoFLOP study")
    assert snapshot(tmp_path) == before


def test_rounds_and_predictions_that_lead_out_of_the_study_are_refused_and_nothing_outside_is_written(
        study, tmp_path, capsys):
    study_dir, _ = study
    outside = tmp_path / "outside"
    outside.mkdir()
    (study_dir / "rounds").symlink_to(outside)
    before = snapshot(tmp_path)
    refused(capsys, [str(study_dir), "--no-report", "--max-rounds", "1"], "is a symbolic link leading outside")
    assert snapshot(tmp_path) == before
    front = frontier.analyse(fs.records(seeds=1).filter(pl.col("split") == "test"), resamples=20)
    plan = frontier_plan.RoundPlan((), (), (("ar", "v", 3e14),))
    (study_dir / "rounds").unlink()
    (study_dir / "predictions").symlink_to(outside)
    with pytest.raises(InputError, match="predictions/3e14.json: .* leading outside"):
        rounds.write_predictions(study_dir, front, plan)
    (study_dir / "predictions").unlink()
    (study_dir / "predictions").mkdir()
    os.mkfifo(study_dir / "predictions" / "3e14.json")  # read before it is kept: never opened
    with pytest.raises(InputError, match="3e14.json: is a FIFO"):
        rounds.write_predictions(study_dir, front, plan)
    assert snapshot(outside) == {str(outside): before[str(outside)]}


def test_carry_lr_from_a_study_whose_report_leads_outside_it_is_refused(tmp_path):
    from analysis.records.carry import carried_lr  # noqa: PLC0415

    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "fits.json").write_text(json.dumps({"selection": {"chosen": []}}))
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "report").symlink_to(tmp_path / "outside")
    with pytest.raises(InputError, match="report/fits.json is a symbolic link leading outside"):
        carried_lr(tmp_path / "study")
