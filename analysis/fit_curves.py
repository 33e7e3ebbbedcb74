"""`python -m analysis.fit_curves <study or records...> [--out DIR] [--bootstrap N] [--x ...] [--seed S]`

How does the AR-vs-any-order gap move with scale, and how sensitive is any-order evaluation to the
ensemble size, with error bars. Writes fits.json, tables/ (parquet + CSV), figures/ (PNG),
report.md, a self-contained report.html and a copy of the study manifest into the report dir.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from cli import Parser, int_arg, parse, run_main
from cli import outputs, rules
from cli.paths import user_path

from analysis import DEFAULT_BOOTSTRAP, MAX_BOOTSTRAP, MIN_BOOTSTRAP
from analysis.fit import evalnoise
from analysis.fit.stats import finite_or_none
from analysis.compare import ablations, distinct, fairness, generation
from analysis.report import atomic, figures, frontier_figures, frontier_lead, sections, summary
from analysis.fit.background import in_background, workers_from_env
from analysis.records.cells import CELL_KEYS, CONDITION_KEYS, build_cells, condition_text, latest
from analysis.records.data_ledger import repetition_notes
from analysis.fit.ensemble import ensemble_studies
from analysis.fit.fits import CurveFit, fit_cell, solved_once
from analysis.compare.gap import (COMPARED_METRICS, REFERENCE_FAMILY, REFERENCE_METRIC, compute_gaps, matched_family_gaps,
                          with_eval_noise)
from analysis.records.selection import one_budget, select
from analysis.records.read import Inputs, RecordsError, load
from analysis.report.render import to_html, to_markdown

X_AXES = ("n_params", "n_params_family", "flops", "tokens")
X_MEANING = {  # what each x convention holds fixed when families are compared at equal x
    "n_params": "matched shape (n_params: the shared core's non-embedding parameters)",
    "n_params_family": "matched family parameters (n_params_family: each family's own non-embedding "
                       "parameters, conditioning and untied head included)",
    "flops": "matched training compute (flops)",
    "tokens": "matched training tokens",
}


@dataclass(frozen=True)
class Analysis:
    """Every result the report shows (the fit part, without figures or files)."""

    inputs: Inputs
    x: str
    bootstrap: int
    seed: int
    notes: tuple[str, ...]
    cells: tuple
    fits: tuple[CurveFit, ...]
    gaps: tuple
    gap_notes: tuple[str, ...]
    ensembles: tuple
    variants: pl.DataFrame
    options: dict
    factorial: pl.DataFrame | None
    weights: str = "raw"  # the kind of weights every comparison uses
    plateau: pl.DataFrame | None = None  # per run and dataset: margin below nll_unigram, flag
    ema: pl.DataFrame | None = None  # EMA - raw per family/size, paired by seed
    matched: tuple = ()  # Δ at matched family parameters (gap.MatchedPoint)
    final: pl.DataFrame | None = None  # the compared records everything above was computed from
    gap_studies: tuple[str, ...] = ()  # the study of each gap, aligned with `gaps`
    selection: object = None  # analysis.records.selection.Selection: best swept settings per cell (validation)


def _fitted(final: pl.DataFrame, x: str, bootstrap: int, seed: int, flags: dict) -> tuple[list, list]:
    """Cells (baselines left out) and their fits, plateau-flagged."""
    cells = build_cells(final.filter(~pl.col("metric").is_in(fairness.NOT_FITTED)), x)
    fits = [fairness.flag_fit(fit_cell(c, x=x, resamples=bootstrap, seed=seed), c.points, flags) for c in cells]
    return cells, fits


K_AXES = ("n_params", "n_params_family", "flops")  # the multiplier k is reported on each


def _axis_fits(final: pl.DataFrame, x: str, bootstrap: int, seed: int, flags: dict) -> dict[str, dict]:
    """Fits of the gap's cells (AR's nll_l2r, the others' compared metrics) on the other k axes."""
    out = {}
    for axis in K_AXES:
        if axis == x:
            continue
        cells = [c for c in build_cells(final.filter(~pl.col("metric").is_in(fairness.NOT_FITTED)), axis)
                 if c.key.m is None and (c.key.metric == REFERENCE_METRIC if c.key.family == REFERENCE_FAMILY
                                          else c.key.metric in COMPARED_METRICS)]
        out[axis] = {c.key: fairness.flag_fit(fit_cell(c, x=axis, resamples=bootstrap, seed=seed), c.points, flags)
                     for c in cells}
    return out


def _matched(final: pl.DataFrame, bootstrap: int, seed: int, flags: dict, family_fits: dict | None = None) -> tuple:
    """Δ at matched family parameters, from AR's fits on x = n_params_family (only those are fitted)."""
    cells = build_cells(final.filter(~pl.col("metric").is_in(fairness.NOT_FITTED)), "n_params_family")
    fits = family_fits if family_fits is not None else {
        c.key: fairness.flag_fit(fit_cell(c, x="n_params_family", resamples=bootstrap, seed=seed), c.points, flags)
        for c in cells if c.key.family == REFERENCE_FAMILY}
    points = matched_family_gaps(cells, fits, bootstrap, seed)
    out = []
    for pt in points:
        why = fairness.flagged_reason(flags, pt)
        out.append(pt if not why or pt.status != "ok" else dataclasses.replace(pt, status="plateau", reason=why))
    return tuple(out)


def analyse(inputs: Inputs, *, bootstrap: int = DEFAULT_BOOTSTRAP, x: str = "n_params", seed: int = 0) -> Analysis:
    """All fits, gaps, ensemble and ablation tables for validated inputs.

    Each study is analysed on its own (its gaps against its own AR runs) and the results are put
    side by side: with several studies every variant is labelled `<study>:<variant>`, so tables
    and figures show the studies apart (overlaid in the same figures), never pooled into one curve.
    """
    studies = sorted(inputs.records["study"].unique().to_list())
    many = len(studies) > 1
    try:
        parts = [_analyse_one(_study_inputs(inputs, name, many), bootstrap, x, seed) for name in studies]
    finally:
        solved_once.cache_clear()  # one analysis' cache: a later one solves its own data afresh
    if not many:
        return replace(parts[0], inputs=inputs, notes=parts[0].notes + tuple(
            f"run without eval.parquet: {r}" for r in inputs.missing_runs))
    notes = [n for name, part in zip(studies, parts) for n in _prefixed(name, part.notes, many)]
    notes += [f"run without eval.parquet: {r}" for r in inputs.missing_runs]
    fits = [replace(f, labels={"study": name, **f.labels}) for name, part in zip(studies, parts) for f in part.fits]
    options: dict[str, list[pl.DataFrame]] = {}
    for name, part in zip(studies, parts):
        for key, frame in part.options.items():
            options.setdefault(key, []).append(_with_study(frame, name))
    factorial = [_with_study(p.factorial, name) for name, p in zip(studies, parts) if p.factorial is not None]
    frames = {key: [_with_study(getattr(p, key), name) for name, p in zip(studies, parts)
                    if getattr(p, key) is not None and not getattr(p, key).is_empty()] for key in ("plateau", "ema", "final")}
    return Analysis(inputs, x, bootstrap, seed, tuple(notes), sum((p.cells for p in parts), ()), tuple(fits),
                    sum((p.gaps for p in parts), ()),
                    tuple(n for name, p in zip(studies, parts) for n in _prefixed(name, p.gap_notes, many)),
                    sum((p.ensembles for p in parts), ()),
                    _concat([_with_study(p.variants, name) for name, p in zip(studies, parts)]),
                    {k: _concat(v) for k, v in options.items()}, _concat(factorial) if factorial else None,
                    "/".join(sorted({p.weights for p in parts})),
                    *(_concat(frames[k]) if frames[k] else None for k in ("plateau", "ema")),
                    sum((p.matched for p in parts), ()), _concat(frames["final"]) if frames["final"] else None,
                    tuple(name for name, p in zip(studies, parts) for _ in p.gaps))


def _study_inputs(inputs: Inputs, study: str, label: bool) -> Inputs:
    """One study's records (variants labelled `<study>:<variant>` when `label`), options and curves."""
    records = inputs.records.filter(pl.col("study") == study)
    if label:
        records = records.with_columns(pl.concat_str(pl.lit(f"{study}:"), pl.col("variant")).alias("variant"))
    runs = records["run_id"].unique().to_list()
    options = inputs.options.filter(pl.col("run_id").is_in(runs)) if inputs.options is not None else None
    return replace(inputs, records=records, options=options, missing_runs=())


def _prefixed(study: str, notes: tuple[str, ...], label: bool) -> list[str]:
    return [f"{study}: {n}" if label else n for n in notes]


def _with_study(frame: pl.DataFrame, study: str) -> pl.DataFrame:
    return frame.select(pl.lit(study).alias("study"), pl.all().exclude("study"))


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="diagonal_relaxed")


def _analyse_one(inputs: Inputs, bootstrap: int, x: str, seed: int) -> Analysis:
    """One study's fits, gaps, ensemble and ablation tables (judge runs left out, one kind of
    weights or each arm its own when EMA is an arm difference, plateau runs flagged)."""
    records, notes = fairness.compared_only(inputs.records)
    records, weights, weight_notes = fairness.choose_weights(records, inputs.options)
    final, latest_notes = latest(records)
    chosen = select(final, inputs.settings)  # settings chosen on validation; every split but validation reported
    every_run, final = final, chosen.reported
    notes += weight_notes + latest_notes + repetition_notes(final)
    plateau = fairness.plateau_table(final, baselines=every_run)
    flags = fairness.flagged(plateau)
    sized, budget_notes = one_budget(final)  # one size, one compute budget
    fit_input, distinct_notes = distinct.fitted_records(sized)
    notes += budget_notes + distinct_notes
    pending_ensembles = in_background(ensemble_studies, sized, x, bootstrap, seed, resamples=bootstrap)
    cells, fits = _fitted(fit_input, x, bootstrap, seed, flags)
    by_key = {c.key: f for c, f in zip(cells, fits)}
    axis_fits = _axis_fits(fit_input, x, bootstrap, seed, flags)
    gaps, gap_notes = compute_gaps(cells, by_key, bootstrap, seed, x=x, axis_fits=axis_fits)
    gaps = with_eval_noise(gaps, final, evalnoise.read_windows(inputs.sources))
    gaps = [fairness.flag_gap(g, flags) for g in gaps if g.points]  # isoFLOP grids may share no size with AR
    notes += [f"run without eval.parquet: {r}" for r in inputs.missing_runs] + list(inputs.notes)
    if plateau.is_empty():
        notes.append("no nll_unigram records: under-training cannot be checked (evaluate with this version)")
    families = sorted(final["family"].unique().to_list())
    if len(families) < 2:
        notes.append(f"only one family present ({', '.join(families) or 'none'}): no cross-family comparison")
    ensembles = [fairness.flag_ensemble(s, flags) for s in pending_ensembles.result()]
    return Analysis(inputs, x, bootstrap, seed, tuple(notes), tuple(cells), tuple(fits), tuple(gaps),
                    tuple(gap_notes), tuple(ensembles),
                    ablations.variant_table(final), ablations.option_tables(final, inputs.options),
                    ablations.factorial_table(final), weights, plateau,
                    fairness.ema_effect(fairness.compared_only(inputs.records)[0]),
                    _matched(sized, bootstrap, seed, flags,
                             axis_fits.get("n_params_family", by_key if x == "n_params_family" else None)),
                    final, selection=chosen)


def fits_json(a: Analysis, extra: dict | None = None) -> str:
    """fits.json text: deterministic for fixed inputs and seed (sorted keys, no timestamps)."""
    arms = fairness.arm_weights(a.final) if a.final is not None else pl.DataFrame()
    doc = {"x": a.x, "x_meaning": X_MEANING[a.x], "weights": a.weights, "bootstrap": a.bootstrap, "seed": a.seed,
           "arm_weights": arms.to_dicts(),
           "fits": [f.to_json() for f in a.fits],
           "gaps": [{"study": study, **_gap_json(g)} for g, study in zip(a.gaps, a.gap_studies or ("",) * len(a.gaps))],
           "matched_family_gaps": [{**dataclasses.asdict(pt), "delta": finite_or_none(pt.delta), "lo": finite_or_none(pt.lo),
                                    "hi": finite_or_none(pt.hi)} for pt in a.matched],
           "plateau_runs": sorted(a.plateau.filter(pl.col("plateau"))["run_id"].unique().to_list())
           if a.plateau is not None and not a.plateau.is_empty() else [],
           "ensemble": [{"family": s.family, "variant": s.variant, "dataset": s.dataset, "split": s.split,
                         "fits": [f.to_json() for f in s.fits],
                         "gains": [{"size": g.size, "x": g.x, "m_min": g.m_min, "m_max": g.m_max, **g.gain.to_dict()}
                                   for g in s.gains], "gain_trend": s.gain_trend.to_dict(),
                         "gain_change_over_span": s.gain_trend.over_span()} for s in a.ensembles],
           **(extra or {})}
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False) + "\n"


def _gap_json(g) -> dict:
    return {"family": g.family, "variant": g.variant, "metric": g.metric, "dataset": g.dataset, "split": g.split,
            "reference": g.reference, "trend": g.trend.to_dict(), "multiplier_reason": g.multiplier_reason,
            "points": [{"size": p.size, "x": p.x, "paired": p.paired, "n_family": p.n_family,
                        "n_reference": p.n_reference, "plateau": p.plateau, **p.delta.to_dict(),
                        "eval_se": finite_or_none(p.eval_se), "n_windows": p.n_windows} for p in g.points],
            "multipliers": [m.to_json() for m in g.multipliers]}


def make_figures(a: Analysis) -> list:
    """Figure blocks (PNG bytes in memory), the summary's dataset/split first: loss vs size, loss vs
    training FLOPs, gap vs size, NLL vs M, then the other sets' loss vs size and training curves."""
    primary = summary.primary_set(a.final)
    first = lambda key: (tuple(key[-2:]) != primary, key)  # noqa: E731 - sort key: primary set first
    groups = {}
    by_key = {f_cell.key: f for f_cell, f in zip(a.cells, a.fits)}
    for cell in a.cells:
        k = cell.key
        if k.metric != "nll_ensemble":
            groups.setdefault((k.metric != "nll_l2r", k.metric, k.conditions, k.dataset, k.split), []).append(cell)
    size_blocks = []
    order = lambda kv: first((*kv[0][:2], tuple(-1 if v is None else v for v in kv[0][2]), *kv[0][3:]))  # noqa: E731
    for (_, metric, conditions, dataset, split), cells in sorted(groups.items(), key=order):
        title = f"{metric} {dataset}/{split}" + condition_text(dict(zip(CONDITION_KEYS, conditions)))
        size_blocks.append(sections.fig(f"loss_vs_size_{atomic.safe_name(metric, dataset, split, *conditions)}.png",
                                        figures.loss_vs_size(cells, by_key, title, a.x, _ylabel(a, metric)),
                                        f"{title} vs {a.x} (95% t-intervals; fitted curves with 95% bootstrap bands)"))
    blocks = size_blocks[:1] + _flops_figure(a, primary)
    for (dataset, split) in sorted({(g.dataset, g.split) for g in a.gaps}, key=first):
        sel = [g for g in a.gaps if (g.dataset, g.split) == (dataset, split)]
        blocks.append(sections.fig(f"gap_vs_size_{atomic.safe_name(dataset, split)}.png",
                                   figures.gap_vs_size(sel, f"gap {dataset}/{split}", a.x, summary.token_unit(a.final)),
                                   f"Δ vs {a.x} on {dataset}/{split} (95% interval bands)"))
    for s in sorted(a.ensembles, key=lambda s: first((s.dataset, s.split))):
        blocks.append(sections.fig(f"nll_vs_m_{atomic.safe_name(s.family, s.variant, s.dataset, s.split)}.png",
                                   figures.nll_vs_m(s, summary.token_unit(a.final)),
                                   f"nll_ensemble vs M per size: {s.family}/{s.variant} {s.dataset}/{s.split} "
                                   "(95% t-interval bands)"))
    blocks += size_blocks[1:]
    curves = a.inputs.curves
    if curves is not None and not curves.is_empty():
        labels = a.inputs.records.select("run_id", "family").unique("run_id")
        blocks.append(sections.fig("training_curves.png", figures.training_curves(curves, labels), "training curves"))
    return blocks


def _ylabel(a: Analysis, metric: str) -> str:
    """`metric (unit)`: the records' unit, per-token units made exact (nats/byte for bytes)."""
    units = a.final.filter(pl.col("metric") == metric)["unit"].unique().to_list()
    unit = units[0] if len(units) == 1 else "/".join(sorted(units)) or "?"
    return f"{metric} ({summary.token_unit(a.final) if unit == 'nats/token' else unit})"


def _flops_figure(a: Analysis, primary: tuple[str, str]) -> list:
    """Loss vs training FLOPs of every family's nll_l2r on the summary's dataset/split."""
    cells = [c for c in build_cells(a.final, "flops") if c.key.metric == "nll_l2r" and c.key.data == primary]
    if not cells:
        return []
    title = f"nll_l2r {primary[0]}/{primary[1]} vs training FLOPs"
    return [sections.fig(f"loss_vs_flops_{atomic.safe_name(*primary)}.png",
                         figures.loss_vs_flops(cells, title, _ylabel(a, "nll_l2r")),
                         f"{title}, all families (95% t-interval bands over seeds)")]


def report_blocks(a: Analysis, figure_blocks: list) -> list:
    """All report sections in order: the summary, the figures, then the inputs and the tables."""
    rec = a.inputs.records
    intro = [sections.h("Inputs"),
             sections.p(f"Sources: {', '.join(a.inputs.sources)}. {rec.height} records, "
                        f"{rec['run_id'].n_unique()} runs, families: {', '.join(sorted(rec['family'].unique().to_list()))}; "
                        f"x = {a.x}; bootstrap resamples = {a.bootstrap}, seed = {a.seed}.")]
    intro += [sections.p(f"Note: {n}") for n in a.notes]
    intro += sections.protocol_section(rec, a.inputs.options, a.weights, a.final) + sections.plateau_section(a.plateau)
    return (summary.summary_blocks(summary.build_summary(a)) + [sections.h("Figures")] + figure_blocks + intro
            + sections.fits_section(list(a.fits), a.x, a.bootstrap)
            + sections.gap_section(list(a.gaps), list(a.gap_notes), a.x, X_MEANING[a.x])
            + sections.matched_section(a.matched, X_MEANING[a.x]) + sections.ema_section(a.ema)
            + sections.generation_section(a.final)
            + sections.ensemble_section(list(a.ensembles)) + sections.ablation_section(a.variants, a.options, a.factorial))


def tables(a: Analysis) -> dict[str, pl.DataFrame]:
    """The tables written under tables/."""
    fit_rows = [{**{k: f.labels.get(k) for k in ("study", *CELL_KEYS)}, "status": f.status, "form": f.form,
                 "df_resid": f.diagnostics.get("df_resid"), "reason": f.reason,
                 "n_points": f.n_points, "n_seeds_min": f.n_seeds_min,
                 **{f"{n}{s}": v for n, prm in f.params.items()
                    for s, v in (("", prm.value), ("_lo", prm.ci95[0]), ("_hi", prm.ci95[1]))}}
                for f in a.fits]
    studies = a.gap_studies or ("",) * len(a.gaps)
    gap_rows = [{"study": study, "family": g.family, "variant": g.variant, "metric": g.metric, "dataset": g.dataset,
                 "split": g.split,
                 "reference": g.reference, "size": pt.size, "x": pt.x, "paired": pt.paired, **pt.delta.to_dict()}
                for g, study in zip(a.gaps, studies) for pt in g.points]
    mult_rows = [{"study": study, "family": g.family, "variant": g.variant, "metric": g.metric, "dataset": g.dataset,
                  "split": g.split, **m.to_json(), "lo": m.to_json()["ci95"][0], "hi": m.to_json()["ci95"][1]}
                 for g, study in zip(a.gaps, studies) for m in g.multipliers]
    out = {"fits": pl.DataFrame(fit_rows, infer_schema_length=None), "points": a.variants,
           "gap": pl.DataFrame(gap_rows, infer_schema_length=None)}
    if mult_rows:
        out["multipliers"] = pl.DataFrame([{k: v for k, v in r.items() if k != "ci95"} for r in mult_rows],
                                          infer_schema_length=None)
    out.update({f"option_{atomic.safe_name(k)}": v for k, v in a.options.items()})
    for name, frame in (("plateau", a.plateau), ("ema_effect", a.ema)):
        if frame is not None and not frame.is_empty():
            out[name] = frame
    if a.matched:
        out["matched_family_gap"] = pl.DataFrame([dataclasses.asdict(pt) for pt in a.matched])
    if a.factorial is not None:
        out["factorial"] = a.factorial
    heldout = _heldout(a)
    if heldout is not None:
        out["heldout"] = heldout
    if a.final is not None:
        parallel, spread = generation.parallel_error(a.final), generation.repeat_spread(a.final)
        if parallel is not None:
            out["parallel_decoding"] = parallel
        if not spread.is_empty():
            out["generation_repeats"] = spread.sort(generation.SAMPLER_KEYS, nulls_last=True)
    return out



def _heldout(a: Analysis) -> pl.DataFrame | None:
    """An isoFLOP study's held-out budgets, predicted before they trained, against what they measured."""
    study_dir = a.inputs.study_dir
    final = a.final
    if study_dir is None or final is None or "budget_flops" not in final.columns:
        return None
    predicted = frontier_lead.read_predictions(study_dir)
    if not predicted:
        return None
    return frontier_lead.heldout_frame(frontier_figures.analysed(final, a.bootstrap, a.seed), predicted)


def write_report(a: Analysis, out_dir: Path) -> Path:
    """Write every output of the report into out_dir as a whole: built in a temporary folder and
    swapped in (analysis.report.atomic), so a kill or a full disk leaves the previous report intact. The
    folder is marked as a report of `a.inputs.sources` (cli.outputs)."""
    def write(tmp: Path) -> None:
        _write_files(a, tmp)
        atomic.write_text(tmp / outputs.MARKER, outputs.marker_text("report", a.inputs.sources, out_dir))

    return atomic.build_dir(out_dir, write, owned=(*REPORT_ENTRIES, outputs.MARKER))


REPORT_ENTRIES = ("fits.json", "tables", "figures", "report.md", "report.html", "study.json")  # the rest is kept


def _write_files(a: Analysis, out_dir: Path) -> None:
    front = frontier_figures.build(a.selection, a.final, a.bootstrap, a.seed)  # isoFLOP studies, sweeps
    atomic.write_text(out_dir / "fits.json", fits_json(a, front.doc))
    for name, frame in tables(a).items():
        atomic.write_table(out_dir / "tables", name, frame)
    figure_blocks = make_figures(a) + list(front.figures)
    for b in figure_blocks:
        atomic.write_bytes(out_dir / "figures" / b.name, b.png)
    blocks = report_blocks(a, figure_blocks) + list(front.blocks)
    title = "aoscale scaling report"
    atomic.write_text(out_dir / "report.md", to_markdown(title, blocks))
    atomic.write_text(out_dir / "report.html", to_html(title, blocks))
    manifest = a.inputs.study_dir / "study.json" if a.inputs.study_dir else None
    if manifest is not None and manifest.is_file():
        atomic.write_bytes(out_dir / "study.json", manifest.read_bytes())


def default_out(paths: list[Path]) -> Path:
    """<study>/report for a study dir, else report/ beside the first records file."""
    first = paths[0]
    return first / "report" if first.is_dir() else first.parent / "report"


def run(paths: list[str | Path], out_dir: str | Path | None = None, *, bootstrap: int = DEFAULT_BOOTSTRAP,
        x: str = "n_params", seed: int = 0, force: bool = False) -> Path:
    """Load, analyse and write the report; returns the report dir. Raises RecordsError on bad input,
    an `out_dir` aoscale does not own as this report included (`force`: replace another source's)."""
    if x not in X_AXES:
        raise RecordsError(f"--x: unknown axis '{x}'; use one of {', '.join(X_AXES)}")
    if bootstrap < MIN_BOOTSTRAP:
        raise RecordsError(f"--bootstrap: {bootstrap} resamples is too few for a 95% interval; use >= {MIN_BOOTSTRAP}")
    rules.at_most("--bootstrap", bootstrap, MAX_BOOTSTRAP, "more resamples narrow no interval and each needs memory")
    try:
        workers_from_env()
    except ValueError as error:
        raise RecordsError(str(error)) from None
    out = Path(out_dir) if out_dir is not None else default_out([Path(p) for p in paths])
    check_out(out, paths, force=force)
    inputs = load(list(paths))
    return write_report(analyse(inputs, bootstrap=bootstrap, x=x, seed=seed), out)


def check_out(out: Path, sources: list[str | Path], *, force: bool = False) -> None:
    """Refuse (RecordsError) a report directory that is a file, cannot be written, or is not
    aoscale's report of `sources` (a study, a run, another source's report without `force`:
    cli.outputs)."""
    outputs.check_output("--out", out, "report", sources, force=force, legacy=REPORT_ENTRIES,
                         default=default_out([Path(p) for p in sources]))
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise RecordsError(f"--out: {existing} is not writable; pass a folder you can write to")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on bad input, nothing written)."""
    parser = Parser(prog="python -m analysis.fit_curves", description=__doc__.splitlines()[2],
                    error_prefix="fit_curves")
    parser.add_argument("paths", nargs="+", help="study directory and/or records files (.parquet, .ndjson)")
    parser.add_argument("--out", default=None, help="report directory (default <study>/report): a new folder "
                        "or a report aoscale wrote from the same paths")
    parser.add_argument("--force", action="store_true", help="replace a report aoscale wrote from other paths")
    parser.add_argument("--bootstrap", type=int_arg, default=DEFAULT_BOOTSTRAP,
                        help=f"bootstrap resamples (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--x", default="n_params", choices=X_AXES, help="x axis of the fits")
    parser.add_argument("--seed", type=int_arg, default=0, help="bootstrap seed (>= 0)")
    args = parse(parser, argv)
    if isinstance(args, int):
        return args

    def body() -> int:
        if not 0 <= args.seed < 2**32:
            raise RecordsError(f"--seed: {args.seed} must be in [0, 2**32); pass a non-negative seed")
        for path in args.paths:
            user_path("paths", path)
        out = user_path("--out", args.out) if args.out is not None else default_out([Path(p) for p in args.paths])
        try:
            written = run(args.paths, out, bootstrap=args.bootstrap, x=args.x, seed=args.seed, force=args.force)
        except OSError as error:  # a full disk, a size limit: one line, the previous report kept
            print(f"fit_curves: {atomic.failure_line(error, out)}", file=sys.stderr)
            return 1
        print(written / "report.html")
        return 0

    return run_main("fit_curves", body)


if __name__ == "__main__":
    raise SystemExit(main())
