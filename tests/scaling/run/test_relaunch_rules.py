"""What a relaunch may change: a derived name follows the study directory, an explicit other name
is refused with one line, a suite change rewrites study.json; retries of failed runs."""
from __future__ import annotations

import pytest

from cli import InputError
from scaling.run import study_ledger
from scaling.run.scheduler import is_final, retry_allowance
from scaling.study.study_spec import build_study


def test_a_derived_name_follows_the_study_dir_and_an_explicit_other_name_is_refused(tmp_path):
    first = build_study({"preset": "quickstart"})
    study_ledger.prepare(tmp_path, first)
    other_suite = build_study({"preset": "quickstart", "eval_suite": "quick"})
    assert other_suite.name != first.name and other_suite.study_hash == first.study_hash
    adopted = study_ledger.adopt_name(tmp_path, other_suite, named=False)
    assert adopted.name == first.name and {c.spec.study for c in adopted.cells} == {first.name}
    assert adopted.run_ids == first.run_ids
    study_ledger.prepare(tmp_path, adopted)  # the suite change is carried out: study.json and every spec.json
    doc = study_ledger.read_study(tmp_path)
    assert doc["name"] == first.name and doc["settings"]["eval_suite"] == "quick"
    assert {study_ledger.load_spec(tmp_path, r).eval_suite for r in first.run_ids} == {"quick"}
    named = build_study({"preset": "quickstart", "name": "other"})
    assert study_ledger.adopt_name(tmp_path, named, named=True) is named
    with pytest.raises(InputError) as refused:
        study_ledger.check_study_dir(tmp_path, named)
    assert str(refused.value).startswith("name: ") and "--name quickstart" in str(refused.value)
    assert "\n" not in str(refused.value) and study_ledger.read_study(tmp_path) == doc


def test_retry_failed_gives_runs_that_used_up_their_retries_that_many_more():
    def run(state, failures):
        return study_ledger.RunView(f"{state}{failures}", state, 0, 6, failures, failures, "")

    views = [run("failed", 2), run("failed", 1), run("done", 0), run("pending", 0)]
    assert retry_allowance(views, 1, False) == {"failed2": 1, "failed1": 1, "done0": 1, "pending0": 1}
    allowed = retry_allowance(views, 1, True)
    assert allowed == {"failed2": 3, "failed1": 1, "done0": 1, "pending0": 1}
    assert is_final(views[0], 1) and not is_final(views[0], allowed["failed2"])
    assert not is_final(run("failed", 3), allowed["failed2"]) and is_final(run("failed", 4), allowed["failed2"])
