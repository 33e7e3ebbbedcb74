"""Flags of the trainer's command line (`python -m jobs.train`, whose `main` is `jobs.train.loop.main`):
flags, `--set key=value` and `--spec spec.json` become a `RunSpec`.

Bad input raises `cli.InputError` naming the field, before anything is written.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from collections.abc import Callable
from typing import Any

from cli import InputError, Parser, float_arg, int_arg
from cli.options import set_value
from jobs.train.preflight import check_types
from jobs.run import recipes
from jobs.run.files import SPEC_FILE
from jobs.run.spec import FIELD_DOCS, RunSpec

TABLE_FIELDS = {"model_options": "KEY=VALUE", "tracking": "tracking.KEY=VALUE"}  # not settable whole
SPEC_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunSpec) if f.default is not dataclasses.MISSING}
FLAG_TYPES: dict[str, Callable[[str], Any]] = {"int": int_arg, "float": float_arg, "str": str}  # by annotation
# other names a field's flag answers to: older ones, and the launcher's and generate's --judge-run
ALIASES = {"warmup_steps": ("--warmup",), "eval_suite": ("--suite",), "judge": ("--judge-run",)}


def field_flag(name: str) -> str:
    """The flag of RunSpec field `name` in every command that takes it: `--name-with-dashes`."""
    return "--" + name.replace("_", "-")


def flag_type(name: str) -> Callable[[str], Any]:
    """The argparse type of RunSpec field `name`'s flag, from its annotation."""
    return FLAG_TYPES[str(RunSpec.__dataclass_fields__[name].type)]


def spec_flags() -> tuple[dataclasses.Field, ...]:
    """The RunSpec fields that are flags: every one but the tables (set key by key with --set)."""
    return tuple(f for f in dataclasses.fields(RunSpec) if f.name not in TABLE_FIELDS)


def add_field_flag(parser: argparse._ActionsContainer, name: str) -> None:
    """Add RunSpec field `name`'s flag: its type, its doc and its default, as the field declares them."""
    default = SPEC_DEFAULTS.get(name)
    shown = "" if default in (None, "") else f" (default {default})"
    parser.add_argument(field_flag(name), *ALIASES.get(name, ()), dest=name, type=flag_type(name),
                        help=(FIELD_DOCS[name] + shown).replace("%", "%%"))


def build_parser() -> argparse.ArgumentParser:
    """The `python -m jobs.train` argument parser: one flag per RunSpec field (`spec_flags`)."""
    p = Parser(prog="python -m jobs.train", description="Train (or resume) one run.")
    p.add_argument("--run-dir", required=True, help="run directory (created; reruns resume)")
    p.add_argument("--spec", help="a spec.json to train (flags given too override its fields)")
    p.add_argument("--tokens", type=int_arg, help="training tokens: sets --steps from batch_size x seq_len")
    fields = p.add_argument_group("run spec fields (jobs.run.spec.RunSpec)")
    for spec_field in spec_flags():
        add_field_flag(fields, spec_field.name)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a spec field, tracking.KEY, or else a model option (value read as TOML, else JSON, else text)")
    p.add_argument("--max-steps-this-call", type=int_arg, help="stop (preempted) after this many steps")
    p.add_argument("--handle-signals", action="store_true", default=True,
                   help="SIGTERM/SIGUSR1/SIGUSR2/SIGINT checkpoint and stop, state preempted (the default)")
    p.add_argument("--no-handle-signals", dest="handle_signals", action="store_false",
                   help="leave the signals' default actions (the run is marked failed or preempted)")
    p.add_argument("--allow-numerics-change", action="store_true",
                   help="resume a run trained on another numerics path (jobs.run.numerics; sets "
                        "AOSCALE_ALLOW_NUMERICS_CHANGE=1): its records then name both paths")
    return p


def _apply_sets(fields: dict[str, Any], pairs: list[str], flagged: frozenset[str] = frozenset()) -> None:
    """Apply `--set key=value` pairs; a key given twice, or also given by its flag (`flagged`), is
    refused: which of the two values trains is no guess to leave to the order of the words."""
    names = {f.name for f in dataclasses.fields(RunSpec)}
    options, tracking = dict(fields.get("model_options", {})), dict(fields.get("tracking", {}))
    seen: set[str] = set()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--set: {pair!r} must look like key=value")
        if key in seen:
            raise InputError(f"--set: {key} is given twice; give it once")
        if key in flagged:
            raise InputError(f"--set: {key} is also given as {field_flag(key)}; give it once")
        seen.add(key)
        if key in TABLE_FIELDS:
            raise InputError(f"--set: {key} is a table, set its keys one by one (--set {TABLE_FIELDS[key]})")
        if key.startswith("tracking."):
            tracking[key.removeprefix("tracking.")] = set_value(value)
        elif key in names:
            fields[key] = set_value(value)
        else:
            options[key] = set_value(value)
    fields["model_options"], fields["tracking"] = options, tracking


def _base_fields(args: argparse.Namespace) -> dict[str, Any]:
    source = Path(args.spec) if args.spec else Path(args.run_dir) / SPEC_FILE
    if args.spec or (source.exists() and args.family is None):
        try:
            fields = RunSpec.load(source).to_dict()
        except (OSError, ValueError, TypeError) as error:
            raise InputError(f"spec: cannot read {source} ({error}); give a valid spec.json") from None
        fields.pop("run_id")
        return fields
    missing = [f"--{n}" for n in ("family", "size") if getattr(args, n) is None]
    if args.steps is None and args.tokens is None:
        missing.append("--steps or --tokens")
    if missing:
        raise InputError(f"arguments: {', '.join(missing)} required (or --spec spec.json)")
    return {"family": args.family, "size": args.size, "steps": 0, "lr": None, "warmup_steps": None}


def _rung_defaults(fields: dict[str, Any]) -> None:
    """The lr and warm-up a study would give this rung (jobs.run.recipes), where the command gave none."""
    if fields.get("lr") is not None and fields.get("warmup_steps") is not None:
        return
    try:
        rule = recipes.rule_for(fields["size"])
    except (KeyError, ValueError) as error:
        raise InputError(str(error)) from None
    if fields.get("lr") is None:
        fields["lr"] = rule.lr
    if fields.get("warmup_steps") is None:
        step_tokens = fields.get("batch_size", SPEC_DEFAULTS["batch_size"]) * fields.get("seq_len", SPEC_DEFAULTS["seq_len"])
        budget = recipes.Budget(seq_len=fields.get("seq_len", SPEC_DEFAULTS["seq_len"]))
        fields["warmup_steps"] = recipes.warmup_for(fields["steps"], step_tokens, budget)


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The RunSpec named by the command line (ValueError on bad input)."""
    fields = _base_fields(args)
    flagged = {f.name: getattr(args, f.name) for f in spec_flags() if getattr(args, f.name) is not None}
    fields.update(flagged)
    _apply_sets(fields, args.set, frozenset(flagged))
    computed = {"steps"} if args.tokens is not None else set()  # from --tokens, below (checked by check_run)
    check_types({k: v for k, v in fields.items()
                 if k not in computed and not (k in ("lr", "warmup_steps") and v is None)})
    if args.tokens is not None:
        tokens_per_step = fields.get("batch_size", SPEC_DEFAULTS["batch_size"]) * fields.get("seq_len", SPEC_DEFAULTS["seq_len"])
        if args.tokens < 1 or tokens_per_step < 1:
            raise InputError(f"tokens: {args.tokens} tokens at batch_size x seq_len = {tokens_per_step} per step; "
                             "all three must be positive")
        fields["steps"] = -(-args.tokens // tokens_per_step)
    _rung_defaults(fields)
    try:
        return RunSpec.from_dict(fields)
    except (TypeError, ValueError) as error:
        raise InputError(f"spec: {error}") from None
