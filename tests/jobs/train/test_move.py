"""Runs that move: a checkpoint written on 2 DeepSpeed ranks resumes on 1 and on the torch engine,
one written on 1 rank resumes on 2, a torch checkpoint resumes under ZeRO-3 on 2 ranks and that
one back on torch, each through the consolidated state (jobs.train.portable). The losses after
the move equal an unmoved torch run's within TOLERANCE at every step.

TOLERANCE = 1e-4, as tests/jobs/train/test_deepspeed.py: everything is fp32 on the CPU and the
micro-batches per step are kept (so every micro-batch draws the same masks from the same seed);
only the order of the gradient sums differs (an all-reduce over ranks against accumulation in one
process), about 1e-7 relative per sum, which 8 steps at lr 3e-3 grow to below 1e-5 in the loss.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jobs.train import checkpoint as ckpt
from jobs.train import portable
from jobs.run.files import read_metrics, read_status
from jobs.run.spec import RunSpec
from jobs.train.loop import train

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
STEPS, MOVE_AT = 8, 4
TOLERANCE = 1e-4


def spec(micro: int, **changes) -> RunSpec:
    return RunSpec(family="ar", size="0.1M", steps=STEPS, lr=3e-3, warmup_steps=2, seq_len=32,
                   batch_size=8, micro_batch_size=micro, eval_batches=2, log_every=1, checkpoint_every=2,
                   keep_checkpoints=5, ema=0.99, **changes)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(path))
        yield path


def in_process(run_dir: Path, run: RunSpec, **kwargs) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(run_dir, run, **kwargs)
    finally:
        torch.set_num_threads(threads)


def torchrun(run_dir: Path, run: RunSpec, cache: Path, ranks: int, *extra: str) -> subprocess.CompletedProcess:
    spec_path = run_dir.parent / f"{run_dir.name}.json"
    spec_path.write_text(run.to_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO),
           "AOSCALE_CACHE": str(cache)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
               "-m", "jobs.train", "--run-dir", str(run_dir), "--spec", str(spec_path), *extra]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}


def assert_matches(run_dir: Path, reference: Path) -> None:
    moved, ref = losses(run_dir), losses(reference)
    assert sorted(moved) == list(range(1, STEPS + 1)) == sorted(ref)
    worst = max(abs(moved[s] - ref[s]) for s in ref)
    assert worst < TOLERANCE, (worst, moved, ref)
    assert (read_status(run_dir)["state"], read_status(run_dir)["step"]) == ("done", STEPS)


def starts(run_dir: Path) -> list[tuple[int, str, int]]:
    return [(r["from_step"], r["engine"], r["world_size"]) for r in read_metrics(run_dir, "start")]


def copy_at(run_dir: Path, target: Path) -> Path:
    shutil.copytree(run_dir, target)
    return target


@pytest.fixture(scope="module")
def reference(cache, tmp_path_factory):
    """Unmoved torch runs keeping 2 and 4 micro-batches per step (micro 4 and 2 of a batch of 8)."""
    root = tmp_path_factory.mktemp("reference")
    for micro in (4, 2):
        assert in_process(root / f"micro{micro}", spec(micro)) == "done"
    return root


def test_two_ranks_to_one_and_to_torch(tmp_path, cache, reference):
    """ZeRO-2 on 2 ranks with the default micro-batch (batch / ranks = 4: 2 micro-batches per
    step), stopped at step 4; resumed on 1 rank (micro 4 x accumulation 2, as recorded) and on
    the torch engine: both equal the unmoved run keeping 2 micro-batches."""
    run = spec(0, engine="deepspeed", zero_stage=2)
    first = torchrun(tmp_path / "run", run, cache, 2, "--max-steps-this-call", str(MOVE_AT))
    assert read_status(tmp_path / "run")["state"] == "preempted", first.stderr[-3000:]
    meta = ckpt.read_meta(ckpt.step_dir(tmp_path / "run", MOVE_AT))
    assert (meta["layout"], meta["n_micro"], meta["micro_batch"]) == (
        {"engine": "deepspeed", "world_size": 2, "zero_stage": 2}, 2, 4)
    to_torch = copy_at(tmp_path / "run", tmp_path / "to_torch")

    second = torchrun(tmp_path / "run", run, cache, 1)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "moves at step 4 from deepspeed ZeRO-2 on 2 ranks to deepspeed ZeRO-2 on 1 rank" in second.stderr
    assert starts(tmp_path / "run") == [(0, "deepspeed", 2), (MOVE_AT, "deepspeed", 1)]
    assert_matches(tmp_path / "run", reference / "micro4")
    assert ckpt.read_meta(ckpt.step_dir(tmp_path / "run", STEPS))["layout"]["world_size"] == 1

    assert in_process(to_torch, run.replace(engine="torch")) == "done"
    assert starts(to_torch) == [(0, "deepspeed", 2), (MOVE_AT, "torch", 1)]
    assert_matches(to_torch, reference / "micro4")


def test_one_rank_to_two(tmp_path, cache, reference):
    """ZeRO-2 on 1 rank (micro 2 x accumulation 4) to 2 ranks (micro 2 x accumulation 2)."""
    run = spec(2, engine="deepspeed", zero_stage=2)
    first = torchrun(tmp_path / "run", run, cache, 1, "--max-steps-this-call", str(MOVE_AT))
    assert read_status(tmp_path / "run")["state"] == "preempted", first.stderr[-3000:]
    second = torchrun(tmp_path / "run", run, cache, 2)
    assert second.returncode == 0, second.stderr[-3000:]
    assert starts(tmp_path / "run") == [(0, "deepspeed", 1), (MOVE_AT, "deepspeed", 2)]
    assert_matches(tmp_path / "run", reference / "micro2")


def test_torch_to_zero3_on_two_ranks_and_back(tmp_path, cache, reference):
    """torch to step 4, ZeRO-3 on 2 ranks to step 6 (its partitions merged per parameter on the
    way back), torch to the end."""
    run = spec(2, engine="torch")
    assert in_process(tmp_path / "run", run, max_steps_this_call=MOVE_AT) == "preempted"
    middle = torchrun(tmp_path / "run", run.replace(engine="deepspeed", zero_stage=3), cache, 2,
                      "--max-steps-this-call", "2")
    assert read_status(tmp_path / "run")["state"] == "preempted", middle.stderr[-3000:]
    assert "moves at step 4 from torch on 1 rank to deepspeed ZeRO-3 on 2 ranks" in middle.stderr
    assert in_process(tmp_path / "run", run) == "done"
    assert starts(tmp_path / "run") == [(0, "torch", 1), (MOVE_AT, "deepspeed", 2), (6, "torch", 1)]
    assert_matches(tmp_path / "run", reference / "micro2")


def test_a_regrouping_move_is_warned_and_trains(tmp_path, cache):
    """A 1-rank run with one micro-batch per step cannot keep it on 2 ranks: the run goes on
    (the same data; the masks drawn anew) and status.json says so."""
    run = spec(0, engine="deepspeed", zero_stage=2).replace(steps=4)
    first = torchrun(tmp_path / "run", run, cache, 1, "--max-steps-this-call", "2")
    assert read_status(tmp_path / "run")["state"] == "preempted", first.stderr[-3000:]
    second = torchrun(tmp_path / "run", run, cache, 2)
    assert second.returncode == 0, second.stderr[-3000:]
    status = read_status(tmp_path / "run")
    assert status["state"] == "done" and any("do not split over 2 ranks" in w for w in status["warnings"])


def test_layout_of_a_checkpoint_without_the_record(tmp_path):
    """Checkpoints from before meta.json recorded the layout: read from the files."""
    folder = tmp_path / "step"
    (folder / "ds" / "state").mkdir(parents=True)
    assert portable.layout(folder, "torch") == {"engine": "torch", "world_size": 1, "zero_stage": 0}
    for rank in range(2):
        (folder / "ds" / "state" / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt").write_bytes(b"")
        (folder / "ds" / "state" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    assert portable.layout(folder, "deepspeed") == {"engine": "deepspeed", "world_size": 2, "zero_stage": 3}
    assert json.dumps(portable.layout(folder, "deepspeed"))  # meta.json-ready
