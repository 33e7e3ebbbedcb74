"""Output folders (`--out` of a report or the results book): written only where aoscale owns them.

A folder aoscale writes as an output gets a marker file, `.aoscale-output.json`, naming its kind
(`report`, `book`) and the sources it was built from (as paths relative to the folder, so a moved
study keeps its report's). `check_output` accepts an output folder only where it is

- new (absent, or an empty folder), or
- a marked folder of the same kind built from the same sources, or
- with `force`, a marked folder of the same kind built from other sources,

and never a study, a run, the runs folder of a study, a folder inside a run, or a folder of
files aoscale did not write (an unmarked folder holding only `legacy` names, the files the kind
writes, counts as an output of unknown sources: accepted at the kind's default place or with
`force`). Each refusal is one `InputError` line naming the path and the fix, before anything is
written.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from cli import InputError
from cli.paths import refuse_special

MARKER = ".aoscale-output.json"
OWNERS = {"study": ("study.json", "runs"), "run": ("spec.json",)}  # folders an output never replaces
RUNS_DIR = "runs"


def _resolved(paths: Iterable[str | os.PathLike]) -> set[Path]:
    return {Path(p).expanduser().resolve() for p in paths}


def _owner(folder: Path) -> str | None:
    """The kind of data folder `folder` is ("study", "run", "runs"), or None."""
    try:
        for kind, files in OWNERS.items():
            if all((folder / name).exists() for name in files):
                return kind
        study = folder.parent
        if folder.name == RUNS_DIR and all((study / name).exists() for name in OWNERS["study"]):
            return "runs"
    except OSError:
        return None
    return None


def read_marker(folder: Path) -> dict | None:
    """The marker of an output folder ({"kind", "sources"} with sources resolved), or None."""
    path = folder / MARKER
    try:
        refuse_special("--out", path)
        doc = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError, InputError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str) or not isinstance(doc.get("sources"), list):
        return None
    if not all(isinstance(s, str) for s in doc["sources"]):
        return None
    return {"kind": doc["kind"], "sources": _resolved(folder / s for s in doc["sources"])}


def marker_text(kind: str, sources: Iterable[str | os.PathLike], folder: Path) -> str:
    """The marker's JSON for an output of `kind` at `folder` built from `sources`."""
    base = Path(folder).expanduser().resolve()
    relative = sorted(os.path.relpath(p, base) for p in _resolved(sources))
    return json.dumps({"kind": kind, "sources": relative, "written_by": "aoscale"}, indent=1) + "\n"


def _refuse_owned(field: str, path: Path) -> None:
    resolved = path.expanduser().resolve()
    what = _owner(resolved) if resolved.is_dir() else None
    if what is not None:
        raise InputError(f"{field}: {path} is a {what} folder, not an output aoscale wrote; pass a new folder "
                         "(an output never replaces a study or a run)")
    for parent in resolved.parents:
        kind = _owner(parent)
        if kind in ("run", "runs"):
            raise InputError(f"{field}: {path} is inside the {kind} folder {parent}; pass a folder outside it")


def _shown(paths: set[Path]) -> str:
    return ", ".join(sorted(str(p) for p in paths)) or "nothing"


def check_output(field: str, path: Path, kind: str, sources: Iterable[str | os.PathLike], *, force: bool = False,
                 legacy: tuple[str, ...] = (), default: Path | None = None) -> None:
    """Refuse (InputError) writing an output of `kind` built from `sources` into `path` unless
    aoscale owns it there (see the module's rules)."""
    refuse_special(field, path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{field}: {path} is a file; pass a folder for the {kind}")
    _refuse_owned(field, path)
    if not path.is_dir():
        return
    marker = read_marker(path)
    if marker is not None:
        _check_marked(field, path, kind, marker, _resolved(sources), force)
        return
    entries = [e.name for e in path.iterdir() if not (e.name.startswith(".") and "tmp-" in e.name)]
    if not entries:
        return
    known = set(entries) <= set(legacy)
    at_default = default is not None and path.expanduser().resolve() == default.expanduser().resolve()
    if known and (force or at_default):
        return
    fix = "pass --force to replace it" if known else "pass a new folder"
    raise InputError(f"{field}: {path} holds files aoscale did not write as a {kind} ({sorted(entries)[0]}, ...): "
                     f"it has no {MARKER}; {fix}")


def _check_marked(field: str, path: Path, kind: str, marker: dict, sources: set[Path], force: bool) -> None:
    if marker["kind"] != kind:
        raise InputError(f"{field}: {path} is a {marker['kind']} aoscale wrote, not a {kind}; pass a new folder")
    if marker["sources"] != sources and not force:
        raise InputError(f"{field}: {path} is the {kind} of {_shown(marker['sources'])}, not of {_shown(sources)}; "
                         f"pass a new folder, or --force to replace it")
