"""Checkpoints: atomic step directories with per-file checksums, fallback past corrupt ones.

Layout of one checkpoint, `run_dir/ckpt/step_XXXXXXXX/`:

- `model.pt`: `{"model": full state dict, "ema": EMA state or None, "step": int}`: everything
  evaluation needs, never sharded (ZeRO-3 weights are gathered before saving), so `load_model`
  works without DeepSpeed;
- engine state: `optimizer.pt` (torch engine) or `ds/` (DeepSpeed's own `save_checkpoint`
  output), and `rank_XXXX.pt` per rank (its RNG states, both engines);
- `meta.json` (written last): step, engine, the engine's `layout` (engine, world size, ZeRO
  stage), the micro-batches per step (`n_micro`, `micro_batch`) and the sha256 of every other file.

A checkpoint of another layout than the resuming engine's (another world size, engine or stage)
loads through the consolidated state (`jobs.train.portable`), and the resume keeps `n_micro`
where the new world size divides it, so the losses go on as if the run had not moved.

A checkpoint is built in `ckpt/.tmp_step_XXXXXXXX/`, each file fsynced, then renamed into place,
so a crash never leaves a half-written `step_*` directory. On load the checksums are verified;
a corrupt checkpoint is skipped with a warning and the previous one is used.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cli import InputError
from cli.durable import fsync_dir
from jobs.run.files import CKPT_DIR, CKPT_PREFIX, SPEC_FILE, atomic_write_json
from jobs.run.spec import RunSpec
from jobs.data.corpus import get_encoding
import models
from models.ema import EMA
from jobs.run.device import pick_device
from jobs.train import portable

META_FILE = "meta.json"
MODEL_FILE = "model.pt"
_PREFIX = CKPT_PREFIX


@dataclass(frozen=True)
class CheckpointInfo:
    """Which checkpoint was loaded and which weights."""

    path: Path
    step: int
    engine: str
    weights: str  # "ema" or "raw"


def step_dir(run_dir: str | Path, step: int) -> Path:
    """`run_dir/ckpt/step_XXXXXXXX` (the name sorts by step)."""
    return Path(run_dir) / CKPT_DIR / f"{_PREFIX}{step:08d}"


def temp_dir(run_dir: str | Path, step: int) -> Path:
    """The staging directory a checkpoint is built in (the same name on every rank)."""
    return Path(run_dir) / CKPT_DIR / f".tmp_{_PREFIX}{step:08d}"


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Committed checkpoint directories, oldest first."""
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX)]
    return sorted((p for p in found if p.name[len(_PREFIX):].isdigit()), key=step_of)


def sha256_file(path: Path, fsync: bool = False) -> str:
    """sha256 (hex) of a file's bytes; with `fsync`, also flush it to disk."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
        if fsync:
            os.fsync(handle.fileno())
    return digest.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != META_FILE)


def save_file(obj: Any, path: Path) -> None:
    """`torch.save` into a staging directory (fsynced at commit). A failed write (a full disk)
    raises its own OSError, not the archive writer's RuntimeError that hides it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        try:
            torch.save(obj, handle)
        except RuntimeError as error:
            if isinstance(error.__context__, OSError):
                raise error.__context__ from None
            raise


def step_of(path: Path) -> int:
    """The step of a checkpoint directory, from its name."""
    return int(path.name[len(_PREFIX):])


def remove_staging(run_dir: str | Path) -> None:
    """Delete every staging directory (`ckpt/.tmp_step_*`): a save that failed or was killed."""
    root = Path(run_dir) / CKPT_DIR
    for tmp in root.glob(f".tmp_{_PREFIX}*") if root.is_dir() else ():
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(run_dir: str | Path, step: int) -> Path:
    """An empty staging directory for the checkpoint of `step` (leftovers of a crash removed)."""
    tmp = temp_dir(run_dir, step)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


_RANK_FILE = re.compile(r"(?:zero_pp_rank_(\d+)_.*|rank_(\d+)\.pt)")  # a rank's own files


def owner(name: str) -> int:
    """The rank that checksums a staged file: its own partition and RNG files (DeepSpeed's
    `zero_pp_rank_R_*`, `rank_RRRR.pt`) by rank R, everything else by rank 0."""
    match = _RANK_FILE.fullmatch(name)
    return int(match.group(1) or match.group(2)) if match else 0


def digest_own(run_dir: str | Path, step: int, rank: int) -> dict[str, str]:
    """sha256 of the staged files this rank owns (`owner`), each fsynced: every rank hashes and
    flushes its own partition at once, so rank 0 is not the bottleneck of a save."""
    tmp = temp_dir(run_dir, step)
    return {str(p.relative_to(tmp)): sha256_file(p, fsync=True) for p in _files(tmp) if owner(p.name) == rank}


def commit(run_dir: str | Path, step: int, engine: str, keep: int, digests: dict[str, str] | None = None,
           **record: Any) -> Path:
    """Checksum and fsync the staged files (those not in `digests`, which the ranks computed),
    write meta.json (with `record`: the engine's layout, the micro-batches per step, the save's
    size and time), rename into place, prune to `keep`."""
    tmp, final = temp_dir(run_dir, step), step_dir(run_dir, step)
    digests = digests or {}
    files = {name: digests.get(name) or sha256_file(tmp / name, fsync=True)
             for name in (str(p.relative_to(tmp)) for p in _files(tmp))}
    atomic_write_json(tmp / META_FILE, {"step": step, "engine": engine, **record, "files": files})
    if final.exists():  # the same step saved again (e.g. preempted exactly at a checkpoint)
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    prune(run_dir, keep)
    return final


def prune(run_dir: str | Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints (keep >= 1)."""
    for old in checkpoint_dirs(run_dir)[: -max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)


def verify(path: Path) -> str | None:
    """None when every file matches its checksum, else why the checkpoint is unusable."""
    try:
        meta = json.loads((path / META_FILE).read_text())
        for name, expected in meta["files"].items():
            if not (path / name).is_file():
                return f"{name} is missing"
            if sha256_file(path / name) != expected:
                return f"{name} fails its sha256 check"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"meta.json unreadable ({error})"
    return None


def read_meta(path: Path) -> dict[str, Any]:
    """The checkpoint's meta.json."""
    return json.loads((path / META_FILE).read_text())


def saved_layout(path: Path) -> dict[str, Any]:
    """The engine, world size and ZeRO stage a checkpoint was written with (meta.json's `layout`;
    for a checkpoint from before meta.json recorded it, read from its files)."""
    meta = read_meta(path)
    if "layout" in meta:
        return meta["layout"]
    return portable.layout(path, meta["engine"])


def newest_record(run_dir: str | Path, key: str) -> Any:
    """A value the newest checkpoint's meta.json recorded (None: no checkpoint, or not recorded)."""
    saved = checkpoint_dirs(run_dir)
    try:
        return read_meta(saved[-1]).get(key) if saved else None
    except (OSError, ValueError):
        return None


def latest_valid(run_dir: str | Path,
                 warn: Callable[[str], None] | None = None) -> Path | None:
    """The newest checkpoint whose checksums verify; each corrupt newer one is reported to `warn`."""
    for path in reversed(checkpoint_dirs(run_dir)):
        problem = verify(path)
        if problem is None:
            return path
        if warn is not None:
            warn(f"checkpoint {path.name} is corrupt ({problem}); falling back to an earlier one")
    return None


def load_file(path: Path) -> Any:
    """`torch.load(..., weights_only=True)` onto the CPU."""
    return torch.load(path, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------------------------
# Models from run directories


def vocab_size(tokenizer: str) -> int:
    """Vocabulary size of a tokenizer (all ids including specials)."""
    return get_encoding(tokenizer).n_vocab


def model_from_spec(spec: RunSpec) -> torch.nn.Module:
    """A freshly initialised model for the spec (`ValueError` naming a bad family/size/option)."""
    return models.build_model(spec.family, spec.size, vocab_size=vocab_size(spec.tokenizer),
                              seq_len=spec.seq_len, **spec.options)


def _pick_weights(weights: str, spec: RunSpec) -> str:
    if weights not in ("auto", "ema", "raw"):
        raise ValueError(f"weights: {weights!r} must be auto, ema or raw")
    if weights == "ema" and spec.ema <= 0:
        raise ValueError("weights: 'ema' requested but the run trained without EMA (ema=0); use raw")
    return ("ema" if spec.ema > 0 else "raw") if weights == "auto" else weights


def load_model(run_dir: str | Path, weights: str = "auto",
               warn: Callable[[str], None] | None = None, device: str | torch.device = "cpu"
               ) -> tuple[torch.nn.Module, RunSpec, CheckpointInfo]:
    """Build the run's model from spec.json and load its newest valid checkpoint.

    `weights`: `auto` (EMA weights when the run used EMA, else raw), `ema` or `raw`. The model is
    returned in eval mode on `device`: `cpu` (default), a torch device, or `auto` for the run's
    device rule (`jobs.run.device.pick_device`: this rank's GPU where CUDA exists). Raises
    `FileNotFoundError` when no valid checkpoint exists.
    """
    spec = RunSpec.load(Path(run_dir) / SPEC_FILE)
    chosen = _pick_weights(weights, spec)
    path = latest_valid(run_dir, warn)
    if path is None:
        raise FileNotFoundError(f"run_dir: no valid checkpoint under {Path(run_dir) / CKPT_DIR}; "
                                "train the run first (python -m jobs.train --run-dir ...)")
    state = load_file(path / MODEL_FILE)
    model = model_from_spec(spec)
    model.load_state_dict(state["model"])
    if chosen == "ema":
        ema = EMA(model, spec.ema)
        ema.load_state_dict(state["ema"])
        ema.apply_to(model)
    info = CheckpointInfo(path=path, step=int(state["step"]),
                          engine=read_meta(path)["engine"], weights=chosen)
    if device == "auto":
        device = pick_device()
    return model.to(device).eval(), spec, info


def load_run(run_dir: str | Path, weights: str = "auto", device="cpu") -> tuple[torch.nn.Module, RunSpec, CheckpointInfo]:
    """`load_model` for evaluation and generation, with every problem as a `cli.InputError`: no
    spec.json, no valid checkpoint, or a newer checkpoint that fails its checksum (never used
    silently at an older step: the message says to train the run again from there)."""
    run_dir = Path(run_dir)
    if not (run_dir / SPEC_FILE).is_file():
        raise InputError(f"--run-dir: {run_dir} has no spec.json; pass a run directory")
    problems: list[str] = []
    try:
        model, spec, info = load_model(run_dir, weights=weights, warn=problems.append, device=device)
    except FileNotFoundError as error:
        raise InputError(f"--run-dir: {error}") from None
    except (ValueError, TypeError) as error:
        raise InputError(str(error).splitlines()[0]) from None
    if problems:
        corrupt = problems[0].split(";")[0]
        raise InputError(f"--run-dir: {corrupt}, newer than the valid one at step {info.step}; rerun "
                         f"python -m jobs.train --run-dir {run_dir} to train it again from step {info.step}")
    return model, spec, info
