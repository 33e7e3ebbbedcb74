"""A change of a study's files on relaunch, journalled so a kill at any point leaves status true.

A relaunch that changes what study.json or a run's spec.json says (another evaluation suite,
resources, tracking, new runs of a widened sweep) first writes `<study>/relaunch.json`: the new
study document and the text of every spec.json that changes. Only then are study.json and the
spec files rewritten, and the journal removed last. A launcher killed in between leaves the
journal; the next launch rolls it forward (under the study lock) before anything else, and a
reader (`scaling.status`, through `scaling.run.study_ledger.view`) takes a run's spec from the journal while
it is pending, so a run whose records are on the old suite is never shown as done, and says the
change is pending (`pending_change`). A spec that cannot be rewritten because its run is training
(its lock held) stays in the journal until a later launch can write it. A damaged journal
(cli.schema.RELAUNCH: the study a study.json, each spec a run id's spec.json object) is refused
before anything is written or shown.

`differences` names the settings in which two studies differ, for a refused relaunch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli import InputError, schema
from cli.faults import fault_point
from cli.paths import within
from jobs.executors import lock_held
from jobs.run import files as runfiles

JOURNAL_FILE = "relaunch.json"
SHOWN_VALUE_CHARS = 40  # a differing setting's values are shown when this short, else just its name


def apply(study_dir: str | Path, doc: dict[str, Any], specs: dict[str, str]) -> None:
    """Make study.json hold `doc` and each run's spec.json the text in `specs` (run id -> text),
    journalled; nothing is written when both already do. The caller holds the study lock."""
    study_dir = Path(study_dir)
    changed = {run_id: text for run_id, text in specs.items() if _spec_text(study_dir, run_id) != text}
    if not changed and runfiles.read_json(study_dir / runfiles.STUDY_FILE) == doc:
        return
    runfiles.atomic_write_json(study_dir / JOURNAL_FILE, {"study": doc, "specs": changed})
    fault_point("relaunch-journalled")
    _carry_out(study_dir, doc, changed)


def roll_forward(study_dir: str | Path) -> None:
    """Finish the change a killed launcher journalled (nothing when none is pending). The caller
    holds the study lock."""
    pending = read(study_dir)
    if pending is not None:
        _carry_out(Path(study_dir), pending["study"], pending["specs"])


def read(study_dir: str | Path) -> dict[str, Any] | None:
    """The pending change (`study`, `specs`), or None; a damaged journal (cli.schema.RELAUNCH), or a
    spec keyed by anything but a run id of the study (cli.paths.within), is an InputError naming it."""
    path = Path(study_dir) / JOURNAL_FILE
    doc = schema.load_json(path, schema.RELAUNCH)
    for run_id, text in (doc or {"specs": {}})["specs"].items():
        try:
            within(f"{path}: specs", Path(study_dir) / runfiles.RUNS_DIR, run_id)
        except InputError as error:  # the journal's fix, not the name rule's
            raise InputError(f"{str(error).split('; ')[0]}; {schema.RELAUNCH.fix}") from None
        _spec_doc(path, run_id, text)
    return doc


def pending_change(study_dir: str | Path) -> dict[str, Any] | None:
    """A change a kill interrupted, as scaling.status reports it: `study_written` (study.json holds
    the new study yet), `specs_left` (runs whose spec.json is still to write) and `runs_added`
    (runs the new study adds to study.json's order); None when none is pending."""
    pending = read(study_dir)
    if pending is None:
        return None
    current = schema.load_json(Path(study_dir) / runfiles.STUDY_FILE, schema.STUDY, default={})
    order = current.get("order") or []
    left = sorted(r for r, text in pending["specs"].items() if _spec_text(Path(study_dir), r) != text)
    return {"study_written": current == pending["study"], "specs_left": left,
            "runs_added": [r for r in pending["study"].get("order") or [] if r not in order]}


def pending_spec(run_dir: str | Path) -> dict[str, Any] | None:
    """The spec a pending change gives the run in `run_dir` (`<study>/runs/<id>`), or None."""
    run_dir = Path(run_dir)
    path = run_dir.parent.parent / JOURNAL_FILE
    if not path.exists():
        return None
    text = (read(path.parent) or {"specs": {}})["specs"].get(run_dir.name)
    return None if text is None else _spec_doc(path, run_dir.name, text)


def _spec_doc(path: Path, run_id: str, text: str) -> dict[str, Any]:
    """The spec.json object a journal's text holds; InputError naming the journal and run otherwise."""
    try:
        spec = json.loads(text)
    except ValueError:
        spec = None
    if not isinstance(spec, dict):
        raise InputError(f"{path}: specs.{run_id}: not a JSON object (a run's spec.json text); "
                         f"{schema.RELAUNCH.fix}")
    return spec


def _carry_out(study_dir: Path, doc: dict[str, Any], specs: dict[str, str]) -> None:
    """Write study.json, then each spec.json (a training run's is kept for later), then drop the
    journal, or shrink it to the specs still to write."""
    if runfiles.read_json(study_dir / runfiles.STUDY_FILE) != doc:
        runfiles.atomic_write_json(study_dir / runfiles.STUDY_FILE, doc)
    fault_point("relaunch-study-written")
    left = {}
    for run_id, text in specs.items():
        directory = study_dir / runfiles.RUNS_DIR / run_id
        if directory.exists() and lock_held(directory):
            left[run_id] = text
            continue
        directory.mkdir(parents=True, exist_ok=True)
        if _spec_text(study_dir, run_id) != text:
            runfiles.atomic_write_text(directory / runfiles.SPEC_FILE, text)
            fault_point("relaunch-spec-written")
    if left:
        runfiles.atomic_write_json(study_dir / JOURNAL_FILE, {"study": doc, "specs": left})
    else:
        (study_dir / JOURNAL_FILE).unlink(missing_ok=True)


def _spec_text(study_dir: Path, run_id: str) -> str | None:
    path = study_dir / runfiles.RUNS_DIR / run_id / runfiles.SPEC_FILE
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The settings two study.json `settings` tables differ in, as `key old -> new` (values shown
    when short, `unset` for a missing one; tables compared key by key, `run.beta1`)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [prefix.rstrip(".") or "settings"]
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = _plain(old.get(key)), _plain(new.get(key))
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
            continue
        shown = f" {_shown(a)} -> {_shown(b)}"
        out.append(f"{prefix}{key}" + (shown if len(shown) <= SHOWN_VALUE_CHARS else ""))
    return out


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def _plain(value: Any) -> Any:
    """A value as study.json stores it (tuples as lists)."""
    return json.loads(json.dumps(value, default=str))
