"""Study specs: families x variants x sizes x seeds, plus data, budget and engine.

A study is assembled from layers of settings, later layers winning: the base for its sizes, a
preset, a TOML file (`--spec study.toml`), then command-line flags. `build_study` validates every
field before anything touches the disk and expands the study into frozen `RunSpec`s whose run ids
depend only on result-changing fields, so the same study always yields the same run ids.
"""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from cli import InputError
from jobs.train import ds_config
from jobs.data.corpus import DEFAULT_TEXT_FIELD, canonical_corpus, check_corpus
from jobs.data.datasets import check_eval_suite, parse_eval_suite
from jobs.data.tokenizers import get_encoding
from jobs.run.spec import ENGINES, HASHED_FIELDS, RunSpec, ZERO_STAGES, canonical_json
from jobs.run.tracking import check_tracking
from models.families import JUDGE_FAMILY
from models.ladder import core_params, get_shape, parse_sizes

from jobs.data.suites import SUITES

from .arms import DEFAULT_ARMS, Arm, arm_from_dict, check_ema, check_family, default_arm, network_options, resolve_arm
from .presets import base_for, preset_settings
from .recipes import Budget, schedule
from . import sweep

DEFAULT_EVAL_SUITE = "quick"
# RunSpec fields a study decides itself; the remaining hashed fields may be set under [run].
STRUCTURAL = {"family", "size", "steps", "lr", "warmup_steps", "model_options", "tokenizer", "corpus",
              "text_field", "seq_len", "batch_size", "ema", "seed"}
# study.json format: 2 = run ids hash every resolved model option (defaults included) and the
# network and EMA are study settings. A study written in another format is refused, not mixed.
STUDY_FORMAT = 2
JUDGE_SETTINGS = ("auto", "none")  # or a run directory: the judge of generated samples
RUN_OVERRIDES = tuple(name for name in HASHED_FIELDS if name not in STRUCTURAL)
RESOURCES = ("engine", "zero_stage", ds_config.FIELD, "eval_every", "checkpoint_every", "keep_checkpoints", "log_every")
BUDGET_KEYS = tuple(f.name for f in fields(Budget))
SETTING_KEYS = ("name", "preset", "families", "arms", "sizes", "seeds", "tokenizer", "corpus", "run",
                "resources", "tracking", "network", "ema", "judge", "eval_suite", "text_field") + BUDGET_KEYS \
    + sweep.AXIS_KEYS
RESULT_KEYS = tuple(k for k in SETTING_KEYS if k not in ("name", "resources", "tracking", "judge"))


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
    """Settings from a TOML study file; malformed text or unknown keys -> StudyError."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise StudyError(f"spec: file {path} not found; pass an existing study TOML") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise StudyError(f"spec: {path} is not valid TOML ({error}); fix the file") from None
    unknown = sorted(set(data) - set(SETTING_KEYS))
    if unknown:
        raise StudyError(f"spec: unknown key(s) {unknown} in {path}; valid: {', '.join(SETTING_KEYS)}")
    return data


def build_study(flags: dict[str, Any], toml: dict[str, Any] | None = None) -> StudySpec:
    """Merge base < preset < TOML < flags, validate, and expand into cells."""
    toml = toml or {}
    given = {**toml, **{k: v for k, v in flags.items() if v is not None}}
    try:
        preset = _choose_preset(given)
        layers = [preset_settings(preset) if preset else {}, toml, flags]
        settings = _merge(layers)
        settings["sizes"] = parse_sizes(",".join(_as_list(settings.get("sizes") or base_for([])["sizes"])))
        settings = _merge([base_for(settings["sizes"]), settings])
        cells = _expand(settings, _name(preset, given))
    except StudyError:
        raise
    except (ValueError, TypeError) as error:
        raise StudyError(str(error).splitlines()[0]) from None
    return _finish(settings, cells, preset, given)


def _choose_preset(given: dict[str, Any]) -> str | None:
    """The named preset; with nothing else given at all, the quickstart."""
    if given.get("preset"):
        return given["preset"]
    if any(given.get(key) for key in ("sizes", "families", "arms")):
        return None
    return "quickstart"


def _merge(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """Later layers win key by key; the `run`, `resources` and `tracking` tables merge field by field."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                continue
            if key in ("run", "resources", "tracking"):
                out[key] = {**out.get(key, {}), **value}
            else:
                out[key] = value
    return out


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _name(preset: str | None, given: dict[str, Any]) -> str:
    return str(given.get("name") or preset or "study")


def _arms(settings: dict[str, Any]) -> list[Arm]:
    """The preset's or file's arms, filtered by `families`; a family without an arm gets its default."""
    arms = [a if isinstance(a, Arm) else arm_from_dict(a) for a in settings.get("arms", [])]
    families = _as_list(settings["families"]) if settings.get("families") else None
    if families is None:
        return arms or list(DEFAULT_ARMS.values())
    for family in families:
        check_family(family)
    kept = [arm for arm in arms if arm.family in families]
    return kept + [default_arm(f) for f in families if all(a.family != f for a in arms)]


def _seeds(settings: dict[str, Any]) -> int:
    seeds = settings.get("seeds", 1)
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise StudyError(f"seeds: must be a positive integer (seeds 0..N-1 are run), got {seeds!r}")
    return seeds


def _budget(settings: dict[str, Any]) -> Budget:
    budget = Budget(**{k: settings[k] for k in BUDGET_KEYS if k in settings})
    for key in ("seq_len", "tokens", "max_tokens", "max_steps", "batch_size", "warmup_tokens"):
        value = getattr(budget, key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise StudyError(f"{key}: must be a positive integer, got {value!r}")
    for key in ("tokens_per_param", "lr"):
        value = getattr(budget, key)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise StudyError(f"{key}: must be a positive number, got {value!r}")
    return budget


def _check_tables(settings: dict[str, Any]) -> None:
    bad_run = sorted(set(settings.get("run", {})) - set(RUN_OVERRIDES))
    if bad_run:
        raise StudyError(f"run: unknown field(s) {bad_run}; [run] may set {', '.join(RUN_OVERRIDES)}")
    bad_res = sorted(set(settings.get("resources", {})) - set(RESOURCES))
    if bad_res:
        raise StudyError(f"resources: unknown field(s) {bad_res}; valid: {', '.join(RESOURCES)}")
    resources = settings.get("resources", {})
    if resources.get("engine", "torch") not in ENGINES:
        raise StudyError(f"engine: unknown engine {resources['engine']!r}; valid: {', '.join(ENGINES)}")
    if resources.get("zero_stage", 2) not in ZERO_STAGES:
        raise StudyError(f"zero_stage: must be one of {ZERO_STAGES}, got {resources['zero_stage']!r}")


def _check_data(settings: dict[str, Any]) -> None:
    """Tokenizer (loaded), text field, an existing local corpus (opened) and the eval suite."""
    try:
        get_encoding(settings.get("tokenizer"))
    except (ValueError, TypeError) as error:
        raise StudyError(str(error).splitlines()[0]) from None
    field = settings.get("text_field", DEFAULT_TEXT_FIELD)
    if not isinstance(field, str) or not field:
        raise StudyError(f"text_field: must be a column name, got {field!r}")
    check_corpus(str(settings.get("corpus")), field)
    check_eval_suite(settings.get("eval_suite", DEFAULT_EVAL_SUITE))


def _expand(settings: dict[str, Any], name: str) -> list[Cell]:
    """Every (size, seed, arm) cell as a RunSpec, size-major so small runs finish first; the
    judge run (when the study has one) comes first, so it is trained before it is needed."""
    _check_tables(settings)
    _check_data(settings)
    settings["resources"] = ds_config.with_overlay(settings.get("resources", {}))
    if settings.get("tracking"):
        settings["tracking"] = check_tracking(settings["tracking"])
    arms, seeds, budget = _arms(settings), _seeds(settings), _budget(sweep.budget_settings(settings))
    network = network_options(settings.get("network", "gpt2"))
    study_ema = check_ema(settings.get("ema", 0.0))
    resolved = [resolve_arm(arm, network) for arm in arms]
    judge = _judge(settings, seeds, network, study_ema, budget, name)
    reference = judge.run_id if judge is not None else _judge_dir(settings)
    def make(arm, options, size, seed, run_budget, run_fields, tags):
        return _cell(arm, options, arm.ema_rate(study_ema), size, seed, settings, run_budget, name,
                     judge=reference, run_fields=run_fields, tags=tags)
    cells = sweep.expand(settings, list(zip(arms, resolved)), seeds, budget, make)  # grid, sweeps, budgets
    cells = ([judge] if judge is not None else []) + cells
    ids = [cell.run_id for cell in cells]
    if len(set(ids)) != len(ids):
        raise StudyError("arms: two arms describe the same runs; remove the duplicate arm")
    return cells


def _judge(settings: dict, seeds: int, network: dict, ema: float, budget: Budget, name: str) -> Cell | None:
    """The study's judge of generated samples: with `judge = "auto"` and a suite that generates, a
    dedicated AR run at the largest size with its own seed (one past the compared seeds), trained
    like the others and excluded from every fit and gap (role `judge`)."""
    choice = settings.get("judge", "auto")
    if not isinstance(choice, str) or not choice:
        raise StudyError(f"judge: expected 'auto', 'none' or an AR run directory, got {choice!r}")
    suite = parse_eval_suite(settings.get("eval_suite", DEFAULT_EVAL_SUITE))[0]  # SUITE[:SET,SET]
    if suite not in SUITES:
        raise StudyError(f"eval_suite: unknown suite {suite!r}; valid: {', '.join(SUITES)}")
    if choice != "auto" or not SUITES[suite].generate:
        return None
    arm = default_arm(JUDGE_FAMILY)
    largest = max(settings["sizes"], key=lambda size: core_params(get_shape(size)))
    return _cell(arm, resolve_arm(arm, network), ema, largest, seeds, settings, budget, name, role="judge")


def _judge_dir(settings: dict) -> str:
    """`judge` given as a run directory (`--judge-run`): an AR run with the study's tokenizer."""
    choice = settings.get("judge", "auto")
    if choice in JUDGE_SETTINGS:
        return ""
    path = Path(choice).expanduser().resolve()
    try:
        other = RunSpec.load(path / "spec.json")
    except (OSError, ValueError):
        raise StudyError(f"judge: {choice} is not a run directory with a valid spec.json; pass an AR run "
                         "directory to --judge-run, or 'auto'") from None
    if other.family != JUDGE_FAMILY or other.tokenizer != settings["tokenizer"]:
        raise StudyError(f"judge: {choice} is a {other.family} run with tokenizer {other.tokenizer!r}; the "
                         f"judge must be an AR run with tokenizer {settings['tokenizer']!r}")
    return str(path)


def _cell(arm: Arm, options: dict, ema: float, size: str, seed: int, settings: dict, budget: Budget,
          name: str, role: str = "compared", judge: str = "", run_fields: dict | None = None,
          tags: dict | None = None) -> Cell:
    plan = schedule(size, budget)
    tracking = {**settings.get("tracking", {}), **{f"factor_{k}": v for k, v in arm.factors}, **(tags or {})}
    spec = RunSpec(
        family=arm.family, size=size, steps=plan.steps, lr=plan.lr, warmup_steps=plan.warmup_steps,
        model_options=options, tokenizer=settings["tokenizer"],
        corpus=canonical_corpus(str(settings["corpus"])),
        text_field=settings.get("text_field", DEFAULT_TEXT_FIELD),
        eval_suite=settings.get("eval_suite", DEFAULT_EVAL_SUITE),
        seq_len=budget.seq_len, batch_size=plan.batch_size, ema=ema, seed=seed,
        study=name, variant=arm.label if role == "compared" else "judge", tracking=tracking, role=role,
        judge=judge, **{**settings.get("run", {}), **(run_fields or {})}, **settings.get("resources", {}),
    )
    return Cell(spec, arm.factors, spec.run_id)


def _finish(settings: dict, cells: list[Cell], preset: str | None, given: dict) -> StudySpec:
    """Canonical settings; a study that is not the pure preset gets `<preset>-<hash>` as its name."""
    arms = [arm.to_dict() for arm in _arms(settings)]
    canonical = {k: v for k, v in settings.items() if k not in ("arms", "name", "preset", "families")}
    canonical.update(arms=arms, preset=preset)
    study = StudySpec(_name(preset, given), tuple(sorted(canonical.items())), tuple(cells))
    changed = any(given.get(k) is not None for k in RESULT_KEYS if k != "preset")
    if given.get("name") or not changed:
        return study
    name = f"{preset or 'study'}-{study.study_hash[:8]}"
    renamed = tuple(Cell(c.spec.replace(study=name), c.factors, c.run_id) for c in cells)  # study is not hashed
    return StudySpec(name, study.settings, renamed)
