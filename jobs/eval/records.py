"""Evaluation records (CONTRACTS.md "Records"): one row per metric x dataset x estimator setting.

The contract's columns come first; extra columns record the estimator setting so that every
number can be traced to how it was measured:
  estimator      how the value was estimated (exact, perm_mc, mdlm, kdce, ctx_ensemble, ...)
  k_mc           Monte-Carlo draws per sequence (permutations or noise samples)
  n_targets      scored target slots per sequence (ensembling subsample), null = all
  steps          sampling steps (generation rows)
  tokens_per_step  parallel tokens per step (joint-vs-marginal rows)
  temperature, top_p  the sampling setting of generation rows (1.0 and 1.0: plain sampling)
  repeats        independent generations a generation row pools (gen_time_s: their mean)
  evaluator      run id of the model that scored samples (gen_ppl)
  weights        ema | raw (null for properties of the data: nll_unigram)
  role           compared | judge (the judge scores generated samples and enters no fit or gap)
  chunking       how the dataset was cut into sequences
  eval_seed      the seed all evaluation randomness derives from
  device         where the model ran: cpu, or cuda (<GPU name>) (jobs.run.device.placement)
  precision      fp32, or bf16 (autocast, where the run trained with it)
  numerics       the numerics path the run trained on (jobs.run.numerics: its id, or the ids of
                 its segments joined by "+" where a resume changed path; null: not recorded)
  eval_numerics  the numerics path this value was computed on
  coverage_tokens  tokens the value was computed over (windows x their length)
  split_tokens     tokens in the split those windows were drawn from (coverage share = ratio)
  budget_flops   the training-FLOP budget whose isoFLOP profile planned the run (null otherwise)
  plan_tokens    the tokens its plan asked for, before rounding to whole steps (null: a plain grid run)
  epochs         passes over the training split by this step; unique_tokens: the distinct training
                 tokens those covered (expected, jobs.data.ledger)
  sweep_<name>   the value of each swept run setting (lr, warmup, batch_size, beta2, ...; scaling.study.sweep)
  suite          the evaluation suite the row was measured with (jobs.eval.evaluate --eval-suite)
  suite_hash     what that suite measured then (jobs.data.suites.Suite.fingerprint, with any overrides)
  run_steps      the steps the run was planned for: a row with step < run_steps scored a partial
                 checkpoint (jobs.eval.evaluate --allow-partial), not the run's result
  n_layer        the core's depth (the summary states depth changes between rungs)
Per-token units are exact: under the `bytes` tokenizer a token is a byte, so a `nats/token`
value is written as `nats/byte` (`run_context` carries the run's token unit to `record`).
`se` is the sampling standard error over the evaluated windows, sd(per-window values) / sqrt(n),
which counts the choice of windows and the Monte-Carlo draws together (jobs.eval.windows; the
per-window values are in the run's eval_windows.parquet); for fractions (lambada_acc, infill_em) it
is the binomial standard error over items.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl

from cli import InputError, record_checks, schema
from jobs.data.ledger import ledger_columns
from jobs.run.files import atomic_write_bytes
from models.ladder import get_shape

EVAL_FILE = "eval.parquet"
FACTOR_PREFIX = schema.FACTOR_PREFIX  # optional columns: a run's level of each factor of a factorial design
SWEEP_PREFIX = schema.SWEEP_PREFIX  # optional columns: a run's value of each swept setting (numbers)

DTYPES = {"str": pl.String, "int": pl.Int64, "float": pl.Float64}
# The columns, their kinds and ranges are one table, cli.schema.RECORD_COLUMNS (analysis reads the same).
CONTRACT_SCHEMA: dict[str, pl.DataType] = {name: DTYPES[col.kind] for name, col in schema.RECORD_COLUMNS.items()
                                           if col.contract}
EXTRA_SCHEMA: dict[str, pl.DataType] = {name: DTYPES[col.kind] for name, col in schema.RECORD_COLUMNS.items()
                                        if not col.contract}
SCHEMA = {**CONTRACT_SCHEMA, **EXTRA_SCHEMA}
UNITS = schema.UNITS  # nats/token, nats/byte, bits/byte, ppl, s, fraction
TOKEN_UNIT = "_token_unit"  # context key (not a column): what one token is under the run's tokenizer
BYTE_TOKENIZERS = ("bytes",)
# A new evaluation replaces earlier rows with the same key (latest setting wins per estimator).
REPLACE_KEY = ("dataset", "split", "metric", "estimator", "weights")


def run_context(spec, counts: dict[str, int], flops_per_token: int, step: int, weights: str) -> dict[str, Any]:
    """Columns shared by every row of one evaluated checkpoint.

    n_params is the shape's core (non-embedding) count, the default for fits (docs/DESIGN.md §4.5);
    n_params_family the family's own non-embedding count; tokens are those seen by `step`.
    """
    tokens = int(step) * spec.batch_size * spec.seq_len
    return {
        "study": spec.study, "run_id": spec.run_id, "family": spec.family, "variant": spec.variant,
        "size": spec.size, "n_params": int(counts["core"]), "n_params_family": int(counts["family_non_embedding"]),
        "tokens": tokens, "flops": float(flops_per_token) * tokens, "seed": spec.seed, "step": int(step),
        "weights": weights, "role": spec.role, "run_steps": int(spec.steps), "n_layer": get_shape(spec.size).n_layer,
        **factor_columns(spec), **plan_columns(spec), **ledger_columns(spec, tokens),
        TOKEN_UNIT: "nats/byte" if spec.tokenizer in BYTE_TOKENIZERS else "nats/token",
    }


def factor_columns(spec) -> dict[str, str]:
    """Per-run factor levels of an ablation design (`factor_<name>` in the spec's tracking), as text."""
    return {key: str(value) for key, value in spec.tracking if key.startswith(FACTOR_PREFIX)}


def plan_columns(spec) -> dict[str, Any]:
    """Where the study's plan put the run: budget_flops, plan_tokens (null when it set none) and
    its `sweep_<name>` values, from the spec's tracking (scaling.study.sweep)."""
    tags = dict(spec.tracking)
    return {"budget_flops": tags.get("budget_flops"), "plan_tokens": tags.get("plan_tokens"),
            **{key: float(value) for key, value in tags.items() if key.startswith(SWEEP_PREFIX)}}


def _extra_columns(names) -> dict[str, pl.DataType]:
    """Schema of the optional factor (text) and sweep (number) columns among `names`."""
    return {name: pl.String if name.startswith(FACTOR_PREFIX) else pl.Float64 for name in sorted(names)
            if name.startswith((FACTOR_PREFIX, SWEEP_PREFIX))}


def record(context: dict[str, Any], *, dataset: str, split: str, metric: str, value: float, unit: str,
           n_samples: int, se: float | None = None, m: int | None = None, **extra: Any) -> dict[str, Any]:
    """One row; `extra` may set any EXTRA_SCHEMA column."""
    unknown = sorted(set(extra) - set(EXTRA_SCHEMA))
    if unknown:
        raise ValueError(f"record: unknown column(s) {unknown}; valid extras: {sorted(EXTRA_SCHEMA)}")
    if unit not in UNITS:
        raise ValueError(f"record: unit {unit!r} must be one of {UNITS}")
    if unit == "nats/token":
        unit = context.get(TOKEN_UNIT, unit)
    return {**context, "dataset": dataset, "split": split, "metric": metric, "value": float(value),
            "se": None if se is None else float(se), "n_samples": int(n_samples), "m": m, "unit": unit,
            **extra}


def to_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a DataFrame with the fixed schema (missing extras are null) plus any factor and sweep columns."""
    dtypes = {**SCHEMA, **_extra_columns({key for row in rows for key in row})}
    full = [{name: row.get(name) for name in dtypes} for row in rows]
    return pl.DataFrame(full, schema=dtypes, orient="row")


def concat_frames(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Record frames as one, with `to_frame`'s columns in its order (to_frame of all their rows)."""
    names = {name for frame in frames for name in frame.columns}
    dtypes = {**SCHEMA, **_extra_columns(names)}
    merged = pl.concat(frames, how="diagonal") if frames else to_frame([])
    missing = [pl.lit(None, dtype).alias(n) for n, dtype in dtypes.items() if n not in merged.columns]
    return merged.with_columns(missing).select(list(dtypes)).cast(dtypes)


def read_records(run_dir: str | Path) -> pl.DataFrame:
    """The run's eval.parquet (an empty frame with the schema when there is none); InputError when
    a column is missing or of another kind (cli.record_checks.record_dtype_problem)."""
    path = Path(run_dir) / EVAL_FILE
    if not path.exists():
        return to_frame([])
    frame = pl.read_parquet(path)
    problem = record_checks.record_dtype_problem(frame.schema)
    if problem:
        raise InputError(f"{path}: {problem}; evaluate the run again (python -m jobs.eval.evaluate --run-dir {run_dir})")
    dtypes = {**SCHEMA, **_extra_columns(frame.columns)}
    missing = [pl.lit(None, dtype).alias(n) for n, dtype in dtypes.items() if n not in frame.columns]
    return frame.with_columns(missing).select(list(dtypes)).cast(dtypes)


def merge_records(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Old rows whose (dataset, split, metric, estimator) the new frame does not measure, then new."""
    keys = new.select(REPLACE_KEY).unique()
    kept = old.join(keys, on=list(REPLACE_KEY), how="anti", nulls_equal=True)
    return pl.concat([kept, new], how="diagonal")  # factor columns may be new


def write_records(run_dir: str | Path, new: pl.DataFrame, drop: tuple[str, ...] = (),
                  fresh: bool = False) -> pl.DataFrame:
    """Merge `new` into run_dir/eval.parquet atomically (temp + fsync + rename); returns all rows.

    Old rows of the metrics in `drop` go too (e.g. gen_ppl of samples that were just replaced);
    `fresh` replaces every old row (a study's re-evaluation with its new suite)."""
    old = to_frame([]) if fresh else read_records(run_dir)
    if drop and not old.is_empty():
        old = old.filter(~pl.col("metric").is_in(list(drop)))
    merged = merge_records(old, new)
    buffer = io.BytesIO()
    merged.write_parquet(buffer)
    atomic_write_bytes(Path(run_dir) / EVAL_FILE, buffer.getvalue())
    return merged
