"""The answer first: the summary block that opens report.md and report.html.

Every sentence here is generated from the analysis results, never written by hand: the gap to AR
at each size with its interval and n and what it says (AR better, family better, inconclusive),
the trend of the gap over the measured span of x, the multiplier k(x) only where it interpolates
inside both curves' measured ranges (an extrapolated k never appears here), the ensemble gain at
the largest size, the study's scope (`analysis.report.scope`), and warnings (runs on the unigram plateau, fits at a bound or
not identifiable, sizes missing seeds, runs without records, sets that were not evaluated). A frontier (isoFLOP)
study's summary opens with its frontier (`analysis.report.frontier_lead`: k with its interval and loss range, L_opt and
N_opt per budget, exponents, bracketing, lr per cell, held-out budgets) before the per-size gaps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from analysis.report import frontier_figures, frontier_lead
from analysis.compare.fairness import BASELINE_METRIC, PLATEAU_MARGIN_NATS, numerics_warnings
from analysis.compare.gap import REFERENCE_FAMILY, REFERENCE_METRIC
from analysis.compare.multiplier import headline
from analysis.report.render import Block, num
from analysis.report.scope import scope_sentence, token_unit

LISTED = 4  # names listed in one warning before "and N more"


@dataclass(frozen=True)
class Summary:
    """The summary's sentences: what was measured (`answer`) and what to distrust (`warnings`)."""

    dataset: str  # the evaluation set the sentences are about (shakespeare, wikitext2, ...)
    split: str  # its split (test; validation where a study has no test records)
    answer: tuple[str, ...]  # one sentence per measured result, each with n and its interval
    warnings: tuple[str, ...]  # one sentence per reason to distrust a result (plateau, bound, one seed)
    lead: tuple[Block, ...] = ()  # a frontier study's frontier, shown first


def signed(v: float | None, digits: int = 3) -> str:
    """'+0.123' / '-0.045' / 'n/a'."""
    if v is None or not math.isfinite(v):
        return num(v)
    return f"{v:+.{digits}f}"


def _ci(mean: float, lo: float, hi: float, n: object) -> str:
    return f"{signed(mean)} [{signed(lo)}, {signed(hi)}] (n={n})"


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:LISTED])
    return shown + (f" and {len(items) - LISTED} more" if len(items) > LISTED else "")


def primary_set(final: pl.DataFrame) -> tuple[str, str]:
    """The dataset/split the summary leads with: where the reference family's metric (AR's
    nll_l2r) has most records, validation first."""
    ar = final.filter((pl.col("family") == REFERENCE_FAMILY) & (pl.col("metric") == REFERENCE_METRIC))
    pool = ar if not ar.is_empty() else final
    if pool.is_empty():
        return "", ""
    counts = (pool.group_by(["dataset", "split"]).len()
              .with_columns((pl.col("split") == "validation").alias("val"))
              .sort(["val", "len", "dataset", "split"], descending=[True, True, False, False]))
    return counts["dataset"][0], counts["split"][0]


def name(family: str, variant: str) -> str:
    """`aogpt/adaln+mix:0.1`, or the family alone when the variant has no label."""
    return f"{family}/{variant}" if variant else family


def verdict(points) -> str:
    """Which sizes' intervals lie above zero (AR better), below it, or straddle it; sizes without
    an interval or with a run on the unigram plateau are no result either way."""
    stuck = [p.size for p in points if getattr(p, "plateau", "")]
    single = [p.size for p in points if p.size not in stuck and not math.isfinite(p.delta.lo)]
    above = [p.size for p in points if p.delta.lo > 0 and p.size not in stuck]
    below = [p.size for p in points if p.delta.hi < 0 and p.size not in stuck]
    unclear = [p.size for p in points if p.size not in above + below + stuck + single]
    parts = []
    if above:
        parts.append(f"AR is better at {'every size' if len(above) == len(points) else ', '.join(above)}")
    if below:
        parts.append(f"the family is better at {', '.join(below)}")
    if unclear:
        parts.append(f"the interval includes zero at {', '.join(unclear)}")
    if single:
        parts.append(f"no interval at {', '.join(single)} (fewer than 2 seeds)")
    if stuck:
        parts.append(f"no result at {', '.join(stuck)} (a run on the unigram plateau)")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:]


def _trend(gap, x: str, unit: str) -> str:
    t = gap.trend
    if t.status == "plateau":
        return "none (a run on the unigram plateau)"
    if t.status != "ok":
        return f"none ({t.status}: {t.reason})"
    direction = "it shrinks" if t.hi < 0 else "it grows" if t.lo > 0 else "no significant trend"
    span = t.span_decades
    return (f"over the measured {span:.2f} decades of {x} ({num(t.x_min)}–{num(t.x_max)}) Δ changes by "
            f"{_ci(t.slope * span, t.lo * span, t.hi * span, f'{t.n_points} sizes')} {unit} "
            f"(OLS over size means, t({t.df})): {direction}")


def _multiplier(gap, x: str) -> str:
    m = headline(gap.multipliers, x)
    if m is None:
        why = gap.multiplier_reason
        if "plateau" in why:
            return "none (a run on the unigram plateau)"
        if why:
            return f"none ({why})"
        return ("not quoted: at every measured size the family would need a size outside its measured range "
                "(extrapolated; see the multipliers table)")
    return (f"k at {x}={num(m.x)}: {num(m.k, 3)} [{num(m.lo, 3)}, {num(m.hi, 3)}] times AR's {x} to reach AR's loss "
            f"(the family's measured range holds the implied {num(m.x_family)}; never reached in {m.unreached:.0%} "
            "of resamples)")


def _n_text(point):
    """n of a gap point: the seed count when paired, else both families' counts."""
    return point.delta.n if point.paired else f"{point.n_family} vs {point.n_reference}"


def gap_sentence(gap, x: str, unit: str = "nats/token") -> str:
    """One bullet: the gap at each size with interval and n, the verdict, the trend and k(x)."""
    sizes = "; ".join(f"{p.size} {_ci(p.delta.mean, p.delta.lo, p.delta.hi, _n_text(p))}" for p in gap.points)
    return (f"{name(gap.family, gap.variant)} {gap.metric} − AR nll_l2r ({unit}): {sizes}. {verdict(gap.points)}. "
            f"Trend: {_trend(gap, x, unit)}. Multiplier k(x): {_multiplier(gap, x)}.")


def ensemble_sentence(study, unit: str = "nats/token") -> str:
    """The gain NLL(M_min) − NLL(M_max) at the largest size, and its trend."""
    who = name(study.family, study.variant)
    if not study.gains:
        return f"{who}: no ensemble gain (fewer than two M per size)."
    g = max(study.gains, key=lambda g: g.x)
    t = study.gain_trend
    trend = (f" Gain trend over the measured {t.span_decades:.2f} decades: "
             f"{_ci(t.slope * t.span_decades, t.lo * t.span_decades, t.hi * t.span_decades, f'{t.n_points} sizes')} "
             f"{unit} (OLS over size means, t({t.df}))." if t.status == "ok" else "")
    return (f"Ensemble gain of {who} at {g.size}: NLL(M={g.m_min}) − NLL(M={g.m_max}) = "
            f"{_ci(g.gain.mean, g.gain.lo, g.gain.hi, g.gain.n)} {unit}.{trend}")


def plateau_runs(plateau: pl.DataFrame | None) -> tuple[list[str], int]:
    """From `fairness.plateau_table`: the runs with a metric less than PLATEAU_MARGIN_NATS below the
    unigram baseline ('family size seed s (metric value, ... vs unigram u on dataset)'), and the
    number of runs that have a baseline (0: nothing could be checked)."""
    if plateau is None or plateau.is_empty():
        return [], 0
    high = (plateau.filter(pl.col("plateau"))
            .group_by(["family", "variant", "size", "seed", "run_id", "dataset", "baseline"], maintain_order=True)
            .agg(pl.col("metric"), pl.col("value")))
    named = [f"{name(r['family'], r['variant'])} {r['size']} seed {r['seed']} ("
             + ", ".join(f"{m} {num(v)}" for m, v in zip(r["metric"], r["value"]))
             + f" vs unigram {num(r['baseline'])} on {r['dataset']})" for r in high.iter_rows(named=True)]
    return named, plateau["run_id"].n_unique()


def fit_warnings(fits) -> list[str]:
    """Fits at a bound and fits that are not identifiable."""
    out = []
    for status, what in (("reduced", "take the reduced form A*x^-alpha (E not identified, or the full form would be "
                                     "saturated; E fixed at 0, named in the fits table)"),
                         ("saturated", "are saturated (0 residual df: no interval, not used)"),
                         ("at_bound", "have a parameter at its search bound (a flat or step-like curve: not drawn, not "
                                      "extrapolated; the fits table says which)"),
                         ("not_identifiable", "are not identifiable")):
        hit = [f for f in fits if f.status == status]
        if hit:
            names = [f"{f.labels['family']} {f.labels['metric']}" + (f" M={f.labels['m']}" if f.labels.get("m") else "")
                     + (f" at {f.labels['size']}" if f.labels.get("size") else "") + f"/{f.labels['dataset']}" for f in hit]
            out.append(f"{len(hit)} of {len(fits)} power-law fits {what}: {_listing(names)}.")
    return out


def seed_warnings(cells) -> list[str]:
    """Sizes with fewer seeds than the study's most-seeded size."""
    l2r = [c for c in cells if c.key.metric == "nll_l2r"]
    most = max((len(p.values) for c in l2r for p in c.points), default=0)
    short = [f"{c.key.family} {p.label} ({len(p.values)}/{most}) on {c.key.dataset}" for c in l2r for p in c.points
             if len(p.values) < most]
    return [f"Sizes missing seeds: {_listing(short)}."] if short else []


def set_warnings(final: pl.DataFrame, primary: tuple[str, str]) -> list[str]:
    """Name the sets that were evaluated when nothing beyond the study's own split was."""
    sets = sorted({(d, s) for d, s in final.select("dataset", "split").iter_rows()})
    if sets == [primary]:
        return [f"Only {primary[0]}/{primary[1]} was evaluated: other sets were skipped (evaluation had no "
                "data folder) or not requested."]
    return []


def build_summary(a) -> Summary:
    """The summary of an `analysis.fit_curves.Analysis`."""
    final = a.final
    dataset, split = primary_set(final)
    answer = []
    gaps = sorted((g for g in a.gaps if (g.dataset, g.split) == (dataset, split)),
                  key=lambda g: (g.metric != "nll_l2r", g.family, g.variant, g.metric))
    unit = token_unit(final)
    scope = scope_sentence(final, getattr(a.inputs, "specs", None), (dataset, split), a.x)
    answer += [gap_sentence(g, a.x, unit) for g in gaps]
    if not gaps:
        answer.append("No gap to AR: " + ("; ".join(a.gap_notes) or f"no comparable runs on {dataset}/{split}") + ".")
    for s in a.ensembles:
        if (s.dataset, s.split) == (dataset, split):
            answer.append(ensemble_sentence(s, unit))
    answer += [scope] if scope else []
    plateau, n_checked = plateau_runs(a.plateau)
    warnings = []
    if plateau:
        warnings.append(f"{len(plateau)} of {n_checked} runs are on the unigram plateau (less than {PLATEAU_MARGIN_NATS} "
                        f"{unit} below it): {_listing(plateau)}. Gaps involving them say nothing about the families.")
    elif not n_checked:
        warnings.append(f"No {BASELINE_METRIC} records: whether runs left the unigram plateau is unchecked.")
    warnings += (fit_warnings(list(a.fits) + [f for e in a.ensembles for f in e.fits]) + seed_warnings(a.cells)
                 + set_warnings(final, (dataset, split)) + numerics_warnings(final))
    if a.inputs.missing_runs:
        warnings.append(f"{len(a.inputs.missing_runs)} run(s) have no eval.parquet: {_listing(list(a.inputs.missing_runs))}.")
    warnings += [f"{n}." for n in a.notes if not n.startswith(("run without eval.parquet", "no nll_unigram records"))]
    return Summary(dataset, split, tuple(answer), tuple(warnings), tuple(frontier_first(a, unit)))


def frontier_first(a, unit: str) -> list[Block]:
    """The frontier lead of an isoFLOP study (records planned by budget), else nothing."""
    final = a.final
    if final is None or "budget_flops" not in final.columns or final["budget_flops"].drop_nulls().is_empty():
        return []
    front = frontier_figures.analysed(final, a.bootstrap, a.seed)
    return frontier_lead.lead_blocks(front, final, getattr(a.inputs, "specs", None), unit,
                                     getattr(a.inputs, "study_dir", None))


def summary_blocks(s: Summary) -> list[Block]:
    """The summary as report blocks: a heading, the answer and the warnings as bullet lists."""
    where = f" on {s.dataset}/{s.split}" if s.dataset else ""
    out = list(s.lead) + [Block("h", text=f"Summary{where} (95 % intervals; n = seeds)"),
           Block("list", text="answer", rows=tuple((t,) for t in s.answer))]
    if s.warnings:
        out.append(Block("list", text="warnings", rows=tuple((t,) for t in s.warnings)))
    return out
