"""Generate samples from a run and measure them: generative perplexity, time, joint-vs-marginal.

`python -m jobs.eval.generate --run-dir DIR [--n-samples N] [--steps 64,128] ...` writes
`run_dir/samples.parquet` (one row per sample) and merges these records into eval.parquet:
  gen_ppl       per-sample exp(mean NLL) under the judge: an AR run that is not one of the compared
                runs (the study's dedicated judge run, `spec.judge`, or --judge-run); value = mean,
                se = std / sqrt(n); `evaluator` = the judge's run id. A model scoring its own
                samples pays no KL term, so no compared run ever judges. When the judge has no
                checkpoint yet, `score_samples` adds the rows later from samples.parquet.
  gen_entropy   per-sample unigram entropy of the generated tokens (nats/token), mean and se:
                repetitive text shows as low entropy beside a flattering gen_ppl
  gen_time_s    wall seconds to generate the n samples (batched), per step count; with R repeats
                (independent draws, `repeats`), the mean over them, se = their std / sqrt(R)
  gen_self_nll  families that declare `decode_order_nll` (the decoders): samples decoded k tokens
                per step (linear schedule) scored by the same model along their decode order, per
                k (`tokens_per_step`): the cost of the factorised parallel step, measured against
                k = 1 (exact ancestral sampling)
Every row carries its sampling setting (`temperature`, `top_p`: 1.0 and 1.0 is plain sampling; the
review's annealing is 0.7 and 0.95); gen_ppl and gen_entropy pool the samples of all repeats.
Each family samples with its own `sample` (its module under models/families), which names its
method (the `estimator` column and samples.parquet's `method`).
"""
from __future__ import annotations

import argparse
import io
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import torch

from cli import InputError, Parser, float_arg, int_arg, parse, run_main
from jobs.train.checkpoint import latest_valid, load_run
from jobs.data.corpus import get_encoding
from jobs.run.device import placement
from jobs.run.numerics import record_columns
from jobs.train.preflight import check_eval_dir
from jobs.eval.records import read_records, record, run_context, to_frame, write_records
from jobs.run.files import atomic_write_bytes
from jobs.run.lock import holding
from jobs.run.spec import RunSpec
from cli import rules
from models import likelihood as lk
from models import sampling as sm
from models.families import JUDGE_FAMILY

SAMPLES_FILE = "samples.parquet"
SAMPLING_COLUMNS = ("temperature", "top_p")  # GenSettings.columns(): the sampling setting of a row
GEN_METRICS = ("gen_time_s", "gen_entropy", "gen_ppl", "gen_self_nll")
GEN_SEED = 20240918  # default sampling seed, recorded as eval_seed


@dataclass(frozen=True)
class GenSettings:
    """How to sample: counts, step settings, schedule/sampler and nucleus settings."""

    n_samples: int = 16
    length: int | None = None  # default: the model's context
    steps: tuple[int, ...] = (64,)
    schedule: str = "linear"  # decoders
    sampler: str | None = None  # MDM; default ancestral (sedd models: analytic)
    sampling: sm.Sampling = field(default_factory=sm.Sampling)
    tokens_per_step: tuple[int, ...] = (1, 2, 4, 8)  # joint-vs-marginal sweep (decoders)
    seed: int = GEN_SEED
    repeats: int = 1  # independent generations per step count (gen_time_s: their mean and spread)

    def columns(self) -> dict:
        """The record and sample columns naming this sampling setting."""
        return {"temperature": float(self.sampling.temperature), "top_p": float(self.sampling.top_p)}


def _request(gs: GenSettings, length: int, steps: int) -> sm.Request:
    """The family's sampling request for one step count."""
    return sm.Request(gs.n_samples, length, steps, gs.schedule, gs.sampler, gs.sampling)


# ---- the judge ---------------------------------------------------------------------------------
def judge_dir(run_dir: Path, spec, judge_run: str | Path | None = None) -> Path | None:
    """The judge's run directory: --judge-run, else the spec's (a sibling run id or a path)."""
    chosen = judge_run or spec.judge
    if not chosen:
        return None
    path = Path(chosen)
    return path if path.is_absolute() or len(path.parts) > 1 else Path(run_dir).parent / chosen


def load_judge(run_dir: Path, spec, length: int, judge_run: str | Path | None = None):
    """(model, run id) of the judge; (None, None) when there is none or it has no checkpoint yet.

    ValueError when the judge cannot judge: not an AR run, another tokenizer, a shorter context,
    or one of the compared runs of this study."""
    path = judge_dir(run_dir, spec, judge_run)
    if path is None:
        return None, None
    try:
        other = RunSpec.load(path / "spec.json")
    except (OSError, ValueError):
        raise ValueError(f"--judge-run: {path} is not a run directory with a valid spec.json") from None
    if other.family != JUDGE_FAMILY or other.tokenizer != spec.tokenizer or other.seq_len < length:
        raise ValueError(f"--judge-run: {path} must be an AR run with tokenizer {spec.tokenizer!r} and a "
                         f"context of at least {length}")
    if other.role != "judge" and other.study == spec.study or other.run_id == spec.run_id:
        raise ValueError(f"--judge-run: {path} is a compared run of study {spec.study!r}; a model cannot "
                         "judge its own comparison (use the study's judge run or one from another study)")
    if latest_valid(path) is None:
        return None, None
    model, other, _ = load_run(path, "auto", device="auto")
    return model, other.run_id


def unigram_entropy(samples: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each sample's token frequencies: [N, L] -> [N]; a constant sample has 0."""
    out = []
    for row in samples:
        p = torch.bincount(row).double()
        p = p[p > 0] / row.numel()
        out.append(-(p * p.log()).sum())
    return torch.stack(out)


# ---- measurement -------------------------------------------------------------------------------
def _gen_record(ctx, metric, value, unit, n, **extra) -> dict:
    return record(ctx, dataset="generated", split="samples", metric=metric, value=value, unit=unit,
                  n_samples=n, **extra)


def _mean_se(values: torch.Tensor) -> tuple[float, float | None]:
    values = values.double()
    se = float(values.std() / math.sqrt(len(values))) if len(values) > 1 else None
    return float(values.mean()), se


def self_nll_rows(model, ctx, gs: GenSettings, length: int) -> list[dict]:
    """gen_self_nll per tokens-per-step k (families declaring `decode_order_nll`): joint NLL of
    k-parallel samples."""
    rows = []
    for k in gs.tokens_per_step:
        g = torch.Generator(model.wte.weight.device).manual_seed(gs.seed + k)
        nll, steps = model.decode_order_nll(gs.n_samples, length, k, gs.sampling, g)
        value, se = _mean_se(nll)
        rows.append(_gen_record(ctx, "gen_self_nll", value, "nats/token", gs.n_samples, se=se,
                                estimator="decode_order", tokens_per_step=k, steps=steps, **gs.columns()))
    return rows


def generation_rows(model, spec, ctx: dict, run_dir: Path, seed: int = GEN_SEED,
                    gs: GenSettings | None = None, judge_run=None) -> tuple[list[dict], list[dict]]:
    """(record rows, sample rows) for every step count of `gs`."""
    gs = gs or GenSettings(seed=seed)
    length = gs.length or model.seq_len
    evaluator, evaluator_id = load_judge(Path(run_dir), spec, length, judge_run)
    if model.sample is None:
        raise ValueError(f"family: {model.family!r} declares no sampler (`sample`); it cannot generate")
    steps_list = (length,) if model.SPEC.steps_are_length else gs.steps
    rows, samples = [], []
    for steps in steps_list:
        out, times, drawn = None, [], []
        for repeat in range(gs.repeats):
            out, elapsed = _timed_sample(model, spec, gs, length, steps, repeat)
            times.append(elapsed)
            drawn.append(out.tokens)
        tokens = torch.cat(drawn)  # [repeats * n_samples, length]
        # the steps run, not those asked for
        extra = dict(steps=out.steps, estimator=out.method, repeats=gs.repeats, **gs.columns())
        value, se = _mean_se(torch.tensor(times))
        rows.append(_gen_record(ctx, "gen_time_s", value, "s", gs.n_samples, se=se, **extra))
        value, se = _mean_se(unigram_entropy(tokens))
        rows.append(_gen_record(ctx, "gen_entropy", value, "nats/token", len(tokens), se=se, **extra))
        if evaluator is not None:
            value, se = _mean_se(lk.sample_ppl(evaluator, tokens))
            rows.append(_gen_record(ctx, "gen_ppl", value, "ppl", len(tokens), se=se, evaluator=evaluator_id,
                                    **extra))
        samples += _sample_rows(spec, tokens, extra, gs.n_samples)
    if model.decode_order_nll is not None:
        rows += self_nll_rows(model, ctx, gs, length)
    return rows, samples


def _timed_sample(model, spec, gs: GenSettings, length: int, steps: int, repeat: int):
    """(the family's Generation, wall seconds) of one batch; repeat 0 keeps the stream of a single
    generation, later repeats draw from their own."""
    g = torch.Generator(model.wte.weight.device).manual_seed(gs.seed * 1_000_003 + steps + 7_919 * repeat)
    start = time.perf_counter()
    with placement(spec).autocast():
        out = model.sample(_request(gs, length, steps), g)
    _synchronize(model)
    elapsed = time.perf_counter() - start
    if not out.method:
        raise ValueError(f"family: {model.family!r}'s `sample` names no method (Generation.method)")
    return out, elapsed


def generation_sweep(model, spec, ctx: dict, run_dir: Path, settings: list[GenSettings],
                     judge_run=None) -> tuple[list[dict], list[dict]]:
    """(record rows, sample rows) of every sampling setting in `settings` (e.g. plain and annealed)."""
    rows, samples = [], []
    for gs in settings:
        got_rows, got_samples = generation_rows(model, spec, ctx, run_dir, gs=gs, judge_run=judge_run)
        rows += got_rows
        samples += got_samples
    return rows, samples


def _synchronize(model) -> None:
    """Wait for the model's GPU (timings cover the work, not its launch)."""
    if model.wte.weight.device.type == "cuda":
        torch.cuda.synchronize(model.wte.weight.device)


def _sample_rows(spec, tokens: torch.Tensor, extra: dict, per_repeat: int) -> list[dict]:
    enc = get_encoding(spec.tokenizer)
    return [{"run_id": spec.run_id, "method": extra["estimator"], "steps": extra["steps"],
             "temperature": extra["temperature"], "top_p": extra["top_p"], "repeat": i // per_repeat,
             "sample": i, "tokens": row, "text": enc.decode(row, errors="replace")}
            for i, row in enumerate(tokens.tolist())]


def write_samples(run_dir: Path, samples: list[dict]) -> None:
    """samples.parquet, atomically."""
    buffer = io.BytesIO()
    pl.DataFrame(samples, schema={"run_id": pl.String, "method": pl.String, "steps": pl.Int64,
                                  "temperature": pl.Float64, "top_p": pl.Float64, "repeat": pl.Int64,
                                  "sample": pl.Int64, "tokens": pl.List(pl.Int64), "text": pl.String}
                 ).write_parquet(buffer)
    atomic_write_bytes(run_dir / SAMPLES_FILE, buffer.getvalue())


def score_samples(run_dir: str | Path, judge_run: str | Path | None = None) -> pl.DataFrame | None:
    """Add gen_ppl rows for samples.parquet under the judge (rows the run's own generation could
    not write because its judge was not trained yet). None when there is nothing to score."""
    run_dir = Path(run_dir)
    if not (run_dir / SAMPLES_FILE).exists():
        return None
    spec = RunSpec.load(run_dir / "spec.json")
    records = read_records(run_dir)
    if not records.filter(pl.col("metric") == "gen_ppl").is_empty():
        return None  # scored already
    samples = pl.read_parquet(run_dir / SAMPLES_FILE)
    samples = samples.with_columns([pl.lit(None, pl.Float64).alias(c) for c in SAMPLING_COLUMNS
                                    if c not in samples.columns])  # files written before the columns
    length = int(samples["tokens"].list.len().max())
    judge, judge_id = load_judge(run_dir, spec, length, judge_run)
    if judge is None:
        return None
    timed = records.filter(pl.col("metric") == "gen_time_s")
    timed = timed.with_columns([pl.lit(None, pl.Float64).alias(c) for c in SAMPLING_COLUMNS if c not in timed.columns])
    rows = []
    for (method, steps, *sampling), group in samples.group_by(["method", "steps", *SAMPLING_COLUMNS],
                                                              maintain_order=True):
        same = [pl.col(c).eq_missing(v) for c, v in zip(SAMPLING_COLUMNS, sampling)]
        base = timed.filter((pl.col("estimator") == method) & (pl.col("steps") == steps) & pl.all_horizontal(same)
                            ).row(0, named=True)
        ctx = {k: v for k, v in base.items() if k not in ("dataset", "split", "metric", "value", "se", "n_samples",
                                                           "m", "unit", "estimator", "steps", "evaluator", "repeats",
                                                           *SAMPLING_COLUMNS)}
        with torch.no_grad():
            value, se = _mean_se(lk.sample_ppl(judge, torch.tensor(group.sort("sample")["tokens"].to_list())))
        rows.append(_gen_record(ctx, "gen_ppl", value, "ppl", len(group), se=se, evaluator=judge_id,
                                steps=steps, estimator=method, repeats=base.get("repeats"),
                                **dict(zip(SAMPLING_COLUMNS, sampling))))
    return write_records(run_dir, to_frame(rows))


def generate(run_dir: str | Path, gs: GenSettings = GenSettings(), weights: str = "auto",
             judge_run: str | Path | None = None) -> pl.DataFrame:
    """Sample from the run, write samples.parquet, merge records into eval.parquet."""
    run_dir = Path(run_dir)
    model, spec, info = load_run(run_dir, weights, device="auto")
    length = gs.length or model.seq_len
    if length > model.seq_len:
        raise InputError(f"--length: {length} exceeds the model's context {model.seq_len}")
    ctx = {**run_context(spec, model.count_params(), model.flops_per_token(spec.micro_batch), info.step, info.weights),
           "eval_seed": gs.seed, **placement(spec).columns(), **record_columns(run_dir, model, placement(spec))}
    try:
        rows, samples = generation_rows(model, spec, ctx, run_dir, gs=gs, judge_run=judge_run)
    except ValueError as error:
        raise InputError(str(error)) from None
    write_samples(run_dir, samples)
    # new samples replace the old: every generation row of the old ones goes (none is left unmatched)
    return write_records(run_dir, to_frame(rows), drop=GEN_METRICS)


# ---- CLI ---------------------------------------------------------------------------------------
def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--{name}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"--{name}: every value must be a positive integer, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The `python -m jobs.eval.generate` argument parser."""
    p = Parser(prog="python -m jobs.eval.generate", description="Sample from a run and score the samples.")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--n-samples", type=int_arg, default=16)
    p.add_argument("--length", type=int_arg, help="tokens per sample (default: the model's context)")
    p.add_argument("--steps", default="64", help="comma-separated step counts T (decoders, MDMs)")
    p.add_argument("--schedule", default="linear",
                   help="decoders: linear | cosine | linear-trunc | cosine-trunc (the official rounding) | bernoulli")
    p.add_argument("--sampler", help="MDM: ancestral | analytic | euler")
    p.add_argument("--temperature", type=float_arg, default=1.0)
    p.add_argument("--top-p", type=float_arg, default=1.0)
    p.add_argument("--tokens-per-step", default="1,2,4,8", help="decoders: joint-vs-marginal sweep")
    p.add_argument("--judge-run", "--evaluator-run", dest="judge_run",
                   help="AR run directory that scores samples (default: the study's judge run); never a "
                        "compared run of the same study")
    p.add_argument("--weights", default="auto")
    p.add_argument("--seed", type=int_arg, default=GEN_SEED)
    return p


def settings_from_args(args) -> GenSettings:
    """Validated GenSettings from parsed CLI arguments (InputError naming the field)."""
    rules.positive_int("--n-samples", args.n_samples)
    if args.length is not None:
        rules.positive_int("--length", args.length)
    rules.seed("--seed", args.seed)
    if args.schedule not in sm.SCHEDULES:
        raise InputError(f"--schedule: {args.schedule!r} is not one of {list(sm.SCHEDULES)}")
    if args.sampler is not None and args.sampler not in sm.MDM_SAMPLERS:
        raise InputError(f"--sampler: {args.sampler!r} is not one of {list(sm.MDM_SAMPLERS)}")
    if not (args.temperature >= 0 and 0 < args.top_p <= 1):
        raise InputError("--temperature/--top-p: need temperature >= 0 and 0 < top_p <= 1")
    return GenSettings(args.n_samples, args.length, _ints(args.steps, "steps"), args.schedule, args.sampler,
                       sm.Sampling(args.temperature, args.top_p), _ints(args.tokens_per_step, "tokens-per-step"),
                       args.seed)


def main(argv: list[str] | None = None) -> int:
    """CLI: exit 0 on success, 2 on bad input (one line on stderr, nothing written)."""
    args = parse(build_parser(), argv)
    if isinstance(args, int):
        return args

    def body() -> int:
        gs = settings_from_args(args)
        check_eval_dir(Path(args.run_dir))
        with holding(args.run_dir):
            frame = generate(args.run_dir, gs, args.weights, args.judge_run)
        print(f"wrote {SAMPLES_FILE} and {len(frame)} records to {args.run_dir}")
        return 0

    return run_main("error", body)


if __name__ == "__main__":
    sys.exit(main())
