"""Reading records (the jobs -> analysis contract) from a study directory or from files.

A study directory contributes `runs/*/eval.parquet` (records), `runs/*/spec.json` (run options
for the ablation tables), `runs/*/metrics.ndjson` (training curves) and `study.json` (manifest).
Files may be parquet or ndjson. Every problem with the input raises `RecordsError` whose message
is one line naming the column or path and the fix; nothing is written before validation passes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from analysis.records.values import check_together, check_values
from analysis.records.carry import study_note
from analysis.records.health import group_notes, run_records
from analysis.records.selection import SETTING_FIELDS, SWEEP_PREFIX
from cli import InputError, rules, schema

# column -> (kind, nullable); kinds: str, int, float (ints accepted and cast). CONTRACTS.md "Records";
# ranges and the optional columns in the one table, cli.schema.RECORD_COLUMNS.
SCHEMA: dict[str, tuple[str, bool]] = {name: (col.kind, col.nullable) for name, col in schema.RECORD_COLUMNS.items()
                                       if col.contract}
# optional measurement conditions (jobs/eval/records.py): generation step count, parallel tokens per
# step and the sampling setting. A metric measured under several conditions is one curve per
# condition, never their mean; absent columns read as null (no condition).
CONDITION_COLUMNS = {name: schema.RECORD_COLUMNS[name].kind for name in ("steps", "tokens_per_step", "temperature", "top_p")}
CAST = {"str": pl.String, "int": pl.Int64, "float": pl.Float64}
READERS = {".parquet": pl.read_parquet, ".ndjson": pl.read_ndjson, ".jsonl": pl.read_ndjson}
FACTOR_PREFIX = "factor_"  # optional extra columns: per-run factor levels for the factorial table
OPTION_PREFIX = "opt_"  # run options joined from spec.json: model_options keys and `ema`
SPEC_SCALAR_OPTIONS = ("ema",)  # top-level spec.json fields that are ablation options
SPEC_SCOPE_FIELDS = ("lr", "tokenizer", "corpus", "steps", "batch_size", "seq_len")  # what the summary's scope states


RecordsError = InputError  # the one input-error type of every CLI (cli.InputError), by its records name


@dataclass(frozen=True)
class Inputs:
    """Everything analysis reads: records plus what a study directory adds."""

    records: pl.DataFrame
    study_dir: Path | None
    sources: tuple[str, ...]
    options: pl.DataFrame | None = None  # run_id + opt_* columns (strings)
    curves: pl.DataFrame | None = None  # run_id, kind, step, tokens, loss
    missing_runs: tuple[str, ...] = ()  # run dirs without eval.parquet ("<run_id> (<state>)")
    notes: tuple[str, ...] = field(default=())
    specs: pl.DataFrame | None = None  # run_id + SPEC_SCOPE_FIELDS from spec.json (the summary's scope)
    settings: pl.DataFrame | None = None  # run_id + sweep_<name>: each run's effective settings (selection)


def validate(frame: pl.DataFrame, source: str) -> pl.DataFrame:
    """Check every column's type, nulls and range (cli.schema.RECORD_COLUMNS, the optional columns
    included) and cast to the canonical dtypes; raises RecordsError naming the column and row."""
    check_values(frame, source)
    casts = [pl.col(n).cast(CAST[k]) for n, (k, _) in SCHEMA.items()]
    conditions = [(pl.col(n) if n in frame.columns else pl.lit(None)).cast(CAST[k]).alias(n)
                  for n, k in CONDITION_COLUMNS.items()]
    return frame.with_columns(casts + conditions)


def read_file(path: Path) -> pl.DataFrame:
    """One records file, validated."""
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise RecordsError(f"{path}: unknown records format '{path.suffix}'; use .parquet or .ndjson")
    try:
        frame = reader(path)
    except Exception as exc:  # polars raises several types for unreadable files
        raise RecordsError(f"{path}: cannot read records ({type(exc).__name__}); check the file") from exc
    return validate(frame, str(path))


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def load(paths: list[str | Path]) -> Inputs:
    """Records from study directories and/or files (all validated before anything is written)."""
    if not paths:
        raise RecordsError("paths: no study directory or records file given; pass <study> or files")
    frames, options, curves, missing, notes, specs, settings, study_dir = [], [], [], [], [], [], [], None
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            study_dir = study_dir or path
            part = _load_study(path)
            frames += part["frames"]
            options += part["options"]
            curves += part["curves"]
            missing += part["missing"]
            notes += part["notes"]
            specs += part["specs"]
            settings += part["settings"]
        elif path.is_file():
            frames.append(read_file(path))
        else:
            raise RecordsError(f"{path}: no such file or directory; pass a study dir or records files")
    records = _concat(frames)
    if records.is_empty():
        raise RecordsError(f"{paths[0]}: the records hold 0 rows; evaluate runs or pass non-empty record files")
    check_together(records, ", ".join(str(p) for p in paths))
    return Inputs(records=records, study_dir=study_dir, sources=tuple(str(p) for p in paths),
                  options=_concat(options) if options else None,
                  curves=_concat(curves) if curves else None, missing_runs=tuple(missing),
                  notes=tuple(notes), specs=_concat(specs) if specs else None,
                  settings=_concat(settings) if settings else None)


def _load_study(study: Path) -> dict[str, list]:
    """A study's usable records (analysis.records.health: unreadable, outdated or partial records are
    left out with a note, as are damaged checkpoints named), options, curves and notes."""
    if not sorted(study.glob("runs/*/eval.parquet")):
        raise RecordsError(f"{study}/runs/*/eval.parquet: no records found; evaluate runs or pass record files")
    out: dict[str, list] = {"frames": [], "options": [], "curves": [], "missing": [], "notes": [], "specs": [],
                            "settings": []}
    unevaluated: dict[str, list[str]] = {}
    damage: list[str] = []
    for run_dir in sorted(p for p in (study / "runs").iterdir() if p.is_dir()):
        frame, notes = run_records(run_dir, validate, _spec(run_dir))
        damage += notes
        if frame is not None:
            out["frames"].append(frame)
        elif not (run_dir / "eval.parquet").is_file():
            out["missing"].append(f"{run_dir.name} ({_run_state(run_dir)})")
        for warning in (_status(run_dir) or {}).get("warnings", []):
            if str(warning).startswith(UNEVALUATED_PREFIX):
                unevaluated.setdefault(str(warning)[len(UNEVALUATED_PREFIX):], []).append(run_dir.name)
        opts = _run_options(run_dir)
        if opts is not None:
            out["options"].append(opts)
        scope = _run_scope(run_dir)
        if scope is not None:
            out["specs"].append(scope)
            out["settings"].append(_run_settings(run_dir))
        curve = _run_curve(run_dir)
        if curve is not None:
            out["curves"].append(curve)
    out["notes"] = group_notes(damage) + [f"not evaluated in {len(runs)} run(s): {what}"
                                          for what, runs in sorted(unevaluated.items())] + study_note(study)
    if not out["frames"]:
        raise RecordsError(f"{study}/runs/*/eval.parquet: no usable records ({'; '.join(damage)[:300]}); relaunch the "
                           f"study to evaluate its runs")
    return out


# A run's status.json warning for a zero-shot set its suite wanted but could not have (jobs.eval.evaluate).
UNEVALUATED_PREFIX = "eval: zero-shot set not evaluated: "


def _spec(run_dir: Path) -> dict | None:
    """The run's spec.json, checked by cli.schema.SPEC (None when there is none)."""
    return schema.load_json(run_dir / "spec.json", schema.SPEC)


def _status(run_dir: Path) -> dict | None:
    """The run's status.json, checked by cli.schema.STATUS (None when there is none)."""
    return schema.load_json(run_dir / "status.json", schema.STATUS)


def _run_state(run_dir: Path) -> str:
    status = _status(run_dir) or {}
    state = str(status.get("state", "no status.json"))
    return "trained, not evaluated" if state == "done" else state  # done means evaluated too


def _run_options(run_dir: Path) -> pl.DataFrame | None:
    spec = _spec(run_dir)
    if spec is None:
        return None
    opts = {f"{OPTION_PREFIX}{k}": _opaque(v) for k, v in (spec.get("model_options") or {}).items()}
    opts.update({f"{OPTION_PREFIX}{k}": _opaque(spec[k]) for k in SPEC_SCALAR_OPTIONS if k in spec})
    return pl.DataFrame({"run_id": [run_dir.name], **{k: [v] for k, v in opts.items()}})


def _run_scope(run_dir: Path) -> pl.DataFrame | None:
    spec = _spec(run_dir)
    if spec is None:
        return None
    return pl.DataFrame({"run_id": [run_dir.name], **{k: [_opaque(spec[k])] for k in SPEC_SCOPE_FIELDS if k in spec}})


def _run_settings(run_dir: Path) -> pl.DataFrame:
    """run_id + sweep_<name> (SETTING_FIELDS) from spec.json: the settings the run trained with, as
    numbers (a field the spec lacks is null); RecordsError naming the field when one is not a number."""
    spec = _spec(run_dir) or {}
    values = {}
    for name, spec_field in SETTING_FIELDS.items():
        value = spec.get(spec_field)
        if value is not None:
            value = rules.number(f"{run_dir / 'spec.json'}: {spec_field}", value)
        values[f"{SWEEP_PREFIX}{name}"] = [None if value is None else float(value)]
    return pl.DataFrame({"run_id": [run_dir.name], **values}, schema={"run_id": pl.String,
                                                                      **dict.fromkeys(values, pl.Float64)})


def _opaque(value: object) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _run_curve(run_dir: Path) -> pl.DataFrame | None:
    path = run_dir / "metrics.ndjson"
    if not path.is_file():
        return None
    rows = []
    for number, line in enumerate(schema.read_text(path).splitlines(), 1):
        row = _parse_line(line)
        if row is None:
            continue
        schema.METRICS_ROW.check(f"{path} line {number}", row)
        loss = row.get("loss", row.get("val_loss"))
        if isinstance(loss, (int, float)) and isinstance(row.get("step"), int):
            rows.append({"run_id": run_dir.name, "kind": str(row.get("kind", "train")),
                         "step": row["step"], "tokens": int(row.get("tokens") or 0), "loss": float(loss)})
    return pl.DataFrame(rows) if rows else None


def _parse_line(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None  # a partially written last line of a live run
    return row if isinstance(row, dict) else None
