"""Evaluation records (CONTRACTS.md "Records"): one row per metric x dataset x estimator setting.

The contract's columns come first; extra columns record the estimator setting so that every
number can be traced to how it was measured:
  estimator      how the value was estimated (exact, perm_mc, mdlm, kdce, ctx_ensemble, ...)
  k_mc           Monte-Carlo draws per sequence (permutations or noise samples)
  n_targets      scored target slots per sequence (ensembling subsample), null = all
  steps          sampling steps (generation rows)
  tokens_per_step  parallel tokens per step (joint-vs-marginal rows)
  evaluator      run id of the model that scored samples (gen_ppl)
  weights        ema | raw (null for properties of the data: nll_unigram)
  role           compared | judge (the judge scores generated samples and enters no fit or gap)
  chunking       how the dataset was cut into sequences
  eval_seed      the seed all evaluation randomness derives from
  device         where the model ran: cpu, or cuda (<GPU name>) (jobs.device.placement)
  precision      fp32, or bf16 (autocast, where the run trained with it)
  n_layer        the core's depth (the summary states depth changes between rungs)
Per-token units are exact: under the `bytes` tokenizer a token is a byte, so a `nats/token`
value is written as `nats/byte` (`run_context` carries the run's token unit to `record`).
`se` is the Monte-Carlo standard error given the evaluated sequences (null for exact values);
for fractions (lambada_acc, infill_em) it is the binomial standard error over items.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl

from jobs.runfiles import atomic_write_bytes
from models.ladder import get_shape

EVAL_FILE = "eval.parquet"
FACTOR_PREFIX = "factor_"  # optional columns: a run's level of each factor of a factorial design

CONTRACT_SCHEMA: dict[str, pl.DataType] = {
    "study": pl.String, "run_id": pl.String, "family": pl.String, "variant": pl.String,
    "size": pl.String, "n_params": pl.Int64, "n_params_family": pl.Int64, "tokens": pl.Int64,
    "flops": pl.Float64, "seed": pl.Int64, "step": pl.Int64, "dataset": pl.String,
    "split": pl.String, "metric": pl.String, "value": pl.Float64, "se": pl.Float64,
    "n_samples": pl.Int64, "m": pl.Int64, "unit": pl.String,
}
EXTRA_SCHEMA: dict[str, pl.DataType] = {
    "estimator": pl.String, "k_mc": pl.Int64, "n_targets": pl.Int64, "steps": pl.Int64,
    "tokens_per_step": pl.Int64, "evaluator": pl.String, "weights": pl.String,
    "chunking": pl.String, "eval_seed": pl.Int64, "role": pl.String, "device": pl.String,
    "precision": pl.String, "n_layer": pl.Int64,
}
SCHEMA = {**CONTRACT_SCHEMA, **EXTRA_SCHEMA}
UNITS = ("nats/token", "nats/byte", "bits/byte", "ppl", "s", "fraction")
TOKEN_UNIT = "_token_unit"  # context key (not a column): what one token is under the run's tokenizer
BYTE_TOKENIZERS = ("bytes",)
# A new evaluation replaces earlier rows with the same key (latest setting wins per estimator).
REPLACE_KEY = ("dataset", "split", "metric", "estimator", "weights")


def run_context(spec, counts: dict[str, int], flops_per_token: int, step: int, weights: str) -> dict[str, Any]:
    """Columns shared by every row of one evaluated checkpoint.

    n_params is the shape's core (non-embedding) count, the default for fits (DESIGN §3);
    n_params_family the family's own non-embedding count; tokens are those seen by `step`.
    """
    tokens = int(step) * spec.batch_size * spec.seq_len
    return {
        "study": spec.study, "run_id": spec.run_id, "family": spec.family, "variant": spec.variant,
        "size": spec.size, "n_params": int(counts["core"]), "n_params_family": int(counts["family_non_embedding"]),
        "tokens": tokens, "flops": float(flops_per_token) * tokens, "seed": spec.seed, "step": int(step),
        "weights": weights, "role": spec.role, "n_layer": get_shape(spec.size).n_layer, **factor_columns(spec),
        TOKEN_UNIT: "nats/byte" if spec.tokenizer in BYTE_TOKENIZERS else "nats/token",
    }


def factor_columns(spec) -> dict[str, str]:
    """Per-run factor levels of an ablation design (`factor_<name>` in the spec's tracking), as text."""
    return {key: str(value) for key, value in spec.tracking if key.startswith(FACTOR_PREFIX)}


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
    """Rows as a DataFrame with the fixed schema (missing extras are null) plus any factor columns."""
    factors = sorted({key for row in rows for key in row if key.startswith(FACTOR_PREFIX)})
    schema = {**SCHEMA, **dict.fromkeys(factors, pl.String)}
    full = [{name: row.get(name) for name in schema} for row in rows]
    return pl.DataFrame(full, schema=schema, orient="row")


def read_records(run_dir: str | Path) -> pl.DataFrame:
    """The run's eval.parquet (an empty frame with the schema when there is none)."""
    path = Path(run_dir) / EVAL_FILE
    if not path.exists():
        return to_frame([])
    frame = pl.read_parquet(path)
    schema = {**SCHEMA, **{c: pl.String for c in frame.columns if c.startswith(FACTOR_PREFIX)}}
    missing = [pl.lit(None, dtype).alias(n) for n, dtype in schema.items() if n not in frame.columns]
    return frame.with_columns(missing).select(list(schema)).cast(schema)


def merge_records(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Old rows whose (dataset, split, metric, estimator) the new frame does not measure, then new."""
    keys = new.select(REPLACE_KEY).unique()
    kept = old.join(keys, on=list(REPLACE_KEY), how="anti", nulls_equal=True)
    return pl.concat([kept, new], how="diagonal")  # factor columns may be new


def write_records(run_dir: str | Path, new: pl.DataFrame, drop: tuple[str, ...] = ()) -> pl.DataFrame:
    """Merge `new` into run_dir/eval.parquet atomically (temp + fsync + rename); returns all rows.

    Old rows of the metrics in `drop` go too (e.g. gen_ppl of samples that were just replaced)."""
    old = read_records(run_dir)
    if drop and not old.is_empty():
        old = old.filter(~pl.col("metric").is_in(list(drop)))
    merged = merge_records(old, new)
    buffer = io.BytesIO()
    merged.write_parquet(buffer)
    atomic_write_bytes(Path(run_dir) / EVAL_FILE, buffer.getvalue())
    return merged
