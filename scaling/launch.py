"""Launch a scaling study: `python -m scaling.launch [--preset NAME | --spec study.toml] [flags]`.

With no flags it runs the `quickstart` preset into `studies/quickstart`. Each run trains (resuming
where it stopped), evaluates, and then the study is analysed into `<study>/report/`. Relaunching
the same command is idempotent; `--dry-run` prints the plan and writes nothing.

Backends (`--backend`, see scaling.run.backends): `local` (default) and `ray` block until the study is
done; `slurm` submits the runs that are not done as one job array and returns at once (follow it
with `python -m scaling.status <study>`; `--wait` waits and then writes the report).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from cli import InputError, Parser, int_arg, parse, run_main
from analysis import DEFAULT_BOOTSTRAP
from jobs.train import ds_config
from analysis import MAX_BOOTSTRAP, MIN_BOOTSTRAP
from analysis.fit.background import workers_from_env
from analysis.records.carry import carried_lr
from cli import rules
from cli.environment import ALLOW_NUMERICS_CHANGE
from jobs.executors import Executor, one_line
from jobs.executors.local import visible_gpus
from jobs.run.lock import exclusive

from .run import prepare_stage
from .plan import launch_checks
from .plan.dry_run import format_plan, plan_rows, refusal, usable_cores
from .run import study_ledger
from .run.backends import BACKENDS, add_flags, check_backend
from .run.scheduler import Scheduler, retry_allowance, submit_runs, to_submit
from .study.presets import PRESETS
from .study import settings
from .study.study_spec import StudyError, StudySpec, build_study, load_toml
from .study.sweep import parse_sweep

STUDIES_ROOT = Path("studies")
MAX_RUNS = 5000  # a plan above this is refused (with its count) unless --max-runs allows it


def preset_help() -> str:
    """One line per preset: its name and the first line of its function's docstring."""
    width = max(len(name) for name in PRESETS)
    lines = [f"  {name.ljust(width)}  {(fn.__doc__ or '').strip().splitlines()[0]}" for name, fn in PRESETS.items()]
    return "presets (--preset NAME):\n" + "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The launch CLI's flags; unset flags are None so presets and TOML files show through."""
    p = Parser(prog="python -m scaling.launch", description=__doc__.splitlines()[0], error_prefix="launch",
               epilog=preset_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--spec", help="study TOML file; flags override it")
    add("--study-dir", help="study directory (default studies/<name>)")
    settings.add_flags(p.add_argument_group("study settings (scaling.study.settings; a --spec file's keys)"))
    add("--set", action="append", metavar="KEY=VALUE", help="any study setting, or a field of a table "
        "(run.beta2=0.99, resources.zero_stage=3, tracking.entity=me); the value read as TOML; repeatable")
    add("--carry-lr-from", metavar="STUDY", help="each family's lr chosen on validation at STUDY's swept budget "
        "(its report), carried to this study's other budgets (analysis.records.carry)")
    add("--engine", help="torch or deepspeed")
    add("--deepspeed-config", help="DeepSpeed config overlay (.json/.toml): ZeRO offload and buckets, "
        "communication, profiling; implies --engine deepspeed; run ids unchanged")
    add("--wandb", nargs="?", const=True, metavar="PROJECT", help="log every run to wandb (project: the "
        "study's unless given); online when logged in; a study file's [tracking] table sets more")
    add("--allow-numerics-change", action="store_true",
        help=f"resume runs trained on another numerics path (sets {ALLOW_NUMERICS_CHANGE.name}=1 for the "
             "workers; ray: pass it in --ray-env): their records name both paths")
    add("--wait", action="store_true", help="slurm: wait for the jobs, then write the report")
    add("--bootstrap", type=int_arg, default=DEFAULT_BOOTSTRAP,
        help=f"bootstrap resamples of the fits (default {DEFAULT_BOOTSTRAP})")
    add("--dry-run", action="store_true", help="print the plan and write nothing")
    add("--force", action="store_true", help="run a plan that is too big for this machine anyway")
    add("--max-runs", type=int_arg, default=MAX_RUNS, help=f"refuse a plan of more runs than this (default {MAX_RUNS})")
    add("--no-progress", action="store_true", help="no progress bars")
    add("--no-report", action="store_true", help="train and evaluate only; skip the fits and the report")
    add_flags(p)
    return p


FLAG_KEYS = tuple(setting.key for setting in settings.FLAG_SETTINGS)  # the study settings given as flags


def study_from_args(args: argparse.Namespace, world_size: int = 1) -> StudySpec:
    """The study the flags (and `--spec` file) describe; StudyError on bad input.

    Runs spread over more than one GPU (`world_size` > 1) use the DeepSpeed engine (a resource:
    run ids do not change)."""
    return build_study(*setting_layers(args, world_size))


def setting_layers(args: argparse.Namespace, world_size: int = 1) -> tuple[dict[str, Any], dict[str, Any] | None,
                                                                          dict[str, Any]]:
    """The flags' settings, the `--spec` file's and the `--set` items' (scaling.study.settings.load_settings
    checks them)."""
    flags: dict[str, Any] = {key: getattr(args, key) for key in FLAG_KEYS}
    engine = "deepspeed" if world_size > 1 else args.engine
    resources = {"engine": engine, ds_config.FIELD: args.deepspeed_config}
    flags["resources"] = {key: value for key, value in resources.items() if value is not None} or None
    if getattr(args, "carry_lr_from", None):
        flags["carry_lr"] = carried_lr(args.carry_lr_from).by_family
    if args.wandb is not None:
        flags["tracking"] = {"wandb": True, **({"project": args.wandb} if isinstance(args.wandb, str) else {})}
    toml = None
    if args.spec:
        launch_checks.check_spec_file(args.spec)
        toml = load_toml(args.spec)
    return flags, toml, settings.parse_sets(getattr(args, "set", None))


def _check(args: argparse.Namespace) -> tuple[StudySpec, Path, Any]:
    """Validate everything (flags, study, every run, data, memory, study dir, backend options)
    before anything is written; see scaling.plan.launch_checks."""
    launch_checks.check_flags(args, FLAG_KEYS)
    rules.at_least("--bootstrap", args.bootstrap, MIN_BOOTSTRAP)  # refused before training, report or not
    rules.at_most("--bootstrap", args.bootstrap, MAX_BOOTSTRAP, "more resamples narrow no interval and each needs memory")
    check_analysis_env()  # the report's worker count, refused before training rather than after it
    rules.positive_int("--max-runs", args.max_runs)
    check_plan_size(args)
    backend = check_backend(args)
    if args.wait and not backend.detached:
        raise StudyError(f"wait: --backend {args.backend} always waits; fix: drop --wait")
    study = study_from_args(args)  # study errors first: they need no cluster
    options = backend.options(args)
    world_size = backend.world_size(options)
    if world_size > 1:
        study = study_from_args(args, world_size)
    study_dir = launch_checks.check_study_path(args.study_dir if args.study_dir else STUDIES_ROOT / study.name)
    named = args.name is not None or bool(args.spec and "name" in load_toml(args.spec))
    check_carry(args, study)
    extending = carries_into(args, study_dir) or study_ledger.widens(study_dir, study)
    study = study_ledger.adopt_name(study_dir, study, named, extending)
    study_ledger.check_study_dir(study_dir, study, extending)
    prepare_stage.use_cache(prepare_stage.stage(study, study_dir, args.backend))  # what the checks read
    launch_checks.check_study(study, study_dir)
    launch_checks.check_fit(study, world_size, args.backend)
    return study, study_dir, options


def carries_into(args: argparse.Namespace, study_dir: Path) -> bool:
    """`--carry-lr-from` names the study's own directory: the carried plan extends that study
    (its swept-budget runs are kept, the other budgets' runs added: scaling.run.study_ledger.extends)."""
    source = getattr(args, "carry_lr_from", None)
    return bool(source) and Path(source).resolve() == Path(study_dir).resolve()


def check_analysis_env() -> None:
    """The report's AOSCALE_ANALYSIS_WORKERS (analysis.fit.background), as an InputError."""
    try:
        workers_from_env()
    except ValueError as error:
        raise InputError(str(error)) from None


def check_carry(args: argparse.Namespace, study: StudySpec) -> None:
    """The carried lr was chosen at the budget this study sweeps (else exit 2 naming both)."""
    if not getattr(args, "carry_lr_from", None):
        return
    at_budget = parse_sweep(dict(study.settings).get("sweep"), {c.spec.family for c in study.cells}).at_budget
    chosen = carried_lr(args.carry_lr_from).budget_flops
    if at_budget != chosen:
        raise InputError(f"carry-lr-from: {args.carry_lr_from} chose lr at {chosen:.3g} FLOPs but this study "
                         f"sweeps at {at_budget if at_budget is None else format(at_budget, '.3g')}; carry from "
                         "a study that swept the same budget")


def check_plan_size(args: argparse.Namespace) -> None:
    """Refuse a plan of more than `--max-runs` runs from its count alone, before any run is built."""
    runs = settings.load_settings(*setting_layers(args)).planned_runs
    if runs > args.max_runs:
        raise InputError(f"max-runs: the plan has {runs:,} runs, more than --max-runs {args.max_runs:,}; "
                         "shrink --seeds, --sizes or the arms, or raise --max-runs")


def launch(args: argparse.Namespace, study: StudySpec, study_dir: Path, options: Any = None) -> int:
    """Train and evaluate every run, then write the report; 0 when every run is done.

    A detached backend (slurm) without `--wait` only submits and returns 0 (see `submit_only`)."""
    study_ledger.prepare(study_dir, study, carries_into(args, study_dir) or study_ledger.widens(study_dir, study))
    backend = BACKENDS[args.backend]
    if options is None:
        options = backend.options(args)
    executor = backend.executor(options, study_dir)
    data_stage = prepare_stage.stage(study, study_dir, args.backend)
    prepare_stage.use_cache(data_stage)
    prepare_stage.run_stage(data_stage, study_dir, executor)  # here, or a CPU job / task the runs wait for
    run_dirs = [study_ledger.run_dir(study_dir, r) for r in study.run_ids]
    attached = backend.attach(executor, run_dirs)
    if backend.detached and not args.wait:
        return submit_only(args, study, study_dir, executor, attached)
    progress = False if args.no_progress else None
    final = Scheduler(study_dir, study.run_ids, executor, args.max_retries, progress, attached,
                      retry_failed=args.retry_failed).run()
    return finish(args, study, study_dir, final)


def submit_only(args: argparse.Namespace, study: StudySpec, study_dir: Path, executor: Executor,
                attached: dict[str, Any]) -> int:
    """Submit every run that is neither done, out of retries, queued nor running; return at once."""
    views = [study_ledger.view(study_dir, r) for r in study.run_ids]
    allowed = retry_allowance(views, args.max_retries, args.retry_failed)
    todo = [v.run_id for v in views if v.run_id not in attached and to_submit(v, allowed[v.run_id])]
    handles = submit_runs(executor, [study_ledger.run_dir(study_dir, r) for r in todo])
    jobs = sorted({h.job_id.split("_")[0] for h in handles})
    counts = Counter(v.state for v in views if v.run_id not in todo and v.run_id not in attached)
    left = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    print(f"study {study.name}: submitted {len(todo)} runs" + (f" as job {', '.join(jobs)}" if jobs else "")
          + (f"; {len(attached)} already queued" if attached else "") + (f"; {left}" if left else ""))
    print(f"follow with: python -m scaling.status {study_dir}  (relaunch with --wait to wait and write the report)")
    return 0


def finish(args: argparse.Namespace, study: StudySpec, study_dir: Path, final: dict[str, str]) -> int:
    """Print the outcome and write the report; 0 when every run is done and the report written."""
    counts = Counter(final.values())
    print(f"study {study.name}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    names = study_ledger.run_names(study_dir)
    for run_id, state in final.items():
        if state != "done":
            print(f"  {names.get(run_id, run_id)} {state} ({run_id}): {study_ledger.view(study_dir, run_id).reason}")
    if "failed" in counts:
        print("  retry the failed runs: relaunch with --retry-failed")
    all_done = counts.get("done", 0) == len(final)
    judge_pass(study_dir, [r for r, state in final.items() if state == "done"])
    if args.no_report or not counts.get("done"):
        return 0 if all_done else 1
    try:
        report_dir = write_report(study_dir, args.bootstrap)
    except OSError as error:  # a full disk: the previous report is kept whole (analysis.report.atomic)
        from analysis.report.atomic import failure_line  # noqa: PLC0415 - imported only after training

        print(f"launch: {failure_line(error, study_dir / 'report')}", file=sys.stderr)
        return 1
    except Exception as error:  # the runs are kept; the report can be rebuilt with analysis.fit_curves
        print(f"launch: report: not written ({one_line(error)}); rerun python -m analysis.fit_curves "
              f"{study_dir}", file=sys.stderr)
        return 1
    print(f"report: {report_dir / 'report.md'} (and report.html)")
    return 0 if all_done else 1


def judge_pass(study_dir: Path, run_ids: list[str]) -> None:
    """Score generated samples that were drawn before the study's judge run had finished."""
    from jobs.eval.generate import score_samples  # noqa: PLC0415 - needs torch; only after training

    for run_id in run_ids:
        run_dir = study_ledger.run_dir(study_dir, run_id)
        if (run_dir / "samples.parquet").exists():
            try:
                score_samples(run_dir)
            except ValueError as error:
                print(f"  {run_id}: samples not judged ({one_line(error)})", file=sys.stderr)


def write_report(study_dir: Path, bootstrap: int) -> Path:
    """Fit the curves over the study and write `<study>/report/`, one launcher at a time (under
    the study's lock; a second launcher waits and then rewrites it from the same records)."""
    from analysis import fit_curves  # noqa: PLC0415 - imported only after training

    with exclusive(study_dir / study_ledger.STUDY_LOCK):
        return fit_curves.run([study_dir], study_dir / "report", bootstrap=bootstrap, x="n_params", seed=0)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 2 on bad input with nothing written."""
    args = parse(parser(), argv)
    if isinstance(args, int):  # --help or a parse error (already printed as one line)
        return args
    with prepare_stage.cache_env(None):  # the study's cache folder is set for this launch only
        return run_main("launch", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    study, study_dir, options = _check(args)
    if args.carry_lr_from:
        print(carried_lr(args.carry_lr_from).describe(args.carry_lr_from), flush=True)
    rows = plan_rows(study)
    has_gpu = bool(visible_gpus())
    if args.dry_run:
        print(format_plan(study, rows, usable_cores(), has_gpu))
        print(launch_checks.check_fit(study, BACKENDS[args.backend].world_size(options), args.backend))
        print(prepare_stage.describe(prepare_stage.stage(study, study_dir, args.backend), args.backend, options))
        describe = BACKENDS[args.backend].describe
        if describe is not None:
            todo = [r for r in study.run_ids if study_ledger.view(study_dir, r).state != "done"]
            print(describe(options, study_dir, len(todo)))
        return 0
    why = None if (has_gpu or args.force or args.backend != "local") else refusal(study, rows, usable_cores())
    if why:
        raise InputError(why)
    launch_checks.check_resources(study, memory=args.backend == "local" and not args.force)
    if args.allow_numerics_change:  # the workers inherit it (local, slurm); jobs.run.numerics reads it
        os.environ[ALLOW_NUMERICS_CHANGE.name] = ALLOW_NUMERICS_CHANGE.on
    print(f"study {study.name}: {len(rows)} runs in {study_dir}", flush=True)
    return launch(args, study, study_dir, options)


if __name__ == "__main__":
    sys.exit(main())
