"""jobs.data.suites.EvalSuite: the evaluation suite parsed once, its canonical text, one default."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cli import InputError
from jobs.data.suites import DEFAULT_SUITE, SUITES, EvalSuite, check_suite
from jobs.run.spec import RunSpec


@pytest.mark.parametrize("text,name,sets,canonical", [
    ("quick", "quick", (), "quick"),
    ("paper", "paper", (), "paper"),
    ("cpu-speed", "cpu-speed", (), "cpu-speed"),
    ("paper:wikitext2", "paper", ("wikitext2",), "paper:wikitext2"),
    ("paper:wikitext2,lambada", "paper", ("wikitext2", "lambada"), "paper:wikitext2,lambada"),
    ("quick: ptb , lm1b,", "quick", ("ptb", "lm1b"), "quick:ptb,lm1b"),  # spaces and a trailing comma
])
def test_valid_forms_parse_to_their_fields_and_print_canonically(text, name, sets, canonical):
    suite = EvalSuite.parse(text)
    assert (suite.name, suite.sets, str(suite)) == (name, sets, canonical)
    assert EvalSuite.parse(str(suite)) == suite  # the canonical text reads back to the same value
    assert EvalSuite.parse(suite) is suite  # a parsed value passes through
    assert check_suite("eval_suite", text) == canonical  # the settings' rule keeps the canonical text


def test_the_suite_it_evaluates_with():
    assert EvalSuite.parse("cpu").suite == EvalSuite.parse("cpu").base == SUITES["cpu"]
    named = EvalSuite.parse("paper:wikitext2")
    assert named.base == SUITES["paper"] and named.suite == replace(SUITES["paper"], zero_shot=("wikitext2",))


def test_one_default_the_run_fields_own():
    assert DEFAULT_SUITE == EvalSuite("quick") and str(DEFAULT_SUITE) == RunSpec.eval_suite


@pytest.mark.parametrize("value,fix", [
    (5, "must be a non-empty string"),
    ("", "must be a non-empty string"),
    ("   ", "must be a non-empty string"),
    ("quick\n", "must not hold control characters"),
    ("huge", "is not one of " + ", ".join(SUITES)),
    (" quick", "is not one of quick"),  # the name is taken as written
    (":wikitext2", "names suite '', which is not one of quick"),
    ("huge:ptb", "names suite 'huge', which is not one of quick"),
    ("quick:", "names no zero-shot set after the colon; write quick alone or quick:SET,SET"),
    ("cpu:,", "names no zero-shot set after the colon; write cpu alone or cpu:SET,SET"),
    ("paper: , ", "names no zero-shot set after the colon; write paper alone or paper:SET,SET"),
])
@pytest.mark.parametrize("field", ["eval_suite", "--eval-suite"])
def test_each_bad_form_is_refused_in_one_line_naming_the_field_and_the_fix(value, fix, field):
    with pytest.raises(InputError) as refused:
        EvalSuite.parse(value, field)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{field}: {value!r} ") and fix in message
