"""The validation rules every setting is checked with, each written once with one phrase.

A rule takes the field's name (as the user wrote it: `seeds`, `run.beta1`, `arms[2].family`) and
a value, and returns the value normalised (an int stays an int, a comma list becomes a tuple) or
raises `cli.InputError` with one line `<field>: <value> <phrase>; <fix>`. Study settings
(`scaling.study.settings`), run specs (`jobs.train.spec_rules`) and the launch flags all use these, so the
phrase "must be a positive integer" exists in one place.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from cli import InputError

# A study or run name: one path component of safe characters (letters, digits, . _ - + =, colon),
# starting with a letter or digit, at most NAME_MAX_CHARS long (far below the file system's 255).
NAME_MAX_CHARS = 100
SEED_LIMIT = 2**63
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=:,-]*")


def fail(field: str, value: Any, phrase: str, fix: str = "") -> InputError:
    """The one-line error of a broken rule (callers raise it)."""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InputError(f"{field}: {shown} {phrase}" + (f"; {fix}" if fix else ""))


def require(field: str, value: Any, holds: bool, phrase: str) -> Any:
    """`value` when `holds`, else the rule's error `<field>: <value> <phrase>`."""
    if not holds:
        raise fail(field, value, phrase)
    return value


def integer(field: str, value: Any) -> int:
    """An int (not a bool, not a float)."""
    return require(field, value, not isinstance(value, bool) and isinstance(value, int), "must be an integer")


def positive_int(field: str, value: Any) -> int:
    """An integer >= 1."""
    return require(field, value, integer(field, value) >= 1, "must be a positive integer")


def at_least(field: str, value: Any, low: int) -> int:
    """An integer >= `low`."""
    return require(field, value, integer(field, value) >= low, f"must be an integer >= {low}")


def nonneg_int(field: str, value: Any) -> int:
    """An integer >= 0."""
    return at_least(field, value, 0)


def seed(field: str, value: Any) -> int:
    """A random seed: an integer in [0, 2**63) (what torch.manual_seed and numpy take)."""
    return require(field, value, nonneg_int(field, value) < SEED_LIMIT, "must be below 2**63")


def number(field: str, value: Any) -> float:
    """A finite int or float (not a bool; inf and NaN refused)."""
    finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    return require(field, value, finite, "must be a finite number")


def positive_number(field: str, value: Any) -> float:
    """A finite number > 0."""
    return require(field, value, number(field, value) > 0, "must be a positive number")


def nonneg_number(field: str, value: Any) -> float:
    """A finite number >= 0."""
    return require(field, value, number(field, value) >= 0, "must be a number >= 0")


def rate(field: str, value: Any) -> float:
    """A finite number in [0, 1) (betas, EMA rates)."""
    return require(field, value, 0 <= number(field, value) < 1, "must be a number in [0, 1)")


def fraction(field: str, value: Any) -> float:
    """A finite number in [0, 1]."""
    return require(field, value, 0 <= number(field, value) <= 1, "must be a number in [0, 1]")


def at_most(field: str, value: Any, limit: float, fix: str = "") -> Any:
    """A number no larger than `limit` (sanity bounds: `tokens_per_param`, plan sizes)."""
    if value > limit:
        raise fail(field, value, f"must be at most {limit:g}", fix)
    return value


def text(field: str, value: Any) -> str:
    """A non-empty string without control characters."""
    if not isinstance(value, str) or not value.strip():
        raise fail(field, value, "must be a non-empty string")
    if any(ord(c) < 32 for c in value):
        raise fail(field, value, "must not hold control characters (newline, NUL, ...)")
    return value


def switch(field: str, value: Any) -> bool:
    """true or false."""
    if not isinstance(value, bool):
        raise fail(field, value, "must be true or false")
    return value


def one_of(field: str, value: Any, choices: Iterable[Any]) -> Any:
    """One of `choices` (compared with ==; a bool never matches an int choice)."""
    choices = tuple(choices)
    if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices) or value not in choices:
        raise fail(field, value, "is not one of " + ", ".join(map(str, choices)))
    return value


def table(field: str, value: Any) -> dict[str, Any]:
    """A table (TOML `[...]`, a JSON object)."""
    if not isinstance(value, dict):
        raise fail(field, value, "must be a table of key = value", f"write {field} = {{ key = value, ... }}")
    return value


def known_keys(field: str, value: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """A table whose keys are all in `keys` (an unknown key is never dropped silently)."""
    keys = tuple(keys)
    unknown = sorted(set(table(field, value)) - set(keys))
    if unknown:
        raise fail(f"{field}.{unknown[0]}", value[unknown[0]], "is not a known key", f"valid: {', '.join(keys)}")
    return value


def text_list(field: str, value: Any) -> tuple[str, ...]:
    """A comma-separated string or a list of strings, non-empty, each given once."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value]
    else:
        raise fail(field, value, "must be a comma-separated string or a list of strings")
    if not items or not all(items):
        raise fail(field, value, "must name at least one entry")
    for i, item in enumerate(items):
        if item in items[:i]:
            raise InputError(f"{field}: {item} given twice; give each once")
    return tuple(items)


def name(field: str, value: Any) -> str:
    """A study or run name, or an id read from a file: one path component of safe characters, at
    most NAME_MAX_CHARS (`cli.paths.within` joins it to its folder)."""
    text(field, value)
    if len(value) > NAME_MAX_CHARS:
        raise fail(field, value, f"is longer than {NAME_MAX_CHARS} characters", "choose a shorter name")
    if not _NAME.fullmatch(value):
        raise fail(field, value, "is not one path component of letters, digits and . _ - + = : ,",
                   "no '/', '..', spaces or control characters; start with a letter or digit")
    return value
