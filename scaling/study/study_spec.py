"""Study specs: families x variants x sizes x seeds, plus data, budget and engine.

`build_study` takes the study's settings through `scaling.study.settings.load_settings` (the one
loader of presets, TOML files and flags, every key checked by its declared rule), checks what
needs more than one value (tokenizer, corpus, eval suite, judge) before anything touches the
disk, and expands the study into frozen `RunSpec`s whose run ids depend only on result-changing
fields, so the same study always yields the same run ids.
"""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli import InputError
from jobs.data.corpus import canonical_corpus, check_corpus
from jobs.data.datasets import check_eval_suite
from jobs.data.tokenizers import get_encoding
from jobs.run.spec import RunSpec, canonical_json
from jobs.train import wsd_branch
from models.families import JUDGE_FAMILY
from models.ladder import core_params, get_shape

from . import sweep
from .arms import Arm, default_arm, resolve_arm
from jobs.run.recipes import Budget, schedule
from .settings import StudySettings, load_settings

# study.json format: 2 = run ids hash every resolved model option (defaults included) and the
# network and EMA are study settings. A study written in another format is refused, not mixed.
STUDY_FORMAT = 2
JUDGE_SETTINGS = ("auto", "none")  # or a run directory: the judge of generated samples


StudyError = InputError  # the one input-error type of every CLI (cli.InputError), by its study name


@dataclass(frozen=True)
class Cell:
    """One run of the study: its spec and the ablation factor levels of its arm."""

    spec: RunSpec
    factors: tuple[tuple[str, Any], ...]
    run_id: str  # spec.run_id, hashed once


@dataclass(frozen=True)
class StudySpec:
    """A validated study: the settings it was built from and its cells."""

    name: str
    settings: tuple[tuple[str, Any], ...]  # canonical, JSON-ready (arms as dicts)
    cells: tuple[Cell, ...]

    @property
    def run_ids(self) -> list[str]:
        return [cell.run_id for cell in self.cells]

    @property
    def study_hash(self) -> str:
        """sha256 of the sorted run ids: two specs with the same runs are the same study."""
        return hashlib.sha256(canonical_json(sorted(self.run_ids)).encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        """The study.json document: canonical settings, hash and a row per run."""
        runs = {c.run_id: {"family": c.spec.family, "variant": c.spec.variant, "size": c.spec.size,
                           "seed": c.spec.seed, "factors": dict(c.factors)} for c in self.cells}
        for c in self.cells:
            runs[c.run_id]["role"] = c.spec.role
        return {"name": self.name, "format": STUDY_FORMAT, "hash": self.study_hash,
                "settings": dict(self.settings), "order": self.run_ids, "runs": runs}


def load_toml(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML study file; malformed text -> StudyError (its keys are checked by
    scaling.study.settings.load_settings)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise StudyError(f"spec: file {path} not found; pass an existing study TOML") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise StudyError(f"spec: {path} is not valid TOML ({error}); fix the file") from None
    return data


def build_study(flags: dict[str, Any], toml: dict[str, Any] | None = None,
                sets: dict[str, Any] | None = None) -> StudySpec:
    """Load the settings (base < preset < TOML < flags and `--set` items, each checked), check the
    data and expand them into cells."""
    settings = load_settings(flags, toml, sets)
    _check_data(settings)
    return _finish(settings, _expand(settings))


def _check_data(settings: StudySettings) -> None:
    """Tokenizer (loaded), an existing local corpus (opened) and the eval suite's sets."""
    data = settings.data
    try:
        get_encoding(data.tokenizer)
        check_corpus(data.corpus, data.text_field)
        check_eval_suite(data.eval_suite)
    except InputError:
        raise
    except (ValueError, TypeError) as error:
        raise StudyError(str(error).splitlines()[0]) from None


def _expand(settings: StudySettings) -> list[Cell]:
    """Every (size, seed, arm) cell as a RunSpec, size-major so small runs finish first; the
    judge run (when the study has one) comes first, so it is trained before it is needed."""
    network = settings.network.options
    resolved = [_resolve(arm, network) for arm in settings.arms]
    judge = _judge(settings, network)
    reference = judge.run_id if judge is not None else _judge_dir(settings)
    def make(arm, options, size, seed, run_budget, run_fields, tags):
        return _cell(arm, options, arm.ema_rate(settings.network.ema), size, seed, settings, judge=reference,
                     budget=run_budget, run_fields=run_fields, tags=tags)

    values = {**dict(settings.values), "tokenizer": settings.data.tokenizer, "seq_len": settings.budget.seq_len,
              "sizes": list(settings.sizes)}  # the plain view scaling.study.sweep reads
    try:  # the plain grid, or sweeps, isoFLOP budgets, the data axis and WSD branches
        cells = sweep.expand(values, list(zip(settings.arms, resolved)), settings.seeds, settings.budget, make)
    except ValueError as error:
        raise StudyError(str(error).splitlines()[0]) from None
    cells = ([judge] if judge is not None else []) + cells
    _refuse_duplicates(cells, settings)
    _check_branches(cells)
    return cells


def _check_branches(cells: list[Cell]) -> None:
    """A branch's `branch_from` names a run of this study that keeps a snapshot at its
    `branch_step` (what `branches = [...]` plans); anything else could only wait for a trunk
    that never comes."""
    trunks = {cell.run_id: cell.spec for cell in cells}
    for cell in cells:
        spec = cell.spec
        if not spec.branch_from:
            continue
        trunk = trunks.get(spec.branch_from)
        if trunk is None:
            raise StudyError(f"run.branch_from: {spec.branch_from!r} names no run of this study; WSD branches "
                             "come from `branches = [...]`: remove branch_from from [run]")
        if spec.branch_step not in wsd_branch.snapshot_steps(trunk):
            raise StudyError(f"run.branch_step: trunk {spec.branch_from} keeps no snapshot at step {spec.branch_step} "
                             f"(its snapshot_steps: {trunk.snapshot_steps or 'none'}); plan branches with "
                             "`branches = [...]`")


def _refuse_duplicates(cells: list[Cell], settings: StudySettings) -> None:
    """Two cells with one run id: a step cap that merges runs of different plans, or duplicate arms."""
    seen: dict[str, Cell] = {}
    for cell in cells:
        first = seen.setdefault(cell.run_id, cell)
        if first is cell:
            continue
        spec = cell.spec
        where = f"{spec.family} {spec.variant} {spec.size} s{spec.seed} ({cell.run_id})"
        if settings.budget.max_steps is not None and dict(first.spec.tracking) != dict(spec.tracking):
            raise StudyError(f"max_steps: {settings.budget.max_steps} caps two planned runs into one, {where}; "
                             "raise --max-steps past the shorter run's steps, or plan one budget")
        raise StudyError(f"arms: two arms describe the same runs ({where}); remove the duplicate arm")


def _resolve(arm: Arm, network: dict) -> dict:
    try:
        return resolve_arm(arm, network)
    except ValueError as error:
        raise StudyError(str(error).splitlines()[0]) from None


def _judge(settings: StudySettings, network: dict) -> Cell | None:
    """The study's judge of generated samples: with `judge = "auto"` and a suite that generates, a
    dedicated AR run at the largest size with its own seed (one past the compared seeds), trained
    like the others and excluded from every fit and gap (role `judge`)."""
    if settings.judge != "auto" or not settings.data.eval_suite.base.generate:
        return None
    arm = default_arm(JUDGE_FAMILY)
    largest = max(settings.sizes, key=lambda size: core_params(get_shape(size)))
    return _cell(arm, _resolve(arm, network), settings.network.ema, largest, settings.seeds, settings, role="judge")


def _judge_dir(settings: StudySettings) -> str:
    """`judge` given as a run directory (`--judge-run`): an AR run with the study's tokenizer."""
    choice, tokenizer = settings.judge, settings.data.tokenizer
    if choice in JUDGE_SETTINGS:
        return ""
    path = Path(choice).expanduser().resolve()
    try:
        other = RunSpec.load(path / "spec.json")
    except (OSError, ValueError):
        raise StudyError(f"judge: {choice} is not a run directory with a valid spec.json; pass an AR run "
                         "directory to --judge-run, or 'auto'") from None
    if other.family != JUDGE_FAMILY or other.tokenizer != tokenizer:
        raise StudyError(f"judge: {choice} is a {other.family} run with tokenizer {other.tokenizer!r}; the "
                         f"judge must be an AR run with tokenizer {tokenizer!r}")
    return str(path)


def _cell(arm: Arm, options: dict, ema: float, size: str, seed: int, settings: StudySettings,
          role: str = "compared", judge: str = "", budget: Budget | None = None, run_fields: dict | None = None,
          tags: dict | None = None) -> Cell:
    """One run: the arm at a size and seed under the study's budget (or a planned point's), with
    a sweep's run fields and its tags (budget_flops, sweep_<name>: record columns)."""
    budget = budget or settings.budget
    plan = schedule(size, budget)
    tracking = {**dict(settings.tracking), **{f"factor_{k}": v for k, v in arm.factors}, **(tags or {})}
    data = settings.data
    spec = RunSpec(
        family=arm.family, size=size, steps=plan.steps, lr=plan.lr, warmup_steps=plan.warmup_steps,
        model_options=options, tokenizer=data.tokenizer, corpus=canonical_corpus(data.corpus),
        text_field=data.text_field, eval_suite=str(data.eval_suite), seq_len=budget.seq_len,
        batch_size=plan.batch_size, ema=ema, seed=seed, study=settings.name,
        variant=arm.label if role == "compared" else "judge", tracking=tracking, role=role,
        judge=judge, **{**dict(settings.run), **(run_fields or {})}, **dict(settings.resources),
    )
    return Cell(spec, arm.factors, spec.run_id)


def _finish(settings: StudySettings, cells: list[Cell]) -> StudySpec:
    """Canonical settings; a study that is not the pure preset gets `<preset>-<hash>` as its name."""
    study = StudySpec(settings.name, tuple(sorted(settings.canonical().items())), tuple(cells))
    if not settings.renamed:
        return study
    name = f"{settings.preset or 'study'}-{study.study_hash[:8]}"
    renamed = tuple(Cell(c.spec.replace(study=name), c.factors, c.run_id) for c in cells)  # study is not hashed
    return StudySpec(name, study.settings, renamed)
