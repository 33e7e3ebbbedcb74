"""Checks a run makes before it touches its directory: the spec's fields (each by the one rule
`FIELD_RULES` declares for it, cli.InputError), and that the directory holds this run (same run
id; ValueError naming the field and the fix)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli import rules
from jobs.data.suites import check_suite
from jobs.run.files import SPEC_FILE
from jobs.run.spec import COMPILE_SETTINGS, ENGINES, PRECISIONS, ROLES, SCHEDULES, ZERO_STAGES, RunSpec
from jobs.run.tracking import WANDB_KEYS, WANDB_MODES


def _options(field: str, value: Any) -> Any:
    if not isinstance(value, (dict, tuple, list)):
        raise rules.fail(field, value, "must be a table of key = value options")
    return value


# Tags a study's plan puts on a run (scaling.study.sweep; record columns by jobs.eval.records.plan_columns),
# beside the tracking keys and the factor_* and sweep_* levels.
PLAN_TAGS = ("budget_flops", "plan_tokens", "branch_step")


def _tracking(field: str, value: Any) -> Any:
    """A run's tracking names: the study's [tracking] keys and its arm's factor_* levels."""
    table = dict(_options(field, value))
    for key, item in table.items():
        if key not in WANDB_KEYS + PLAN_TAGS and not key.startswith(("factor_", "sweep_")):
            raise rules.fail(f"{field}.{key}", item, "is not a known key", f"valid: {', '.join(WANDB_KEYS)}")
    if "mode" in table:
        rules.one_of(f"{field}.mode", table["mode"], WANDB_MODES)
    if "wandb" in table:
        rules.switch(f"{field}.wandb", table["wandb"])
    return value


def _text_or_empty(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise rules.fail(field, value, "must be a string")
    return value


def _id_or_empty(field: str, value: Any) -> str:
    """Empty, or a run id of the same study (one path component, `cli.rules.name`)."""
    return value if _text_or_empty(field, value) == "" else rules.name(field, value)


def _decay_fraction(field: str, value: Any) -> float:
    """WSD's decaying share of the steps: in (0, 1]."""
    if rules.fraction(field, value) <= 0:
        raise rules.fail(field, value, "must be in (0, 1]", "the final share of steps that decays")
    return value


# Every RunSpec field's rule (type and range), declared once: jobs.train's flags, --set and
# spec.json, and a study's [run] and [resources] tables are all checked by these.
FIELD_RULES: dict[str, Callable[[str, Any], Any]] = {
    "family": rules.text, "size": rules.text, "steps": rules.positive_int, "lr": rules.positive_number,
    "warmup_steps": rules.nonneg_int, "model_options": _options, "tokenizer": rules.text, "corpus": rules.text,
    "seq_len": lambda f, v: rules.at_least(f, v, 2), "batch_size": rules.positive_int,
    "micro_batch_size": rules.nonneg_int, "min_lr_ratio": rules.fraction, "weight_decay": rules.nonneg_number,
    "beta1": rules.rate, "beta2": rules.rate, "grad_clip": rules.positive_number, "ema": rules.rate,
    "seed": rules.seed, "precision": lambda f, v: rules.one_of(f, v, PRECISIONS), "eval_batches": rules.positive_int,
    "text_field": rules.text, "engine": lambda f, v: rules.one_of(f, v, ENGINES),
    "zero_stage": lambda f, v: rules.one_of(f, v, ZERO_STAGES),
    "compile": lambda f, v: rules.one_of(f, v, COMPILE_SETTINGS), "deepspeed_config": _text_or_empty,
    "eval_every": rules.nonneg_int, "checkpoint_every": rules.nonneg_int,
    "checkpoint_minutes": rules.nonneg_number, "keep_checkpoints": rules.positive_int,
    "log_every": rules.positive_int, "eval_suite": check_suite, "study": _text_or_empty,
    "variant": _text_or_empty, "tracking": _tracking, "role": lambda f, v: rules.one_of(f, v, ROLES),
    "judge": _text_or_empty, "schedule": lambda f, v: rules.one_of(f, v, SCHEDULES),
    "decay_fraction": _decay_fraction, "branch_from": _id_or_empty, "branch_step": rules.nonneg_int,
    "snapshot_steps": _text_or_empty,
}


def check_field(name: str, value: Any, where: str = "") -> Any:
    """One RunSpec field by its rule; `where` prefixes the field as the user wrote it (`run.`)."""
    return FIELD_RULES[name](where + name, value)


def check_fields(fields: dict[str, Any]) -> None:
    """Every RunSpec field present in `fields` by its rule (unknown names are RunSpec's to refuse)."""
    for name, value in fields.items():
        if name in FIELD_RULES:
            check_field(name, value)


def validate(spec: RunSpec) -> None:
    """Every field of the spec by its rule, then the rules between fields (InputError)."""
    check_fields({name: getattr(spec, name) for name in FIELD_RULES})
    if spec.batch_size % spec.micro_batch:
        raise rules.fail("micro_batch_size", spec.micro_batch_size,
                         f"must divide batch_size {spec.batch_size} (0 = no accumulation)")


def check_run_dir(run_dir: Path, spec: RunSpec) -> None:
    """A run directory holds one run: refuse a spec.json with another run id."""
    path = run_dir / SPEC_FILE
    if not path.exists():
        return
    try:
        existing = RunSpec.load(path)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"run_dir: {path} is unreadable ({error}); use a fresh --run-dir") from None
    if existing.run_id != spec.run_id:
        raise ValueError(f"run_dir: {run_dir} holds run {existing.run_id}, not {spec.run_id}; "
                         "use a fresh --run-dir or the same spec")
    # Checkpoints of another engine, world size or ZeRO stage load through the consolidated
    # state (jobs.train.portable): a run may move.
