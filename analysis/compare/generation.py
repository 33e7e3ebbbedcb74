"""Generation tables: quality and speed per sampler setting, and the joint-vs-marginal error of
parallel decoding.

A decoder that decodes k tokens per step samples them from their factorised marginals; its own
joint NLL of those samples along their decode order (gen_self_nll) rises with k above the k = 1
value (exact ancestral sampling). `parallel_error` states that rise per run, paired by run (the
same model and sampling setting at k and at 1), summarised over seeds with a t-interval."""
from __future__ import annotations

import polars as pl

from analysis.compare.ablations import seed_table
from analysis.records.cells import conditioned

SAMPLER_KEYS = ["family", "variant", "size", "estimator", "steps", "temperature", "top_p"]
PARALLEL_KEYS = ["family", "variant", "size", "temperature", "top_p", "tokens_per_step", "steps"]


def parallel_error(final: pl.DataFrame) -> pl.DataFrame | None:
    """gen_self_nll(k) − gen_self_nll(k = 1) per family, variant, size, sampling setting and k > 1:
    mean over seeds, t-interval and n; None without gen_self_nll rows at k = 1 and some k > 1."""
    rows = conditioned(final).filter(pl.col("metric") == "gen_self_nll")
    if rows.is_empty():
        return None
    run_keys = ["run_id", "temperature", "top_p"]
    base = rows.filter(pl.col("tokens_per_step") == 1).select(*run_keys, pl.col("value").alias("at_1"))
    paired = (rows.filter(pl.col("tokens_per_step") > 1).join(base, on=run_keys, how="inner", nulls_equal=True)
              .with_columns(value=pl.col("value") - pl.col("at_1")))
    return seed_table(paired, PARALLEL_KEYS) if not paired.is_empty() else None


def repeat_spread(final: pl.DataFrame) -> pl.DataFrame:
    """gen_time_s' spread over a run's repeats (std = se · sqrt(repeats)), its median over the seeds'
    runs, per sampler setting; runs without repeats (or one) give none."""
    rows = conditioned(final).filter(pl.col("metric") == "gen_time_s")
    if rows.is_empty() or "repeats" not in rows.columns or "estimator" not in rows.columns:
        return pl.DataFrame()  # no generation, or records written before repeats existed
    return (rows.filter(pl.col("repeats") > 1)
            .with_columns(repeat_sd=pl.col("se") * pl.col("repeats").cast(pl.Float64).sqrt())
            .group_by(SAMPLER_KEYS).agg(pl.col("repeat_sd").median(), pl.col("repeats").max()))
