"""What a frontier (isoFLOP) study's report opens with (issue 35, item 5): k with its interval and
the loss range it was read over (charged and core FLOPs; none where the frontiers share no loss
range), the exponents of N_opt and L_opt, L_opt and N_opt per budget with each profile's
bracketing status, the lr each cell trained at, and the held-out budgets (predicted before they
trained, `predictions/<budget>.json` of scaling.rounds) against what they measured. Built before
the per-size gaps; every number read off `analysis.compare.frontier`'s entries.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from analysis.compare import frontier
from analysis.report import sections
from analysis.compare.gap import COMPARED_METRICS, REFERENCE_FAMILY, REFERENCE_METRIC
from analysis.report.render import Block, interval, num
from cli import schema

SIDE_SHAPES = 2  # shapes each side of the vertex that make a minimum bracketed (frontier_plan's rule)
PREDICTIONS_DIR = "predictions"
LEAD_METRICS = (REFERENCE_METRIC, *COMPARED_METRICS)


def _name(key: frontier.EntryKey) -> str:
    return f"{key.family}/{key.variant} {key.metric}"


def _named(key: frontier.EntryKey) -> str:
    """An entry's name with the data it was scored on (a study scores several evaluation sets)."""
    return f"{_name(key)} on {key.dataset}/{key.split}"


def bracketing(entry: frontier.Entry, p: frontier.Profile) -> str:
    """A profile's status with how many measured shapes lie each side of its vertex."""
    if not math.isfinite(p.n_opt):
        return p.status
    sizes = np.unique(entry.points.filter(pl.col("budget_flops") == p.budget_flops)["n_params"].to_numpy())
    below, above = int(np.sum(sizes < p.n_opt)), int(np.sum(sizes > p.n_opt))
    word = "bracketed" if p.status == "ok" and min(below, above) >= SIDE_SHAPES else "not bracketed"
    return f"{p.status}, {word} ({below} shapes below N_opt, {above} above)"


def k_sentence(e: frontier.Entry, unit: str) -> str:
    """k of one family against AR: inside the overlap, per FLOP count, or why there is none."""
    inside = [k for k in e.multipliers if not k["extrapolated"]]
    if not inside:
        why = ("the two frontiers share no L_opt range (only an extrapolated k exists; it is never quoted)"
               if e.multipliers else "no AR frontier to read it against, or a frontier whose L_opt does not fall with C")
        return f"{_named(e.key)}: no compute multiplier inside the data: {why}." + bound_sentence(e.k_bound, unit)
    losses = sorted({k["loss"] for k in inside})
    if all(k["ci95"][0] is None for k in inside):  # the data hold a value but no interval: not a result
        return (f"{_named(e.key)}: k read inside the data over L_opt {num(losses[0])}–{num(losses[-1])} {unit} has no "
                "interval (a frontier with fewer than 3 ok budgets leaves no scatter between budgets to draw); "
                "not quoted.")
    parts = []
    for flops in frontier.FLOP_COUNTS:
        rows = [k for k in inside if k["flops"] == flops]
        if rows:
            parts.append(f"{flops} FLOPs " + "; ".join(f"L={num(k['loss'])}: {interval(k['k'], *k['ci95'])}" for k in rows))
    return (f"{_named(e.key)} against AR's {inside[0]['reference_metric']}: k = C_family / C_AR at matched loss, read "
            f"over L_opt {num(losses[0])}–{num(losses[-1])} {unit} (where both frontiers are measured): "
            + " | ".join(parts) + ".")


def bound_sentence(b: dict | None, unit: str) -> str:
    """The bound read off measured points where no k interpolates (frontier.k_bound), or ''."""
    if not b:
        return ""
    return (f" Read off measured points instead: AR reached {num(b['loss'])} {unit} at C={b['reference_budget_flops']:.3g}, "
            f"while the family's L_opt at C={b['budget_flops']:.3g} is {interval(b['l_opt']['value'], *b['l_opt']['ci95'])}, "
            f"above it; so k > {num(b['k_above'])} on charged FLOPs (> {num(b['k_above_core'])} on core FLOPs) "
            "at that loss, if the family's frontier falls with C (a bound, not a k).")


def exponent_sentence(e: frontier.Entry) -> str:
    """N_opt ∝ C^a and L_opt ∝ C^b of one entry, with intervals and their basis."""
    a, b = e.exponent, e.l_opt_exponent or {}
    statuses = [p.status for p in e.profiles]
    return (f"{_named(e.key)}: N_opt ∝ C^a, a = {interval(a.get('value'), *a.get('ci95', [None, None]))}; L_opt ∝ C^b, "
            f"b = {interval(b.get('value'), *b.get('ci95', [None, None]))} ({a.get('n_budgets', 0)} ok budgets of "
            f"{len(statuses)}; {a.get('interval', '')}).")


def lead_entries(front: frontier.Frontier) -> list[frontier.Entry]:
    """The entries the lead shows: AR's nll_l2r and each family's compared metrics, reported splits."""
    return [e for e in front.entries if e.key.metric in LEAD_METRICS and e.key.split != "validation"]


def sentences(front: frontier.Frontier, unit: str) -> list[str]:
    """The lead's bullets: k per family, then the exponents, then how many minima are bracketed."""
    shown = lead_entries(front)
    out = [k_sentence(e, unit) for e in shown if e.key.family != REFERENCE_FAMILY]
    out += [exponent_sentence(e) for e in shown]
    profiles = [bracketing(e, p) for e in shown for p in e.profiles]
    brk = sum(s.startswith("ok, bracketed") for s in profiles)
    rest = ("" if brk == len(profiles) else "; the others' N_opt and L_opt are not measured (python -m "
            "scaling.rounds plans the shapes that bracket them)")
    out.append(f"{brk} of {len(profiles)} isoFLOP profiles have a bracketed minimum ({SIDE_SHAPES}+ measured shapes "
               f"each side of an interior vertex){rest}.")
    return out


def budget_table(front: frontier.Frontier) -> Block:
    """L_opt and N_opt per budget with each profile's bracketing status."""
    rows = [[_name(e.key), f"{e.key.dataset}/{e.key.split}", f"{p.budget_flops:.3g}", bracketing(e, p), str(p.n_points),
             interval(p.n_opt, *frontier._ci(p.n_opt_draws)), interval(p.l_opt, *frontier._ci(p.l_opt_draws))]
            for e in lead_entries(front) for p in e.profiles]
    return sections.table(["entry", "data", "C (FLOPs)", "status", "runs", "N_opt [95% CI]", "L_opt [95% CI]"], rows)


def lr_table(reported: pl.DataFrame, specs: pl.DataFrame | None) -> Block | None:
    """The lr each (family, budget, size) cell trained at (its selected runs, from their specs)."""
    if specs is None or "lr" not in specs.columns or "budget_flops" not in reported.columns:
        return None
    runs = (reported.filter((pl.col("metric") == REFERENCE_METRIC) & pl.col("budget_flops").is_not_null())
            .select("run_id", "family", "variant", "budget_flops", "size", "n_params", "seed").unique()
            .join(specs.select("run_id", pl.col("lr").cast(pl.Float64)), on="run_id", how="left"))
    if runs.is_empty():
        return None
    cells = (runs.group_by("family", "variant", "budget_flops", "size")
             .agg(pl.col("n_params").first(), pl.col("lr").unique().sort(), pl.len().alias("runs"))
             .sort("family", "variant", "budget_flops", "n_params"))
    rows = [[f"{r['family']}/{r['variant']}", f"{r['budget_flops']:.3g}", r["size"], num(float(r["n_params"])),
             ", ".join(f"{v:g}" for v in r["lr"] if v is not None) or "n/a", str(r["runs"])]
            for r in cells.iter_rows(named=True)]
    return sections.table(["family", "C (FLOPs)", "size", "N", "lr (chosen on validation)", "runs"], rows)


def read_predictions(study_dir: Path | None) -> list[dict]:
    """Every entry of `<study>/predictions/*.json` (written before its budget trained), each file
    checked by cli.schema.PREDICTIONS: a damaged one is an InputError naming the file and key."""
    if study_dir is None or not (Path(study_dir) / PREDICTIONS_DIR).is_dir():
        return []
    return [entry for path in sorted((Path(study_dir) / PREDICTIONS_DIR).glob("*.json"))
            for entry in schema.load_json(path, schema.PREDICTIONS)["entries"]]


def _covered(predicted: dict, measured: float) -> str:
    lo, hi = predicted.get("ci95", [None, None])
    if lo is None or not math.isfinite(measured):
        return "n/a"
    return "yes" if lo <= measured <= hi else "no"


def heldout_frame(front: frontier.Frontier, predicted: list[dict]) -> pl.DataFrame:
    """Predicted against measured N_opt and L_opt at each held-out budget, and whether each interval
    covered (tables/heldout.csv; the report's held-out table reads it)."""
    entries = {e.key: e for e in front.entries}
    rows = []
    for pr in predicted:
        key = frontier.EntryKey(*(pr.get(k) for k in frontier.ENTRY))
        e = entries.get(key)
        prof = next((p for p in e.profiles if math.isclose(p.budget_flops, pr["budget_flops"])), None) if e else None
        n_m, l_m = (prof.n_opt, prof.l_opt) if prof is not None and prof.status == "ok" else (math.nan, math.nan)
        (n_lo, n_hi), (l_lo, l_hi) = pr["n_opt"]["ci95"], pr["l_opt"]["ci95"]
        rows.append({**key._asdict(), "budget_flops": float(pr["budget_flops"]),
                     "n_opt_predicted": pr["n_opt"]["value"], "n_opt_lo": n_lo, "n_opt_hi": n_hi,
                     "n_opt_measured": n_m, "n_opt_covered": _covered(pr["n_opt"], n_m),
                     "l_opt_predicted": pr["l_opt"]["value"], "l_opt_lo": l_lo, "l_opt_hi": l_hi,
                     "l_opt_measured": l_m, "l_opt_covered": _covered(pr["l_opt"], l_m),
                     "measured_status": "not trained yet" if prof is None else prof.status,
                     "from_budgets": ",".join(f"{c:.3g}" for c in pr.get("from_budgets", []))})
    return pl.DataFrame(rows, infer_schema_length=None)


def heldout_rows(front: frontier.Frontier, predicted: list[dict]) -> list[list[str]]:
    """The held-out table's rows (heldout_frame, rendered)."""
    return [[_name(frontier.EntryKey(*(r[k] for k in frontier.ENTRY))), f"{r['dataset']}/{r['split']}",
             f"{r['budget_flops']:.3g}", interval(r["n_opt_predicted"], r["n_opt_lo"], r["n_opt_hi"]),
             num(r["n_opt_measured"]), r["n_opt_covered"], interval(r["l_opt_predicted"], r["l_opt_lo"], r["l_opt_hi"]),
             num(r["l_opt_measured"]), r["l_opt_covered"], r["measured_status"]]
            for r in heldout_frame(front, predicted).iter_rows(named=True)]


def lead_blocks(front: frontier.Frontier, reported: pl.DataFrame, specs: pl.DataFrame | None, unit: str,
                study_dir: Path | None = None) -> list[Block]:
    """The frontier section a frontier study's report opens with (module doc); [] for other studies."""
    if not lead_entries(front):
        return []
    out = [sections.h(f"The frontier first (isoFLOP study; 95 % intervals; losses in {unit})"),
           Block("list", text="frontier", rows=tuple((s,) for s in sentences(front, unit))),
           sections.h("L_opt and N_opt per budget", 3), budget_table(front)]
    lrs = lr_table(reported, specs)
    out += [sections.h("lr per cell", 3), lrs] if lrs is not None else []
    rows = heldout_rows(front, read_predictions(study_dir))
    if rows:
        out += [sections.h("Held-out budgets: predicted before training, then measured", 3),
                sections.p("Predicted from the frontier's lines in ln C over the budgets measured before (t(K-2) "
                           "predictive intervals of a new vertex, analysis.compare.frontier_plan); covered = the measured "
                           "vertex lies inside the predicted interval."),
                sections.table(["entry", "data", "C (FLOPs)", "predicted N_opt", "measured N_opt", "covered",
                                "predicted L_opt", "measured L_opt", "covered", "measured status"], rows)]
    return out
