"""cli.options: flags declared on their options' fields, and the one reading of a `--set` value."""
from __future__ import annotations

import argparse
import dataclasses
import math

import pytest

from cli import float_arg
from cli.options import add_flags, flags, option, set_value


@pytest.mark.parametrize(("text", "value"), [
    ("0.95", 0.95), ("3", 3), ("1e-3", 1e-3), ("[0.25, 0.5]", [0.25, 0.5]), ("true", True), ('"x"', "x"),
    ("{ a = 1 }", {"a": 1}), ('{"a": 1, "b": [1]}', {"a": 1, "b": [1]}), ("null", None), ("wsd", "wsd"),
    ("gpt2,pos=rope", "gpt2,pos=rope"), ("", ""),
])
def test_a_set_value_is_toml_else_json_else_text(text, value):
    got = set_value(text)
    assert got == value and type(got) is type(value)


def test_a_non_finite_set_value_stays_a_number_for_its_rule_to_refuse():
    assert math.isinf(set_value("inf")) and math.isnan(set_value("nan"))


def test_flags_come_from_the_fields_with_their_defaults_in_the_help():
    @dataclasses.dataclass(frozen=True)
    class Options:
        rate: float = option(0.5, "--the-rate", "how fast", type=float_arg)
        name: str = option("", "--the-name", "what")
        plain: int = 1

    declared = flags(Options)
    assert [(f.name, f.field, f.help) for f in declared] == [("the-rate", "rate", "how fast (default 0.5)"),
                                                             ("the-name", "name", "what")]
    parser = argparse.ArgumentParser()
    add_flags(parser, declared)
    assert vars(parser.parse_args(["--the-rate", "0.25"])) == {"the_rate": 0.25, "the_name": None}
