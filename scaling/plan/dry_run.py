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


from jobs.data.suites import EvalSuite
from jobs.run.peaks import PLANNING_GPU, planning_peak
from jobs.train.preflight import USABLE_FRACTION, memory_formula, plan_micro_batch
from models.families import FAMILIES
from models.likelihood import ESTIMATORS
from models.ladder import core_params, get_shape

from scaling.study.accounting import VOCAB_SIZES, family_accounting, vocab_of  # noqa: F401 (re-exported)
from scaling.study.arms import network_name
from scaling.study.study_spec import StudySpec
from scaling.study.sweep import SWEEP_PREFIX

# The planning GPU's datasheet dense bf16 peak (989e12 FLOP/s): jobs.run.peaks, the same peak a run on
# that GPU divides its logged `mfu` by, with the same FLOP count (jobs.run.peaks.FLOP_CONVENTION).
H100_BF16_DENSE_FLOPS, PEAK_SOURCE = planning_peak()
DEFAULT_MFU = 0.40  # a well-tuned dense transformer's model FLOPs utilisation (PaLM reports 46 %)
GPU_NAME = f"{PLANNING_GPU} bf16"
# Effective fp32 training throughput of one thread at CPU-study widths: 11 GFLOP/s at 2/48/2,
# 18 at 0.3M, 19.5 at 1M (seq 32 x batch 32, reference/tune_quickstart.py speed table; small matmuls
# run far below the ~175 GFLOP/s matmul peak). At 20 GFLOP/s the estimate is short for the tiniest
# rungs (11 GFLOP/s measured) and leaves out start-up and evaluation (~30 s per run).
CPU_FLOPS_PER_CORE = 20e9
RUN_OVERHEAD_S = 30.0  # start-up and cpu-suite evaluation per run, measured on the quickstart (tune_quickstart)
CPU_REFUSE_HOURS = 12.0  # a local CPU plan longer than this is refused without --force
S_PER_HOUR = 3600.0
GIB = 2**30


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
    eval_flops: float = 0.0  # its evaluation suite's forward FLOPs (eval_flops)


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
                            axes_label(spec), eval_flops(spec, per_token)))
    return rows


# The zero-shot sets' tokens before chunking, per tokenizer: the data kit's files (the sets
# jobs.data.datasets reads), measured with load_eval_set(name, enc, 1024) as n_tokens + dropped_tokens.
# A set not listed (shakespeare) counts as none.
ZERO_SHOT_TOKENS = {"gpt2": {"wikitext2": 271_924, "ptb": 101_873, "lm1b": 178_482},
                    "bytes": {"wikitext2": 1_240_786, "ptb": 442_423, "lm1b": 829_491}}
# LAMBADA (5,153 items, load_lambada on the data kit): forward tokens of one pass per item
# (sum of context + target tokens) and of one pass per target token (an encoder's exact scoring)
LAMBADA_TOKENS = {"gpt2": (430_230, 550_301), "bytes": (1_688_837, 11_326_251)}
FORWARD_SHARE = 1 / 3  # a forward pass's share of a training step's FLOPs (forward + backward = 3 forwards)


def _windows(suite, seq_len: int, tokenizer: str) -> list[int]:
    """Windows of each dataset the suite scores: its validation (and test) windows, then each
    zero-shot set's chunks (all of them, or zero_shot_chunks)."""
    out = [suite.val_chunks] * (2 if suite.test_split else 1)
    for name in suite.zero_shot:
        chunks = ZERO_SHOT_TOKENS.get(tokenizer, ZERO_SHOT_TOKENS["gpt2"]).get(name, 0) // seq_len
        out.append(chunks if suite.zero_shot_chunks is None else min(chunks, suite.zero_shot_chunks))
    return out


def eval_forward_tokens(spec) -> float:
    """Tokens its evaluation suite runs through the model (each weights kind: EMA and raw for an
    EMA run). Per window of L tokens: exact L2R L (a decoder's one causal pass) or L x L (a family
    scored by an ELBO is an encoder: one masked pass per token, batched but not fewer); perm_mc
    k_mc x L; elbo estimators x k_mc x L; the ensemble n_targets x m_max x L/2 on its windows (a
    slot's prefix, L/2 on average); infilling one pass, or span passes for an encoder, per chunk of
    one set; LAMBADA as LAMBADA_TOKENS; generation (first weights) samples x steps x L for an
    encoder, samples x L for a decoder (cached), plus samples x L per step count for the judge's
    score (counted at this model's FLOPs per token)."""
    suite, L = EvalSuite.parse(spec.eval_suite).suite, spec.seq_len
    metrics = FAMILIES[spec.family].SPEC.metrics
    encoder = "elbo" in metrics
    windows = _windows(suite, L, spec.tokenizer)
    estimators = len(ESTIMATORS) + (spec.options.get("loss") == "sedd")
    per_window = (L * L if encoder else L) + suite.k_mc * L * (("perm_mc" in metrics) + estimators * encoder)
    tokens = sum(windows) * per_window
    if "ctx_ensemble" in metrics:
        tokens += min(suite.ensemble_chunks, windows[0]) * suite.n_targets * suite.m_max * L / 2
    if suite.infill_span:
        tokens += windows[1 if len(windows) > 1 else 0] * L * (suite.infill_span if encoder else 1)
    if suite.lambada:
        tokens += LAMBADA_TOKENS.get(spec.tokenizer, LAMBADA_TOKENS["gpt2"])[encoder]
    kinds = 2 if spec.ema > 0 else 1
    generation = 0.0
    if suite.generate:
        passes = (sum(suite.gen_steps) if encoder else len(suite.gen_steps)) + len(suite.gen_steps)  # + the judge
        generation = suite.gen_samples * suite.gen_repeats * len(suite.gen_sampling) * L * passes
    return kinds * tokens + generation


def eval_flops(spec, train_flops_per_token: float) -> float:
    """Evaluation FLOPs of a run: its suite's forward tokens x a forward pass's FLOPs per token
    (FORWARD_SHARE of the family's training FLOPs per token, the convention of `flops`)."""
    return eval_forward_tokens(spec) * train_flops_per_token * FORWARD_SHARE


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
EVAL_COLUMNS = ("eval_flops", "eval_gpu_h")  # evaluation's cost per run (eval_flops), after COLUMNS


def eval_cells(row: PlanRow) -> tuple[str, str]:
    """A row's EVAL_COLUMNS: its evaluation FLOPs and the GPU-hours they add (`gpu_hours`)."""
    return f"{row.eval_flops:.2e}", f"{gpu_hours(row.eval_flops):.3g}"


def eval_total_line(study: StudySpec, rows: list[PlanRow]) -> str:
    """The totals line of the evaluation's cost."""
    total = sum(r.eval_flops for r in rows)
    suites = sorted({c.spec.eval_suite for c in study.cells})
    return (f"evaluation ({', '.join(suites)} suite): {total:.3e} forward FLOPs, {gpu_hours(total):.3g} GPU-hours "
            f"more at the same MFU (every rank scores its share: jobs.eval.shard)")


def format_plan(study: StudySpec, rows: list[PlanRow], cores: int, has_gpu: bool) -> str:
    """The dry-run text: header, table, totals, GPU-hours and (without GPUs) the CPU estimate."""
    columns = COLUMNS + EVAL_COLUMNS + (("axes",) if any(r.axes for r in rows) else ())
    table = [columns] + [(r.run_id, r.family, r.variant if r.role == "compared" else f"({r.role})", r.network,
                          f"{r.ema:g}", r.size, str(r.seed), human(r.params), human(r.params_family),
                          human(r.tokens), f"{r.flops:.2e}", str(r.steps), *eval_cells(r), r.axes)[:len(columns)]
                         for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = [f"study {study.name} (hash {study.study_hash}): {len(rows)} runs"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    total_flops = sum(r.flops for r in rows)
    lines.append(f"total: {len(rows)} runs, {human(sum(r.tokens for r in rows))} tokens, "
                 f"{total_flops:.3e} training FLOPs, {sum(r.steps for r in rows)} steps")
    lines.append(f"estimate: {gpu_hours(total_flops):.3g} GPU-hours on {GPU_NAME} "
                 f"({H100_BF16_DENSE_FLOPS / 1e12:.0f} TFLOP/s peak, {PEAK_SOURCE}) at {DEFAULT_MFU:.0%} MFU "
                 "(the mfu runs log: same peak and FLOP count)")
    lines.append(eval_total_line(study, rows))
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


# ---------------------------------------------------------------------------------------------
# The memory plan: each run's micro-batch, accumulation and ranks (jobs.train.preflight's memory model)


@dataclass(frozen=True)
class MemoryRow:
    """How one run splits its batch: `micro` sequences per forward pass x `accumulation` passes per
    optimizer step on each of `ranks` ranks, using `rank_bytes` of the memory model per rank."""

    run_id: str
    family: str
    size: str
    micro: int
    accumulation: int
    ranks: int
    rank_bytes: int

    @property
    def batch(self) -> int:
        return self.micro * self.accumulation * self.ranks


def memory_rows(study: StudySpec, ranks: int, device_bytes: int) -> list[MemoryRow]:
    """Each run's plan (jobs.train.preflight.plan_micro_batch) on `ranks` devices of `device_bytes`;
    runs that differ only in seed, lr or schedule share one computation."""
    planned: dict[tuple, tuple[int, int, int]] = {}
    rows = []
    for cell in study.cells:
        spec = cell.spec
        key = (spec.family, spec.size, spec.model_options, spec.tokenizer, spec.seq_len, spec.batch_size,
               spec.micro_batch_size, spec.ema > 0, spec.engine, spec.zero_stage)
        if key not in planned:
            planned[key] = plan_micro_batch(spec, ranks, device_bytes)
        micro, accumulation, need = planned[key]
        rows.append(MemoryRow(spec.run_id, spec.family, spec.size, micro, accumulation, ranks, need))
    return rows


def memory_refusal(rows: list[MemoryRow], device_bytes: int, source: str) -> str | None:
    """One line naming the first run that does not fit `device_bytes` (from `source`, e.g.
    `--gpu-memory 80`) even at micro-batch 1, with the fixes; None when every run fits."""
    usable = device_bytes * USABLE_FRACTION
    over = [r for r in rows if r.rank_bytes > usable]
    if not over:
        return None
    worst = max(over, key=lambda r: r.rank_bytes)
    return (f"gpu-memory: run {worst.run_id} ({worst.family} {worst.size}) needs about "
            f"{worst.rank_bytes / GIB:.1f} GiB per rank even at micro-batch 1 on {worst.ranks} rank(s), more than "
            f"{USABLE_FRACTION:.0%} of {source} ({len(over)} of {len(rows)} runs do not fit); fix: more GPUs "
            "(--gpus-per-node, --nodes), ZeRO stage 3 (--set resources.zero_stage=3), smaller --sizes or "
            "--seq-len, or a larger --gpu-memory if the GPUs have it")


def format_memory_plan(rows: list[MemoryRow], device_bytes: int, source: str) -> str:
    """The dry-run's memory section: per run micro-batch x accumulation x ranks = batch and the
    GiB per rank, under the stated assumption and the memory model's formula and margin."""
    table = [("run_id", "size", "micro x accum x ranks", "GiB/rank")]
    table += [(r.run_id, r.size, f"{r.micro} x {r.accumulation} x {r.ranks} = {r.batch}",
               f"{r.rank_bytes / GIB:.1f}") for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [f"memory plan on {source} (planned to {USABLE_FRACTION:.0%}: {device_bytes * USABLE_FRACTION / GIB:.1f}"
             " GiB): sequences per forward x accumulation steps x ranks = the batch"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    lines.append(f"memory model: {memory_formula()}")
    return "\n".join(lines)
