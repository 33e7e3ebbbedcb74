"""cli.rules: each rule returns the value it accepts unchanged and refuses the rest with one line
`<field>: <value> <phrase>[; <fix>]`."""
from __future__ import annotations

import math

import pytest

from cli import InputError, rules


@pytest.mark.parametrize("rule, good, bad, phrase", [
    (rules.integer, 3, 3.0, "must be an integer"),
    (rules.positive_int, 1, 0, "must be a positive integer"),
    (rules.nonneg_int, 0, -1, "must be an integer >= 0"),
    (rules.seed, 2**63 - 1, 2**63, "must be below 2**63"),
    (rules.number, -2.5, math.inf, "must be a finite number"),
    (rules.positive_number, 1e-9, 0.0, "must be a positive number"),
    (rules.nonneg_number, 0, -1e-9, "must be a number >= 0"),
    (rules.rate, 0.999, 1.0, "must be a number in [0, 1)"),
    (rules.fraction, 1.0, 1.5, "must be a number in [0, 1]"),
    (rules.switch, False, 0, "must be true or false"),
    (rules.text, "x", "a\nb", "must not hold control characters (newline, NUL, ...)"),
])
def test_a_rule_keeps_what_it_accepts_and_names_what_it_refuses(rule, good, bad, phrase):
    assert rule("f", good) is good
    with pytest.raises(InputError) as error:
        rule("f", bad)
    assert str(error.value) == f"f: {bad!r} {phrase}"


def test_a_bool_is_not_an_integer_or_a_number_or_an_int_choice():
    for rule in (rules.integer, rules.positive_int, rules.number):
        with pytest.raises(InputError):
            rule("f", True)
    assert rules.one_of("f", 2, (1, 2)) == 2
    with pytest.raises(InputError, match=r"^f: True is not one of 1, 2$"):
        rules.one_of("f", True, (1, 2))


def test_at_least_at_most_and_a_long_value_shown_short():
    assert rules.at_least("f", 5, 5) == 5
    with pytest.raises(InputError, match=r"^f: 4 must be an integer >= 5$"):
        rules.at_least("f", 4, 5)
    with pytest.raises(InputError, match=r"^f: 11 must be at most 10; use less$"):
        rules.at_most("f", 11, 10, "use less")
    shown = str(rules.fail("f", "x" * 100, "is bad"))
    assert shown == "f: '" + "x" * 56 + "... is bad"


def test_tables_and_their_keys():
    assert rules.known_keys("run", {"lr": 1}, ("lr", "steps")) == {"lr": 1}
    with pytest.raises(InputError, match=r"^run\.nope: 2 is not a known key; valid: lr, steps$"):
        rules.known_keys("run", {"lr": 1, "nope": 2}, ("lr", "steps"))
    with pytest.raises(InputError, match=r"^run: \[1\] must be a table of key = value; write run = \{"):
        rules.table("run", [1])


def test_text_lists_split_strip_and_refuse_repeats():
    assert rules.text_list("sizes", " a, b ,,c") == ("a", "b", "c")
    assert rules.text_list("sizes", ["a", " b"]) == ("a", "b")
    with pytest.raises(InputError, match=r"^sizes: a given twice; give each once$"):
        rules.text_list("sizes", "a,b,a")
    with pytest.raises(InputError, match="must name at least one entry"):
        rules.text_list("sizes", " , ")
    with pytest.raises(InputError, match="must be a comma-separated string or a list of strings"):
        rules.text_list("sizes", [1])


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "a b", "x" * (rules.NAME_MAX_CHARS + 1), ""])
def test_a_name_is_one_safe_path_component(bad):
    assert rules.name("name", "study-1_a.b+c=d:e,f") == "study-1_a.b+c=d:e,f"
    with pytest.raises(InputError, match=r"^name: "):
        rules.name("name", bad)
