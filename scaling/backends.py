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

from cli import float_arg, int_arg
from jobs.executors import Executor, Handle, get_executor

from .study import StudyError


@dataclass(frozen=True)
class Flag:
    """One backend flag: `--name` stored as `dest`; `field` is the options dataclass field."""

    name: str
    field: str
    help: str
    type: Callable[[str], Any] = str
    repeat: bool = False
    switch: bool = False  # a flag without a value (True when given)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


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
        except ValueError as error:
            raise StudyError(str(error)) from None

    def attach(self, executor: Executor, run_dirs: list[Path]) -> dict[str, Handle]:
        """Handles of runs an earlier launch left queued (run id -> handle)."""
        attach = getattr(executor, "attach", None)
        return attach(run_dirs) if attach else {}


def _local(args: argparse.Namespace, given: dict[str, Any]) -> dict[str, Any]:
    if args.max_parallel is not None and args.max_parallel < 1:
        raise ValueError(f"max-parallel: must be >= 1, got {args.max_parallel}")
    return {"max_parallel": args.max_parallel}


def _slurm(args: argparse.Namespace, given: dict[str, Any]) -> Any:
    from jobs.executors.slurm import (SlurmOptions, parse_additional, parse_time_min,  # noqa: PLC0415 - Slurm backend only
                                      validate_slurm_options)

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
    from jobs.executors.ray_tune import RayOptions, parse_env, validate_ray_options  # noqa: PLC0415 - Ray backend only

    if "env" in given:
        given["env"] = parse_env(given["env"])
    options = RayOptions(max_retries=args.max_retries, **given)
    validate_ray_options(options)
    return options


SLURM_FLAGS = (
    Flag("slurm-partition", "partition", "Slurm partition (default: the cluster's)"),
    Flag("slurm-account", "account", "Slurm account"),
    Flag("slurm-qos", "qos", "Slurm QOS"),
    Flag("slurm-time", "time_min", "time limit per run: minutes or [D-]HH:MM[:SS] (default 60)"),
    Flag("slurm-constraint", "constraint", "Slurm node constraint"),
    Flag("nodes", "nodes", "nodes per run (default 1)", int_arg),
    Flag("gpus-per-node", "gpus_per_node", "GPUs per node (default 0); >1 GPU in all uses DeepSpeed", int_arg),
    Flag("cpus-per-task", "cpus_per_task", "CPUs per task (default 1)", int_arg),
    Flag("mem", "mem", "memory per node, e.g. 16G"),
    Flag("slurm-array-parallelism", "array_parallelism", "array tasks at once (default 64)", int_arg),
    Flag("slurm-setup", "setup", "shell line run before each task, e.g. 'module load cuda' (repeatable)",
         repeat=True),
    Flag("slurm-exclusive", "exclusive", "whole nodes to each task (sbatch --exclusive)", switch=True),
    Flag("slurm-signal-delay", "signal_delay_s", "seconds before the time limit that USR2 asks the run to "
         "checkpoint and requeue (default 90)", int_arg),
    Flag("slurm-mail-type", "mail_type", "sbatch --mail-type, e.g. END,FAIL"),
    Flag("slurm-mail-user", "mail_user", "sbatch --mail-user"),
    Flag("slurm-additional", "additional", "extra sbatch option key=value (repeatable)", repeat=True),
)
RAY_FLAGS = (
    Flag("ray-address", "address", "Ray cluster to join: auto (the one `ray start` runs here) or host:port "
         "(default: start a local Ray)"),
    Flag("ray-working-dir", "working_dir", "code folder shipped to the workers when joining a cluster "
         "(default: this aoscale checkout)"),
    Flag("ray-env", "env", "environment variable KEY=VALUE for every trial (repeatable; AOSCALE_*, "
         "WANDB_*, HF_* and OMP_NUM_THREADS are passed on anyway)", repeat=True),
    Flag("cpus-per-trial", "cpus_per_trial", "CPUs per run (default 1)", float_arg),
    Flag("gpus-per-trial", "gpus_per_trial", "GPUs per run: 0 (default) to 1; a run spanning GPUs needs "
         "--backend slurm", float_arg),
    Flag("ray-num-cpus", "num_cpus", "CPUs of a locally started Ray (default: all)", int_arg),
    Flag("max-concurrent-trials", "max_concurrent", "runs at once (default: as resources allow)", int_arg),
)

BACKENDS: dict[str, Backend] = {
    "local": Backend((), _local, lambda options, study_dir: get_executor("local", **options)),
    "slurm": Backend(SLURM_FLAGS, _slurm, detached=True, world_size=_slurm_world_size, describe=_slurm_describe,
                     executor=lambda options, study_dir: get_executor("slurm", study_dir=study_dir, options=options)),
    "ray": Backend(RAY_FLAGS, _ray,
                   executor=lambda options, study_dir: get_executor("ray", study_dir=study_dir, options=options)),
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every backend's flags, in one argument group per backend; unset flags stay None."""
    for name, backend in BACKENDS.items():
        if not backend.flags:
            continue
        group = parser.add_argument_group(f"--backend {name}")
        for flag in backend.flags:
            if flag.switch:
                group.add_argument(f"--{flag.name}", dest=flag.dest, action="store_const", const=True, help=flag.help)
                continue
            action = "append" if flag.repeat else "store"
            group.add_argument(f"--{flag.name}", dest=flag.dest, type=flag.type, action=action, help=flag.help)


def check_foreign_flags(args: argparse.Namespace) -> None:
    """Refuse a flag of another backend (it would be silently ignored)."""
    for name, backend in BACKENDS.items():
        for flag in (backend.flags if name != args.backend else ()):
            if getattr(args, flag.dest, None) is not None:
                raise StudyError(f"{flag.name}: only used with --backend {name}; fix: add --backend {name} "
                                 "or drop the flag")
