"""What a study held fixed, and so what its result is confounded with: the summary's scope line.

Dataset and tokenizer, evaluation coverage (tokens scored, and their share of the split when the
records carry `coverage_tokens` / `split_tokens`), the size span in decades, tokens per
parameter, whether the learning rate was tuned (one value shared by every run = not tuned) and
the depth changes between rungs. Also the exact per-token unit (`token_unit`).
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl

from analysis.compare.gap import REFERENCE_FAMILY, REFERENCE_METRIC
from analysis.report.render import num

LN2 = math.log(2.0)


def token_unit(final: pl.DataFrame) -> str:
    """The per-token unit of the NLL metrics: the records' own (nats/byte under the bytes
    tokenizer), or, for records written before units were exact, nats/byte when every run's
    bpb_l2r * ln 2 equals its nll_l2r (a token is a byte), else nats/token."""
    units = set(final.filter(pl.col("metric") == REFERENCE_METRIC)["unit"].unique().to_list())
    if "nats/byte" in units:
        return "nats/byte"
    pair = (final.filter(pl.col("metric").is_in([REFERENCE_METRIC, "bpb_l2r"]) & pl.col("m").is_null())
            .group_by(["run_id", "dataset", "split", "metric"]).agg(pl.col("value").mean())
            .pivot(on="metric", index=["run_id", "dataset", "split"], values="value"))
    if {"bpb_l2r", REFERENCE_METRIC} <= set(pair.columns) and pair.drop_nulls().height:
        p = pair.drop_nulls()
        if bool(((p["bpb_l2r"] * LN2 - p[REFERENCE_METRIC]).abs() <= 1e-9 * p[REFERENCE_METRIC].abs()).all()):
            return "nats/byte"
    return "nats/token"


def _values(specs: pl.DataFrame | None, field: str, runs: list[str]) -> list[str]:
    if specs is None or field not in specs.columns:
        return []
    return sorted(specs.filter(pl.col("run_id").is_in(runs))[field].drop_nulls().unique().to_list())


def _data(primary: tuple[str, str], specs, runs, unit: str) -> str:
    tok = _values(specs, "tokenizer", runs)
    corpus = _values(specs, "corpus", runs)
    where = f"data {primary[0]}/{primary[1]}" + (f" (training corpus {', '.join(corpus)})" if corpus else "")
    if tok:
        return f"{where}, tokenizer {', '.join(tok)}: losses in {unit}"
    return f"{where}, tokenizer not recorded (losses in {unit})"


def _coverage(rows: pl.DataFrame) -> str:
    if "coverage_tokens" not in rows.columns or rows["coverage_tokens"].drop_nulls().is_empty():
        n = rows["n_samples"]
        return (f"evaluation coverage not recorded in these records ({num(float(n.min()))}–{num(float(n.max()))} "
                "sequences scored per run)")
    cov = rows["coverage_tokens"].drop_nulls()
    upper = "" if cov.min() == cov.max() else f"–{num(float(cov.max()))}"
    text = f"evaluation scores {num(float(cov.min()))}{upper} tokens"
    if "split_tokens" in rows.columns and not rows["split_tokens"].drop_nulls().is_empty():
        share = (rows["coverage_tokens"] / rows["split_tokens"]).drop_nulls()
        text += (f" of the {num(float(rows['split_tokens'].drop_nulls().max()))}-token split "
                 f"({share.min():.0%}" + ("" if share.min() == share.max() else f"–{share.max():.0%}") + ")")
    return text


def _span(rows: pl.DataFrame, x: str) -> str:
    xs = rows.group_by("size").agg(pl.col(x).median())[x].to_numpy().astype(float)
    if xs.size < 2:
        return f"one size ({x} {num(float(xs[0]))})" if xs.size else "no sizes"
    return f"sizes span {math.log10(xs.max() / xs.min()):.2f} decades of {x} ({num(xs.min())}–{num(xs.max())})"


def _tokens_per_param(rows: pl.DataFrame) -> str:
    ratio = (rows["tokens"] / rows["n_params"]).to_numpy().astype(float)
    lo, hi = float(np.min(ratio)), float(np.max(ratio))
    same = abs(hi - lo) <= 0.01 * hi
    return f"{num(lo, 3)} training tokens per core parameter" + ("" if same else f" to {num(hi, 3)}") + (
        " at every size" if same else "")


def _lr(specs, runs) -> str:
    lrs = _values(specs, "lr", runs)
    if not lrs:
        return "learning rate not recorded"
    if len(lrs) == 1:
        return f"learning rate not tuned (one value, {lrs[0]}, shared by every run)"
    return f"learning rate varies across runs ({', '.join(lrs)}): check whether it was tuned per size"


def _depth(rows: pl.DataFrame) -> str:
    if "n_layer" in rows.columns and not rows["n_layer"].drop_nulls().is_empty():
        by = rows.group_by("size").agg(pl.col("n_layer").max(), pl.col("n_params").median()).sort("n_params")
        depths = by["n_layer"].to_list()
    else:
        by = rows.group_by("size").agg(pl.col("n_params").median()).sort("n_params")
        parts = [s.split("/") for s in by["size"].to_list()]
        if not all(len(p) == 3 and p[0].isdigit() for p in parts):
            return "depth per rung not recorded"
        depths = [int(p[0]) for p in parts]
    if len(set(depths)) == 1:
        return f"depth {depths[0]} at every rung"
    return "depth changes between rungs (" + ", ".join(f"{s}: {d} layers" for s, d in zip(by["size"], depths)) + ")"


def scope_sentence(final: pl.DataFrame, specs: pl.DataFrame | None, primary: tuple[str, str], x: str) -> str:
    """One sentence naming what was held fixed, from AR's nll_l2r records on the primary set."""
    rows = final.filter((pl.col("metric") == REFERENCE_METRIC) & (pl.col("dataset") == primary[0])
                        & (pl.col("split") == primary[1]))
    if rows.is_empty():
        return ""
    runs = final["run_id"].unique().to_list()
    ref = rows.filter(pl.col("family") == REFERENCE_FAMILY)
    parts = [_data(primary, specs, runs, token_unit(final)), _coverage(rows), _span(ref if not ref.is_empty() else rows, x),
             _tokens_per_param(rows), _lr(specs, runs), _depth(rows)]
    return "Scope (held fixed, so the result is conditional on it): " + "; ".join(parts) + "."
