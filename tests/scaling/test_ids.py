"""Ids read from files stay ids, waits are bounded, workers die with their launcher.

An id or name aoscale reads back (study.json's `order` and `name`, a run id, `[run] branch_from`)
is one safe path component inside its study (`cli.paths.within`): a bad one is one line naming
the key, exit 2, nothing written. A WSD branch waits for its trunk only while the trunk can still
get there, saying what it waits for, and stops on SIGTERM as `preempted`. A launcher killed with
SIGKILL takes its waiting worker with it (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli import InputError
from jobs.run import files as runfiles
from jobs.run.lock import RunLock
from jobs.train import loop as train
from jobs.train import wsd_branch
from scaling import launch, status
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.test_bad_inputs import assert_refused, snapshot
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
PLAIN = {"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2, "seq_len": 32}
BRANCHED = ('families = "ar"\nsizes = "0.1M"\nseeds = 1\nseq_len = 32\nbatch_size = 2\ntokens = 640\n'
            'branches = [0.5]\n[run]\nschedule = "wsd"\n')  # a trunk of 10 steps, a branch from step 5
LAUNCH = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--max-steps", "2", "--seq-len", "32",
          "--no-progress", "--no-report"]
DEADLINE_S = 30.0  # a worker's exit after its signal, with interpreter teardown on a busy machine


def _edit(study_dir: Path, change) -> None:
    doc = json.loads((study_dir / "study.json").read_text())
    change(doc)
    (study_dir / "study.json").write_text(json.dumps(doc))


def _add_run(run_id):
    def change(doc):
        doc["order"].append(run_id)
        doc["runs"][str(run_id)] = {"family": "ar", "variant": "base", "size": "0.1M", "seed": 0}
    return change


BAD_STUDIES = {  # folder -> (change to a valid study.json, the key the refusal names)
    "up": (_add_run("../../x"), "order[1]"), "abs": (_add_run("/etc"), "order[1]"), "dot": (_add_run("."), "order[1]"),
    "dotdot": (_add_run(".."), "order[1]"), "hidden": (_add_run(".git"), "order[1]"),
    "name_up": (lambda doc: doc.update(name="../../evil"), "name"),
    "name_slash": (lambda doc: doc.update(name="a/b"), "name"),
    "name_int": (lambda doc: doc.update(name=5), "name"),
    "name_none": (lambda doc: doc.pop("name"), "name"),
}


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A prepared study, copies of it each with one bad id, and one whose run folder is a link
    out of the study."""
    root = tmp_path_factory.mktemp("ids")
    study = build_study(PLAIN)
    study_ledger.prepare(root / "good", study)
    for name, (change, _) in BAD_STUDIES.items():
        study_ledger.prepare(root / name, study)
        _edit(root / name, change)
    study_ledger.prepare(root / "link", study)
    (root / "outside").mkdir()
    run = root / "link" / "runs" / study.run_ids[0]
    (run / "spec.json").unlink()
    run.rmdir()
    run.symlink_to(root / "outside")
    return root


CASES = [pytest.param(main, name, field, id=f"{main}:{name}") for name, (_, field) in BAD_STUDIES.items()
         for main in ("status", "launch")] + [pytest.param("status", "link", "symbolic link leading outside")]


@pytest.mark.parametrize("main, name, field", CASES)
def test_a_bad_id_in_study_json_is_refused_in_one_line_naming_the_key(ws, main, name, field, capsys, monkeypatch):
    monkeypatch.chdir(ws)
    argv = [name] if main == "status" else [*LAUNCH, "--study-dir", name]
    assert_refused({"status": status.main, "launch": launch.main}[main], argv, field, (ws,), capsys)


def test_run_dir_is_the_one_place_a_run_id_becomes_a_path(ws):
    assert study_ledger.run_dir(ws / "good", "abc123") == ws / "good" / "runs" / "abc123"
    for bad in ("../x", "/etc", "..", "", "a/b", "x\n"):
        with pytest.raises(InputError, match="run_id: "):
            study_ledger.run_dir(ws / "good", bad)


@pytest.mark.parametrize("toml, field", [
    ('[run]\nbranch_from = "../../../etc"\n', "run.branch_from: '../../../etc' is not one path component"),
    ('[run]\nbranch_from = "/etc"\n', "run.branch_from: '/etc' is not one path component"),
    ('[run]\nbranch_from = 5\n', "run.branch_from: 5 must be a string"),
    ('[run]\nbranch_from = "0123456789ab"\n', "run.branch_from: '0123456789ab' names no run of this study"),
    ('[run]\nbranch_step = 3\nbranch_from = "x"\n', "run.branch_from: 'x' names no run of this study"),
])
def test_branch_from_names_a_run_of_the_same_study_at_dry_run(tmp_path, monkeypatch, capsys, toml, field):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('families = "ar"\nsizes = "0.1M"\nseeds = 1\nmax_steps = 2\n' + toml)
    assert_refused(launch.main, ["--spec", "s.toml", "--study-dir", "st", "--dry-run"], field, (tmp_path,), capsys)


def test_the_trainer_refuses_a_branch_from_that_is_a_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["--run-dir", "runs/r", "--family", "ar", "--size", "0.1M", "--steps", "2", "--seq-len", "32",
            "--batch-size", "2", "--set", "branch_from=../../etc"]
    assert_refused(train.main, argv, "branch_from: '../../etc' is not one path component", (tmp_path,), capsys)


@pytest.fixture()
def branched(tmp_path, monkeypatch):
    """A prepared study of a WSD trunk and its branch (no run started): (study dir, trunk id, branch id)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "b.toml").write_text(BRANCHED)
    study, study_dir, _ = launch._check(launch.parser().parse_args(["--spec", "b.toml", "--study-dir", "st"]))
    study_ledger.prepare(study_dir, study)
    (trunk, _), (branch, spec) = [(c.run_id, c.spec) for c in study.cells]
    assert spec.branch_from == trunk and spec.branch_step == 5
    return study_dir.resolve(), trunk, branch


def _spec(study_dir: Path, run_id: str):
    return study_ledger.load_spec(study_dir, run_id)


@pytest.mark.parametrize("trunk_state, message", [
    ("failed", "is failed without a snapshot at step 5 (boom); relaunch with --retry-failed"),
    ("done", "is done without a snapshot at step 5; its snapshot was removed"),
])
def test_a_branch_stops_waiting_at_once_for_a_trunk_that_is_over(branched, trunk_state, message):
    study_dir, trunk, branch = branched
    runfiles.write_status(study_dir / "runs" / trunk, trunk_state, step=10, steps=10, reason="boom")
    started = time.monotonic()
    with pytest.raises(wsd_branch.NoTrunk, match=re.escape(f"branch_from: trunk {trunk} {message}")):
        wsd_branch.adopt_trunk(study_dir / "runs" / branch, _spec(study_dir, branch))
    assert time.monotonic() - started < 2


def test_a_branch_refuses_a_trunk_that_is_no_run_or_plans_no_snapshot_there(branched):
    study_dir, trunk, branch = branched
    spec = _spec(study_dir, branch)
    with pytest.raises(wsd_branch.NoTrunk, match="keeps no snapshot at step 4 "):
        wsd_branch.adopt_trunk(study_dir / "runs" / branch, spec.replace(branch_step=4))
    with pytest.raises(wsd_branch.NoTrunk, match="trunk 0123456789ab is not a run of this study"):
        wsd_branch.adopt_trunk(study_dir / "runs" / branch, spec.replace(branch_from="0123456789ab"))
    with pytest.raises(InputError, match="branch_from: '../..' is not one path component"):
        wsd_branch.adopt_trunk(study_dir / "runs" / branch, spec.replace(branch_from="../.."))


def test_a_branch_waits_only_while_its_trunk_makes_progress(branched, monkeypatch, capsys):
    """The wait is bounded by the trunk's progress, says what it waits for, ends on a stop
    request, and adopts the snapshot once it is there."""
    study_dir, trunk, branch = branched
    run_dir, spec = study_dir / "runs" / branch, _spec(study_dir, branch)
    started = time.monotonic()
    with pytest.raises(wsd_branch.NoTrunk, match=r"made no progress for 1 s \(pending at step 0\)"):
        wsd_branch.adopt_trunk(run_dir, spec, wait_s=1.0)
    assert 1.0 < time.monotonic() - started < 5
    assert f"waiting for trunk {trunk} (pending, step 0) to reach step 5" in capsys.readouterr().err
    assert wsd_branch.adopt_trunk(run_dir, spec, stopped=lambda: True) is False
    monkeypatch.setenv(wsd_branch.BRANCH_WAIT, "abc")
    with pytest.raises(InputError, match="AOSCALE_BRANCH_WAIT_S='abc': expected a positive number of seconds"):
        wsd_branch.adopt_trunk(run_dir, spec)
    snap = wsd_branch.snapshot_dir(study_dir / "runs" / trunk, 5)
    snap.mkdir(parents=True)
    (snap / "meta.json").write_text("{}")
    assert wsd_branch.adopt_trunk(run_dir, spec) is True
    assert (run_dir / "ckpt" / snap.name / "meta.json").is_file()


def _workers(run_dir: Path) -> list[int]:
    """Pids of live workers on `run_dir` (their command line names it)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"jobs.executors.local" in words and str(run_dir).encode() in words:
            pids.append(int(proc.name))
    return pids


def _waiting(run_dir: Path) -> bool:
    log = run_dir / "worker.log"
    return log.exists() and "waiting for trunk" in log.read_text()


@pytest.fixture()
def trunk_training(branched):
    """The trunk held by this process as if it trained (its lock, status running at step 1)."""
    study_dir, trunk, _ = branched
    lock = RunLock(study_dir / "runs" / trunk)
    assert lock.acquire()
    runfiles.write_status(study_dir / "runs" / trunk, "running", step=1, steps=10)
    yield branched
    lock.release()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_launcher_killed_with_sigkill_takes_its_waiting_worker_with_it(trunk_training):
    study_dir, trunk, branch = trunk_training
    run_dir = study_dir / "runs" / branch
    launcher = subprocess.Popen([sys.executable, "-m", "scaling.launch", "--spec", "b.toml", "--study-dir", "st",
                                 "--no-progress", "--no-report", "--max-parallel", "2"],
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _waiting(run_dir), 120, "the branch's wait")
        assert len(_workers(run_dir)) == 1
        launcher.kill()
        launcher.wait()
        took = wait_until(lambda: not _workers(run_dir), DEADLINE_S, "the worker's exit")
    finally:
        launcher.kill()
    print(f"worker gone {took:.1f} s after its launcher's SIGKILL")
    state = runfiles.read_status(run_dir)
    assert state["state"] == "preempted", state
    assert state["reason"].startswith(f"stopped while waiting for trunk {trunk} to reach step 5")


def test_a_waiting_worker_exits_on_sigterm_as_preempted(trunk_training):
    study_dir, trunk, branch = trunk_training
    run_dir = study_dir / "runs" / branch
    with open(run_dir / "worker.log", "ab") as log:
        worker = subprocess.Popen([sys.executable, "-m", "jobs.executors.local", str(run_dir)], cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _waiting(run_dir), 120, "the branch's wait")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(DEADLINE_S) == 0
    finally:
        worker.kill()
    assert runfiles.read_status(run_dir)["state"] == "preempted"
    assert f"run {run_dir}: preempted" in (run_dir / "worker.log").read_text()


def test_a_worker_whose_launcher_is_gone_does_not_start(branched):
    study_dir, _, branch = branched
    run_dir = study_dir / "runs" / branch
    before = snapshot(study_dir)
    done = subprocess.run([sys.executable, "-m", "jobs.executors.local", str(run_dir), "1"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "launcher 1 is gone; not starting" in done.stderr, done.stderr
    assert snapshot(study_dir) == before
