"""The study directory is the ledger: `study.json` plus one run directory per run.

`<study>/study.json` holds the canonical study settings, its hash and a row per run (family,
variant, size, seed, ablation factors); `<study>/runs/<run_id>/` holds what the trainer writes
(spec.json, status.json, checkpoints, metrics, eval). A run's ledger state combines status.json
with its lock: `running` only while a live process holds it, `interrupted` when status.json says
running but nobody does (a killed launcher), to be resumed. Evaluation is part of a run's truth:
a run whose training is done but whose records are missing, unreadable, partial or of another
suite than its spec's is `trained` (jobs.eval.state), and the next launch evaluates it.
"""
from __future__ import annotations

import fcntl
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cli import InputError, rules, schema
from cli.paths import special_kind, within
from jobs.data.suites import DEFAULT_SUITE, EvalSuite
from jobs.eval.state import records_gap
from jobs.executors import lock_held
from jobs.run import files as runfiles
from jobs.run.spec import RunSpec

from scaling.study.study_spec import STUDY_FORMAT, StudyError, StudySpec
from scaling.study.sweep import parse_sweep

from . import journal

STUDY_FILE = runfiles.STUDY_FILE
RUNS_DIR = runfiles.RUNS_DIR
STUDY_LOCK = ".lock"


def run_dir(study_dir: str | Path, run_id: str) -> Path:
    """`<study>/runs/<run_id>`: the one place a run id becomes a path, so an id read from a file
    (`../../x`, `/etc`, a link out of the study) is refused (InputError naming the run id)."""
    return within("run_id", Path(study_dir) / RUNS_DIR, run_id)


def read_study(study_dir: str | Path) -> dict[str, Any] | None:
    """The study.json document, or None when the directory holds no study."""
    path = Path(study_dir) / STUDY_FILE
    if not path.exists():
        return None
    if special_kind(path):  # a FIFO would block the read
        raise StudyError(f"study-dir: {path} is a {special_kind(path)}, not a regular file; move the folder away or "
                         "pick another --study-dir")
    try:
        doc = json.loads(path.read_text())
    except OSError as error:
        raise StudyError(f"study-dir: {path} cannot be read ({error.strerror or error}); check its permissions") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise StudyError(f"study-dir: {path} is not valid JSON; move the folder away or pick another --study-dir") from None
    _check_document(path, doc)
    return doc


RUN_KEYS = ("family", "variant", "size", "seed")  # what every study.json row says about its run


def _check_document(path: Path, doc: Any) -> None:
    """A study.json of this format holds an object with `order` (run ids) and a `runs` row for each."""
    why = None
    if not isinstance(doc, dict):
        why = f"holds a JSON {type(doc).__name__}, not a study object"
    elif not isinstance(doc.get("order"), list):
        why = "has no `order` list of run ids"
    elif doc.get("format", 1) != STUDY_FORMAT:
        return  # another version's study: check_study_dir refuses it by its format
    elif not isinstance(doc.get("runs"), dict):
        why = "has no `runs` table"
    else:
        broken = [r for r in doc["order"] if not isinstance(r, str) or not isinstance(doc["runs"].get(r), dict)
                  or any(key not in doc["runs"][r] for key in RUN_KEYS)]
        if broken:
            why = f"lists run {broken[0]!r} without its row ({', '.join(RUN_KEYS)})"
    if why is None:
        _check_schema(path, doc)
        _check_ids(path, doc)
    if why:
        raise StudyError(f"study-dir: {path} {why}; it was not written by scaling.launch: move the folder away "
                         "or pick another --study-dir")


def _check_schema(path: Path, doc: dict) -> None:
    """Each key's kind (cli.schema.STUDY: `settings` a table, a row's `seed` an integer, ...)."""
    try:
        schema.STUDY.check(str(path), doc)
    except InputError as error:
        raise StudyError(f"study-dir: {error}") from None


def _check_ids(path: Path, doc: dict) -> None:
    """The study's `name` and each run id in `order` are ids (`cli.paths.within`'s rule): a study
    folder never leads a reader or a relaunch outside it. StudyError naming the key."""
    try:
        for i, run_id in enumerate(doc["order"]):
            within(f"order[{i}]", path.parent / RUNS_DIR, run_id)
        rules.name("name", doc.get("name"))
    except InputError as error:
        raise StudyError(f"study-dir: {path} {str(error).split('; ')[0]}; it was not written by scaling.launch: "
                         "move the folder away or pick another --study-dir") from None


def extends(existing: dict | None, study: StudySpec) -> bool:
    """Whether `study` keeps every run of the directory's study (its `order`) and adds some: a
    study that carries its lr into its own directory (scaling.launch --carry-lr-from)."""
    return existing is not None and set(existing.get("order") or ()) < set(study.run_ids)


def widens(study_dir: str | Path, study: StudySpec) -> bool:
    """Whether `study` is the directory's study with wider sweeps: the same settings but for the
    sweep's value lists, each family's a superset of the old one at the same budget (the fix a
    "widen the sweep" warning asks for), and every old run kept. Only the new values train."""
    existing = read_study(study_dir) if Path(study_dir).is_dir() else None
    if not extends(existing, study):
        return False
    old = json.loads(json.dumps(existing.get("settings") or {}, default=str))
    new = json.loads(json.dumps(dict(study.settings), default=str))
    families = {arm["family"] for arm in new.get("arms", ())}
    try:
        before, after = parse_sweep(old.pop("sweep", None), families), parse_sweep(new.pop("sweep", None), families)
    except ValueError:
        return False
    if old != new or before.at_budget != after.at_budget:
        return False
    for family in families:
        axes, wider = before.axes(family), after.axes(family)
        if set(axes) != set(wider) or any(not set(v) <= set(wider[n]) for n, v in axes.items()):
            return False
    return True


def check_study_dir(study_dir: str | Path, study: StudySpec, extending: bool = False) -> None:
    """Refuse (StudyError) a path that is a file or holds a different study (unless `extending`
    and the study keeps all of its runs: `extends`); writes nothing."""
    path = Path(study_dir)
    if path.exists() and not path.is_dir():
        raise StudyError(f"study-dir: {path} is a file; pass a folder with --study-dir")
    existing = read_study(path)
    if existing is not None and existing.get("format", 1) != STUDY_FORMAT:
        raise StudyError(f"study-dir: {path} was written by another aoscale version (study format "
                         f"{existing.get('format', 1)}, this one writes {STUDY_FORMAT}: run ids now hash every "
                         f"resolved model option); its runs stay readable by analysis.fit_curves; "
                         f"launch into a new --study-dir")
    other = existing is not None and existing.get("hash") != study.study_hash
    if other and extending and not extends(existing, study):
        raise StudyError(f"study-dir: {path} holds runs the carried plan does not keep; carry into another "
                         "--study-dir")
    if other and not extending:
        differ = journal.differences(existing.get("settings"), dict(study.settings))
        raise StudyError(f"study-dir: {path} holds a different study ({existing.get('name')}, hash "
                         f"{existing.get('hash')} != {study.study_hash}; settings that differ: "
                         f"{', '.join(differ) or 'the runs only'}); pass another --study-dir")
    if existing is not None and existing.get("name") != study.name:
        raise StudyError(f"name: {path} holds study {existing.get('name')!r}, not {study.name!r} (its records "
                         f"carry that name); relaunch with --name {existing.get('name')}, or pass another "
                         f"--study-dir for a study named {study.name}")


def adopt_name(study_dir: str | Path, study: StudySpec, named: bool, extending: bool = False) -> StudySpec:
    """The study under the name its directory already gives it, when the user named none
    (`named` False) and the runs are the same: a derived name (`<preset>-<hash>`, which a changed
    suite changes) is no choice of theirs. An explicit other name is refused by check_study_dir."""
    existing = read_study(study_dir) if Path(study_dir).is_dir() else None
    same = existing is not None and (existing.get("hash") == study.study_hash or (extending and extends(existing, study)))
    if named or not same or existing.get("name") == study.name:
        return study
    name = str(existing.get("name"))
    cells = tuple(replace(cell, spec=cell.spec.replace(study=name)) for cell in study.cells)
    return replace(study, name=name, cells=cells)


def prepare(study_dir: str | Path, study: StudySpec, extending: bool = False) -> None:
    """Create the ledger (idempotent): study.json and each run's spec.json, under the study lock.

    The same runs with other settings that change no run id (the evaluation suite, resources,
    tracking) rewrite study.json and the spec.json files; runs whose records are then of another
    suite show as `trained` and are evaluated again, never trained again. The change is journalled
    (scaling.run.journal): a change a killed launcher left half done is finished first."""
    path = Path(study_dir)
    check_study_dir(path, study, extending)
    (path / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    with open(path / STUDY_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        journal.roll_forward(path)
        check_study_dir(path, study, extending)
        specs = {run_dir(path, cell.run_id).name: json.dumps(cell.spec.to_dict(), indent=2, sort_keys=True) + "\n"
                 for cell in study.cells}
        journal.apply(path, json.loads(json.dumps(study.to_dict(), default=str)), specs)
        repair_statuses(path, study.run_ids)


def repair_statuses(study_dir: Path, run_ids: Iterable[str]) -> None:
    """Each idle run's damaged status.json written back as rebuilt from its checkpoints
    (jobs.run.files.repair_status): a relaunch leaves every status readable, so the report reads
    what the scheduler saw."""
    for run_id in run_ids:
        directory = run_dir(study_dir, run_id)
        if directory.is_dir() and not lock_held(directory):
            runfiles.repair_status(directory)


@dataclass(frozen=True)
class RunView:
    """What the ledger knows about one run."""

    run_id: str
    state: str  # pending | running | interrupted | trained | done | failed | preempted
    step: int
    steps: int
    attempts: int
    failures: int
    reason: str


def view(study_dir: str | Path, run_id: str) -> RunView:
    """The run's state from status.json and its lock."""
    directory = run_dir(study_dir, run_id)
    status = runfiles.read_status(directory)
    state = status.get("state", "pending")
    held = lock_held(directory)
    if held:
        state = "running"
    elif state == "running":
        state = "interrupted"
    reason = str(status.get("reason", ""))
    if state == "done":
        gap = _records_gap(directory, int(status.get("steps", 0)))
        state, reason = ("trained", gap) if gap else (state, reason)
    return RunView(run_id, state, int(status.get("step", 0)), int(status.get("steps", 0)),
                   int(status.get("attempts", 0)), int(status.get("failures", 0)), reason)


def _records_gap(directory: Path, steps: int) -> str | None:
    """What a trained run's records lack for its spec's suite (None: it is done); the spec a pending
    relaunch gives it (scaling.run.journal) counts over its spec.json."""
    try:
        spec = journal.pending_spec(directory) or runfiles.read_json(directory / runfiles.SPEC_FILE, default={})
        suite = EvalSuite.parse(spec.get("eval_suite", DEFAULT_SUITE))
    except (OSError, ValueError, AttributeError):  # InputError too: a damaged spec.json
        suite = DEFAULT_SUITE
    return records_gap(directory, suite, steps)


def study_run_ids(study_dir: str | Path) -> list[str]:
    """Run ids in the order study.json lists them (the launch order)."""
    doc = read_study(study_dir)
    if doc is None:
        raise StudyError(f"study: {study_dir} holds no {STUDY_FILE}; pass a study directory made by scaling.launch")
    return list(doc["order"])


def run_names(study_dir: str | Path) -> dict[str, str]:
    """run_id -> `family variant size s<seed>` (e.g. `ar base 0.1M s1`) from study.json, for
    progress lines; empty when the directory holds no study."""
    doc = read_study(study_dir) or {"runs": {}}
    return {run_id: f"{row['family']} {row['variant']} {row['size']} s{row['seed']}"
            for run_id, row in doc["runs"].items()}


def load_spec(study_dir: str | Path, run_id: str) -> RunSpec:
    """The run's spec.json."""
    return RunSpec.load(run_dir(study_dir, run_id) / runfiles.SPEC_FILE)

