"""The dry-run planner: one row per run, totals, GPU-hours and the CPU feasibility estimate.

FLOPs are each family's own training count (`FamilyModel.flops_per_token`: the core, the head
and the family's adaLN modulation, time MLP and other projections, forward + backward), the
number the run's records carry. Each row shows both parameter conventions: `params`, the shape's
core (what fits compare at matched shape), and `params_family`, the family's own non-embedding
count (conditioning, time MLP and an untied head included). Both are read from a model built on
the `meta` device (no memory), once per distinct (family, options, size).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass


from models.ladder import core_params, get_shape

from scaling.study.accounting import VOCAB_SIZES, family_accounting, vocab_of  # noqa: F401 (re-exported)
from scaling.study.arms import network_name
from scaling.study.study_spec import StudySpec
from scaling.study.sweep import SWEEP_PREFIX

H100_BF16_DENSE_FLOPS = 989e12  # NVIDIA H100 SXM datasheet: dense BF16 tensor-core peak, FLOP/s
DEFAULT_MFU = 0.40  # a well-tuned dense transformer's model FLOPs utilisation (PaLM reports 46 %)
GPU_NAME = "H100 SXM bf16"
# Effective fp32 training throughput of one thread at CPU-study widths: 11 GFLOP/s at 2/48/2,
# 18 at 0.3M, 19.5 at 1M (seq 32 x batch 32, reference/tune_quickstart.py speed table; small matmuls
# run far below the ~175 GFLOP/s matmul peak). At 20 GFLOP/s the estimate is short for the tiniest
# rungs (11 GFLOP/s measured) and leaves out start-up and evaluation (~30 s per run).
CPU_FLOPS_PER_CORE = 20e9
RUN_OVERHEAD_S = 30.0  # start-up and cpu-suite evaluation per run, measured on the quickstart (tune_quickstart)
CPU_REFUSE_HOURS = 12.0  # a local CPU plan longer than this is refused without --force
S_PER_HOUR = 3600.0


@dataclass(frozen=True)
class PlanRow:
    """One run of the plan."""

    run_id: str
    family: str
    variant: str
    size: str
    seed: int
    params: int
    tokens: int
    flops: float
    steps: int
    network: str = ""
    ema: float = 0.0
    params_family: int = 0
    role: str = "compared"
    axes: str = ""  # the run's compute budget and swept values (scaling.study.sweep), e.g. "C=1e+12 lr=0.003"


def axes_label(spec) -> str:
    """`C=<budget>` and `<name>=<value>` for each swept setting of a run ('' for a plain grid run)."""
    tags = dict(spec.tracking)
    parts = [f"C={tags['budget_flops']:.0e}"] if tags.get("budget_flops") else []
    return " ".join(parts + [f"{k[len(SWEEP_PREFIX):]}={v:g}" for k, v in sorted(tags.items())
                             if k.startswith(SWEEP_PREFIX)])


def plan_rows(study: StudySpec) -> list[PlanRow]:
    """A row per cell with both parameter counts and the family's training FLOPs."""
    rows = []
    for cell in study.cells:
        spec = cell.spec
        shape = get_shape(spec.size)
        own, per_token = family_accounting(spec.family, spec.size, json.dumps(spec.options, sort_keys=True),
                                           vocab_of(spec.tokenizer), spec.seq_len, spec.micro_batch)
        flops = per_token * charged_tokens(spec)
        rows.append(PlanRow(spec.run_id, spec.family, spec.variant, spec.size, spec.seed, core_params(shape),
                            spec.tokens, flops, spec.steps, network_name(spec.options), spec.ema, own, spec.role,
                            axes_label(spec)))
    return rows


def charged_tokens(spec) -> int:
    """Tokens a run adds to the study's cost: a WSD branch only its decay (its trunk paid the rest)."""
    return spec.tokens - (spec.branch_step * spec.batch_size * spec.seq_len if spec.branch_from else 0)


def gpu_hours(flops: float, mfu: float = DEFAULT_MFU, peak_flops: float = H100_BF16_DENSE_FLOPS) -> float:
    """Hours of one GPU at `mfu` of `peak_flops`."""
    return flops / (mfu * peak_flops) / S_PER_HOUR


def cpu_hours(flops: float, cores: int) -> float:
    """Hours on `cores` CPU cores at CPU_FLOPS_PER_CORE each."""
    return flops / (max(1, cores) * CPU_FLOPS_PER_CORE) / S_PER_HOUR


def usable_cores() -> int:
    """Cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def human(n: float) -> str:
    """98.3K, 85.0M, 1.7B, 3.2T."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:g}"


COLUMNS = ("run_id", "family", "variant", "network", "ema", "size", "seed", "params", "params_family",
           "tokens", "flops", "steps")


def format_plan(study: StudySpec, rows: list[PlanRow], cores: int, has_gpu: bool) -> str:
    """The dry-run text: header, table, totals, GPU-hours and (without GPUs) the CPU estimate."""
    columns = COLUMNS + (("axes",) if any(r.axes for r in rows) else ())
    table = [columns] + [(r.run_id, r.family, r.variant if r.role == "compared" else f"({r.role})", r.network,
                          f"{r.ema:g}", r.size, str(r.seed), human(r.params), human(r.params_family),
                          human(r.tokens), f"{r.flops:.2e}", str(r.steps), r.axes)[:len(columns)] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = [f"study {study.name} (hash {study.study_hash}): {len(rows)} runs"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    total_flops = sum(r.flops for r in rows)
    lines.append(f"total: {len(rows)} runs, {human(sum(r.tokens for r in rows))} tokens, "
                 f"{total_flops:.3e} training FLOPs, {sum(r.steps for r in rows)} steps")
    lines.append(f"estimate: {gpu_hours(total_flops):.3g} GPU-hours on {GPU_NAME} "
                 f"({H100_BF16_DENSE_FLOPS / 1e12:.0f} TFLOP/s peak) at {DEFAULT_MFU:.0%} MFU")
    if not has_gpu:
        lines.append(f"estimate here: {cpu_hours(total_flops, cores):.3g} hours on {cores} CPU cores "
                     f"at {CPU_FLOPS_PER_CORE / 1e9:.0f} GFLOP/s per core")
        wall = cpu_hours(total_flops, cores) + len(rows) * RUN_OVERHEAD_S / max(1, cores) / S_PER_HOUR
        lines.append(f"wall estimate here: {wall:.3g} hours with {RUN_OVERHEAD_S:.0f} s of start-up and "
                     "evaluation per run")
    return "\n".join(lines)


def refusal(study: StudySpec, rows: list[PlanRow], cores: int) -> str | None:
    """Why a GPU-less machine should not run this plan (None when it is reasonable)."""
    total_flops = sum(r.flops for r in rows)
    hours = cpu_hours(total_flops, cores)
    if hours <= CPU_REFUSE_HOURS:
        return None
    return (f"budget: this study needs ~{hours:.3g} hours on {cores} CPU cores ({total_flops:.2e} FLOPs; "
            f"{gpu_hours(total_flops):.3g} GPU-hours on {GPU_NAME}); run it on a cluster with "
            f"--backend slurm or --backend ray, shrink it (--sizes, --tokens, --max-steps), or pass --force")
