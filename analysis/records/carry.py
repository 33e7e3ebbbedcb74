"""The learning rate a tuned budget carries to a study's other budgets (issue: the frontier's lr
swept at the middle budget, the chosen rule carried to the others, documented).

The rule: in a study whose report chose lr by validation at one swept budget (analysis.records.selection,
fits.json `selection`), each family carries the lr of its best run at that budget, the chosen
(size, lr) cell with the lowest seed-mean validation CARRY_METRIC (the budget's empirical
optimum, on the metric every family reports). Refused (InputError: one line) when the report is
missing, chose no lr, swept lr at more than one budget, holds several variants of a family, or
when the carried value sits at an edge of its sweep ("widen the sweep"): an edge choice is not a
tuned lr. Reads files only; `scaling.launch --carry-lr-from STUDY` plans with the result, the
study records it (study.json settings `carry_lr`), and its status and report say so (`study_note`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cli import InputError, rules, schema
from cli.paths import within
from analysis.records.selection import FALLBACK_METRIC, SWEEP_PREFIX, cell_label

CARRY_METRIC = FALLBACK_METRIC  # nll_l2r: every family reports it, and selection's per-M metrics follow it
LR_COLUMN = f"{SWEEP_PREFIX}lr"
FLAG = "carry-lr-from"


@dataclass(frozen=True)
class CarriedLr:
    """Per family the carried lr, the budget it was chosen at, and the cells it came from."""

    by_family: dict[str, float]
    budget_flops: float
    cells: tuple[str, ...]  # cell_label of each family's carried cell

    def describe(self, source: str) -> str:
        """One line for the launcher and the plan."""
        shown = ", ".join(f"{fam} {lr:g}" for fam, lr in sorted(self.by_family.items()))
        return (f"lr carried from {source} (chosen on validation {CARRY_METRIC} at budget "
                f"{self.budget_flops:.3g} FLOPs, each family's best size): {shown}")


def read_selection(study_dir: Path) -> dict:
    """fits.json's `selection` of a study's report, checked by cli.schema.FITS; InputError naming
    the fix when absent or damaged (the file, the key and what was expected)."""
    try:
        doc = schema.load_json(within(FLAG, study_dir, "report", "fits.json"), schema.FITS)  # inside the study
    except InputError as error:
        raise InputError(f"{FLAG}: {error}") from None
    if doc is None:
        raise InputError(f"{FLAG}: {study_dir} has no readable report/fits.json; launch that study (or run "
                         f"python -m analysis.fit_curves {study_dir}) first")
    selection = doc.get("selection")
    if not isinstance(selection, dict) or not selection.get("chosen"):
        raise InputError(f"{FLAG}: {study_dir}'s report chose no swept settings (no sweep); launch a study "
                         "that sweeps lr at one budget first")
    return selection


def carried_lr(study_dir: str | Path) -> CarriedLr:
    """The carried lr per family from a study's report (see the module docstring)."""
    study_dir = Path(study_dir)
    selection = read_selection(study_dir)
    rows = [r for r in selection["chosen"] if r.get("metric") == CARRY_METRIC and r.get(LR_COLUMN) is not None
            and (r.get("n_candidates") or 0) > 1 and r.get("budget_flops") is not None]
    budgets = sorted({float(r["budget_flops"]) for r in rows})
    if len(budgets) != 1:
        found = "no budget" if not budgets else f"{len(budgets)} budgets ({', '.join(f'{b:.3g}' for b in budgets)})"
        raise InputError(f"{FLAG}: {study_dir}'s report chose lr at {found}; carrying needs an lr sweep at exactly "
                         "one budget (sweep at_budget)")
    best: dict[str, dict] = {}
    for row in rows:
        family = row["family"]
        if family in best and best[family]["variant"] != row["variant"]:
            raise InputError(f"{FLAG}: {study_dir} holds several variants of {family} "
                             f"({best[family]['variant']}, {row['variant']}); carrying picks one lr per family")
        if family not in best or row["val_mean"] < best[family]["val_mean"]:
            best[family] = row
    warnings = selection.get("warnings") or []
    for row in best.values():
        label = cell_label(row)
        edge = [w for w in warnings if w.startswith(f"{label}:") and " lr=" in w]
        if edge:
            raise InputError(f"{FLAG}: {edge[0]} before carrying it")
    return CarriedLr({f: float(r[LR_COLUMN]) for f, r in sorted(best.items())}, budgets[0],
                     tuple(cell_label(r) for _, r in sorted(best.items())))


def study_note(study_dir: str | Path) -> list[str]:
    """A line naming the lr a study carried to its unswept budgets (study.json settings
    `carry_lr`), or nothing when it carried none; a damaged study.json is refused (cli.schema.STUDY)."""
    path = Path(study_dir) / "study.json"
    carry = ((schema.load_json(path, schema.STUDY) or {}).get("settings") or {}).get("carry_lr")
    if not carry:
        return []
    for family, lr in rules.table(f"{path}: settings.carry_lr", carry).items():
        rules.positive_number(f"{path}: settings.carry_lr.{family}", lr)
    shown = ", ".join(f"{family} {lr:g}" for family, lr in sorted(carry.items()))
    return [f"lr carried from the swept budget to the others (scaling.launch --{FLAG}; analysis.records.carry): {shown}"]
