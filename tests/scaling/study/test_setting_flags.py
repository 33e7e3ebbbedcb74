"""Each setting declared once: the launcher's study flags, `--set` and the trainer's flags are all
derived from the declarations (scaling.study.settings.SETTINGS, jobs.run.spec.RunSpec's fields)."""
from __future__ import annotations

import dataclasses

import pytest

from cli import InputError
from jobs.run.spec import FIELD_DOCS, TABLE_FIELDS, RunSpec
from jobs.train.cli import build_parser, spec_from_args
from jobs.train.spec_rules import FIELD_RULES
from scaling import launch
from scaling.study import settings

TINY = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--max-steps", "2", "--seq-len", "32"]


def flags_of(parser) -> dict[str, object]:
    """Option string -> its argparse action."""
    return {name: action for action in parser._actions for name in action.option_strings}


def study(*argv: str):
    return launch.study_from_args(launch.parser().parse_args([*TINY, *argv]))


def test_every_spec_field_has_one_rule_one_doc_and_a_trainer_flag_but_the_tables():
    names = [f.name for f in dataclasses.fields(RunSpec)]
    assert set(FIELD_RULES) == set(names) and all(FIELD_DOCS[n] for n in names)
    trainer = flags_of(build_parser())
    for name in names:
        flag = "--" + name.replace("_", "-")
        assert (flag in trainer) == (name not in TABLE_FIELDS), name
        if name not in TABLE_FIELDS:
            assert trainer[flag].help.startswith(FIELD_DOCS[name].replace("%", "%%")), name


def test_a_study_setting_that_is_a_spec_field_has_the_same_flag_and_help_in_both_commands():
    trainer, launcher = flags_of(build_parser()), flags_of(launch.parser())
    shared = [s for s in settings.FLAG_SETTINGS if s.key in FIELD_DOCS and s.rule is FIELD_RULES[s.key]]
    assert {s.key for s in shared} >= {"lr", "warmup_steps", "ema", "seq_len", "batch_size", "tokenizer", "corpus",
                                       "text_field", "eval_suite"}
    for setting in shared:
        assert setting.flag_name in trainer and setting.flag_name in launcher, setting.key
        assert launcher[setting.flag_name].help.startswith(FIELD_DOCS[setting.key]), setting.key
        assert launcher[setting.flag_name].dest == trainer[setting.flag_name].dest == setting.key


def test_every_flagged_setting_is_a_launcher_flag_and_the_tables_are_not():
    launcher = flags_of(launch.parser())
    for setting in settings.SETTINGS:
        assert (setting.flag_name in launcher) == bool(setting.help), setting.key
    assert launch.FLAG_KEYS == tuple(s.key for s in settings.FLAG_SETTINGS)
    assert {"arms", "run", "resources", "tracking", "carry_lr"} == {s.key for s in settings.SETTINGS if not s.help}


def test_a_setting_given_by_flag_by_set_or_by_file_plans_the_same_runs(tmp_path):
    by_flag = study("--budgets", "1e11", "--grid-points", "6", "--grid-step", "1.5")
    by_set = study("--set", "budgets=[1e11]", "--set", "grid_points=6", "--set", "grid_step=1.5")
    spec = tmp_path / "s.toml"
    spec.write_text("budgets = [1e11]\ngrid_points = 6\ngrid_step = 1.5\n")
    by_file = study("--spec", str(spec))
    assert len(by_flag.run_ids) == 6
    assert by_flag.run_ids == by_set.run_ids == by_file.run_ids


def test_set_reaches_a_table_field_of_every_run():
    plain, tuned = study(), study("--set", "run.beta2=0.99", "--set", "resources.log_every=3")
    assert [c.spec.beta2 for c in tuned.cells] == [0.99] and [c.spec.log_every for c in tuned.cells] == [3]
    assert tuned.run_ids != plain.run_ids  # beta2 changes results; log_every does not (same id otherwise)
    assert study("--set", "resources.log_every=3").run_ids == plain.run_ids


@pytest.mark.parametrize(("argv", "message"), [
    (["--set", "run.beta2=2"], r"^run\.beta2: 2 must be a number in \[0, 1\)"),
    (["--set", "bogus=1"], r"^set: unknown key 'bogus'; valid: name, preset,"),
    (["--set", "sizes.x=1"], r"^set: sizes\.x is not a setting; a dotted key sets a field of run, resources"),
    (["--set", "lr"], r"^set: 'lr' must look like key=value"),
    (["--lr", "1e-3", "--set", "lr=2e-3"], r"^set: lr is given twice \(--lr and --set lr=\.\.\.\); give it once"),
    (["--set", "judge=x", "--judge-run", "y"], r"^set: judge is given twice \(--judge-run and"),
])
def test_a_bad_set_names_the_key_as_written(argv, message):
    with pytest.raises(InputError, match=message):
        study(*argv)


def test_the_trainer_takes_every_spec_field_as_its_flag(tmp_path):
    base = ["--run-dir", str(tmp_path), "--family", "ar", "--size", "0.1M", "--steps", "3"]
    spec = spec_from_args(build_parser().parse_args([*base, "--weight-decay", "0.05", "--schedule", "wsd",
                                                     "--warmup", "2", "--text-field", "body"]))
    assert (spec.weight_decay, spec.schedule, spec.warmup_steps, spec.text_field) == (0.05, "wsd", 2, "body")
    again = spec_from_args(build_parser().parse_args([*base, "--weight-decay", "0.05", "--schedule", "wsd",
                                                      "--warmup-steps", "2", "--text-field", "body"]))
    assert again == spec
    with pytest.raises(InputError, match=r"^schedule: 'linear' is not one of cosine, wsd"):
        spec_from_args(build_parser().parse_args([*base, "--schedule", "linear"]))


def test_the_suite_has_one_flag_with_one_alias_and_one_default_in_all_three_commands():
    from jobs.data.suites import DEFAULT_SUITE
    from jobs.eval.evaluate import build_parser as evaluate_parser

    for parser in (build_parser(), launch.parser(), evaluate_parser()):
        action = flags_of(parser)["--eval-suite"]
        assert action.option_strings == ["--eval-suite", "--suite"] and action.dest == "eval_suite"
        assert action.help.startswith(FIELD_DOCS["eval_suite"])
    assert evaluate_parser().parse_args(["--run-dir", "r"]).eval_suite == str(DEFAULT_SUITE) == RunSpec.eval_suite
    assert launch.parser().parse_args([]).eval_suite is None  # unset: the preset's or file's suite shows through


def test_a_table_field_given_by_a_flag_and_by_set_is_refused():
    with pytest.raises(InputError, match=r"^set: resources\.engine is given twice \(--engine and --set "
                                         r"resources\.engine=\.\.\.\); give it once"):
        study("--engine", "torch", "--set", "resources.engine=deepspeed")
