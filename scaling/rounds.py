"""`python -m scaling.rounds STUDY [--dry-run] [--max-rounds N] [--backend ...]`: a frontier study in rounds.

After a study is launched (`scaling.launch --preset frontier`, round 0; issue 35), each
round asks `analysis.compare.frontier_plan` what the study still lacks (bracketed minima, overlapping
frontiers, lr tuned near each minimum, seeds, budgets), trains it, and asks again, until every
criterion holds or `--max-rounds` rounds are recorded.

A round is written before it trains: first `predictions/<budget>.json` for every budget it adds
outside the measured range (N_opt and L_opt with 95 % predictive intervals; never overwritten, so
the prediction stays the one made before the data), then `rounds/round-<n>.json` (atomically: its
runs by run id, each with the criterion and the reason it was added, its checks and its cost).
The study is extended in place (its runs kept, ids stable: scaling.run.study_ledger.extends), so a relaunch
resumes an unfinished round instead of planning another, and nothing is trained twice. Once a
round is recorded the study is no longer the preset's plan: resume it with this command (scaling.launch
refuses it as another study); scaling.status and analysis.fit_curves read it as any study.
`--dry-run` prints the next round (the unfinished one, or the one the planner would add) with its
cost and writes nothing.

Each round trains on the launcher's backends with the launcher's backend flags (`--backend`,
`--max-parallel`, `--max-retries`, `--retry-failed`, the `--slurm-*`/`--nodes`/`--gpus-per-node` and
`--ray-*` groups: scaling.run.backends declares them once for both). This process only plans and
waits: on a login node, `--backend slurm` submits each round's runs as one job array and waits for
it (the next round needs its results), `--backend ray` runs them as a Tune grid on the cluster. Runs
spread over more than one GPU train with DeepSpeed, as scaling.launch makes them (run ids unchanged).
"""
from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from cli import InputError, Parser, float_arg, int_arg, parse, run_main, schema
from cli.paths import within
from cli.durable import fsync_dir
from jobs.run import files as runfiles
from jobs.run.spec import RunSpec
from models.ladder import core_params, get_shape, shape_for_params

from analysis import DEFAULT_BOOTSTRAP, MIN_BOOTSTRAP
from analysis.compare import frontier_plan

from .plan.dry_run import RUN_OVERHEAD_S, S_PER_HOUR, cpu_hours, usable_cores
from .run import study_ledger
from .run.backends import Backend, add_flags, check_backend
from jobs.run.recipes import GPT3_WARMUP_TOKENS, Budget, schedule
from .study.study_spec import Cell, StudySpec
from .study.sweep import SWEEP_PREFIX, family_fpt

ROUNDS_DIR = "rounds"
PREDICTIONS_DIR = "predictions"
DEFAULT_MAX_ROUNDS = 6
DONE = "done"
ENTRY_KEYS = ("family", "variant", "dataset", "split", "metric")  # a prediction's frontier entry


ROUND_NAME = re.compile(r"round-([0-9]+)\.json")  # ASCII digits only ('round-\u00b2.json' is no round)


def study_path(study_dir: Path, *names: str) -> Path:
    """A path of the study's own (`rounds/round-3.json`, `predictions/3e11.json`): inside the study
    with symbolic links resolved (cli.paths.within), else one line naming it."""
    return within("/".join(names), study_dir, *names)


def round_files(study_dir: Path) -> list[Path]:
    """`rounds/round-<n>.json` in round order. Anything else in `rounds/` (another name, a folder,
    a special file) or a `rounds` that is no folder is refused in one line: it is not skipped."""
    folder = study_path(study_dir, ROUNDS_DIR)
    if not folder.exists():
        return []
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder; move it away and relaunch (it holds round-<n>.json)")
    found = []
    for path in folder.iterdir():
        match = ROUND_NAME.fullmatch(path.name)
        if path.name.startswith("."):  # an atomic write's temporary file
            continue
        if match is None or int(match.group(1)) < 1:
            raise InputError(f"{path} is not a round file (round-<n>.json, n >= 1); move it out of {folder} "
                             "and relaunch")
        found.append((int(match.group(1)), study_path(study_dir, ROUNDS_DIR, path.name)))
    return [path for _, path in sorted(found)]


def read_round(path: Path) -> dict:
    """A round file, checked by cli.schema.ROUND: InputError naming the file, the key and the fix
    when it is damaged (its run ids are ids: one safe path component each). Its number is its
    file's, and each row's run id, seed and lr are its spec's (`check_rows`)."""
    doc = schema.load_json(path, schema.ROUND)
    match = ROUND_NAME.fullmatch(path.name)
    if match is not None and doc["round"] != int(match.group(1)):
        raise InputError(f"{path}: round: {doc['round']} is not the file's number {match.group(1)}; "
                         f"{schema.ROUND.fix}")
    check_rows(path, doc)
    return doc


def check_rows(path: Path, doc: dict) -> None:
    """Each row's run id, seed and lr are those of the spec it records (the spec is what trains; a
    row naming another run would resume a round that never ends)."""
    for i, row in enumerate(doc["runs"]):
        try:
            spec = RunSpec.from_dict(dict(row["spec"]))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: runs[{i}].spec does not load ({str(error).splitlines()[0]}); "
                             f"{schema.ROUND.fix}") from None
        for key, value in (("run_id", spec.run_id), ("seed", spec.seed), ("lr", spec.lr)):
            if row[key] != value:
                raise InputError(f"{path}: runs[{i}].{key}: {row[key]!r} is not its spec's {value!r}; "
                                 f"{schema.ROUND.fix}")


def recorded(study_dir: Path) -> list[dict]:
    """Every recorded round, each read and checked (a damaged one stops here, in one line)."""
    return [read_round(path) for path in round_files(study_dir)]


def unfinished(study_dir: Path) -> dict | None:
    """The last round when some of its runs are not done (a killed round: it resumes)."""
    docs = recorded(study_dir)
    if not docs:
        return None
    doc = docs[-1]
    left = [r["run_id"] for r in doc["runs"] if study_ledger.view(study_dir, r["run_id"]).state != DONE]
    return doc if left else None


def next_number(study_dir: Path) -> int:
    """The next round's number: one past the highest recorded (never a count of files)."""
    return max((doc["round"] for doc in recorded(study_dir)), default=0) + 1


@contextlib.contextmanager
def one_at_a_time(study_dir: Path) -> Iterator[None]:
    """An exclusive flock on the study folder itself (nothing is written) while a `scaling.rounds`
    plans, records and trains: a second one on the same study is refused in one line."""
    fd = os.open(study_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"another scaling.rounds is extending {study_dir}; wait for it to finish "
                             "(one at a time per study)") from None
        yield
    finally:
        os.close(fd)


def budget_name(budget_flops: float) -> str:
    """A budget as a file stem: 3e+11 -> '3e11'."""
    return f"{budget_flops:.4g}".replace("e+", "e")


# ---- from planned runs to cells ---------------------------------------------------------------------
def existing_study(study_dir: Path) -> StudySpec:
    """The study as its ledger holds it: study.json's settings and every run's spec.json."""
    doc = study_ledger.read_study(study_dir)
    if doc is None:
        raise InputError(f"{study_dir} holds no study.json; launch the study first "
                         "(python -m scaling.launch --preset frontier --study-dir ...)")
    cells = tuple(Cell(study_ledger.load_spec(study_dir, r), tuple(sorted((doc["runs"][r].get("factors") or {}).items())), r)
                  for r in doc["order"])
    study = StudySpec(str(doc["name"]), tuple(sorted((doc.get("settings") or {}).items())), cells)
    if not _templates(study):
        raise InputError(f"{study_dir} is not an isoFLOP study (no compared run holds a budget_flops); "
                         "scaling.rounds extends a frontier study (python -m scaling.launch --preset frontier)")
    return study


def _templates(study: StudySpec) -> dict[tuple[str, str], RunSpec]:
    """Per (family, variant) a compared budget run to copy (its network, options, data, run fields)."""
    out: dict[tuple[str, str], RunSpec] = {}
    for cell in study.cells:
        spec = cell.spec
        if spec.role == "compared" and not spec.branch_from and dict(spec.tracking).get("budget_flops") is not None:
            out.setdefault((spec.family, spec.variant), spec)
    return out


def shape_n(n_params: float) -> float:
    """Core parameters of the shape the launcher trains for a wanted N (frontier_plan's `shape_n`)."""
    return float(core_params(shape_for_params(n_params)))


def _measured(study: StudySpec) -> dict[tuple, str]:
    """(family, variant, budget, core parameters) -> the size label of the study's runs there."""
    return {(c.spec.family, c.spec.variant, float(dict(c.spec.tracking).get("budget_flops") or 0),
             float(core_params(get_shape(c.spec.size)))): c.spec.size for c in study.cells}


def _spec(template: RunSpec, run: frontier_plan.PlannedRun, size: str, settings: dict, fpt) -> RunSpec:
    """The planned run as a spec: `size` (the measured shape at its N, else the nearest), tokens = budget / the family's FLOPs per
    token there, the study's batch and warm-up rule, the planned lr (tagged sweep_lr) and seed."""
    tokens = max(1, int(run.budget_flops / fpt(template.family, dict(template.model_options), size)))
    budget = Budget(seq_len=template.seq_len, tokens=tokens, batch_size=settings.get("batch_size"), lr=run.lr,
                    warmup_steps=settings.get("warmup_steps"), max_steps=settings.get("max_steps"),
                    warmup_tokens=settings.get("warmup_tokens", GPT3_WARMUP_TOKENS))
    plan = schedule(size, budget)
    tracking = {k: v for k, v in dict(template.tracking).items() if not k.startswith(SWEEP_PREFIX)}
    tracking.update(budget_flops=run.budget_flops, plan_tokens=tokens, **{f"{SWEEP_PREFIX}lr": run.lr})
    return template.replace(size=size, steps=plan.steps, lr=plan.lr, warmup_steps=plan.warmup_steps,
                            batch_size=plan.batch_size, seed=run.seed, tracking=tracking, snapshot_steps="")


def round_cells(study: StudySpec, plan: frontier_plan.RoundPlan) -> list[tuple[frontier_plan.PlannedRun, Cell]]:
    """The plan's runs as new cells of the study (runs it already has, or two planned runs that
    fall on one shape, are one run: keyed by run id)."""
    settings = dict(study.settings)
    fpt, _ = family_fpt(settings)  # executed FLOPs at the study's batch (scaling.study.sweep.sequences_per_pass)
    templates, have, measured, out = _templates(study), set(study.run_ids), _measured(study), []
    for run in plan.runs:
        template = templates.get((run.family, run.variant))
        if template is None:
            continue
        size = measured.get((run.family, run.variant, float(run.budget_flops), float(run.n_params)),
                            shape_for_params(run.n_params).label)
        spec = _spec(template, run, size, settings, fpt)
        if spec.run_id in have:
            continue
        have.add(spec.run_id)
        factors = next(c.factors for c in study.cells if c.spec.family == run.family and c.spec.variant == run.variant)
        out.append((run, Cell(spec, factors, spec.run_id)))
    return out


def resumed_cells(study: StudySpec, doc: dict) -> list[Cell]:
    """A recorded round's cells from the specs it wrote (a round killed before its runs reached
    the ledger still resumes as planned)."""
    out = []
    for row in doc["runs"]:
        try:
            spec = RunSpec.from_dict(dict(row["spec"]))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"round {doc.get('round')} run {row.get('run_id')}: its spec does not load "
                             f"({str(error).splitlines()[0]}); move the round file away and relaunch") from None
        factors = next((c.factors for c in study.cells if (c.spec.family, c.spec.variant) == (spec.family, spec.variant)),
                       ())
        out.append(Cell(spec, factors, spec.run_id))
    return out


def extended(study: StudySpec, cells: list[Cell]) -> StudySpec:
    """The study with `cells` appended (its own runs first, in their order)."""
    return replace(study, cells=study.cells + tuple(c for c in cells if c.run_id not in set(study.run_ids)))


# ---- writing a round ----------------------------------------------------------------------------------
def round_doc(number: int, plan: frontier_plan.RoundPlan, cells: list[tuple[frontier_plan.PlannedRun, Cell]]) -> dict:
    """What `rounds/round-<n>.json` holds."""
    return {"round": number, "cost_flops": sum(r.budget_flops for r, _ in cells),
            "new_budgets": [{"family": f, "variant": v, "budget_flops": b} for f, v, b in plan.new_budgets],
            "checks": [{"criterion": c.criterion, "subject": c.subject, "met": c.met, "detail": c.detail}
                       for c in plan.checks],
            "runs": [{"run_id": c.run_id, "family": r.family, "variant": r.variant, "size": c.spec.size,
                      "n_params": core_params(get_shape(c.spec.size)), "seed": r.seed, "lr": r.lr,
                      "budget_flops": r.budget_flops, "criterion": r.criterion, "reason": r.reason,
                      "spec": c.spec.to_dict()} for r, c in cells]}


def write_predictions(study_dir: Path, front, plan: frontier_plan.RoundPlan) -> list[Path]:
    """`predictions/<budget>.json` for each budget the round adds outside the measured range. An
    entry predicted before is kept as it was (the prediction made before its data); a family new to
    the budget is added beside it."""
    written = []
    for budget, doc in frontier_plan.predictions(front, list(plan.new_budgets)).items():
        path = study_path(study_dir, PREDICTIONS_DIR, f"{budget_name(budget)}.json")
        old = schema.load_json(path, schema.PREDICTIONS)  # a FIFO, a device or a damaged file: one line
        kept = old["entries"] if old is not None else []
        seen = {tuple(e.get(k) for k in ENTRY_KEYS) for e in kept}
        new = [e for e in doc["entries"] if tuple(e.get(k) for k in ENTRY_KEYS) not in seen]
        if not new:
            continue
        if path.parent.exists() and not path.parent.is_dir():
            raise InputError(f"{path.parent} is not a folder; move it away and relaunch")
        path.parent.mkdir(parents=True, exist_ok=True)
        runfiles.atomic_write_json(path, {**doc, "entries": kept + new, "written_before_training": True})
        written.append(path)
    return written


def describe(doc: dict, cores: int) -> str:
    """The round's runs, why each was added, and its cost."""
    runs = doc["runs"]
    hours = cpu_hours(doc["cost_flops"], cores) + len(runs) * RUN_OVERHEAD_S / S_PER_HOUR / max(1, cores)
    lines = [f"round {doc['round']}: {len(runs)} runs, {doc['cost_flops']:.3g} training FLOPs "
             f"(~{hours:.2f} h on {cores} cores)"]
    lines += [f"  {r['run_id']} {r['family']}/{r['variant']} C={r['budget_flops']:.3g} {r['size']} s{r['seed']} "
              f"lr={r['lr']:g} [{r['criterion']}] {r['reason']}" for r in runs]
    unmet = [c for c in doc.get("checks", []) if not c["met"]]
    lines += [f"  unmet: {c['criterion']} {c['subject']}: {c['detail']}" for c in unmet]
    return "\n".join(lines)


def next_round(study_dir: Path, config: frontier_plan.PlanConfig, resamples: int) -> tuple[dict, StudySpec]:
    """The unfinished round, or the one the planner adds, and the study extended by it; a round
    with no runs is the planner's verdict (its checks: every one met, or those it cannot meet)."""
    pending = unfinished(study_dir)  # every recorded round read first: a damaged one is named
    study = existing_study(study_dir)
    if pending is not None:
        return pending, extended(study, resumed_cells(study, pending))
    points, front = frontier_plan.read_study(study_dir, resamples)
    plan = frontier_plan.plan_round(points, config, shape_n)
    cells = round_cells(study, plan)
    doc = round_doc(next_number(study_dir), plan, cells)
    if not cells:
        return doc, study
    doc["_front"], doc["_plan"] = front, plan  # for writing; dropped before the file
    return doc, extended(study, [c for _, c in cells])


def commit_round(study_dir: Path, doc: dict) -> None:
    """Predictions first, then the round file (written once: never over a recorded round); the
    round is then resumable."""
    front, plan = doc.pop("_front", None), doc.pop("_plan", None)
    if plan is not None:
        path = study_path(study_dir, ROUNDS_DIR, f"round-{doc['round']}.json")
        round_files(study_dir)  # `rounds` a file, or a stranger in it: refused before a prediction is written
        doc["predictions"] = [str(p.relative_to(study_dir)) for p in write_predictions(study_dir, front, plan)]
        path.parent.mkdir(parents=True, exist_ok=True)
        write_once(path, doc)


def write_once(path: Path, doc: dict) -> None:
    """`doc` as `path`, written in full beside it and linked into place: a file already there (a
    recorded round) is never replaced; InputError instead."""
    tmp = path.with_name(f".{path.name}.new")
    runfiles.atomic_write_json(tmp, doc)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise InputError(f"{path} is already recorded; it is never replaced (relaunch: the round "
                         "resumes)") from None
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


# ---- the command ----------------------------------------------------------------------------------------
def parser() -> Parser:
    p = Parser(prog="python -m scaling.rounds", description=__doc__.splitlines()[0], error_prefix="rounds")
    p.add_argument("study", help="a frontier study directory (launched with scaling.launch)")
    p.add_argument("--dry-run", action="store_true", help="print the next round and its cost; write nothing")
    p.add_argument("--max-rounds", type=int_arg, default=DEFAULT_MAX_ROUNDS,
                   help=f"rounds a study may record (default {DEFAULT_MAX_ROUNDS})")
    p.add_argument("--max-round-flops", type=float_arg, help="an upward budget is affordable within this "
                   "(default: the study's training FLOPs so far)")
    p.add_argument("--bootstrap", type=int_arg, default=DEFAULT_BOOTSTRAP, help="resamples of the final report")
    p.add_argument("--no-report", action="store_true", help="train only; skip the final report")
    add_flags(p)  # the launcher's backend flags (scaling.run.backends)
    p.set_defaults(engine=None)  # the runs keep their engine; more than one GPU per run means DeepSpeed
    return p


def on_ranks(study: StudySpec, world_size: int) -> StudySpec:
    """The study as it trains on `world_size` processes per run: DeepSpeed beyond one (a resource,
    so run ids are unchanged), as scaling.launch.study_from_args makes it."""
    if world_size <= 1:
        return study
    settings = dict(study.settings)
    settings["resources"] = {**(settings.get("resources") or {}), "engine": "deepspeed"}
    cells = tuple(replace(c, spec=c.spec.replace(engine="deepspeed")) for c in study.cells)
    return replace(study, settings=tuple(sorted(settings.items())), cells=cells)


def _train(study_dir: Path, study: StudySpec, args: Any, backend: Backend, options: Any) -> int:
    """Extend the ledger by the round and train what is not done on the backend (scaling.launch's
    scheduler; a detached backend is waited on: the next round needs this one's results)."""
    from . import launch  # noqa: PLC0415 - the launcher's training path, only when training

    study = on_ranks(study, backend.world_size(options))
    study_ledger.prepare(study_dir, study, extending=True)
    flags = ["--study-dir", str(study_dir), "--no-report", "--no-progress", "--backend", args.backend,
             "--max-retries", str(args.max_retries)]
    flags += ["--retry-failed"] if args.retry_failed else []
    flags += ["--wait"] if backend.detached else []
    return launch.launch(launch.parser().parse_args(flags), study, study_dir, options)


def verdict(study: StudySpec, doc: dict, rounds_done: int) -> str:
    """The planner's verdict on a round with no runs: every criterion met, or the checks it
    reports unmet though it adds nothing for them."""
    unmet = [c for c in doc["checks"] if not c["met"]]
    if not unmet:
        return f"study {study.name}: every criterion met after {rounds_done} round(s); nothing to add"
    lines = [f"study {study.name}: {len(unmet)} of {len(doc['checks'])} checks unmet after {rounds_done} round(s), "
             "and the planner adds no run for them (raise --max-round-flops, or see the checks)"]
    return "\n".join(lines + [f"  unmet: {c['criterion']} {c['subject']}: {c['detail']}" for c in unmet])


def progress(study_dir: Path, doc: dict) -> tuple:
    """What a pass can change: the round and its runs' states (a pass that changes none ends the loop)."""
    return doc["round"], tuple(study_ledger.view(study_dir, r["run_id"]).state for r in doc["runs"])


def rounds(args: Any) -> int:
    """Plan, record and train rounds until every criterion holds or the cap (module doc); one
    `scaling.rounds` per study at a time (a dry-run takes no lock: it writes nothing)."""
    study_dir = Path(args.study)
    if not (study_dir / study_ledger.STUDY_FILE).is_file():
        raise InputError(f"study: {study_dir} holds no {study_ledger.STUDY_FILE}; launch the study first")
    backend = check_backend(args)
    options = backend.options(args)  # refused (one line, exit 2) before any round is written
    with contextlib.nullcontext() if args.dry_run else one_at_a_time(study_dir):
        status = _rounds(study_dir, args, backend, options)
    if status is None:
        return 0
    if not status and not args.no_report:
        from .launch import write_report  # noqa: PLC0415 - imported only after training

        print(f"report: {write_report(study_dir, args.bootstrap) / 'report.md'}")
    return status


def _rounds(study_dir: Path, args: Any, backend: Backend, options: Any) -> int | None:
    """The loop (`rounds`): None after a dry-run, else the exit status."""
    config = frontier_plan.PlanConfig(max_round_flops=args.max_round_flops)
    before = None
    while True:
        doc, study = next_round(study_dir, config, MIN_BOOTSTRAP)  # the plan reads no Approach-3 interval
        if not doc["runs"]:
            print(verdict(study, doc, len(round_files(study_dir))))
            return None if args.dry_run else 0
        print(describe(doc, args.max_parallel or usable_cores()), flush=True)
        if args.dry_run:
            if backend.describe is not None:
                todo = [r for r in doc["runs"] if study_ledger.view(study_dir, r["run_id"]).state != DONE]
                print(backend.describe(options, study_dir, len(todo)))
            return None
        if "_plan" in doc and len(round_files(study_dir)) >= args.max_rounds:
            print(f"study {study.name}: {args.max_rounds} rounds recorded (--max-rounds); not starting another")
            return 0
        if "_plan" not in doc and progress(study_dir, doc) == before:
            print(f"rounds: round {doc['round']}: a pass trained none of its unfinished runs and changed nothing; "
                  "stopping (python -m scaling.status shows why)", file=sys.stderr)
            return 1
        commit_round(study_dir, doc)
        status = _train(study_dir, study, args, backend, options)
        if status:
            return status
        before = progress(study_dir, doc)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 2 on bad input with nothing written."""
    args = parse(parser(), argv)
    if isinstance(args, int):
        return args
    if args.max_rounds < 1:
        print(f"rounds: --max-rounds: {args.max_rounds} must be >= 1; give a count of rounds", file=sys.stderr)
        return 2
    if not (args.max_round_flops is None or (math.isfinite(args.max_round_flops) and args.max_round_flops > 0)):
        print(f"rounds: --max-round-flops: {args.max_round_flops:g} must be a finite number > 0 (FLOPs a round may "
              "spend on an upward budget); give e.g. 1e15", file=sys.stderr)
        return 2
    return run_main("rounds", lambda: rounds(args))


if __name__ == "__main__":
    sys.exit(main())
