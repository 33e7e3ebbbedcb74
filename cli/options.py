"""Command-line flags declared on the options dataclass they fill, once.

An options field declared with `option(default, "--flag-name", "help")` carries its flag; `flags(cls)`
lists them and `add_flags(group, cls)` adds them to an argparse group, each help text ending with
the field's default. So a backend's options, their defaults, their flags and their help are
written in one place (as submitit derives its parameters from one signature).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag: `--name` fills options field `field`; unset flags stay None."""

    name: str
    field: str
    help: str
    type: Callable[[str], Any] = str
    repeat: bool = False  # may be given more than once (a tuple of values)
    switch: bool = False  # takes no value (True when given)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


def option(default: Any, name: str, help: str, *, type: Callable[[str], Any] = str, repeat: bool = False,
           switch: bool = False) -> Any:
    """A dataclass field with its command-line flag `--name`."""
    shown = "" if isinstance(default, bool) or default in ("", (), None) else f" (default {default:g})" if isinstance(
        default, float) else f" (default {default})"
    flag = {"name": name.removeprefix("--"), "help": help + shown, "type": type, "repeat": repeat,
            "switch": switch}
    return dataclasses.field(default=default, metadata={"flag": flag})


def flags(cls: type) -> tuple[Flag, ...]:
    """The flags declared on the fields of dataclass `cls`, in field order."""
    return tuple(Flag(field=f.name, **f.metadata["flag"]) for f in dataclasses.fields(cls) if "flag" in f.metadata)


def add_flags(group: argparse._ActionsContainer, declared: tuple[Flag, ...]) -> None:
    """Add each flag to an argparse group or parser; unset flags stay None."""
    for flag in declared:
        if flag.switch:
            group.add_argument(f"--{flag.name}", dest=flag.dest, action="store_const", const=True, help=flag.help)
        else:
            group.add_argument(f"--{flag.name}", dest=flag.dest, type=flag.type,
                               action="append" if flag.repeat else "store", help=flag.help)


def set_value(text: str) -> Any:
    """A `--set key=value` value, read alike in every command: a TOML value (`0.95`, `[0.25, 0.5]`,
    `true`, `"x"`, `{ a = 1 }`), else JSON (`{"a": 1}`), else the text itself (`wsd`)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
