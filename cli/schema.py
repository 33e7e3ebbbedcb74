"""One schema per file kind aoscale reads back, each a table of rules (`cli.rules`), read through
`load_json` / `check` (JSON documents and lines); record frames are checked against RECORD_COLUMNS
by cli.record_checks.

A JSON kind maps each key to a rule and names its required keys; a damaged file is refused with
one `cli.InputError` line `<file>: <key>: <value> <what was expected>; <fix>` (a nested key is
written `selection.chosen[2].sweep_lr`). Keys a kind does not name are left alone (newer writers
may add some). The kinds: `study.json` (STUDY), a run's `spec.json` as analysis reads it (SPEC),
`status.json` (STATUS), a `metrics.ndjson` row (METRICS_ROW), a report's `fits.json` as
`--carry-lr-from` and the results book read it (FITS), `book_run.json` (BOOK_RUN), a frontier
round's plan `rounds/round-<n>.json` (ROUND), a held-out budget's `predictions/<budget>.json`
(PREDICTIONS), a study's pending `relaunch.json` (RELAUNCH: its
specs' keys are run ids, checked by `cli.paths.within`).

Records (`eval.parquet`, and any records file given to `analysis.fit_curves`) are one table of
columns, RECORD_COLUMNS: each column's kind (str, int, float), whether it may be null, and its
range or its choices, the optional columns included; `sweep_<name>` and `factor_<name>` columns
by their prefix (cli.record_checks reads frames against them).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli import InputError, rules
from cli.paths import special_kind

Rule = Callable[[str, Any], Any]


# ---- rules for values read from files -----------------------------------------------------------
def optional(rule: Rule) -> Rule:
    """`rule`, or null."""
    return lambda field, value: None if value is None else rule(field, value)


def string(field: str, value: Any) -> str:
    """A string (may be empty: a variant, a reason)."""
    if not isinstance(value, str):
        raise rules.fail(field, value, "must be a string")
    return value


def list_of(rule: Rule, nonempty: bool = False) -> Rule:
    """A JSON list whose every item passes `rule` (`field[i]` names a bad one)."""
    def check(field: str, value: Any) -> list:
        if not isinstance(value, list) or (nonempty and not value):
            raise rules.fail(field, value, "must be a non-empty list" if nonempty else "must be a list")
        return [rule(f"{field}[{i}]", item) for i, item in enumerate(value)]
    return check


def table_of(rule: Rule) -> Rule:
    """A JSON object whose every value passes `rule` (`field.key` names a bad one)."""
    return lambda field, value: {key: rule(f"{field}.{key}", item) for key, item in rules.table(field, value).items()}


def loss(field: str, value: Any) -> float:
    """A loss as metrics.ndjson writes it: a number, or "nan"/"inf" (JSON has no NaN)."""
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise rules.fail(field, value, "must be a number (or \"nan\")")
    return value


# ---- JSON kinds ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """The keys of one kind of JSON object: key -> rule, the keys it must have, what to do when
    a file of this kind is damaged."""

    name: str
    fields: Mapping[str, Rule]
    required: tuple[str, ...] = ()
    fix: str = ""

    def check(self, where: str, doc: Any) -> dict:
        """`doc` when it is an object whose keys pass their rules; InputError naming the key otherwise."""
        if not isinstance(doc, dict):
            raise InputError(f"{where}: holds a JSON {_json_type(doc)}, expected an object ({self.name})"
                             + _fix(self.fix))
        for key in self.required:
            if key not in doc:
                raise InputError(f"{where}: {key} is missing ({_expected(self.fields[key])})" + _fix(self.fix))
        for key, rule in self.fields.items():
            if key in doc:
                try:
                    rule(f"{where}: {key}", doc[key])
                except InputError as error:
                    shown = str(error).split("; ")[0] if self.fix else str(error)  # the file's fix, not the rule's
                    raise InputError(shown + _fix(self.fix)) from None
        return doc


def nested(kind: Kind) -> Rule:
    """A rule for an object inside a document, checked by `kind` (keys named `outer.inner`)."""
    def check(field: str, value: Any) -> dict:
        where, _, key = field.rpartition(": ")
        prefix = f"{where}: {key}." if where else f"{field}."
        if not isinstance(value, dict):
            raise rules.fail(field, value, f"must be an object ({kind.name})")
        for name in kind.required:
            if name not in value:
                raise InputError(f"{prefix}{name} is missing ({_expected(kind.fields[name])})")
        for name, rule in kind.fields.items():
            if name in value:
                rule(f"{prefix}{name}", value[name])
        return value
    return check


def _json_type(doc: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(doc), "null")


def _fix(fix: str) -> str:
    return f"; {fix}" if fix else ""


class _Probe:
    """A value no rule accepts, shown as `?` (so a rule's phrase can be read off its error)."""

    def __repr__(self) -> str:
        return "?"


def _expected(rule: Rule) -> str:
    """What `rule` asks for, in its own words ("must be an integer")."""
    try:
        rule("x", _Probe())
    except InputError as error:
        return str(error).split(" ", 2)[-1].split("; ")[0]
    return "a value"


STATES = ("pending", "running", "done", "failed", "preempted")  # jobs.run.files.STATES
STATUS = Kind("status.json", {
    "state": lambda f, v: rules.one_of(f, v, STATES), "step": rules.nonneg_int, "steps": rules.nonneg_int,
    "attempts": rules.nonneg_int, "failures": rules.nonneg_int, "warnings": list_of(string), "reason": string,
    "updated_at": rules.number, "job_id": string}, required=("state",))
STUDY_ROW = Kind("a run's row", {"family": rules.text, "variant": string, "size": rules.text, "seed": rules.seed},
                 required=("family", "variant", "size", "seed"))
STUDY = Kind("study.json", {
    "format": rules.integer, "hash": string, "name": string, "order": list_of(string),
    "runs": lambda f, v: {k: nested(STUDY_ROW)(f"{f}.{k}", row) for k, row in rules.table(f, v).items()},
    "settings": rules.table},
    fix="it was not written by scaling.launch: move the folder away or pick another --study-dir")
SPEC = Kind("spec.json", {  # the keys analysis reads (jobs.run.spec.RunSpec checks the whole spec)
    "model_options": optional(rules.table), "ema": optional(rules.rate), "eval_suite": rules.text,
    "steps": rules.positive_int, "lr": rules.positive_number, "tokenizer": rules.text, "corpus": optional(string),
    "batch_size": rules.positive_int, "seq_len": rules.positive_int},
    fix="relaunch the study to rewrite it")
METRICS_ROW = Kind("metrics.ndjson row", {
    "kind": rules.text, "step": rules.nonneg_int, "tokens": optional(rules.nonneg_int), "loss": loss,
    "val_loss": loss, "tokens_per_s": optional(rules.nonneg_number)},
    fix="fix or delete that line (a run's training log)")
CHOSEN = Kind("a chosen cell", {
    "family": rules.text, "variant": string, "metric": rules.text, "val_mean": rules.number,
    "n_candidates": optional(rules.positive_int), "budget_flops": optional(rules.positive_number),
    "sweep_lr": optional(rules.positive_number)}, required=("family", "variant", "metric", "val_mean"))
SELECTION = Kind("selection", {"chosen": list_of(nested(CHOSEN)), "warnings": list_of(string)})
ARM_WEIGHTS = Kind("an arm's weights", {"family": rules.text, "variant": string, "weights": rules.text},
                  required=("family", "variant", "weights"))
GAIN = Kind("an ensemble gain", {
    "size": rules.text, "m_min": rules.positive_int, "m_max": rules.positive_int, "mean": optional(rules.number),
    "lo": optional(rules.number), "hi": optional(rules.number), "n": optional(rules.nonneg_int)},
    required=("size", "m_min", "m_max"))
ENSEMBLE = Kind("an ensemble study", {"family": rules.text, "variant": string, "gains": list_of(nested(GAIN))},
                required=("family", "variant", "gains"))
FITS = Kind("fits.json", {  # what --carry-lr-from and the results book (reference/review_book.py) read
    "selection": optional(nested(SELECTION)), "weights": rules.text, "arm_weights": list_of(nested(ARM_WEIGHTS)),
    "plateau_runs": list_of(rules.text), "ensemble": list_of(nested(ENSEMBLE))},
    fix="rebuild the report: python -m analysis.fit_curves <study>")
BOOK_RUN = Kind("book_run.json", {
    "command": rules.text, "wall_s": rules.nonneg_number, "rc": rules.integer,
    "load_before": list_of(rules.nonneg_number, nonempty=True), "load_after": list_of(rules.nonneg_number, nonempty=True)},
    required=("command", "wall_s", "rc", "load_before", "load_after"), fix="run that study again")
ROUND_RUN = Kind("a round's run", {
    "run_id": rules.name, "family": rules.text, "variant": string, "size": rules.text, "seed": rules.seed,
    "lr": rules.positive_number, "budget_flops": rules.positive_number, "criterion": rules.text, "reason": string,
    "spec": rules.table}, required=("run_id", "family", "variant", "size", "seed", "lr", "budget_flops", "criterion",
                                    "reason", "spec"))
ROUND_CHECK = Kind("a round's check", {"criterion": rules.text, "subject": string, "met": rules.switch,
                                       "detail": string}, required=("criterion", "subject", "met", "detail"))
ROUND = Kind("round file", {  # rounds/round-<n>.json: a frontier round's plan (scaling.rounds)
    "round": rules.positive_int, "cost_flops": rules.nonneg_number, "runs": list_of(nested(ROUND_RUN)),
    "checks": list_of(nested(ROUND_CHECK)), "predictions": list_of(string)}, required=("round", "cost_flops", "runs"),
    fix="move it away and relaunch (python -m scaling.rounds plans that round again)")
RELAUNCH = Kind("relaunch.json", {"study": nested(STUDY), "specs": table_of(string)}, required=("study", "specs"),
                fix="it holds a relaunch a kill interrupted: delete it and relaunch")  # scaling.run.journal

def _pair(field: str, value: Any) -> list:
    """A 95 % interval: two numbers, or two nulls where none was computed."""
    if not isinstance(value, list) or len(value) != 2:
        raise rules.fail(field, value, "must be a list of two numbers (or nulls)")
    return [optional(rules.number)(f"{field}[{i}]", v) for i, v in enumerate(value)]


PREDICTED = Kind("a predicted value", {"value": optional(rules.number), "ci95": _pair}, required=("value", "ci95"))
PREDICTION = Kind("a budget's prediction", {
    "family": rules.text, "variant": string, "dataset": rules.text, "split": rules.text, "metric": rules.text,
    "budget_flops": rules.positive_number, "n_opt": nested(PREDICTED), "l_opt": nested(PREDICTED)},
    required=("family", "variant", "dataset", "split", "metric", "budget_flops", "n_opt", "l_opt"))
PREDICTIONS = Kind("prediction file", {  # predictions/<budget>.json, written by scaling.rounds before it trains
    "budget_flops": rules.positive_number, "entries": list_of(nested(PREDICTION))}, required=("entries",),
    fix="it holds what was predicted before that budget trained: restore it, or move it away (the report then "
        "shows no held-out check for that budget)")



def read_text(path: Path, fix: str = "") -> str:
    """A file's text; InputError naming it when it is special (a FIFO would block), a folder,
    unreadable or not UTF-8."""
    kind = special_kind(path) or ("folder" if path.is_dir() else None)
    if kind:
        raise InputError(f"{path}: is a {kind}, not a regular file" + _fix(fix))
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({error.strerror or error})" + _fix(fix)) from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: is not UTF-8 text" + _fix(fix)) from None


def load_json(path: str | Path, kind: Kind, default: Any = None) -> Any:
    """A JSON file of `kind`, checked; `default` when it does not exist."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return default
    text = read_text(path, kind.fix)
    try:
        doc = json.loads(text)
    except ValueError as error:
        raise InputError(f"{path}: not readable JSON ({error})" + _fix(kind.fix)) from None
    return kind.check(str(path), doc)


# ---- records -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One record column: kind (str, int, float; level: any scalar, a factor's), nullable, its
    range (`low` < or <= value <= `high`) or `choices`; `contract`: one of CONTRACTS.md's columns
    (the others are optional)."""

    kind: str
    nullable: bool = True
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    choices: tuple[str, ...] = ()
    contract: bool = False

    def expected(self) -> str:
        """The range in words."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        low = "" if self.low is None else f"{'>' if self.low_open else '>='} {self.low:g}"
        high = "" if self.high is None else f"<= {self.high:g}"
        return " and ".join(p for p in (low, high) if p) or f"a finite {self.kind}"


UNITS = ("nats/token", "nats/byte", "bits/byte", "ppl", "s", "fraction")  # what jobs.eval.records.record writes
SPLITS = ("validation", "test", "samples")  # the corpus's validation, held-out test, generated samples
_COUNT, _POSITIVE = dict(low=0), dict(low=0, low_open=True)
RECORD_COLUMNS: dict[str, Column] = {
    "study": Column("str", False, contract=True), "run_id": Column("str", False, contract=True),
    "family": Column("str", False, contract=True), "variant": Column("str", False, contract=True),
    "size": Column("str", False, contract=True), "n_params": Column("int", False, **_POSITIVE, contract=True),
    "n_params_family": Column("int", False, **_COUNT, contract=True),
    "tokens": Column("int", False, **_COUNT, contract=True), "flops": Column("float", False, **_COUNT, contract=True),
    "seed": Column("int", False, **_COUNT, contract=True), "step": Column("int", False, **_COUNT, contract=True),
    "dataset": Column("str", False, contract=True), "split": Column("str", False, choices=SPLITS, contract=True),
    "metric": Column("str", False, contract=True), "value": Column("float", False, contract=True),
    "se": Column("float", **_COUNT, contract=True), "n_samples": Column("int", False, **_COUNT, contract=True),
    "m": Column("int", **_COUNT, contract=True), "unit": Column("str", False, choices=UNITS, contract=True),
    "estimator": Column("str"), "k_mc": Column("int", low=1), "n_targets": Column("int", low=1),
    "steps": Column("int", low=1), "tokens_per_step": Column("int", low=1), "evaluator": Column("str"),
    "weights": Column("str", choices=("ema", "raw")), "chunking": Column("str"), "eval_seed": Column("int", **_COUNT),
    "role": Column("str", choices=("compared", "judge")), "device": Column("str"), "precision": Column("str"),
    "coverage_tokens": Column("int", **_COUNT), "split_tokens": Column("int", **_COUNT),
    "budget_flops": Column("float", **_POSITIVE), "plan_tokens": Column("int", **_COUNT),
    "epochs": Column("float", **_COUNT), "unique_tokens": Column("int", **_COUNT), "suite": Column("str"),
    "run_steps": Column("int", **_COUNT), "n_layer": Column("int", low=1), "temperature": Column("float", **_COUNT),
    "top_p": Column("float", **_POSITIVE, high=1), "repeats": Column("int", low=1), "suite_hash": Column("str"),
    "numerics": Column("str"), "eval_numerics": Column("str"),
}
FACTOR_PREFIX, SWEEP_PREFIX = "factor_", "sweep_"  # a run's factor level (text), a swept setting's value
PREFIX_COLUMNS = {FACTOR_PREFIX: Column("level"), SWEEP_PREFIX: Column("float", **_COUNT)}  # a level: any scalar
SWEEP_RANGES = {"sweep_lr": Column("float", **_POSITIVE)}  # swept settings with a stricter range


def column(name: str) -> Column | None:
    """The schema of record column `name` (by its prefix for factor and sweep columns), or None."""
    if name in RECORD_COLUMNS or name in SWEEP_RANGES:
        return RECORD_COLUMNS.get(name) or SWEEP_RANGES[name]
    return next((c for prefix, c in PREFIX_COLUMNS.items() if name.startswith(prefix)), None)


def finite(value: Any) -> bool:
    """A number that is not NaN or inf."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
