"""Faults during a run: a full disk during a checkpoint, SIGTERM and SIGINT mid-run, a second
trainer on the same run, a corrupt status.json in a study, a corrupt final checkpoint. Each ends
with a true status.json, and finishing the run gives the same losses and weights, bit for bit,
as a run that never saw the fault."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from jobs.train import checkpoint as ckpt
from jobs.run.files import read_metrics, read_status
from jobs.run.lock import EXIT_BUSY
from jobs.run.spec import RunSpec
from jobs.train.loop import main, train
from tests.jobs.train.test_train import _launch, _wait_for_step

REPO = Path(__file__).resolve().parents[3]
IS_ROOT = os.geteuid() == 0


pytestmark = pytest.mark.usefixtures("one_thread_cache")


def tiny(**changes) -> RunSpec:
    base = dict(family="ar", size="0.1M", steps=10, lr=3e-3, warmup_steps=2, seq_len=32, batch_size=4,
                eval_batches=1, log_every=1, eval_every=5, checkpoint_every=2, keep_checkpoints=2)
    return RunSpec(**{**base, **changes})


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The run trained once, without any fault."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    assert train(run_dir, tiny(), handle_signals=False) == "done"
    return run_dir


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """Same losses at every step, same validation, same final weights, done, no staging left."""
    def losses(d, kind, key):
        rows = read_metrics(d, kind)
        assert len({r["step"] for r in rows}) == len(rows), f"duplicate {kind} rows"
        return {r["step"]: r[key] for r in rows}
    assert losses(run_dir, "train", "loss") == losses(reference, "train", "loss")
    assert losses(run_dir, "val", "val_loss") == losses(reference, "val", "val_loss")
    a, b = (ckpt.load_file(ckpt.checkpoint_dirs(d)[-1] / ckpt.MODEL_FILE)["model"] for d in (run_dir, reference))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert read_status(run_dir)["state"] == "done"
    assert not list((run_dir / "ckpt").glob(".tmp_*")) and not list(run_dir.glob(".*.tmp"))


def fill(path: Path) -> None:
    """Write `path` until the file system is full."""
    with open(path, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC


@pytest.mark.skipif(not IS_ROOT, reason="a small tmpfs needs root")
def test_disk_full_during_a_checkpoint_leaves_failed_status_and_no_staging(tmp_path, reference):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    try:
        run_dir, filler = mount / "run", mount / "filler"

        def fill_before_step_4_checkpoint(run):
            if run.step == 4:
                fill(filler)

        with pytest.raises(OSError) as raised:
            train(run_dir, tiny(), handle_signals=False, callbacks=[fill_before_step_4_checkpoint])
        assert raised.value.errno == errno.ENOSPC
        status = read_status(run_dir)
        assert status["state"] == "failed" and "No space left" in status["reason"], status
        assert status["step"] == 4
        assert [ckpt.step_of(p) for p in ckpt.checkpoint_dirs(run_dir)] == [2]
        assert not list((run_dir / "ckpt").glob(".tmp_*")) and not list(run_dir.glob(".*.tmp"))
        filler.unlink()
        assert train(run_dir, tiny(), handle_signals=False) == "done"
        assert_same_run(run_dir, reference)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_checkpoints_marks_preempted_and_resumes_exactly(tmp_path, signum, capsys):
    spec = tiny(steps=400, checkpoint_every=0)  # the reference's first 10 steps, then many more
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    run_dir = tmp_path / "run"
    proc = _launch(run_dir, spec_path)
    _wait_for_step(run_dir, 3, proc)
    if signum == signal.SIGTERM:  # meanwhile a second trainer on the same run is turned away
        assert main(["--run-dir", str(run_dir), "--spec", str(spec_path)]) == EXIT_BUSY
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "in use by another process" in err[0], err
    proc.send_signal(signum)
    assert proc.wait(timeout=120) == 3, proc.stderr.read()
    status = read_status(run_dir)
    saved = ckpt.checkpoint_dirs(run_dir)
    assert status["state"] == "preempted" and len(saved) == 1 and ckpt.step_of(saved[0]) == status["step"] >= 3
    assert status["step"] < spec.steps and "stop requested" in status["reason"]
    # finish a 10-step run from that checkpoint: spec.steps only changes the schedule's length,
    # so compare the first steps against a reference of the same length instead
    full = tmp_path / "full"
    assert train(full, spec, max_steps_this_call=status["step"] + 2, handle_signals=False) == "preempted"
    assert train(run_dir, spec, max_steps_this_call=2, handle_signals=False) == "preempted"
    assert_prefix_equal(run_dir, full)


def assert_prefix_equal(run_dir: Path, full: Path) -> None:
    rows = {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}
    ref = {r["step"]: r["loss"] for r in read_metrics(full, "train")}
    assert rows == ref and len(rows) == len(read_metrics(run_dir, "train"))
    a, b = (ckpt.load_file(ckpt.checkpoint_dirs(d)[-1] / ckpt.MODEL_FILE)["model"] for d in (run_dir, full))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_corrupt_status_json_in_a_study_is_rebuilt_and_the_study_finishes(tmp_path, capsys, monkeypatch):
    from scaling import launch, status
    from scaling.run import study_ledger
    from scaling.study.study_spec import build_study

    flags = {"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 6, "seq_len": 32}
    study = build_study(flags)
    study_dir = tmp_path / "study"
    study_ledger.prepare(study_dir, study)
    (run_id,) = study.run_ids
    run_dir = study_ledger.run_dir(study_dir, run_id)
    spec = study_ledger.load_spec(study_dir, run_id).replace(checkpoint_every=2)
    assert train(run_dir, spec, max_steps_this_call=3, handle_signals=False) == "preempted"
    (run_dir / "status.json").write_text('{"state": "runn')
    capsys.readouterr()
    assert status.main([str(study_dir)]) == 1
    out = capsys.readouterr()
    assert "preempted" in out.out and "3/6" in out.out
    assert "status.json: not readable JSON" in out.err and "rebuilt from the checkpoints as preempted at step 3" in out.err
    argv = ["--study-dir", str(study_dir), "--no-progress", "--no-report",
            *("--families ar --sizes 0.1M --seeds 1 --max-steps 6 --seq-len 32".split())]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # its worker trains on one thread, as this process does
    assert launch.main(argv) == 0
    final = read_status(run_dir)
    assert final["state"] == "done" and final["step"] == 6
    assert any("rebuilt" in w for w in final.get("warnings", []))
    clean = tmp_path / "clean"
    assert train(clean, spec, handle_signals=False) == "done"
    assert_same_run(run_dir, clean)


def test_a_done_run_with_a_corrupt_final_checkpoint_is_reported_and_trained_again(tmp_path, reference, capsys):
    import shutil

    from jobs.eval.evaluate import main as evaluate_main

    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    final = ckpt.checkpoint_dirs(run_dir)[-1] / ckpt.MODEL_FILE
    final.write_bytes(final.read_bytes()[:-4] + b"oops")
    capsys.readouterr()
    assert evaluate_main(["--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "step_00000010 is corrupt" in err and "train it again from step 8" in err
    assert not (run_dir / "eval.parquet").exists()
    assert train(run_dir, tiny(), handle_signals=False) == "done"
    assert "is marked done at step 10 but checkpoint step_00000010 is corrupt" in capsys.readouterr().err
    assert_same_run(run_dir, reference)


def test_evaluate_refuses_a_run_that_is_not_done_unless_allow_partial_and_labels_the_rows(tmp_path, capsys):
    import polars as pl

    from jobs.eval.evaluate import main as evaluate_main

    run_dir = tmp_path / "run"
    assert train(run_dir, tiny(), max_steps_this_call=4, handle_signals=False) == "preempted"
    capsys.readouterr()
    assert evaluate_main(["--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is preempted at step 4 of 10, not done" in err[0] and "--allow-partial" in err[0], err
    assert not (run_dir / "eval.parquet").exists()
    assert evaluate_main(["--run-dir", str(run_dir), "--allow-partial", "--datasets", ""]) == 0
    assert "partial records: the run is preempted at step 4 of 10" in capsys.readouterr().err
    records = pl.read_parquet(run_dir / "eval.parquet")
    assert set(records["step"]) == {4} and set(records["run_steps"]) == {10} and set(records["suite"]) == {"quick"}
    assert any("partial records" in w for w in read_status(run_dir)["warnings"])
