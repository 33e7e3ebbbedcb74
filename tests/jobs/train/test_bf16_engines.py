"""bf16 is one regime on every engine and world size: autocast to bf16 over fp32 weights,
gradients and optimizer state (jobs.train.engines). Every family and network option trains under
DeepSpeed ZeRO-2 (and ZeRO-1 and 3 on the riskiest variants) in bf16 on the CPU (DeepSpeed's own bf16 mode cast the module to bf16
and broke rotary positions and SEDD's time conditioning), and a 2-rank run takes the 1-rank
path and losses."""
from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jobs.run import numerics
from jobs.run.files import read_metrics, read_status
from jobs.run.spec import RunSpec
from jobs.train.engines import deepspeed_config
from jobs.train.loop import train
from scaling.study.arms import NETWORKS

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread_cache")]

REPO = Path(__file__).resolve().parents[3]
ROPE = {"pos": "rope"}
# Each family's default arm and the options that reach code a dtype can break: rotary angles
# (pos=rope), adaLN (AO-GPT's target conditioning, SEDD's time MLP), the official network
# (RMSNorm, QK-norm, untied head), MDM's three losses.
VARIANTS: dict[str, tuple[str, dict]] = {
    "ar-gpt2": ("ar", {}),
    "ar-rope": ("ar", ROPE),
    "ar-official": ("ar", NETWORKS["official"]),
    "aogpt-adaln-rope": ("aogpt", ROPE),
    "aogpt-adaln-official": ("aogpt", NETWORKS["official"]),
    "sigma_gpt-input-rope": ("sigma_gpt", ROPE),
    "mdm-mdlm-rope": ("mdm", ROPE),
    "mdm-sedd-rope": ("mdm", {**ROPE, "loss": "sedd"}),
    "mdm-sedd-official": ("mdm", {**NETWORKS["official"], "loss": "sedd"}),
    "mdm-kdce": ("mdm", {"loss": "kdce"}),
}
TOLERANCE = 1e-3  # bf16 matmuls of the same chunks on both sides; only fp32 reduction order differs


def tiny(family: str, options: dict, **changes) -> RunSpec:
    base = dict(family=family, size="2/48/2", steps=2, lr=1e-3, warmup_steps=1, seq_len=16, batch_size=4,
                model_options=options, eval_batches=1, log_every=1, precision="bf16", compile="off",
                engine="deepspeed")
    return RunSpec(**{**base, **changes})


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


@pytest.fixture(scope="module")
def one_rank():
    """This process as rank 0 of 1 (what torchrun would set); the process group is torn down after."""
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": _free_port(), "DS_ACCELERATOR": "cpu"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def test_bf16_under_deepspeed_is_autocast_over_fp32_weights():
    spec = tiny("ar", ROPE)
    config = deepspeed_config(spec, 1, bf16=True)
    assert config["bf16"] == {"enabled": False} and config["fp16"] == {"enabled": False}
    assert config["torch_autocast"] == {"enabled": True, "dtype": "bfloat16", "lower_precision_safe_modules": []}
    assert deepspeed_config(spec, 1, bf16=False)["torch_autocast"]["enabled"] is False


# Every variant under ZeRO-2; stages 1 and 3 (their own optimizer and gather code) on the two
# variants that reach the most dtype-sensitive code (rotary positions; SEDD's time MLP, adaLN).
MATRIX = [(v, 2) for v in VARIANTS] + [(v, s) for v in ("ar-rope", "mdm-sedd-official") for s in (1, 3)]
LINEAR = torch.nn.functional.linear


@pytest.mark.parametrize(("variant", "stage"), MATRIX)
def test_every_family_and_network_option_trains_under_zero_in_bf16(variant, stage, tmp_path, one_rank):
    family, options = VARIANTS[variant]
    spec = tiny(family, options, zero_stage=stage)
    assert train(tmp_path / "run", spec, handle_signals=False) == "done"
    losses = [r["loss"] for r in read_metrics(tmp_path / "run", "train")]
    val = [r["val_loss"] for r in read_metrics(tmp_path / "run", "val")]
    assert len(losses) == 2 and len(val) == 1 and all(math.isfinite(x) for x in losses + val), (losses, val)
    path = numerics.segment_paths(tmp_path / "run")[0]
    assert (path.precision, path.compiled) == ("bf16", False)
    # the run leaves torch as it found it (ZeRO-3's memory-efficient linear would not)
    assert torch.nn.functional.linear is LINEAR


def test_two_ranks_in_bf16_take_the_one_rank_path_and_losses(tmp_path):
    """ZeRO-2 on 2 ranks (gloo) and the torch engine on 1, both bf16, the same 4 chunks of 2 per
    step: one numerics path, losses within bf16-free rounding (fp32 gradient reduction)."""
    spec = tiny("ar", ROPE, steps=4, batch_size=8, micro_batch_size=2, zero_stage=2)
    reference = tmp_path / "one"
    assert train(reference, spec.replace(engine="torch"), handle_signals=False) == "done"
    spec_path, run_dir = tmp_path / "spec.json", tmp_path / "two"
    spec_path.write_text(spec.to_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "jobs.train", "--run-dir", str(run_dir), "--spec", str(spec_path)]
    proc = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and read_status(run_dir)["state"] == "done", proc.stderr[-3000:]
    assert [r["world_size"] for r in read_metrics(run_dir, "start")] == [2]
    assert numerics.segment_paths(run_dir) == numerics.segment_paths(reference)
    assert numerics.training_column(run_dir) == numerics.training_column(reference)
    two, one = ([r["loss"] for r in read_metrics(d, "train")] for d in (run_dir, reference))
    assert len(two) == len(one) == 4 and all(abs(a - b) < TOLERANCE for a, b in zip(two, one)), (two, one)
