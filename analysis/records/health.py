"""What a study's run folders say about their records before the report uses them.

Each run's `eval.parquet` is used only when it can be read and holds the run's result: records of
the suite its spec.json names now (the `suite` column; records without one predate it and count)
at its final step. Everything else is left out with a note that the report lists among its
warnings: an unreadable (truncated) file, records of another suite, a partial checkpoint's
records. Damage that leaves the records usable is named too: checkpoints that are gone, and a
final checkpoint that fails its checksum (the layout of jobs.train.checkpoint: `ckpt/step_XXXXXXXX/`
with `meta.json` listing each file's sha256; checked up to VERIFY_MAX_BYTES per run).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import polars as pl

EVAL_FILE = "eval.parquet"
CKPT_DIR, CKPT_PREFIX, META_FILE = "ckpt", "step_", "meta.json"
VERIFY_MAX_BYTES = 1 << 30  # bigger final checkpoints are not checksummed by the report


def run_records(run_dir: Path, validate: Callable[[pl.DataFrame, str], pl.DataFrame],
                spec: dict | None) -> tuple[pl.DataFrame | None, list[str]]:
    """(the run's validated records or None, notes on what was left out or is damaged)."""
    name = run_dir.name
    notes = checkpoint_notes(run_dir, name)
    path = run_dir / EVAL_FILE
    if not path.is_file():
        return None, notes
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several types for a torn file
        return None, notes + [f"run {name}: {EVAL_FILE} is unreadable ({type(error).__name__}: truncated or corrupt), "
                              f"its records are left out; relaunch the study to evaluate it again"]
    frame = validate(frame, str(path))
    why = _not_the_result(frame, spec or {})
    if why:
        return None, notes + [f"run {name}: {why}, its records are left out; relaunch the study to evaluate it again"]
    return frame, notes


def _not_the_result(frame: pl.DataFrame, spec: dict) -> str | None:
    """Why records are not the run's result now (another suite, a partial checkpoint), or None."""
    suite = spec.get("eval_suite")
    if "suite" in frame.columns and suite is not None:
        suites = sorted(set(frame["suite"].drop_nulls().cast(pl.String).to_list()))
        if suites and suites != [suite]:
            return f"records are of suite {', '.join(suites)} but its study's suite is now {suite}"
    steps = spec.get("steps")
    if isinstance(steps, int) and frame.height and frame["step"].min() < steps:
        return f"records score a partial checkpoint (step {frame['step'].min()} of {steps})"
    return None


SHOWN_RUNS = 6  # run ids a grouped note lists before "and N more"


def group_notes(notes: list[str]) -> list[str]:
    """Notes that say the same of several runs ("run <id>: <what>") as one line naming them, in
    first-seen order, so one damage class of a big study is one warning, not one per run."""
    groups: dict[str, list[str]] = {}
    for note in notes:
        head, sep, what = note.partition(": ")
        run_id = head[len("run "):] if head.startswith("run ") and sep else None
        groups.setdefault(what if run_id else note, []).append(run_id or "")
    out = []
    for what, ids in groups.items():
        ids = [i for i in ids if i]
        if len(ids) <= 1:
            out.append(f"run {ids[0]}: {what}" if ids else what)
            continue
        more = f" and {len(ids) - SHOWN_RUNS} more" if len(ids) > SHOWN_RUNS else ""
        out.append(f"{len(ids)} runs ({', '.join(ids[:SHOWN_RUNS])}{more}): {what.replace('its ', 'their ', 1)}")
    return out


def checkpoint_notes(run_dir: Path, name: str) -> list[str]:
    """Notes on a done run's checkpoints: none left, or the final one corrupt."""
    status = read_json(run_dir / "status.json") or {}
    if status.get("state") != "done":
        return []
    root = run_dir / CKPT_DIR
    saved = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(CKPT_PREFIX)) if root.is_dir() else []
    if not saved:
        return [f"run {name}: its checkpoints are missing ({CKPT_DIR}/ holds none); its records are kept, but it "
                f"cannot be evaluated again without training it again"]
    problem = corrupt(saved[-1])
    if problem:
        return [f"run {name}: its final checkpoint {saved[-1].name} is corrupt ({problem}); its records are kept"]
    return []


def corrupt(path: Path) -> str | None:
    """Why a checkpoint fails its checksums, or None (also when it is too big to check here)."""
    try:
        meta = json.loads((path / META_FILE).read_text())
        files = {name: path / name for name in meta["files"]}
        if any(not p.is_file() for p in files.values()):
            return f"{next(n for n, p in files.items() if not p.is_file())} is missing"
        if sum(p.stat().st_size for p in files.values()) > VERIFY_MAX_BYTES:
            return None
        for name, expected in meta["files"].items():
            if _sha256(files[name]) != expected:
                return f"{name} fails its sha256 check"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{META_FILE} unreadable ({type(error).__name__})"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: Path) -> dict | None:
    """A JSON object file's contents, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
