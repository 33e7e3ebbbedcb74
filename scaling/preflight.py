"""The launcher's preflight: everything `scaling.launch` checks before it writes anything.

Before the study is built: the flags (no empty values) and the `--spec` file (a readable UTF-8
file whose known keys have the right types). After: every run through `jobs.train.preflight` (field
types and ranges, the trainer's and the model's rules) and the study directory (writable). For a
launch that trains (not `--dry-run`), after the plan's own budget check: the data of each
corpus once and, when the local backend trains here, the largest run's memory against this
machine. Each failure is a `cli.InputError`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli import InputError
from jobs.train import preflight

from .study import StudySpec

# TOML keys of a study file and the types they take (lists are of strings).
_TEXT_OR_LIST = ("families", "sizes")
_TEXT = ("name", "preset", "tokenizer", "corpus", "network", "judge", "eval_suite")
_TABLES = ("run", "resources")
_INTEGERS = ("seeds", "seq_len", "tokens", "max_tokens", "max_steps", "batch_size", "warmup_tokens", "warmup_steps")
_NUMBERS = ("lr", "ema")
_NUMBER_OR_LIST = ("tokens_per_param", "budgets")  # a list: one run per value (scaling.sweep)
_FLAG_NAMES = {"judge": "--judge-run"}  # flags whose name is not their destination's


def check_flags(args: argparse.Namespace, keys: tuple[str, ...]) -> None:
    """No text flag is given empty (`--sizes ''` would otherwise mean "the default sizes")."""
    for key in keys + ("spec", "study_dir"):
        value = getattr(args, key, None)
        if isinstance(value, str) and not value.strip(" ,"):
            flag = _FLAG_NAMES.get(key, "--" + key.replace("_", "-"))
            raise InputError(f"{key.replace('_', '-')}: {flag} is empty; give a value or leave the flag out")


def check_spec_file(path: str) -> None:
    """`--spec` names a readable UTF-8 file (its TOML is parsed by scaling.study.load_toml)."""
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


def _type_error(key: str, value: Any, kind: str) -> InputError:
    return InputError(f"{key}: {value!r} is not {kind}; write e.g. {key} = {_EXAMPLES[kind]} in the study file")


_EXAMPLES = {"a string": '"value"', "a string or a list of strings": '["ar", "aogpt"]', "a table": "{ ... }",
             "an integer": "3", "a number": "0.001", "a number or a list of numbers": "[4, 8, 16]"}


def check_toml_types(settings: dict[str, Any]) -> None:
    """The study file's known keys have the types the study takes (unknown keys are
    scaling.study's to refuse)."""
    for key, value in settings.items():
        if key in _TEXT_OR_LIST and not (isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise _type_error(key, value, "a string or a list of strings")
        if key in _TEXT and not isinstance(value, str):
            raise _type_error(key, value, "a string")
        if key in _TABLES and not isinstance(value, dict):
            raise _type_error(key, value, "a table")
        if key in _INTEGERS and (not isinstance(value, int) or isinstance(value, bool)):
            raise _type_error(key, value, "an integer")
        if key in _NUMBERS and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise _type_error(key, value, "a number")
        if key in _NUMBER_OR_LIST and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              for v in (value if isinstance(value, list) else [value])):
            raise _type_error(key, value, "a number or a list of numbers")


def check_study(study: StudySpec, study_dir: Path) -> None:
    """Every run of the study (see jobs.train.preflight.check_specs) and the study directory."""
    preflight.check_writable(study_dir, "study-dir")
    preflight.check_specs([cell.spec for cell in study.cells], memory=False, data=False)


def check_resources(study: StudySpec, *, memory: bool) -> None:
    """For a launch that trains: each corpus once and, with `memory` (training here), the
    largest run against this machine."""
    preflight.check_specs([cell.spec for cell in study.cells], memory=memory, data=True)
