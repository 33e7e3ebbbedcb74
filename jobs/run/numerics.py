"""The numerics path: what decides a run's floating-point rounding besides its spec.

A spec fixes the maths of a run, not its rounding. On the CPU, torch picks vectorised kernels by
the CPU's instruction set (`torch.backends.cpu.get_cpu_capability()`: DEFAULT, AVX2, AVX512),
its BLAS does the same for matmuls, the fused adaLN kernels (models/kernels) replace the eager
norms of cores with adaptive LayerNorm, and their backward sums per-thread partials; on a GPU the
device, CUDA and the compiler decide. Each choice gives the same values to float32 rounding
(~1e-7 relative per op), and training amplifies such differences step by step, so two paths give
two models from one spec (docs/DESIGN.md "Numerics paths" measures how far).

So the path is part of a run's provenance. `numerics.json` in the run folder lists the path of
every training segment (the step it started from and the path it ran on); a resume on another
path is refused (`check_resume`) where the run trained on a bitwise path (the CPU's) unless
`AOSCALE_ALLOW_NUMERICS_CHANGE=1` (the launcher's and trainer's `--allow-numerics-change`); a run
trained on a GPU resumes on another GPU model, CUDA or torch (a requeue in a mixed partition).
Either way the new segment is recorded, and both paths are listed. Records carry the training
path (`numerics`: its id, or the ids of its segments joined by "+") and the path the evaluation
itself ran on (`eval_numerics`); the analysis warns when a comparison mixes training paths.
"""
from __future__ import annotations

import hashlib
import json
import typing
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from cli import InputError, numerics_ids
from cli.paths import special_kind
from cli.environment import ALLOW_NUMERICS_CHANGE, numerics_change_allowed
from jobs.run.files import MANIFEST_FILE, atomic_write_json, read_json
from models import kernels

NUMERICS_FILE = "numerics.json"
NOT_USED = "unused"  # the kernels' field where the pass never reaches them


@dataclass(frozen=True)
class NumericsPath:
    """The choices besides the spec that set a pass's rounding (plain values, stable id)."""

    device: str  # cpu, or cuda (<GPU name>)
    isa: str  # the CPU's vector capability torch dispatches on, or the CUDA version
    torch: str  # torch's version (its kernels and its BLAS come with it)
    kernels: str  # the fused CPU kernels' build key, "off", or NOT_USED (no adaLN, or not fp32 on the CPU)
    threads: int  # intra-op threads (the kernels' backward sums one partial per thread)
    precision: str  # fp32 | bf16 (autocast over fp32 weights on every engine: jobs.train.engines)
    compiled: bool  # through torch.compile

    @property
    def id(self) -> str:
        """The `numerics` record column, `<machine>.<kernels>`: 8 hex digits of the hash of every
        field but `kernels`, then the kernels' build key (8 characters), `off`, or `-` where the
        pass never reaches them. Two runs compare on one path when their machine parts agree and
        their kernel parts do too where both use kernels (`cli.numerics_ids.conflicting`): an AR
        run (`-`) and an AO-GPT run (a build key) of one machine are on one path."""
        machine = {k: v for k, v in asdict(self).items() if k != "kernels"}
        digest = hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()[:8]
        kernel = {NOT_USED: numerics_ids.NOT_REACHED, "off": "off"}.get(self.kernels, self.kernels[:8])
        return f"{digest}.{kernel}"

    @property
    def label(self) -> str:
        """One line for status and messages, e.g. `cpu AVX2 torch 2.13.0 kernels a56449e2 1 thread fp32`."""
        kernel = self.kernels if self.kernels in ("off", NOT_USED) else self.kernels[:8]
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        return " ".join([self.device, self.isa, f"torch {self.torch}", f"kernels {kernel}", threads,
                         self.precision] + (["compiled"] if self.compiled else []))

    def differences(self, other: NumericsPath) -> list[str]:
        """The fields in which `other` differs, as `field old -> new`."""
        return [f"{f.name} {getattr(self, f.name)} -> {getattr(other, f.name)}" for f in fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]


def current(model: torch.nn.Module, device: torch.device, bf16: bool, compiled: bool) -> NumericsPath:
    """This process's path for passes of `model` on `device`."""
    cuda = device.type == "cuda"
    name = f"cuda ({torch.cuda.get_device_name(device)})" if cuda and torch.cuda.is_available() else device.type
    isa = f"CUDA {torch.version.cuda}" if cuda else torch.backends.cpu.get_cpu_capability()
    return NumericsPath(name, isa, torch.__version__, _kernels(model, device, bf16, compiled),
                        torch.get_num_threads(), "bf16" if bf16 else "fp32", compiled)


def _kernels(model: torch.nn.Module, device: torch.device, bf16: bool, compiled: bool) -> str:
    """Whether the fused adaLN kernels can take this model's passes (models.kernels.cpu_backend
    decides per pass; they need an adaLN core, float32 on the CPU, eager), and which build."""
    core = getattr(model, "core", None)
    adaln = core is not None and getattr(core.cfg, "cond_dim", 0) > 0
    if not adaln or device.type != "cpu" or bf16 or compiled:
        return NOT_USED
    return kernels.build_key() if kernels.available() else "off"


# ---------------------------------------------------------------------------------------------
# numerics.json: one segment per training call that moved the run on


FIELD_TYPES = typing.get_type_hints(NumericsPath)  # field -> str | int | bool, as the dataclass declares


def read_segments(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's training segments, `[{"from_step": int, "path": {...}}]` (empty: none recorded,
    a run from before the file existed). A damaged file (not JSON, a key missing or of the wrong
    type, a FIFO or device that would block the read) is refused, naming it and the key."""
    path = Path(run_dir) / NUMERICS_FILE
    if not path.exists():
        return []
    fix = "move it aside to adopt this machine's path"
    kind = special_kind(path)
    if kind:
        raise InputError(f"{path}: a {kind}, not a numerics file; {fix}")
    try:
        segments = json.loads(path.read_text())["segments"]
        for i, segment in enumerate(segments):
            _check_segment(i, segment)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: not a numerics file ({type(error).__name__}: {error}); {fix}") from None
    return segments


def _check_segment(i: int, segment: Any) -> None:
    """TypeError naming `segments[i].<key>` where a value is not of its field's type."""
    step = segment["from_step"]
    if type(step) is not int or step < 0:
        raise TypeError(f"segments[{i}].from_step must be a step count, not {step!r}")
    found = segment["path"]
    for name, kind in FIELD_TYPES.items():
        if type(found[name]) is not kind:
            raise TypeError(f"segments[{i}].path.{name} must be a {kind.__name__}, not {found[name]!r}")
    NumericsPath(**found)  # no key beside the fields


def segment_paths(run_dir: str | Path) -> list[NumericsPath]:
    """The distinct paths the run trained on, in order."""
    paths = [NumericsPath(**s["path"]) for s in read_segments(run_dir)]
    return list(dict.fromkeys(paths))


def path_counts(run_dirs: list[Path]) -> dict[str, tuple[str, int]]:
    """Path id -> (label, runs that trained on it) over `run_dirs`, in first-seen order; a run whose
    numerics.json is damaged is left out (status shows it `unreadable`)."""
    counts: dict[str, tuple[str, int]] = {}
    for run_dir in run_dirs:
        try:
            found = segment_paths(run_dir)
        except InputError:
            continue
        for path in found:
            label, n = counts.get(path.id, (path.label, 0))
            counts[path.id] = (label, n + 1)
    return counts


def _trained_before(run_dir: Path, step: int) -> list[dict[str, Any]]:
    """The segments whose steps the checkpoint at `step` holds (later ones are redone)."""
    return [s for s in read_segments(run_dir) if int(s["from_step"]) < step]


def bitwise(path: NumericsPath) -> bool:
    """Whether a resume on `path` repeats an uninterrupted run bit for bit: the CPU paths do
    (jobs.train.loop); on a GPU, kernels pick their reduction order at run time (cuBLAS, atomics),
    so no GPU path does, and a change of GPU model, CUDA or torch costs no reproducibility."""
    return path.device == "cpu"


def check_resume(run_dir: Path, run_id: str, step: int, path: NumericsPath) -> None:
    """Refuse (InputError) to resume at `step`, trained up to it on a bitwise (CPU) path, on
    another path, unless AOSCALE_ALLOW_NUMERICS_CHANGE=1. A start from step 0 is never refused;
    a run trained on a GPU resumes on any GPU (a requeue in a mixed partition), and
    `record_segment` names the new path."""
    before = _trained_before(run_dir, step)
    if not before:
        return
    last = NumericsPath(**before[-1]["path"])
    if last == path or not bitwise(last) or numerics_change_allowed():
        return
    raise InputError(f"run {run_id}: trained to step {step} on numerics path {last.id} ({last.label}); "
                     f"this process is on {path.id} ({'; '.join(last.differences(path))}): resume it on "
                     f"its own path, or pass --allow-numerics-change ({ALLOW_NUMERICS_CHANGE.name}=1) "
                     "and its records name both")


def record_segment(run_dir: Path, step: int, path: NumericsPath) -> None:
    """Note that training continues from `step` on `path`: segments from `step` on are dropped
    (their steps are redone), and a new one starts where the path changes."""
    old = read_segments(run_dir)
    segments = _trained_before(run_dir, step)
    if not segments or NumericsPath(**segments[-1]["path"]) != path:
        segments.append({"from_step": int(step), "path": asdict(path)})
    if segments != old:
        atomic_write_json(run_dir / NUMERICS_FILE, {"segments": segments})


def ran_eager(run_dir: Path, step: int, path: NumericsPath) -> bool:
    """Whether the training a resume at `step` continues ran eager on `path`'s machine, where this
    process would compile (a compile that fell back: `fell_back`); the resume then stays eager."""
    before = _trained_before(run_dir, step)
    last = before[-1]["path"] if before else {}
    return bool(before) and not last.get("compiled", True) and {**last, "kernels": None, "compiled": True} == {
        **asdict(path), "kernels": None}


def fell_back(run_dir: Path, step: int, eager: NumericsPath) -> None:
    """A compiled call fell back to the eager core during step `step` (models.core): the steps
    from there on ran on `eager`, which numerics.json and the manifest's `numerics` now name."""
    record_segment(run_dir, step - 1, eager)
    manifest = read_json(run_dir / MANIFEST_FILE, default=None)
    if isinstance(manifest, dict):
        atomic_write_json(run_dir / MANIFEST_FILE, {**manifest, "numerics": eager.label})


def training_column(run_dir: str | Path) -> str | None:
    """The `numerics` record column: the training path's id, the ids of its segments' paths
    joined by "+" where a resume changed path, or None for a run from before numerics.json."""
    paths = segment_paths(run_dir)
    return "+".join(p.id for p in paths) if paths else None


def record_columns(run_dir: str | Path, model: torch.nn.Module, place) -> dict[str, str | None]:
    """The record columns of a pass of `model` placed by `place` (a jobs.run.device.Placement):
    `numerics`, the run's training path(s) (`training_column`), and `eval_numerics`, this pass's."""
    compiled = place.compile and bool(getattr(getattr(model, "core", None), "compiled", False))  # not if it fell back
    here = current(model, place.device, place.bf16, compiled)
    return {"numerics": training_column(run_dir), "eval_numerics": here.id}
