"""The one peak FLOP/s that model FLOPs utilisation (MFU) divides by: the device's datasheet peak.

The dry-run's GPU-hours (scaling.plan.dry_run: `flops / (MFU x peak)`) and the MFU each training
run logs (`flops_per_token x tokens/s / (peak x ranks)`, jobs.train.loop) use the same peak, so a
run logging 40 % MFU runs at the dry-run's 40 % assumption. The peak is NVIDIA's datasheet dense
(no 2:4 sparsity) tensor-core number for the run's precision: bf16 for bf16 runs, plain FP32 (not
TF32) for fp32 runs. Where no datasheet applies (the CPU, or a GPU missing from DATASHEET) the
run's peak is its measured matmul peak (jobs.run.tracking.measure_peak_flops), and its records
say so: `peak_source` starts with `measured:` instead of `datasheet:`.

FLOP_CONVENTION states what the numerator counts; `models.families.base.FamilyModel.flops_per_token`
computes it. This module imports no torch (the dry-run plans without it).
"""
from __future__ import annotations

from dataclasses import dataclass

FLOP_CONVENTION = ("flops_per_token = 6 x (weights of every matmul: core, head (tied too), family projections; "
                   "adaLN/time conditioning per row projected, as executed) + 6 x n_layer x seq_len x d_model "
                   "(attention scores and mixing: the causal half of the dense products); forward + "
                   "backward = 3 x forward (Kaplan et al. 2020); embeddings, norms, biases and activation "
                   "recomputation not counted")


@dataclass(frozen=True)
class DatasheetPeak:
    """One GPU model's datasheet dense peaks, FLOP/s."""

    name: str  # as the records name it
    keys: tuple[str, ...]  # all of these, lower case, in torch.cuda.get_device_name()
    bf16_flops: float
    fp32_flops: float


# NVIDIA datasheets, dense (half the "with sparsity" figure); first match wins, so longer names first.
DATASHEET = (
    DatasheetPeak("H200 NVL", ("h200", "nvl"), 835e12, 60e12),  # H200 datasheet: 1,671 TF bf16 sparse
    DatasheetPeak("H200 SXM", ("h200",), 989e12, 67e12),  # 1,979 TF bf16 sparse; FP32 67 TF
    DatasheetPeak("H100 NVL", ("h100", "nvl"), 835e12, 60e12),  # H100 datasheet: 1,671 TF bf16 sparse
    DatasheetPeak("H100 PCIe", ("h100", "pcie"), 756e12, 51e12),  # 1,513 TF bf16 sparse; FP32 51 TF
    DatasheetPeak("H100 SXM", ("h100",), 989e12, 67e12),  # "NVIDIA H100 80GB HBM3": 1,979 TF sparse; FP32 67 TF
    DatasheetPeak("A100", ("a100",), 312e12, 19.5e12),  # A100 datasheet (SXM and PCIe): 624 TF sparse; FP32 19.5 TF
    DatasheetPeak("L40S", ("l40s",), 362e12, 91.6e12),  # L40S datasheet: 733 TF bf16 sparse; FP32 91.6 TF
    DatasheetPeak("L40", ("l40",), 181e12, 90.5e12),  # L40 datasheet: 362 TF bf16 sparse; FP32 90.5 TF
    DatasheetPeak("L4", ("l4",), 121e12, 30.3e12),  # L4 datasheet: 242 TF bf16 sparse; FP32 30.3 TF
)
PLANNING_GPU = "H100 SXM"  # the dry-run's GPU-hours are quoted on this row of DATASHEET


def datasheet(device_name: str) -> DatasheetPeak | None:
    """The DATASHEET row of a GPU named as `torch.cuda.get_device_name` names it (None: not listed)."""
    name = device_name.lower()
    return next((row for row in DATASHEET if all(key in name for key in row.keys)), None)


def datasheet_flops(device_name: str, bf16: bool) -> tuple[float, str] | None:
    """(peak FLOP/s, source) from the datasheet for this GPU and precision, or None."""
    row = datasheet(device_name)
    if row is None:
        return None
    precision = "bf16" if bf16 else "fp32"
    return (row.bf16_flops if bf16 else row.fp32_flops), f"datasheet: NVIDIA {row.name} dense {precision}"


def planning_peak() -> tuple[float, str]:
    """The dry-run's peak: PLANNING_GPU's dense bf16 (the precision GPU runs train in)."""
    found = datasheet_flops(PLANNING_GPU, bf16=True)
    assert found is not None
    return found
