"""Files of a run directory: atomic writes, `status.json`, `metrics.ndjson`.

Everything a user keeps is written to a temporary file in the same folder, fsynced and renamed
over the target, so a crash leaves either the old or the new file, never a torn one. status.json
is the exception that keeps the rule "a run's status is always true": when the disk is full it
is overwritten in place (no new blocks needed), and a corrupt one is rebuilt from the run's
checkpoints and spec with a warning instead of stopping whoever reads it.
"""
from __future__ import annotations

import errno
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from cli.durable import fsync_dir

from cli import InputError, rules, schema

STATES = schema.STATES  # pending, running, done, failed, preempted
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.ndjson"
SPEC_FILE = "spec.json"
STUDY_FILE = "study.json"  # a study directory's marker (scaling.run.study_ledger writes it)
RUNS_DIR = "runs"  # where a study keeps its run directories
MANIFEST_FILE = "manifest.json"
# What makes a folder a study's or a started run's (cli.paths.not_nested): a loose spec.json beside
# a run directory is a user's file, not a run.
NESTING_MARKERS = {"study": (STUDY_FILE,), "run": (SPEC_FILE, MANIFEST_FILE)}
CKPT_DIR = "ckpt"  # checkpoints: ckpt/step_XXXXXXXX (see jobs.train.checkpoint)
CKPT_PREFIX = "step_"
REASON_CHARS = 300  # status reasons are one line, at most this long
_WARNED: set[str] = set()


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
    """The run's status (`{"state": "pending"}` when no status file exists yet).

    A status.json that does not parse or breaks its schema (`cli.schema.STATUS`: `step = "x"`,
    `warnings = 5`) is rebuilt from the checkpoints and spec.json (see `rebuild_status`) with a
    warning naming the key; the next `write_status` stores the rebuilt one."""
    path = Path(run_dir) / STATUS_FILE
    try:
        return schema.load_json(path, schema.STATUS, default={"state": "pending", "step": 0})
    except InputError as error:  # not JSON, a folder or FIFO, or a key that breaks its rule (cli.schema)
        return rebuild_status(run_dir, str(error))


def repair_status(run_dir: str | Path) -> bool:
    """Write back a damaged status.json rebuilt (`rebuild_status`), atomically, so whoever reads it
    next (a report, scaling.status) reads a true one; True when it was rebuilt. The caller holds
    the run (its lock is free): a live worker owns its status. A folder there is left as it is."""
    path = Path(run_dir) / STATUS_FILE
    try:
        schema.load_json(path, schema.STATUS)
        return False
    except InputError as error:
        if path.is_dir() and not path.is_symlink():
            return False
        atomic_write_json(path, rebuild_status(run_dir, str(error)))
        return True


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    """Steps of the committed checkpoint directories (unverified), ascending."""
    root = Path(run_dir) / CKPT_DIR
    names = [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    return sorted(int(n[len(CKPT_PREFIX):]) for n in names
                  if n.startswith(CKPT_PREFIX) and n[len(CKPT_PREFIX):].isdigit())


def rebuild_status(run_dir: str | Path, why: str) -> dict[str, Any]:
    """A status rebuilt from what the run directory holds: the newest checkpoint's step and
    spec.json's steps; `done` when that checkpoint is the last step, else `preempted` (resumable)
    or `pending`. The warning goes to stderr and into the status's `warnings`."""
    steps = checkpoint_steps(run_dir)
    step = steps[-1] if steps else 0
    try:
        total = rules.nonneg_int("steps", read_json(Path(run_dir) / SPEC_FILE, default={}).get("steps", 0))
    except (ValueError, OSError, AttributeError):  # InputError is a ValueError
        total = 0
    state = "done" if total and step >= total else ("preempted" if step else "pending")
    message = f"status: {why}; rebuilt from the checkpoints as {state} at step {step}"
    if message not in _WARNED:  # once per process: status.json is read many times
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr, flush=True)
    return {"state": state, "step": step, "steps": total, "warnings": [message]}


def write_status(run_dir: str | Path, state: str, **fields: Any) -> dict[str, Any]:
    """Merge `fields` into status.json with a new `state` and `updated_at`; returns the status.

    When the disk is full the file is overwritten in place (compact JSON), so a failure is still
    recorded where a new file cannot be created."""
    if state not in STATES:
        raise ValueError(f"status: state {state!r} must be one of {STATES}")
    status = read_status(run_dir)
    status.update(fields, state=state, updated_at=time.time())
    if state not in ("failed", "preempted"):
        status.pop("reason", None)
    if "reason" in status:
        status["reason"] = " ".join(str(status["reason"]).split())[:REASON_CHARS]
    status["job_id"] = job_id()
    path = Path(run_dir) / STATUS_FILE
    try:
        atomic_write_json(path, status)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.exists():
            raise
        overwrite_in_place(path, json.dumps(status, sort_keys=True, default=str).encode())
    return status


def overwrite_in_place(path: Path, data: bytes) -> None:
    """Write `data` over the existing file's blocks, then cut it to length: needs no free space
    while `data` is no longer than the file (not atomic: the fallback for a full disk)."""
    with open(path, "r+b") as handle:
        handle.write(data)
        handle.truncate(len(data))
        handle.flush()
        os.fsync(handle.fileno())


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
    """All metric rows (optionally of one `kind`); a torn last line from a crash is skipped, a row
    that breaks `cli.schema.METRICS_ROW` (`tokens = "abc"`) refused (InputError naming the line and key)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows.append(schema.METRICS_ROW.check(f"{path} line {number}", row))
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
