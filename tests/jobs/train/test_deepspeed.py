"""DeepSpeed ZeRO-2 and ZeRO-3 with 2 CPU ranks (gloo) through torchrun: train, preempt,
resume to completion, match the torch engine's loss curve within 1e-4 over 20 steps."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jobs.train import checkpoint as ckpt
from jobs.run.files import read_metrics, read_status
from jobs.run.spec import RunSpec
from jobs.train.loop import train
from models.kernels import cpu_backend

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
STEPS = 20
TOLERANCE = 1e-4  # fp32 on both engines; only the reduction order differs


def ds_spec(stage: int) -> RunSpec:
    """2 ranks x micro 2 x accumulation 2 = the global batch of 8 the torch engine takes in 4."""
    return RunSpec(family="ar", size="0.1M", steps=STEPS, lr=3e-3, warmup_steps=2, seq_len=32,
                   batch_size=8, micro_batch_size=2, eval_batches=2, log_every=1, eval_every=10,
                   checkpoint_every=5, ema=0.99, engine="deepspeed", zero_stage=stage)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def torch_reference(cache, tmp_path_factory):
    """The same run on the torch engine (same run id: the engine is not hashed)."""
    run_dir = tmp_path_factory.mktemp("torch_ref")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train(run_dir, ds_spec(2).replace(engine="torch")) == "done"
    finally:
        torch.set_num_threads(threads)
    return run_dir


def torchrun(run_dir: Path, spec_path: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO),
           "AOSCALE_CACHE": str(cache)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "jobs.train", "--run-dir", str(run_dir), "--spec", str(spec_path), *extra]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)


def losses(run_dir: Path, kind: str = "train", key: str = "loss") -> dict[int, float]:
    return {r["step"]: r[key] for r in read_metrics(run_dir, kind)}


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_two_ranks_train_preempt_resume_and_match_torch(stage, tmp_path, cache, torch_reference):
    spec = ds_spec(stage)
    spec_path, run_dir = tmp_path / "spec.json", tmp_path / "run"
    spec_path.write_text(spec.to_json())

    first = torchrun(run_dir, spec_path, cache, "--max-steps-this-call", "12")
    assert first.returncode != 0 and read_status(run_dir)["state"] == "preempted", first.stderr[-3000:]
    assert read_status(run_dir)["step"] == 12
    saved = ckpt.step_dir(run_dir, 12)
    assert sorted(p.name for p in saved.iterdir()) == ["ds", "meta.json", "model.pt",
                                                       "rank_0000.pt", "rank_0001.pt"]

    second = torchrun(run_dir, spec_path, cache)
    assert second.returncode == 0, second.stderr[-3000:]
    status = read_status(run_dir)
    assert (status["state"], status["step"]) == ("done", STEPS)
    assert [r["from_step"] for r in read_metrics(run_dir, "start")] == [0, 12]
    assert all(r["world_size"] == 2 for r in read_metrics(run_dir, "start"))

    ds_losses, ref_losses = losses(run_dir), losses(torch_reference)
    assert sorted(ds_losses) == list(range(1, STEPS + 1)) == sorted(ref_losses)
    for step in ref_losses:
        assert abs(ds_losses[step] - ref_losses[step]) < TOLERANCE, step
    ds_val, ref_val = losses(run_dir, "val", "val_loss"), losses(torch_reference, "val", "val_loss")
    assert sorted(ds_val) == [10, 20] and all(abs(ds_val[s] - ref_val[s]) < TOLERANCE for s in ref_val)

    model, loaded_spec, info = ckpt.load_model(run_dir)  # no DeepSpeed needed to read it back
    ref_model, _, _ = ckpt.load_model(torch_reference)
    assert (info.engine, info.weights, info.step, loaded_spec.zero_stage) == ("deepspeed", "ema", STEPS, stage)
    for (name, a), b in zip(model.state_dict().items(), ref_model.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=TOLERANCE), name


def test_zero3_partitioned_adaln_projections_through_the_fused_kernels_match_torch(tmp_path, cache):
    """aogpt(adaln) at 3M under ZeRO-3 with the fused kernels (a micro-batch of 2 x 128 = 256
    rows takes them): each adaLN projection weight (6·192 x 128, above DeepSpeed's default
    persistence threshold of 1e5 elements) is partitioned between uses and gathered for its
    module's forward, and the losses equal the torch engine's."""
    spec = RunSpec(family="aogpt", size="3M", steps=3, lr=1e-3, warmup_steps=1, seq_len=128, batch_size=8,
                   micro_batch_size=2, eval_batches=1, log_every=1, engine="deepspeed", zero_stage=3)
    assert 6 * 192 * 128 > 100_000 and 2 * spec.seq_len >= cpu_backend.FUSED_MIN_ROWS
    reference = tmp_path / "torch"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train(reference, spec.replace(engine="torch")) == "done"
    finally:
        torch.set_num_threads(threads)
    spec_path, run_dir = tmp_path / "spec.json", tmp_path / "run"
    spec_path.write_text(spec.to_json())
    done = torchrun(run_dir, spec_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    ds_losses, ref_losses = losses(run_dir), losses(reference)
    assert sorted(ds_losses) == [1, 2, 3] == sorted(ref_losses)
    assert all(abs(ds_losses[s] - ref_losses[s]) < TOLERANCE for s in ref_losses), (ds_losses, ref_losses)
