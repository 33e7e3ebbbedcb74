"""Report sections: each turns analysis results into report blocks (and figure bytes)."""
from __future__ import annotations

import polars as pl

from analysis.compare import fairness, generation
from analysis.compare.ablations import BUDGET, option_title, seed_table
from analysis.records.cells import CONDITION_KEYS, conditioned
from analysis.fit.fits import CurveFit
from analysis.report.render import Block, interval, num
from analysis.fit.scalefit import FORM_RULE


def h(text: str, level: int = 2) -> Block:
    """Heading block."""
    return Block("h", text=text, level=level)


def p(text: str) -> Block:
    """Paragraph block."""
    return Block("p", text=text)


def table(headers: list[str], rows: list[list[str]]) -> Block:
    """Table block."""
    return Block("table", headers=tuple(headers), rows=tuple(tuple(r) for r in rows))


def fig(name: str, png: bytes, caption: str) -> Block:
    """Figure block."""
    return Block("fig", text=caption, name=name, png=png)


def _param(fit: CurveFit, name: str) -> str:
    prm = fit.params.get(name)
    return interval(prm.value, *prm.ci95) if prm else "n/a"


def _df(fit: CurveFit) -> str:
    d = fit.diagnostics
    if "df_resid" not in d:
        return "n/a"
    lof = d.get("lack_of_fit") or {}
    p_lof = f", lack of fit p={num(lof.get('p'), 2)}" if lof.get("p") is not None else ""
    return f"{d['df_resid']} (pure error {d['df_pure_error']}{p_lof}; {d['resamples_at_bound']} resamples at a bound)"


def fit_rows(fits: list[CurveFit], names: tuple[str, ...], label_keys: tuple[str, ...]) -> list[list[str]]:
    """One row per fit: labels, status, form, parameters with intervals, df, n_points, min seeds, reason."""
    return [[str(f.labels.get(k, "")) for k in label_keys] + [f.status, f.form] + [_param(f, n) for n in names]
            + [_df(f), str(f.n_points), str(f.n_seeds_min), f.reason] for f in fits]


def fits_section(fits: list[CurveFit], x: str, resamples: int) -> list[Block]:
    """The power-law fit table."""
    keys = ("family", "variant", "metric", "dataset", "split", *CONDITION_KEYS)
    head = [*keys, "status", "form", "E", "A", "alpha", "residual df", "n_points", "n_seeds_min", "reason / notes"]
    preds = [[*(str(f.labels[k]) for k in keys), num(x_), interval(pr.value, *pr.ci95, n=f.n_seeds_min)]
             for f in fits for x_, pr in f.predictions]
    return [h("Power-law fits"),
            p(f"L({x}) = E + A*{x}^-alpha by least squares on the per-seed log losses (grid over alpha, then "
              "Levenberg-Marquardt polish). 95 % intervals: a t-calibrated parametric bootstrap "
              f"({resamples} resamples, each solved like the point fit) whose scale is the between-size mean "
              "square, so it carries how far sizes stray from the curve (t with the residual df). Form rule: "
              f"{FORM_RULE}. A fit with 0 residual df is saturated. A size needs >= 2 seeds and a fit >= 3 "
              "such sizes, otherwise it is not identifiable."),
            table(head, fit_rows(fits, ("E", "A", "alpha"), keys)),
            h("Extrapolated predictions", 3),
            p("Past the data (extrapolated: the fit says nothing there that the data checked); only usable fits."),
            table([*keys, x, "prediction [95% CI] (n = min seeds per size)"], preds) if preds else p("none")]


def gap_section(gaps: list, notes: list[str], x: str, x_meaning: str = "") -> list[Block]:
    """Per-size gap tables, trends and multipliers."""
    out = [h("Gap to AR (Δ = family − AR nll_l2r)")] + [p(n) for n in notes]
    if x_meaning:
        out.append(p(f"Each size compares the families at {x_meaning}; trends and multipliers use x = {x}."))
    for g in gaps:
        out.append(h(f"{g.family}/{g.variant} {g.metric} vs {g.reference} — {g.dataset}/{g.split}", 3))
        rows = [[pt.size, num(pt.x), interval(pt.delta.mean, pt.delta.lo, pt.delta.hi),
                 "paired by seed" if pt.paired else "Welch (unpaired)",
                 f"{pt.delta.n}" if pt.paired else f"{pt.n_family} vs {pt.n_reference}",
                 f"not a result: {pt.plateau}" if pt.plateau else "ok"] for pt in g.points]
        out.append(table(["size", x, f"Δ ({g.metric} − AR nll_l2r) [95% CI]", "pairing", "n", "status"], rows))
        t = g.trend
        out.append(p(f"Trend: slope {interval(t.slope, t.lo, t.hi, n=f'{t.n_points} sizes')} per decade of {x}, "
                     f"measured over {num(t.span_decades, 3)} decades (OLS over size means, t({t.df}); status "
                     f"{t.status}{': ' + t.reason if t.reason else ''})."))
        if g.multipliers:
            out.append(table(["axis", "AR's x", "k: x-multiplier to reach AR's loss [95% CI]", "implied family x",
                              "share of resamples never reaching", "extrapolated"],
                             [[m.axis, num(m.x), interval(m.k, m.lo, m.hi), num(m.x_family), num(m.unreached, 3),
                               "EXTRAPOLATED (outside the family's measured range)" if m.extrapolated else "no"]
                              for m in g.multipliers]))
        else:
            out.append(p(f"Multiplier k(x) not computed: {g.multiplier_reason}."))
    return out


def ensemble_section(studies: list) -> list[Block]:
    """NLL(M) fits per size and the M_min -> M_max gain vs size."""
    out = [h("Ensemble-size sensitivity (nll_ensemble vs M)")]
    if not studies:
        return out + [p("No nll_ensemble records with m: ensemble analysis skipped.")]
    for s in studies:
        out.append(h(f"{s.family}/{s.variant} — {s.dataset}/{s.split}", 3))
        out.append(table(["size", "status", "form", "c", "b", "gamma", "residual df", "n_points", "n_seeds_min",
                          "reason / notes"],
                         fit_rows(list(s.fits), ("c", "b", "gamma"), ("size",))))
        out.append(table(["size", "x", "M range", "gain NLL(M_min) − NLL(M_max) [95% CI] (n)"],
                         [[g.size, num(g.x), f"{g.m_min}→{g.m_max}", interval(g.gain.mean, g.gain.lo, g.gain.hi, g.gain.n)]
                          for g in s.gains]))
        t = s.gain_trend
        out.append(p(f"Gain trend: {interval(t.slope, t.lo, t.hi, n=f'{t.n_points} sizes')} nats per decade of "
                     f"model size (status {t.status}{': ' + t.reason if t.reason else ''})."))
    return out


def summary_rows(frame: pl.DataFrame, keys: list[str]) -> list[list[str]]:
    """Rows of a seed-summary table: keys then 'mean [lo, hi] (n)'."""
    return [[str(r[k]) for k in keys] + [interval(r["mean"], r["lo"], r["hi"], r["n"])]
            for r in frame.iter_rows(named=True)]


def ablation_section(variants: pl.DataFrame, options: dict[str, pl.DataFrame], factorial: pl.DataFrame | None) -> list[Block]:
    """Variant, option and factorial tables."""
    budget = [BUDGET] if BUDGET in variants.columns else []
    keys = ["family", "variant", "size", *budget, "dataset", "split", "metric", *CONDITION_KEYS]
    out = [h("Ablations"), h("All variants (seed summaries" + (", one row per compute budget" if budget else "") + ")", 3),
           table([*keys, "mean [95% CI] (n seeds)"], summary_rows(_budget_text(variants), keys))]
    for name, frame in options.items():
        frame = _budget_text(frame)
        okeys = ["family", name, "variant", "size", *([BUDGET] if BUDGET in frame.columns else []), "dataset", "split",
                 "metric"]
        out += [h(f"{option_title(name)} (spec option '{name}'; nll_anyorder and nll_l2r side by side)", 3),
                table([*okeys, "mean [95% CI] (n seeds)"], summary_rows(frame.sort(okeys, nulls_last=True), okeys))]
    if factorial is not None:
        fkeys = ["family", "size", "dataset", "split", "metric", "effect", "contrast"]
        out += [h("Factorial: main effects and interactions", 3),
                p("Effect = mean(+) − mean(−) over the balanced cell means; t-interval from the pooled "
                  "within-cell (seed) variance."),
                table([*fkeys, "effect [95% CI] (n runs)"],
                      [[str(r[k]) for k in fkeys] + [interval(r["estimate"], r["lo"], r["hi"], r["n"])]
                       for r in factorial.iter_rows(named=True)])]
    return out


def _budget_text(frame: pl.DataFrame) -> pl.DataFrame:
    """The budget column as '1e+12' (a size-axis table of an isoFLOP study: one row per budget)."""
    if BUDGET not in frame.columns:
        return frame
    return frame.with_columns(pl.col(BUDGET).map_elements(lambda v: f"{v:.3g}", return_dtype=pl.String))


NETWORK_OPTIONS = ("opt_norm", "opt_qk_norm", "opt_tie_head", "opt_pos", "opt_ema")  # spec.json fields shown per arm


def protocol_section(records: pl.DataFrame, options: pl.DataFrame | None, weights: str,
                     scored: pl.DataFrame | None = None) -> list[Block]:
    """What every comparison holds fixed: each arm's network and EMA, and the weights each arm is
    scored on (from `scored`, the compared records, when given)."""
    how = (f"Families are compared on {weights} weights. " if weights != fairness.PER_ARM else
           "EMA is an arm difference here, so each arm is scored on its own weights (EMA where it trained with "
           "EMA, raw otherwise; the `scored on` column). ")
    out = [h("Comparison protocol"),
           p(how + "One network and one EMA per study: an arm that differs below does so by an explicit override, "
                   "and its label says so.")]
    if options is None or options.is_empty():
        return out + [p("No spec.json options were read: the networks cannot be shown.")]
    shown = [c for c in NETWORK_OPTIONS if c in options.columns]
    arms = (records.select("run_id", "family", "variant").unique().join(options, on="run_id", how="left")
            .group_by(["family", "variant", *shown]).agg(pl.len().alias("runs")).sort(["family", "variant"]))
    per_arm = fairness.arm_weights(scored) if scored is not None else pl.DataFrame()
    if not per_arm.is_empty():
        arms = arms.join(per_arm.select("family", "variant", pl.col("weights").alias("scored on")),
                         on=["family", "variant"], how="left")
    cols = [*shown, *(["scored on"] if "scored on" in arms.columns else [])]
    rows = [[str(r[k]) for k in ("family", "variant", *cols, "runs")] for r in arms.iter_rows(named=True)]
    return out + [table(["family", "variant", *(c.removeprefix("opt_") for c in cols), "runs"], rows)]


def plateau_section(plateau: pl.DataFrame | None) -> list[Block]:
    """Every run against its dataset's unigram baseline; plateau runs named."""
    out = [h("Under-training check (vs the unigram baseline)")]
    if plateau is None or plateau.is_empty():
        return out + [p("No nll_unigram records: under-training cannot be checked.")]
    n_flat = plateau.filter(pl.col("plateau"))["run_id"].n_unique()
    out.append(p(f"A run is on the plateau when its nll_l2r or nll_anyorder is less than 0.1 nats/token below "
                 f"nll_unigram (the training split's add-one-smoothed unigram cross-entropy on the same data). "
                 f"{n_flat} of {plateau['run_id'].n_unique()} runs are on the plateau on at least one dataset; "
                 "no fit, gap or trend that uses them is reported as ok."))
    keys = ["family", "variant", "size", "dataset", "split", "metric"]
    summary = (plateau.group_by(keys).agg(pl.col("value").mean(), pl.col("baseline").mean(),
                                          pl.col("margin").mean(), pl.col("plateau").sum().alias("flat"),
                                          pl.len().alias("n")).sort(keys))
    rows = [[str(r[k]) for k in keys] + [num(r["value"]), num(r["baseline"]), num(r["margin"]),
                                         f"{r['flat']} of {r['n']}"] for r in summary.iter_rows(named=True)]
    return out + [table([*keys, "mean value", "nll_unigram", "mean margin", "seeds on plateau"], rows)]


def ema_section(effect: pl.DataFrame | None) -> list[Block]:
    """EMA - raw per family and size with intervals."""
    if effect is None or effect.is_empty():
        return []
    keys = ["family", "variant", "size", "dataset", "split", "metric"]
    return [h("EMA effect (EMA − raw weights, paired by seed)"),
            table([*keys, "Δ [95% CI] (n seeds)"], summary_rows(effect.sort(keys), keys))]


def matched_section(points: tuple, x_meaning: str) -> list[Block]:
    """Δ at matched family parameters beside the main gaps (which are at the report's x)."""
    if not points:
        return []
    rows = [[pt.family, pt.variant, pt.metric, f"{pt.dataset}/{pt.split}", pt.size, num(pt.x),
             interval(pt.delta, pt.lo, pt.hi, pt.n) if pt.status == "ok" else "n/a", pt.status, pt.reason]
            for pt in points]
    return [h("Gap at matched family parameters", 3),
            p(f"The gaps above are at {x_meaning}. Here each family's loss is compared with AR's fitted loss "
              "at the family's own non-embedding parameter count (n_params_family), so conditioning and head "
              "parameters are charged to the family. Intervals: bootstrap over the family's seeds and AR's fit."),
            table(["family", "variant", "metric", "data", "size", "n_params_family", "Δ [95% CI] (n)", "status",
                   "reason"], rows)]


def generation_section(final: pl.DataFrame) -> list[Block]:
    """gen_ppl under the judge beside the samples' unigram entropy and the generation time, per
    family, size, sampler and sampling setting; then the joint-vs-marginal error of parallel decoding."""
    rows = conditioned(final).filter(pl.col("metric").is_in(["gen_ppl", "gen_entropy", "gen_time_s"]))
    if rows.is_empty():
        return []
    keys = generation.SAMPLER_KEYS
    ppl = seed_table_of(rows.filter(pl.col("metric") == "gen_ppl"), keys)
    ent = seed_table_of(rows.filter(pl.col("metric") == "gen_entropy"), keys)
    spread = generation.repeat_spread(final)
    secs = seed_table_of(rows.filter(pl.col("metric") == "gen_time_s"), keys)
    secs = (secs.join(spread, on=keys, how="left", nulls_equal=True) if not spread.is_empty()
            else secs.with_columns(repeat_sd=pl.lit(None, pl.Float64)))
    judges = ", ".join(sorted(str(j) for j in rows["evaluator"].drop_nulls().unique())) if "evaluator" in rows.columns else ""
    joined = (ent.join(ppl, on=keys, how="left", suffix="_ppl", nulls_equal=True)
              .join(secs, on=keys, how="left", suffix="_s", nulls_equal=True).sort(keys, nulls_last=True))
    body = [[str(r[k]) for k in keys] + [interval(r["mean_ppl"], r["lo_ppl"], r["hi_ppl"], r["n_ppl"])
                                         if r["mean_ppl"] is not None else "not judged",
                                         interval(r["mean"], r["lo"], r["hi"], r["n"]),
                                         interval(r["mean_s"], r["lo_s"], r["hi_s"], r["n_s"])
                                         if r["mean_s"] is not None else "",
                                         num(r["repeat_sd"]) if r.get("repeat_sd") is not None else ""]
            for r in joined.iter_rows(named=True)]
    return [h("Generation (judged from outside the comparison)"),
            p(f"gen_ppl: perplexity of the samples under the judge run ({judges or 'none'}), which is not one of "
              "the compared runs; gen_entropy: the samples' unigram entropy in nats per token (low entropy = "
              "repetitive text, which flatters gen_ppl); gen_time_s: wall seconds per batch, the mean of a run's "
              "repeats, and their spread within a run (median over runs of the repeats' std). temperature and "
              "top_p: the sampling setting (1.0 / 1.0 is plain sampling). Intervals over seeds."),
            table([*keys, "gen_ppl [95% CI] (n seeds)", "gen_entropy [95% CI] (n seeds)",
                   "gen_time_s [95% CI] (n seeds)", "repeat std (s)"], body)] + parallel_section(final)


def parallel_section(final: pl.DataFrame) -> list[Block]:
    """The joint-vs-marginal error of parallel decoding: gen_self_nll(k) − gen_self_nll(1)."""
    frame = generation.parallel_error(final)
    if frame is None:
        return []
    keys = generation.PARALLEL_KEYS
    return [h("Parallel decoding: the joint-vs-marginal error", 3),
            p("A decoder that decodes k tokens per step samples them independently from their marginals. Its own "
              "joint NLL of those samples along their decode order, minus the same at k = 1 (exact ancestral "
              "sampling), paired within each run (same model, same sampling setting), in nats per token; "
              "t-intervals over seeds. Positive: the factorised step costs joint likelihood."),
            table([*keys, "Δ gen_self_nll vs k = 1 [95% CI] (n seeds)"], summary_rows(frame, keys))]


def seed_table_of(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Seed summaries of `rows` by `keys` (see ablations.seed_table)."""
    return seed_table(rows, keys) if not rows.is_empty() else pl.DataFrame(
        schema={**{k: rows.schema[k] for k in keys}, "mean": pl.Float64, "std": pl.Float64, "n": pl.UInt32,
                "se": pl.Float64, "lo": pl.Float64, "hi": pl.Float64})
