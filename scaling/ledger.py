"""The study directory is the ledger: `study.json` plus one run directory per run.

`<study>/study.json` holds the canonical study settings, its hash and a row per run (family,
variant, size, seed, ablation factors); `<study>/runs/<run_id>/` holds what the trainer writes
(spec.json, status.json, checkpoints, metrics, eval). A run's ledger state combines status.json
with its lock: `running` only while a live process holds it, `interrupted` when status.json says
running but nobody does (a killed launcher), to be resumed.
"""
from __future__ import annotations

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import runfiles
from jobs.executors import lock_held
from jobs.spec import RunSpec

from .study import STUDY_FORMAT, StudyError, StudySpec

STUDY_FILE = runfiles.STUDY_FILE
RUNS_DIR = runfiles.RUNS_DIR
STUDY_LOCK = ".lock"


def run_dir(study_dir: str | Path, run_id: str) -> Path:
    """`<study>/runs/<run_id>`."""
    return Path(study_dir) / RUNS_DIR / run_id


def read_study(study_dir: str | Path) -> dict[str, Any] | None:
    """The study.json document, or None when the directory holds no study."""
    path = Path(study_dir) / STUDY_FILE
    if not path.exists():
        return None
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
    if why:
        raise StudyError(f"study-dir: {path} {why}; it was not written by scaling.launch: move the folder away "
                         "or pick another --study-dir")


def check_study_dir(study_dir: str | Path, study: StudySpec) -> None:
    """Refuse (StudyError) a path that is a file or holds a different study; writes nothing."""
    path = Path(study_dir)
    if path.exists() and not path.is_dir():
        raise StudyError(f"study-dir: {path} is a file; pass a folder with --study-dir")
    existing = read_study(path)
    if existing is not None and existing.get("format", 1) != STUDY_FORMAT:
        raise StudyError(f"study-dir: {path} was written by another aoscale version (study format "
                         f"{existing.get('format', 1)}, this one writes {STUDY_FORMAT}: run ids now hash every "
                         f"resolved model option); its runs stay readable by analysis.fit_curves; "
                         f"launch into a new --study-dir")
    if existing is not None and existing.get("hash") != study.study_hash:
        raise StudyError(f"study-dir: {path} holds a different study ({existing.get('name')}, hash "
                         f"{existing.get('hash')} != {study.study_hash}); pass another --study-dir")


def prepare(study_dir: str | Path, study: StudySpec) -> None:
    """Create the ledger (idempotent): study.json and each run's spec.json, under the study lock."""
    path = Path(study_dir)
    check_study_dir(path, study)
    (path / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    with open(path / STUDY_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        check_study_dir(path, study)
        if read_study(path) is None:
            runfiles.atomic_write_json(path / STUDY_FILE, study.to_dict())
        for cell in study.cells:
            _write_spec(run_dir(path, cell.run_id), cell.spec)


def _write_spec(directory: Path, spec: RunSpec) -> None:
    """Write spec.json unless the run is being trained; resources may change between launches."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / runfiles.SPEC_FILE
    text = json.dumps(spec.to_dict(), indent=2, sort_keys=True) + "\n"
    if target.exists() and (target.read_text() == text or lock_held(directory)):
        return
    runfiles.atomic_write_text(target, text)


@dataclass(frozen=True)
class RunView:
    """What the ledger knows about one run."""

    run_id: str
    state: str  # pending | running | interrupted | done | failed | preempted
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
    return RunView(run_id, state, int(status.get("step", 0)), int(status.get("steps", 0)),
                   int(status.get("attempts", 0)), int(status.get("failures", 0)),
                   str(status.get("reason", "")))


def study_run_ids(study_dir: str | Path) -> list[str]:
    """Run ids in the order study.json lists them (the launch order)."""
    doc = read_study(study_dir)
    if doc is None:
        raise StudyError(f"study: {study_dir} holds no {STUDY_FILE}; pass a study directory made by scaling.launch")
    return list(doc["order"])


def load_spec(study_dir: str | Path, run_id: str) -> RunSpec:
    """The run's spec.json."""
    return RunSpec.load(run_dir(study_dir, run_id) / runfiles.SPEC_FILE)

