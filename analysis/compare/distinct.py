"""Each distinct quantity is fitted once.

- Unit conversions: `bpb_<name>` is `nll_<name>` in bits per byte (a constant factor per dataset:
  1/ln 2 times tokens per byte), so it is not a second fit; the tables still show its values.
- Identical metrics: two metrics of one family whose values agree in every run (e.g. MDLM's
  `nll_elbo_mdlm`, which is its `nll_anyorder`) are fitted once, under the preferred name
  (the gap's compared metrics first, then alphabetical).
"""
from __future__ import annotations

import polars as pl

from analysis.compare.gap import COMPARED_METRICS

CONVERSIONS = (("bpb_", "nll_"),)  # (prefix of the converted metric, prefix of the one it converts)
SAME_RTOL = 1e-12  # values this close in every run are the same quantity
GROUP = ("family", "variant", "dataset", "split")


def _preferred(metric: str) -> tuple:
    return (metric not in COMPARED_METRICS, COMPARED_METRICS.index(metric) if metric in COMPARED_METRICS else 0, metric)


def conversions(final: pl.DataFrame) -> tuple[set[str], list[str]]:
    """Metrics that are unit conversions of another metric present, and a note for each."""
    metrics = set(final["metric"].unique().to_list())
    drop, notes = set(), []
    for conv, base in CONVERSIONS:
        for m in sorted(metrics):
            if m.startswith(conv) and base + m[len(conv):] in metrics:
                drop.add(m)
                notes.append(f"{m} is {base + m[len(conv):]} converted to bits per byte: a unit conversion, "
                             "shown in the tables, not fitted a second time")
    return drop, notes


def identical(final: pl.DataFrame) -> tuple[dict[tuple, set[str]], list[str]]:
    """{(family, variant, dataset, split): metrics to leave out} for metrics equal to a preferred one."""
    rows = final.filter(pl.col("m").is_null()).select(*GROUP, "run_id", "metric", "value")
    drop: dict[tuple, set[str]] = {}
    notes = []
    for key, grp in rows.group_by(list(GROUP), maintain_order=True):
        wide = grp.group_by(["run_id", "metric"]).agg(pl.col("value").mean()).pivot(on="metric", index="run_id",
                                                                                  values="value")
        names = sorted((c for c in wide.columns if c != "run_id"), key=_preferred)
        for i, keep in enumerate(names):
            for other in names[i + 1:]:
                if other in drop.get(tuple(key), set()) or keep in drop.get(tuple(key), set()):
                    continue
                both = wide.select(keep, other).drop_nulls()
                if both.height and both.height == wide.height and _same(both[keep], both[other]):
                    drop.setdefault(tuple(key), set()).add(other)
                    notes.append(f"{key[0]} {other} equals {keep} in every run on {key[2]}/{key[3]}: fitted once "
                                 f"(as {keep})")
    return drop, notes


def _same(a: pl.Series, b: pl.Series) -> bool:
    return bool(((a - b).abs() <= SAME_RTOL * a.abs().clip(lower_bound=1e-300)).all())


def fitted_records(final: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The records to fit (conversions and duplicates left out) and notes saying what was left out."""
    conv, notes = conversions(final)
    same, same_notes = identical(final.filter(~pl.col("metric").is_in(sorted(conv))))
    out = final.filter(~pl.col("metric").is_in(sorted(conv)))
    for key, metrics in same.items():
        mask = pl.lit(True)
        for col, value in zip(GROUP, key):
            mask = mask & (pl.col(col) == value)
        out = out.filter(~(mask & pl.col("metric").is_in(sorted(metrics))))
    return out, notes + same_notes
