"""How `scaling.launch` drives each executor: its flags, their validation, and whether it blocks.

`BACKENDS` maps a backend name (a key of `jobs.executors.EXECUTORS`) to a `Backend`:
- `local` trains on this machine and blocks;
- `slurm` submits the runs that are not done as one job array and returns at once (`--wait`
  waits, then writes the report); runs an earlier launch queued are waited on, not resubmitted;
- `ray` is a Tune driver: it blocks until the grid is done.

Every backend's options are parsed and validated (`Backend.options`) before the study directory
is touched; a bad value raises `StudyError` with one line naming the flag and the fix.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli import int_arg, options, rules
from cli.options import Flag
from jobs.executors import EXECUTORS, Executor, Handle, get_executor
from jobs.executors.ray_tune import RayOptions
from jobs.executors.slurm import SlurmOptions

from scaling.study.study_spec import StudyError


@dataclass(frozen=True)
class Backend:
    """One executor as the launcher sees it."""

    flags: tuple[Flag, ...]
    build: Callable[[argparse.Namespace, dict[str, Any]], Any]  # flags -> validated options (ValueError)
    executor: Callable[[Any, Path], Executor]
    detached: bool = False  # jobs outlive the launcher: return after submitting unless --wait
    world_size: Callable[[Any], int] = field(default=lambda options: 1)
    describe: Callable[[Any, Path, int], str] | None = None  # --dry-run: what would be submitted for n runs

    def options(self, args: argparse.Namespace) -> Any:
        """The validated options; StudyError (one line, field and fix) on bad input."""
        given = {f.field: getattr(args, f.dest) for f in self.flags if getattr(args, f.dest) is not None}
        try:
            return self.build(args, given)
        except ValueError as error:  # a rule's line says what is wanted; the flags' help says more
            raise StudyError(str(error) + ("" if "fix:" in str(error) else "; see --help")) from None

    def attach(self, executor: Executor, run_dirs: list[Path]) -> dict[str, Handle]:
        """Handles of runs an earlier launch left queued (run id -> handle)."""
        attach = getattr(executor, "attach", None)
        return attach(run_dirs) if attach else {}


def _local(args: argparse.Namespace, given: dict[str, Any]) -> dict[str, Any]:
    from jobs.executors.local import check_max_parallel, visible_gpus  # noqa: PLC0415 - local backend only

    if args.max_parallel is not None:
        rules.positive_int("max-parallel", args.max_parallel)
    check_max_parallel(args.max_parallel, visible_gpus())
    return {"max_parallel": args.max_parallel}


def _slurm(args: argparse.Namespace, given: dict[str, Any]) -> Any:
    from jobs.executors.slurm import parse_additional, parse_time_min, validate_slurm_options  # noqa: PLC0415

    if "time_min" in given:
        given["time_min"] = parse_time_min(given["time_min"])
    if "additional" in given:
        given["additional"] = parse_additional(given["additional"])
    if "setup" in given:
        given["setup"] = tuple(given["setup"])
    options = SlurmOptions(**given)
    _check_engine(args, _slurm_world_size(options))
    validate_slurm_options(options, check_partition=not args.dry_run)  # a dry run needs no controller
    return options


def _slurm_describe(options: Any, study_dir: Path, n_runs: int) -> str:
    from jobs.executors.slurm import render_submission  # noqa: PLC0415 - Slurm backend only

    return render_submission(options, study_dir, n_runs)


def _slurm_world_size(options: Any) -> int:
    return options.nodes * max(1, options.gpus_per_node)


def _check_engine(args: argparse.Namespace, world_size: int) -> None:
    """A run on more than one GPU needs DeepSpeed; refuse an explicit `--engine torch`."""
    if world_size > 1 and args.engine not in (None, "deepspeed"):
        raise ValueError(f"engine: {args.engine} trains on one process but nodes x gpus_per_node = "
                         f"{world_size}; fix: drop --engine or pass --engine deepspeed")


def _ray(args: argparse.Namespace, given: dict[str, Any]) -> Any:
    from jobs.executors.ray_tune import options_from_flags  # noqa: PLC0415 - Ray backend only

    return options_from_flags(given, args.max_retries)


SLURM_FLAGS = options.flags(SlurmOptions)  # declared on the options' fields, with their help and defaults
RAY_FLAGS = options.flags(RayOptions)

BACKENDS: dict[str, Backend] = {
    "local": Backend((), _local, lambda options, study_dir: get_executor("local", **options)),
    "slurm": Backend(SLURM_FLAGS, _slurm, detached=True, world_size=_slurm_world_size, describe=_slurm_describe,
                     executor=lambda options, study_dir: get_executor("slurm", study_dir=study_dir, options=options)),
    "ray": Backend(RAY_FLAGS, _ray,
                   executor=lambda options, study_dir: get_executor("ray", study_dir=study_dir, options=options)),
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """`--backend`, the flags every backend reads (`--max-parallel`, `--max-retries`, `--retry-failed`)
    and every backend's own flags, in one argument group per backend; unset flags stay None. Declared
    once here for each command that trains a study (scaling.launch, scaling.rounds)."""
    add = parser.add_argument
    add("--backend", default="local", help=f"executor: {', '.join(EXECUTORS)}")
    add("--max-parallel", type=int_arg, help="runs at once (local: default one per GPU, at most one per GPU; "
        "else one per core)")
    add("--max-retries", type=int_arg, default=1, help="retries of a failed run (default 1; ray: per trial too)")
    add("--retry-failed", action="store_true", help="give runs that used up their retries --max-retries more "
                                                    "(e.g. after freeing a full disk)")
    for name, backend in BACKENDS.items():
        if backend.flags:
            options.add_flags(parser.add_argument_group(f"--backend {name}"), backend.flags)


def check_backend(args: argparse.Namespace) -> Backend:
    """The backend `--backend` names, its foreign flags and `--max-retries` checked (StudyError)."""
    if args.backend not in EXECUTORS or args.backend not in BACKENDS:
        raise StudyError(f"backend: unknown backend {args.backend!r}; valid: {', '.join(BACKENDS)}")
    rules.nonneg_int("max-retries", args.max_retries)
    check_foreign_flags(args)
    return BACKENDS[args.backend]


def check_foreign_flags(args: argparse.Namespace) -> None:
    """Refuse a flag of another backend (it would be silently ignored)."""
    for name, backend in BACKENDS.items():
        for flag in (backend.flags if name != args.backend else ()):
            if getattr(args, flag.dest, None) is not None:
                raise StudyError(f"{flag.name}: only used with --backend {name}; fix: add --backend {name} "
                                 "or drop the flag")
