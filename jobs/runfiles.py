"""Files of a run directory: atomic writes, `status.json`, `metrics.ndjson`.

Everything a user keeps is written to a temporary file in the same folder, fsynced and renamed
over the target, so a crash leaves either the old or the new file, never a torn one.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

STATES = ("pending", "running", "done", "failed", "preempted")
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.ndjson"
SPEC_FILE = "spec.json"
MANIFEST_FILE = "manifest.json"


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (a rename inside it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], Any], mode: int | None = None) -> None:
    """Call `write(handle)` on a temporary file beside `path`, fsync it, rename it into place and
    fsync the directory; a crash leaves either the old file or the new one, never a half file.
    `mode` sets the permissions (the temporary file is created 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically (see `atomic_write`)."""
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    """Atomic text write (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Atomic JSON write, indented and key-sorted so files diff well."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | Path, default: Any = None) -> Any:
    """Parse a JSON file, or `default` when it does not exist."""
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------------------
# status.json


def read_status(run_dir: str | Path) -> dict[str, Any]:
    """The run's status (`{"state": "pending"}` when no status file exists yet)."""
    return read_json(Path(run_dir) / STATUS_FILE, default={"state": "pending", "step": 0})


def write_status(run_dir: str | Path, state: str, **fields: Any) -> dict[str, Any]:
    """Merge `fields` into status.json with a new `state` and `updated_at`; returns the status."""
    if state not in STATES:
        raise ValueError(f"status: state {state!r} must be one of {STATES}")
    status = read_status(run_dir)
    status.update(fields, state=state, updated_at=time.time())
    if state != "failed":
        status.pop("reason", None)
    status["job_id"] = job_id()
    atomic_write_json(Path(run_dir) / STATUS_FILE, status)
    return status


def add_status_warning(run_dir: str | Path, message: str) -> None:
    """Append a warning to status.json, keeping its state."""
    status = read_status(run_dir)
    warnings = list(status.get("warnings", [])) + [message]
    write_status(run_dir, status.get("state", "pending"), warnings=warnings)


def job_id() -> str:
    """The scheduler's job id when there is one (Slurm, Ray), else the process id."""
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID", "RAY_JOB_ID"):
        if os.environ.get(name):
            task = os.environ.get("SLURM_ARRAY_TASK_ID")
            return f"{os.environ[name]}_{task}" if name == "SLURM_ARRAY_JOB_ID" and task else os.environ[name]
    return f"pid:{os.getpid()}"


# ---------------------------------------------------------------------------------------------
# metrics.ndjson


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as strings so a failed step's row stays parseable."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def append_metrics(run_dir: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append rows to metrics.ndjson (one JSON object a line) and flush them."""
    lines = [json.dumps({k: _clean(v) for k, v in row.items()}, sort_keys=True) for row in rows]
    if not lines:
        return
    with open(Path(run_dir) / METRICS_FILE, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()


def read_metrics(run_dir: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """All metric rows (optionally of one `kind`); a torn last line from a crash is skipped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [r for r in rows if kind is None or r.get("kind") == kind]


def truncate_metrics(run_dir: str | Path, step: int) -> int:
    """Atomically drop train/val rows logged after `step` (work a resume will redo).

    Event rows (`kind="start"`, ...) are kept: they record what happened. Returns rows dropped.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return 0
    rows = read_metrics(run_dir)
    kept = [r for r in rows if r.get("kind") not in ("train", "val") or int(r["step"]) <= step]
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
    atomic_write_text(path, text)
    return len(rows) - len(kept)
