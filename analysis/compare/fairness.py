"""What makes a comparison fair (docs/DESIGN.md §7), applied to records before and after the fits.

- Judges leave: runs with role `judge` score others' samples and enter no fit, gap or table.
- Weights: in an ordinary comparison every run shares the study's one EMA rate, and families are
  compared on one kind of weights: EMA when every compared run has them, else raw. When EMA is
  itself an arm difference (an ablation: the runs' spec.json `ema` rates, read as the `opt_ema`
  option, take two or more values in the study, which only an arm's explicit, labelled `ema=`
  override can cause), each run is scored on its own weights: EMA weights when it trained with
  EMA (rate > 0), raw weights otherwise, so the EMA arms' effect shows in every table and in the
  factorial. The report names the weights of each arm. The EMA effect (EMA - raw, paired by seed
  within runs) is its own table either way.
- Numerics paths are named: runs trained on different numerics paths (the `numerics` column,
  jobs/run/numerics.py) differ beyond float rounding, so a study that mixes them is warned.
- Under-training is flagged: a run whose nll_l2r (or nll_anyorder) on a dataset is not at least
  PLATEAU_MARGIN_NATS below that dataset's `nll_unigram` baseline is on the plateau there. Fits,
  gaps and trends built on such a run get status `plateau` with the reason, and are not
  extrapolated.
"""
from __future__ import annotations

import dataclasses

import polars as pl

from analysis.compare.ablations import seed_table
from analysis.records.read import OPTION_PREFIX
from cli import numerics_ids

PLATEAU_MARGIN_NATS = 0.1  # "clearly below" the unigram baseline, nats/token (issue: >= 0.1)
BASELINE_METRIC = "nll_unigram"
FLAGGED_METRICS = ("nll_l2r", "nll_anyorder")  # what must beat the baseline
NOT_FITTED = (BASELINE_METRIC,)  # properties of the data, not of a model
RUN_KEYS = ("family", "variant", "size", "seed", "dataset", "split")
EMA_OPTION = f"{OPTION_PREFIX}ema"  # each run's EMA rate, from its spec.json
PER_ARM = "per-arm"  # the weights name when each arm is scored on its own weights


def compared_only(records: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Records without the judge runs, and a note naming them."""
    if "role" not in records.columns:
        return records, []
    judges = records.filter(pl.col("role") == "judge")["run_id"].unique().sort().to_list()
    notes = [f"judge run(s) {', '.join(judges)} score generated samples only: in no fit, gap or table"] if judges else []
    return records.filter(pl.col("role").is_null() | (pl.col("role") != "judge")), notes


def ema_rates(records: pl.DataFrame, options: pl.DataFrame | None) -> list[float]:
    """The distinct EMA rates (spec.json `ema`) of the runs with weight-scored records, sorted."""
    if options is None or EMA_OPTION not in options.columns or "weights" not in records.columns:
        return []
    runs = records.filter(pl.col("weights").is_not_null())["run_id"].unique()
    rates = options.filter(pl.col("run_id").is_in(runs.implode()))[EMA_OPTION].cast(pl.Float64, strict=False)
    return sorted(rates.drop_nulls().unique().to_list())


def choose_weights(records: pl.DataFrame, options: pl.DataFrame | None = None) -> tuple[pl.DataFrame, str, list[str]]:
    """Rows of the weights each run is scored on (plus weight-free rows such as nll_unigram), the
    weights' name (`ema`, `raw`, or PER_ARM when EMA is an arm difference: see the module), notes."""
    if "weights" not in records.columns:
        return records, "unknown", []
    runs = records.filter(pl.col("weights").is_not_null())
    with_ema = set(runs.filter(pl.col("weights") == "ema")["run_id"].unique().to_list())
    every = set(runs["run_id"].unique().to_list())
    rates = ema_rates(records, options)
    if len(rates) > 1:
        own = pl.when(pl.col("run_id").is_in(sorted(with_ema))).then(pl.lit("ema")).otherwise(pl.lit("raw"))
        chosen = records.filter(pl.col("weights").is_null() | (pl.col("weights") == own))
        return chosen, PER_ARM, [_per_arm_note(chosen, rates)]
    kind = "ema" if with_ema and with_ema == every else "raw"
    notes = []
    if with_ema and kind == "raw":
        notes.append(f"{len(with_ema)} of {len(every)} runs have EMA weights: families are compared on raw "
                     "weights, which every run has")
    return records.filter(pl.col("weights").is_null() | (pl.col("weights") == kind)), kind, notes


def arm_weights(final: pl.DataFrame) -> pl.DataFrame:
    """family, variant, the weights its runs were scored on (`ema`, `raw`, or both `ema/raw`) and runs."""
    if "weights" not in final.columns:
        return pl.DataFrame()
    rows = final.filter(pl.col("weights").is_not_null()).select("run_id", "family", "variant", "weights").unique()
    return (rows.group_by(["family", "variant"])
            .agg(pl.col("weights").unique().sort().str.join("/"), pl.col("run_id").n_unique().alias("runs"))
            .sort(["family", "variant"]))


def _per_arm_note(chosen: pl.DataFrame, rates: list[float]) -> str:
    arms = arm_weights(chosen)
    named = "; ".join(f"{w}: " + ", ".join(f"{r['family']}/{r['variant']}" for r in group.iter_rows(named=True))
                      for (w,), group in arms.group_by(["weights"], maintain_order=True))
    return (f"EMA is an arm difference (spec.json ema rates {', '.join(f'{r:g}' for r in rates)}): each arm is "
            f"scored on its own weights, EMA weights where it trained with EMA, raw otherwise ({named}); a "
            "comparison across arms of different weights includes EMA's effect")


def ema_effect(records: pl.DataFrame) -> pl.DataFrame:
    """EMA - raw of nll_l2r / nll_anyorder per (family, variant, size, dataset, split), paired by
    seed, with a t-interval over seeds (empty when no run has both kinds of weights)."""
    if "weights" not in records.columns:
        return pl.DataFrame()
    rows = records.filter(pl.col("metric").is_in(FLAGGED_METRICS) & pl.col("weights").is_not_null())
    keys = ["run_id", "family", "variant", "size", "seed", "dataset", "split", "metric"]
    wide = (rows.group_by([*keys, "weights"]).agg(pl.col("value").mean())
            .pivot(on="weights", index=keys, values="value"))
    if not {"ema", "raw"} <= set(wide.columns):
        return pl.DataFrame()
    diffs = wide.drop_nulls(["ema", "raw"]).with_columns(value=pl.col("ema") - pl.col("raw"))
    return seed_table(diffs, ["family", "variant", "size", "dataset", "split", "metric"])


def plateau_table(final: pl.DataFrame, baselines: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per run and dataset: each flagged metric, the baseline, the margin below it and the flag.

    `baselines`: the records to read each run's BASELINE_METRIC from (default `final`). After a
    sweep's selection each metric keeps its own chosen runs while the baseline follows the fallback
    metric's, so the unselected records must be passed: otherwise a run chosen for one metric only
    would lose its rows here."""
    base = ((final if baselines is None else baselines).filter(pl.col("metric") == BASELINE_METRIC)
            .group_by(["run_id", "dataset", "split"]).agg(pl.col("value").mean().alias("baseline")))
    if base.is_empty():
        return pl.DataFrame()
    scored = (final.filter(pl.col("metric").is_in(FLAGGED_METRICS) & pl.col("m").is_null())
              .group_by(["run_id", *RUN_KEYS, "metric"]).agg(pl.col("value").mean())
              .join(base, on=["run_id", "dataset", "split"], how="inner"))
    return (scored.with_columns(margin=pl.col("baseline") - pl.col("value"))
            .with_columns(plateau=pl.col("margin") < PLATEAU_MARGIN_NATS)
            .sort(["dataset", "split", "family", "variant", "size", "seed", "metric"]))


def flagged(table: pl.DataFrame) -> dict[tuple, str]:
    """(family, variant, size, dataset, split) -> reason, for every size with a plateau run."""
    if table.is_empty():
        return {}
    out: dict[tuple, str] = {}
    for row in table.filter(pl.col("plateau")).iter_rows(named=True):
        key = (row["family"], row["variant"], row["size"], row["dataset"], row["split"])
        out.setdefault(key, f"{row['family']}/{row['variant']} {row['size']} seed {row['seed']} on the plateau "
                            f"({row['metric']} {row['value']:.3f} vs unigram {row['baseline']:.3f}, margin "
                            f"{row['margin']:.3f} < {PLATEAU_MARGIN_NATS})")
    return out


def _reasons(flags: dict[tuple, str], family: str, variant: str, sizes, dataset: str, split: str) -> list[str]:
    return [flags[k] for k in ((family, variant, s, dataset, split) for s in sizes) if k in flags]


def flag_fit(fit, points, flags: dict[tuple, str]):
    """The fit with status `plateau` (no predictions) when one of its sizes has a plateau run."""
    lab = fit.labels
    why = _reasons(flags, lab["family"], lab["variant"], [p.label for p in points], lab["dataset"], lab["split"])
    if not why or fit.status in ("not_identifiable", "not_fitted"):
        return fit
    reason = "; ".join([why[0], fit.reason] if fit.reason else why[:1])
    return dataclasses.replace(fit, status="plateau", predictions=(), reason=reason)


def flag_gap(gap, flags: dict[tuple, str]):
    """Points on the plateau (family or AR reference) are marked; the trend becomes `plateau`."""
    ref_family, ref_variant = gap.reference_key
    points, why = [], []
    for pt in gap.points:
        reasons = (_reasons(flags, gap.family, gap.variant, [pt.size], gap.dataset, gap.split)
                   + _reasons(flags, ref_family, ref_variant, [pt.size], gap.dataset, gap.split))
        points.append(dataclasses.replace(pt, plateau="; ".join(reasons)))
        why += reasons
    if not why:
        return gap
    trend = gap.trend
    if trend.status == "ok":
        trend = dataclasses.replace(trend, status="plateau", reason=why[0])
    return dataclasses.replace(gap, points=tuple(points), trend=trend, multipliers=(),
                               multiplier_reason=f"a run on the plateau ({why[0]})")


def flag_ensemble(study, flags: dict[tuple, str]):
    """The gain trend becomes `plateau` when a size of the study has a plateau run."""
    why = _reasons(flags, study.family, study.variant, [g.size for g in study.gains], study.dataset, study.split)
    if not why or study.gain_trend.status != "ok":
        return study
    return dataclasses.replace(study, gain_trend=dataclasses.replace(study.gain_trend, status="plateau", reason=why[0]))


def flagged_reason(flags: dict[tuple, str], point) -> str:
    """Why a per-size comparison point (family, variant, size, dataset, split) is on the plateau."""
    return flags.get((point.family, point.variant, point.size, point.dataset, point.split), "")


NUMERICS_COLUMN = "numerics"  # each run's training numerics path id(s), "+"-joined when a resume changed it


def numerics_warnings(final: pl.DataFrame) -> list[str]:
    """A warning when the compared runs trained on more than one numerics path (or one of them
    changed path on a resume). A path id is `<machine>.<kernels>` (jobs/run/numerics.py): runs
    whose cores never reach the fused kernels (`-`) share the path of kernel users on their
    machine. Runs without the column (trained before it existed) are counted apart, and alone
    they give no warning."""
    if NUMERICS_COLUMN not in final.columns or final.is_empty():
        return []
    per_run = final.select("run_id", NUMERICS_COLUMN).unique()
    paths = per_run[NUMERICS_COLUMN].drop_nulls()
    machines, builds = numerics_ids.machines_and_builds(list(paths))
    if not numerics_ids.conflicting(list(paths)):
        return []
    ids = sorted({part for value in paths for part in value.split("+")})
    mixed = sorted(per_run.filter(pl.col(NUMERICS_COLUMN).str.contains("+", literal=True))["run_id"])
    counts = ", ".join(f"{key} ({int((paths.str.contains(key, literal=True)).sum())} runs)" for key in ids)
    unknown = per_run[NUMERICS_COLUMN].null_count()
    return [f"The runs trained on {len(machines)} machine path(s) and {len(builds)} kernel build(s): {counts}"
            + (f"; {len(mixed)} changed path on a resume ({', '.join(mixed)})" if mixed else "")
            + (f"; {unknown} record none" if unknown else "")
            + ". One spec trained on two paths gives two models (docs/DESIGN.md, Numerics paths): "
              "differences between these runs include that, not only their settings."]
