"""One peak for the dry-run's GPU-hours and the MFU runs log: the datasheet's dense peak by device
name, or, on the CPU, the measured matmul peak, named as measured in the run's manifest."""
from __future__ import annotations

import json

import pytest
import torch

from jobs.run import peaks
from jobs.run.files import read_metrics
from jobs.run.spec import RunSpec
from jobs.run.tracking import peak_flops
from jobs.train.loop import train
from scaling.plan import dry_run


@pytest.mark.parametrize("device_name, bf16, flops, source", [  # names as torch.cuda.get_device_name gives them
    ("NVIDIA H100 80GB HBM3", True, 989e12, "datasheet: NVIDIA H100 SXM dense bf16"),
    ("NVIDIA H100 80GB HBM3", False, 67e12, "datasheet: NVIDIA H100 SXM dense fp32"),
    ("NVIDIA H200", True, 989e12, "datasheet: NVIDIA H200 SXM dense bf16"),
    ("NVIDIA H200 NVL", True, 835e12, "datasheet: NVIDIA H200 NVL dense bf16"),
    ("NVIDIA H100 PCIe", True, 756e12, "datasheet: NVIDIA H100 PCIe dense bf16"),
    ("NVIDIA H100 NVL", True, 835e12, "datasheet: NVIDIA H100 NVL dense bf16"),
    ("NVIDIA A100-SXM4-80GB", True, 312e12, "datasheet: NVIDIA A100 dense bf16"),
    ("NVIDIA A100 80GB PCIe", False, 19.5e12, "datasheet: NVIDIA A100 dense fp32"),
    ("NVIDIA L40S", True, 362e12, "datasheet: NVIDIA L40S dense bf16"),
    ("NVIDIA L4", True, 121e12, "datasheet: NVIDIA L4 dense bf16"),
])
def test_the_datasheet_peak_by_device_name(device_name, bf16, flops, source):
    assert peaks.datasheet_flops(device_name, bf16) == (flops, source)


def test_an_unlisted_gpu_has_no_datasheet_peak():
    assert peaks.datasheet_flops("Tesla T4", True) is None and peaks.datasheet("NVIDIA GeForce RTX 4090") is None


def test_the_dry_runs_gpu_hours_divide_by_the_peak_a_run_on_that_gpu_logs_mfu_against():
    flops = 3.6e18
    peak, source = peaks.datasheet_flops("NVIDIA H100 80GB HBM3", bf16=True)
    assert (dry_run.H100_BF16_DENSE_FLOPS, dry_run.PEAK_SOURCE) == (peak, source)
    assert (peak, source) == (989e12, "datasheet: NVIDIA H100 SXM dense bf16")
    # a run logging mfu = DEFAULT_MFU on that GPU trains `flops` in exactly the dry-run's hours
    seconds = flops / (dry_run.DEFAULT_MFU * peak)
    assert dry_run.gpu_hours(flops) == seconds / 3600


def test_on_the_cpu_mfu_divides_by_the_measured_peak_and_the_manifest_says_so(tmp_path, data_kit):
    assert peak_flops(torch.device("cpu"), torch.float32)[1] == (
        f"measured: cpu float32 1024x1024 matmul, {torch.get_num_threads()} threads")
    spec = RunSpec(family="ar", size="0.1M", steps=3, lr=1e-3, warmup_steps=1, seq_len=32, batch_size=4,
                   log_every=1, eval_batches=1)
    assert train(tmp_path, spec) == "done"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["peak_source"].startswith("measured: cpu float32 1024x1024 matmul")
    assert manifest["flop_convention"] == peaks.FLOP_CONVENTION and "forward + backward" in peaks.FLOP_CONVENTION
    rows = read_metrics(tmp_path, "train")
    assert len(rows) == 3
    for row in rows:  # the logged mfu is exactly the recorded numerator over the recorded peak
        assert row["mfu"] == manifest["flops_per_token"] * row["tokens_per_s"] / manifest["peak_flops"]
