"""A change of settings on relaunch is journalled (scaling.run.journal), so a kill at any point of it
leaves status true: a launcher killed (SIGKILL, at a named fault point) while it moves a done
study to another evaluation suite leaves no run shown done on records of the old suite, and the
next launch finishes the change, or undoes it when the relaunch asks for the old suite, without
training anything again. A refused relaunch names each setting that differs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.faults import FAULT_ENV
from jobs.run.files import read_metrics
from scaling import launch, status
from scaling.run import journal, study_ledger
from tests.test_bad_inputs import assert_refused

REPO = Path(__file__).resolve().parents[3]
FLAGS = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--max-steps", "2", "--seq-len", "32",
         "--no-progress", "--no-report"]
POINTS = ("relaunch-journalled", "relaunch-study-written", "relaunch-spec-written")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("cache")
    out = {k: v for k, v in os.environ.items() if k not in ("AOSCALE_DATA", FAULT_ENV)}
    out.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", AOSCALE_CACHE=str(cache))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(cache))
        mp.delenv("AOSCALE_DATA", raising=False)
        yield out


@pytest.fixture(scope="module")
def done(tmp_path_factory, env) -> Path:
    """A study of one tiny AR run, trained and evaluated on the quick suite."""
    study = tmp_path_factory.mktemp("done") / "st"
    assert _launch(env, study).returncode == 0
    return study


def _launch(env: dict, study: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    run_env = {**env, FAULT_ENV: fault} if fault else env
    return subprocess.run([sys.executable, "-m", "scaling.launch", *FLAGS, "--study-dir", str(study), *args],
                          env=run_env, cwd=REPO, capture_output=True, text=True, timeout=300)


def _states(study: Path, capsys) -> dict[str, str]:
    capsys.readouterr()
    status.main([str(study), "--json"])
    return {run["run_id"]: run["state"] for run in json.loads(capsys.readouterr().out)["runs"]}


def _suites(study: Path) -> set[str]:
    return {study_ledger.read_study(study)["settings"].get("eval_suite", "quick")} | {
        study_ledger.load_spec(study, r).eval_suite for r in study_ledger.study_run_ids(study)}


def _starts(study: Path) -> int:
    return sum(len(read_metrics(study_ledger.run_dir(study, r), "start")) for r in study_ledger.study_run_ids(study))


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_during_a_suite_change_never_shows_a_run_done_and_the_next_launch_settles_it(point, tmp_path, env,
                                                                                            done, capsys):
    study = tmp_path / "st"
    shutil.copytree(done, study)
    killed = _launch(env, study, "--eval-suite", "cpu", fault=point)
    assert killed.returncode == -9, killed.stderr
    assert (study / journal.JOURNAL_FILE).exists()
    assert set(_states(study, capsys).values()) == {"trained"}  # its records are the quick suite's
    back = _launch(env, study)  # the relaunch asks for the old suite: the change is finished, then undone
    assert back.returncode == 0, back.stderr
    assert not (study / journal.JOURNAL_FILE).exists() and _suites(study) == {"quick"}
    assert set(_states(study, capsys).values()) == {"done"} and _starts(study) == 1  # not trained again


def test_the_relaunch_with_the_new_suite_finishes_the_change_and_evaluates(tmp_path, env, done, capsys):
    study = tmp_path / "st"
    shutil.copytree(done, study)
    assert _launch(env, study, "--eval-suite", "cpu", fault="relaunch-study-written").returncode == -9
    assert _launch(env, study, "--eval-suite", "cpu").returncode == 0
    assert not (study / journal.JOURNAL_FILE).exists() and _suites(study) == {"cpu"}
    assert set(_states(study, capsys).values()) == {"done"} and _starts(study) == 1


@pytest.mark.parametrize("argv, named", [
    (["--seq-len", "64"], "settings that differ: seq_len 32 -> 64"),
    (["--seq-len", "64", "--lr", "0.01"], "lr unset -> 0.01, seq_len 32 -> 64"),
    (["--families", "ar,mdm"], "settings that differ: arms)"),
])
def test_a_refused_relaunch_names_each_setting_that_differs(argv, named, tmp_path, env, done, capsys):
    study = tmp_path / "st"
    shutil.copytree(done, study)
    flags = [a for a in FLAGS if a != "--seq-len" and a != "32"] if "--seq-len" in argv else FLAGS
    if "--families" in argv:
        flags = flags[2:]
    assert_refused(launch.main, [*flags, *argv, "--study-dir", str(study)], named, (study,), capsys)


def test_differences_walk_tables_and_hide_long_values():
    old = {"run": {"beta1": 0.9}, "sizes": ["0.1M"], "sweep": {"lr": [1e-3] * 20}}
    new = {"run": {"beta1": 0.95}, "sizes": ["0.1M"], "sweep": {"lr": [3e-3] * 20}, "budgets": [1e12]}
    assert journal.differences(old, new) == ["budgets unset -> [1000000000000.0]", "run.beta1 0.9 -> 0.95", "sweep.lr"]


BAD_JOURNALS = {  # relaunch.json's text -> what the launch's one line names (cli.schema.RELAUNCH, cli.paths.within)
    '{"study": {}, "specs": {".hidden": "{}"}}': "relaunch.json: specs: '.hidden' is not one path component",
    '{"study": {}, "specs": {"a b": "{}"}}': "relaunch.json: specs: 'a b' is not one path component",
    '{"study": {}, "specs": {"../../evil": "{}"}}': "relaunch.json: specs: '../../evil' is not one path component",
    '{"study": {}, "specs": {"link": "{}"}}': "runs/link is a symbolic link leading outside",
    '{"study": {}, "specs": []}': "relaunch.json: specs: [] must be a table",
    '{"study": {}, "specs": {"r": 5}}': "relaunch.json: specs.r: 5 must be a string",
    '{"specs": {}}': "relaunch.json: study is missing", "[1]": "relaunch.json: holds a JSON list",
    '{"study": {}, "spe': "relaunch.json: not readable JSON",
}


def test_a_damaged_journal_or_one_naming_no_run_id_is_refused_before_anything_is_written(tmp_path, env):
    """A relaunch rolls a pending journal forward only when it is one (cli.schema.RELAUNCH) and
    each spec it would write is keyed by a run id inside the study's runs folder (cli.paths.within,
    the shared id rule: a name with a leading dot or a space, `..`, or a run folder that is a
    symbolic link leading outside are refused): real launches exit 2 with one line naming the
    file and key, and neither the study nor the folder a link leads to changes."""
    from scaling.study.study_spec import build_study
    from tests.test_bad_inputs import snapshot

    cases = []
    for i, text in enumerate(BAD_JOURNALS):
        study = tmp_path / f"st{i}"
        study_ledger.prepare(study, build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2,
                                           "seq_len": 32}))
        (study / "runs" / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
        (study / journal.JOURNAL_FILE).write_text(text)
        cases.append(study)
    (tmp_path / "outside").mkdir()
    before = snapshot(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "scaling.launch", *FLAGS, "--study-dir", str(study)], env=env,
                              cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for study in cases]
    for proc, named in zip(procs, BAD_JOURNALS.values()):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and named in err and "delete it and relaunch" in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path) == before


def _status(env: dict, study: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaling.status", str(study), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("point, written, left", [("relaunch-journalled", False, 1),
                                                  ("relaunch-study-written", True, 1),
                                                  ("relaunch-spec-written", True, 0)])
def test_status_reports_an_interrupted_relaunch_as_it_stands_and_writes_nothing(point, written, left, tmp_path, env,
                                                                                done):
    """After a kill at each point of a suite change, `scaling.status` (a real process, text and
    --json) says a relaunch is pending, whether study.json holds the new study yet and which
    spec.json are still to write, shows the runs `trained` (their records are the old suite's),
    and writes nothing; a damaged journal is one line naming the file and key, exit 2."""
    from tests.test_bad_inputs import snapshot

    study = tmp_path / "st"
    shutil.copytree(done, study)
    assert _launch(env, study, "--eval-suite", "cpu", fault=point).returncode == -9
    before = snapshot(study)
    text, as_json = _status(env, study), _status(env, study, "--json")
    shown = "holds the new study" if written else "does not hold the new study yet"
    assert text.returncode == 1 and f"(relaunch.json): study.json {shown}; " in text.stdout, text.stdout
    assert f"runs whose spec.json is still to write: {left or 'none'}" in text.stdout
    doc = json.loads(as_json.stdout)
    assert doc["relaunch"]["study_written"] is written and len(doc["relaunch"]["specs_left"]) == left
    assert doc["relaunch"]["runs_added"] == [] and {run["state"] for run in doc["runs"]} == {"trained"}
    assert snapshot(study) == before
    (study / journal.JOURNAL_FILE).write_text(json.dumps({"study": {"order": "x"}, "specs": {}}))
    before = snapshot(study)
    bad = _status(env, study)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "relaunch.json: study.order: 'x' must be a list; it holds a relaunch a kill interrupted" in bad.stderr
    assert snapshot(study) == before
