"""The one-run trainer: run directory contents, exact resume after SIGKILL, preemption, NaN
failure, corrupt-checkpoint fallback, bad input, wandb offline files."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from jobs.train import checkpoint as ckpt
from jobs.run.files import read_metrics, read_status
from jobs.run.spec import RunSpec
from jobs.train.loop import lr_at, train
from jobs.train.stopping import request_stop
from jobs.train.loop import main
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.usefixtures("one_thread_cache")


def tiny(**changes) -> RunSpec:
    """A 0.1M any-order model, 32 tokens, accumulation over 2 micro-batches, a row per step."""
    base = dict(family="aogpt", size="0.1M", steps=12, lr=3e-3, warmup_steps=2, seq_len=32,
                batch_size=8, micro_batch_size=4, eval_batches=2, log_every=1, eval_every=4,
                checkpoint_every=4)
    return RunSpec(**{**base, **changes})


def train_losses(run_dir: Path) -> dict[int, float]:
    rows = read_metrics(run_dir, "train")
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), f"duplicate train rows: {steps}"
    return {r["step"]: r["loss"] for r in rows}


def val_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["val_loss"] for r in read_metrics(run_dir, "val")}


def test_lr_schedule_warmup_then_cosine_to_ten_percent():
    spec = tiny(steps=100, warmup_steps=10, lr=1.0)
    assert [lr_at(s, spec) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert lr_at(10, spec) == pytest.approx(1.0)
    assert lr_at(55, spec) == pytest.approx(0.1 + 0.45)  # half-way down the cosine
    assert lr_at(100, spec) == pytest.approx(0.1)


def test_run_directory_contents(tmp_path):
    run_dir = tmp_path / "run"
    assert train(run_dir, tiny(family="ar")) == "done"
    spec = RunSpec.load(run_dir / "spec.json")
    assert spec == tiny(family="ar")
    status = read_status(run_dir)
    assert (status["state"], status["step"], status["steps"]) == ("done", 12, 12)
    rows = read_metrics(run_dir, "train")
    assert [r["step"] for r in rows] == list(range(1, 13))
    for key in ("tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"):
        assert all(isinstance(r[key], float | int) for r in rows), key
    assert rows[-1]["tokens"] == 12 * 8 * 32
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert sorted(val_losses(run_dir)) == [4, 8, 12]
    starts = read_metrics(run_dir, "start")
    assert [s["from_step"] for s in starts] == [0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["packages"]["torch"] == torch.__version__.split("+")[0] or manifest["packages"]["torch"]
    assert len(manifest["tokenizer_hash"]) == 64 and len(manifest["corpus_hash"]["train"]) == 64
    assert manifest["hardware"]["cpu_count"] >= 1
    kept = [p.name for p in ckpt.checkpoint_dirs(run_dir)]
    assert kept == ["step_00000008", "step_00000012"]  # keep_checkpoints=2


def test_rerun_of_done_run_does_nothing(tmp_path):
    run_dir = tmp_path / "run"
    spec = tiny(family="ar", steps=4)
    assert train(run_dir, spec) == "done"
    before = (run_dir / "metrics.ndjson").read_text()
    assert train(run_dir, spec) == "done"
    assert (run_dir / "metrics.ndjson").read_text() == before


def _launch(run_dir: Path, spec_path: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir),
                             "--spec", str(spec_path)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    wait_until(lambda: any(r["step"] >= step for r in read_metrics(run_dir, "train")), timeout_s, f"step {step}",
               every_s=0.02, alive=proc)


def test_sigkill_then_resume_gives_bitwise_identical_losses(tmp_path):
    spec = tiny(steps=16, checkpoint_every=3, keep_checkpoints=3)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert _launch(reference, spec_path).wait() == 0
    kill_after = int(np.random.default_rng(7).integers(4, 13))
    proc = _launch(killed, spec_path)
    _wait_for_step(killed, kill_after, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert read_status(killed)["state"] == "running"
    resumed = _launch(killed, spec_path)
    assert resumed.wait() == 0, resumed.stderr.read()
    assert train_losses(killed) == train_losses(reference)  # exact float equality, every step
    assert val_losses(killed) == val_losses(reference)
    starts = read_metrics(killed, "start")
    assert len(starts) == 2 and starts[1]["from_step"] % 3 == 0 and starts[1]["from_step"] > 0
    assert read_status(killed)["state"] == "done"


def test_preempt_with_request_stop_then_resume_exactly(tmp_path):
    reference, split = tmp_path / "reference", tmp_path / "split"
    spec = tiny(ema=0.99)
    assert train(reference, spec) == "done"

    def stop_at_5(run):
        if run.step == 5:
            request_stop()

    assert train(split, spec, callbacks=[stop_at_5]) == "preempted"
    assert read_status(split)["state"] == "preempted" and read_status(split)["step"] == 5
    assert ckpt.checkpoint_dirs(split)[-1].name == "step_00000005"
    assert train(split, spec, max_steps_this_call=2) == "preempted"
    assert read_status(split)["step"] == 7
    assert train(split, spec) == "done"
    assert train_losses(split) == train_losses(reference)
    assert [s["from_step"] for s in read_metrics(split, "start")] == [0, 5, 7]
    ema_ref, _, info = ckpt.load_model(reference)
    ema_split, _, _ = ckpt.load_model(split)
    assert info.weights == "ema" and info.step == 12
    for a, b in zip(ema_ref.state_dict().values(), ema_split.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_corrupt_latest_checkpoint_falls_back_with_warning(tmp_path, capsys):
    reference, run_dir = tmp_path / "reference", tmp_path / "run"
    spec = tiny(keep_checkpoints=3)
    assert train(reference, spec) == "done"
    assert train(run_dir, spec, max_steps_this_call=8) == "preempted"
    latest = ckpt.checkpoint_dirs(run_dir)[-1]
    assert latest.name == "step_00000008"
    data = bytearray((latest / "model.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (latest / "model.pt").write_bytes(bytes(data))
    assert train(run_dir, spec) == "done"
    assert "step_00000008 is corrupt" in capsys.readouterr().err
    assert any("step_00000008 is corrupt" in w for w in read_status(run_dir)["warnings"])
    assert read_metrics(run_dir, "start")[-1]["from_step"] == 4
    assert train_losses(run_dir) == train_losses(reference)


def test_nan_loss_marks_failed_and_keeps_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    spec = tiny(family="ar", checkpoint_every=2)

    def poison_at_5(run):
        if run.step == 5:
            with torch.no_grad():
                next(run.engine.model.parameters()).fill_(float("nan"))

    assert train(run_dir, spec, callbacks=[poison_at_5]) == "failed"
    status = read_status(run_dir)
    assert status["state"] == "failed" and status["step"] == 6
    assert "loss is nan at step 6" in status["reason"]
    assert [p.name for p in ckpt.checkpoint_dirs(run_dir)] == ["step_00000002", "step_00000004"]
    assert max(train_losses(run_dir)) == 6
    assert math.isnan(float(train_losses(run_dir)[6]))


def test_load_model_weights_choice(tmp_path):
    run_dir = tmp_path / "run"
    assert train(run_dir, tiny(family="ar", steps=4, ema=0.99)) == "done"
    raw, _, raw_info = ckpt.load_model(run_dir, "raw")
    ema, _, ema_info = ckpt.load_model(run_dir, "auto")
    assert (raw_info.weights, ema_info.weights, raw_info.step) == ("raw", "ema", 4)
    saved = ckpt.load_file(raw_info.path / ckpt.MODEL_FILE)
    for name, value in raw.state_dict().items():
        assert torch.equal(value, saved["model"][name])
    assert not all(torch.equal(a, b) for a, b in zip(raw.parameters(), ema.parameters(), strict=True))
    with pytest.raises(ValueError, match="weights"):
        ckpt.load_model(run_dir, "best")


def test_wandb_offline_run_files(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    spec = tiny(family="ar", steps=3, tracking={"wandb": True}, study="unit")
    assert train(run_dir, spec) == "done"
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and spec.run_id in runs[0].name
    assert any(runs[0].glob("*.wandb"))
    assert len(read_metrics(run_dir, "train")) == 3  # local files whether or not wandb is on


BAD_INPUTS = {
    "engine": ["--engine", "jax"],
    "zero_stage": ["--engine", "deepspeed", "--zero-stage", "4"],
    "steps": ["--steps", "-5"],
    "family": ["--family", "rnn"],
    "size": ["--size", "7Q"],
    "precision": ["--precision", "fp16"],
    "micro_batch_size": ["--micro-batch-size", "3"],
}


@pytest.mark.parametrize("field", sorted(BAD_INPUTS))
def test_bad_cli_input_exits_2_with_one_line(field, tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["--run-dir", str(run_dir), "--family", "ar", "--size", "0.1M", "--steps", "3",
            "--seq-len", "32", "--batch-size", "4", *BAD_INPUTS[field]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and field in err[0]
    assert not run_dir.exists()


def test_unreadable_spec_and_foreign_run_dir_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["--run-dir", str(tmp_path / "a"), "--spec", str(bad)]) == 2
    assert "spec: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    run_dir = tmp_path / "run"
    assert train(run_dir, tiny(family="ar", steps=2)) == "done"
    capsys.readouterr()
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    argv = ["--run-dir", str(run_dir), "--family", "ar", "--size", "0.1M", "--steps", "3"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run_dir:" in err[0] and "holds run" in err[0]
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before


def test_cli_exit_status_2_in_a_real_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "jobs.train", "--run-dir", str(tmp_path / "r"),
                          "--family", "ar", "--size", "0.1M", "--steps", "0"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: steps: 0 must be a positive integer"]
    assert not (tmp_path / "r").exists()


def test_cli_set_and_tokens(tmp_path):
    from jobs.train.cli import build_parser, spec_from_args

    args = build_parser().parse_args([
        "--run-dir", str(tmp_path), "--family", "aogpt", "--size", "0.1M", "--tokens", "1000",
        "--batch-size", "4", "--seq-len", "32", "--set", "order=uniform", "--set", "ema=0.99",
        "--set", "tracking.wandb=true"])
    spec = spec_from_args(args)
    assert spec.steps == 8  # ceil(1000 / (4 * 32))
    # the rung's rule (jobs.run.recipes), as a study would give it: at least one warm-up step, lr capped at 3e-3
    assert spec.warmup_steps == 1 and spec.lr == 3e-3 and spec.ema == 0.99
    assert spec.options == {"order": "uniform"} and dict(spec.tracking) == {"wandb": True}


@pytest.mark.parametrize("words, line", [
    (["--lr", "1e-3", "--set", "lr=2e-3"], "error: --set: lr is also given as --lr; give it once"),
    (["--set", "ema=0.9", "--set", "ema=0.99"], "error: --set: ema is given twice; give it once"),
    (["--set", "order=l2r", "--set", "order=uniform"], "error: --set: order is given twice; give it once"),
])
def test_a_set_clashing_with_a_flag_or_given_twice_is_one_line_and_nothing_is_written(tmp_path, capsys, words, line):
    argv = ["--run-dir", str(tmp_path / "r"), "--family", "aogpt", "--size", "0.1M", "--steps", "3", *words]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert not (tmp_path / "r").exists()


def test_switching_engine_on_a_checkpointed_run_is_a_move_not_a_refusal(tmp_path):
    """A checkpoint of another engine loads through the consolidated state (the moves themselves:
    tests/jobs/train/test_move.py); the run directory's check lets it through."""
    from jobs.train.preflight import check_run

    run_dir = tmp_path / "run"
    spec = tiny(family="ar", steps=4, checkpoint_every=2)
    assert train(run_dir, spec, max_steps_this_call=2) == "preempted"
    check_run(run_dir, spec.replace(engine="deepspeed"))  # no InputError


def test_execute_run_trains_once_then_evaluates_once(tmp_path):
    from jobs.eval.records import EVAL_FILE
    from jobs.pipeline import execute_run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "spec.json").write_text(tiny(family="ar", steps=3, ema=0.99).to_json())
    assert execute_run(run_dir) == "done"
    evaluated = run_dir / EVAL_FILE
    assert evaluated.exists()
    stamp = evaluated.stat().st_mtime_ns
    assert execute_run(run_dir) == "done"
    assert len(read_metrics(run_dir, "start")) == 1  # never trained twice
    assert evaluated.stat().st_mtime_ns == stamp  # never evaluated twice
