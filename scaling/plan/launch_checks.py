"""The launcher's preflight: everything `scaling.launch` checks before it writes anything.

Before the study is built: the flags (no empty values) and the `--spec` file (a readable UTF-8
file; its keys are checked by scaling.study.settings). After: every run through `jobs.train.preflight` (field
types and ranges, the trainer's and the model's rules) and the study directory (writable). For a
launch that trains (not `--dry-run`), after the plan's own budget check: the data of each
corpus once and, when the local backend trains here, the largest run's memory against this
machine. Every launch, dry or not, plans each run's micro-batch on the backend's ranks and the
planned device memory (`check_fit`: `--gpu-memory`, default 80 GiB, on a cluster backend; this
machine's memory for a local launch unless `--gpu-memory` is given) and refuses a run that cannot
fit even at micro-batch 1. Each failure is a `cli.InputError`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import InputError
from cli.paths import marked, not_nested, user_path
from jobs.train import preflight
from jobs.run.files import NESTING_MARKERS, SPEC_FILE

from scaling.plan.dry_run import GIB, format_memory_plan, memory_refusal, memory_rows
from scaling.study.settings import BY_KEY, DEFAULT_GPU_MEMORY_GIB
from scaling.study.study_spec import StudySpec

def check_flags(args: argparse.Namespace, keys: tuple[str, ...]) -> None:
    """No text flag is given empty (`--sizes ''` would otherwise mean "the default sizes")."""
    for key in keys + ("spec", "study_dir", "carry_lr_from"):
        value = getattr(args, key, None)
        if isinstance(value, str) and not value.strip(" ,"):
            flag = BY_KEY[key].flag_name if key in BY_KEY else "--" + key.replace("_", "-")
            raise InputError(f"{key.replace('_', '-')}: {flag} is empty; give a value or leave the flag out")


def check_spec_file(path: str) -> None:
    """`--spec` names a readable UTF-8 file (its TOML is parsed by scaling.study.study_spec.load_toml)."""
    file = Path(path)
    if not file.exists():
        raise InputError(f"spec: file {file} not found; pass an existing study TOML")
    if not file.is_file():
        raise InputError(f"spec: {file} is a folder; pass a study TOML file")
    try:
        file.read_bytes().decode("utf-8")
    except OSError as error:
        raise InputError(f"spec: {file} cannot be read ({error.strerror}); check its permissions") from None
    except UnicodeDecodeError as error:
        raise InputError(f"spec: {file} is not UTF-8 text (byte offset {error.start}); save it as UTF-8") from None


def check_study_path(study_dir: str | Path) -> Path:
    """A study directory that is reachable (cli.paths.user_path), not a run directory, and not
    inside another study or run."""
    path = user_path("study-dir", study_dir)
    not_nested("study-dir", path, NESTING_MARKERS)
    if marked(path, NESTING_MARKERS["run"]):
        raise InputError(f"study-dir: {path} is a run directory (it holds {SPEC_FILE}); pass a study folder")
    return path


def check_study(study: StudySpec, study_dir: Path) -> None:
    """Every run of the study (see jobs.train.preflight.check_specs) and the study directory."""
    preflight.check_writable(study_dir, "study-dir")
    preflight.check_specs([cell.spec for cell in study.cells], memory=False, data=False)


def check_resources(study: StudySpec, *, memory: bool) -> None:
    """For a launch that trains: each corpus once and, with `memory` (training here), the
    largest run against this machine."""
    preflight.check_specs([cell.spec for cell in study.cells], memory=memory, data=True)


def planning_memory(study: StudySpec, backend: str) -> tuple[int, str, bool]:
    """(bytes per device, how it is stated, whether it is the `--gpu-memory` assumption): the
    study's `gpu_memory` setting, else this machine's memory for the local backend, else the
    default of DEFAULT_GPU_MEMORY_GIB."""
    gib = dict(study.settings).get("gpu_memory")
    if gib is None and backend == "local":
        have, what = preflight.machine_bytes()
        return have, f"this machine's {have / GIB:.1f} GiB of {what} (local; --gpu-memory to plan for another)", False
    gib = DEFAULT_GPU_MEMORY_GIB if gib is None else gib
    default = "" if "gpu_memory" in dict(study.settings) else ", the default"
    return int(gib * GIB), f"--gpu-memory {gib:g} GiB per GPU{default}", True


def check_fit(study: StudySpec, ranks: int, backend: str) -> str:
    """The memory plan's text for the dry-run; InputError (one line) when a run's batch does not
    split over the ranks, or (`gpu-memory`) cannot fit the planned GPU even at micro-batch 1. A
    local launch without `--gpu-memory` is checked against this machine by `check_resources`
    instead, when it trains."""
    device_bytes, source, assumed = planning_memory(study, backend)
    rows = memory_rows(study, ranks, device_bytes)  # InputError: a batch that does not split over the ranks
    why = memory_refusal(rows, device_bytes, source)
    if why and assumed:
        raise InputError(why)
    return format_memory_plan(rows, device_bytes, source)
