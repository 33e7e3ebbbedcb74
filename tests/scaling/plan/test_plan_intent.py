"""Plans checked against their intent (issue 37, item 5): a budget its runs cannot meet within
scaling.study.sweep.BUDGET_TOLERANCE, a sweep or `at_budget` that touches no run, a repeated `--sweep`,
a TOML boolean in a numeric field and a duplicate value are each refused with exit 2, one line
naming the field (and the value as written), and nothing written: the working folder, a study
in it, the caches, HF_HOME and HOME stay as they were. A preset's per-family sweep table for a
family the study does not train is still dropped (commit 198f8ea)."""
from __future__ import annotations

import pytest

from scaling import launch
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.test_bad_inputs import assert_refused

SMALL = ["--families", "ar", "--seq-len", "32", "--batch-size", "32", "--dry-run", "--no-progress"]
BASE = 'families = "ar"\nseq_len = 32\nbatch_size = 32\n'
TOMLS = {  # file name -> a study file breaking one rule
    "tokens_bool": BASE + 'sizes = "0.1M"\ntokens = true\n',
    "budgets_bool": BASE + "budgets = [1e12, true]\n",
    "branches_bool": BASE + 'budgets = [1e12]\nbranches = [true]\n[run]\nschedule = "wsd"\n',
    "branches_twice": BASE + 'budgets = [1e12]\nbranches = [0.5, 0.50]\n[run]\nschedule = "wsd"\n',
    "branch_decay_100": BASE + 'budgets = [1e12]\nbranches = [0.5]\nbranch_decay = 100\n[run]\nschedule = "wsd"\n',
    "sweep_lr_bool": BASE + 'sizes = "0.1M"\n[sweep]\nlr = [1e-3, true]\n',
    "at_budget_bool": BASE + "budgets = [1e12]\n[sweep]\nlr = [1e-3, 3e-3]\nat_budget = true\n",
    "at_budget_outside": BASE + "budgets = [1e12, 3e12]\n[sweep]\nlr = [1e-3, 3e-3]\nat_budget = 1e13\n",
    "at_budget_no_budgets": BASE + 'sizes = "0.1M"\n[sweep]\nlr = [1e-3, 3e-3]\nat_budget = 1e12\n',
    "sweep_other_family": BASE + 'sizes = "0.1M"\n[sweep.mdm]\nlr = [1e-3, 3e-3]\n',
    "sweep_empty_family": BASE + 'sizes = "0.1M"\n[sweep]\nlr = [1e-3, 3e-3]\n[sweep.ar]\n',
    "tpp_twice": BASE + 'sizes = "0.1M"\ntokens_per_param = [4, 8, 4.0]\n',
    "grid_step_bool": BASE + "budgets = [1e12]\ngrid_step = true\n",
    "carry_bool": BASE + "budgets = [1e12]\ncarry_lr = {ar = true}\n",
}
CASES = [  # (argv, what the one line must name)
    (["--budgets", "1e3"], "budgets: 1000 FLOPs cannot be met"),
    (["--budgets", "1e9"], "budgets: 1e+09 FLOPs cannot be met"),
    (["--budgets", "1e12,1e3"], "budgets: 1000 FLOPs cannot be met"),
    (["--budgets", "1e12", "--batch-size", "32768"], "1.33x the budget"),
    (["--sizes", "0.1M", "--sweep", "mdm:lr=1e-3,3e-3"], "--sweep mdm:lr=1e-3,3e-3"),
    (["--sizes", "0.1M", "--sweep", "lr=1e-3", "--sweep", "lr=3e-3"], "sweep: lr given twice"),
    (["--sizes", "0.1M", "--sweep", "ar:lr=1e-3", "--sweep", "ar:lr=3e-3"], "sweep: ar:lr given twice"),
    (["--sizes", "0.1M", "--sweep", "lr=1e-3,0.001"], "sweep: lr: 0.001 given twice (as 1e-3 and 0.001)"),
    (["--sizes", "0.1M", "--sweep", "lr=1e-3,true"], "'true' is not a number"),
    (["--budgets", "1e12", "--sweep", "lr=1e-3,3e-3", "--sweep", "at_budget=3e12"], "at_budget = 3e+12 is not one"),
    (["--sizes", "0.1M", "--sweep", "lr=1e-3,3e-3", "--sweep", "at_budget=1e12"], "study plans no budgets"),
    (["--budgets", "1e12", "--sweep", "at_budget=1e12"], "no setting is swept"),
    (["--budgets", "1e12,3e12,1e12"], "budgets: 1e+12 given twice"),
    (["--sizes", "0.1M", "--tokens-per-param", "4,8,4"], "tokens_per_param: 4.0 given twice"),
    (["--spec", "tokens_bool.toml"], "tokens"),
    (["--spec", "budgets_bool.toml"], "budgets: true is a boolean"),
    (["--spec", "branches_bool.toml"], "branches: true is a boolean"),
    (["--spec", "branches_twice.toml"], "branches: 0.5 given twice"),
    (["--spec", "branch_decay_100.toml"], "branch_decay: a share"),
    (["--spec", "sweep_lr_bool.toml"], "sweep: lr: true is a boolean"),
    (["--spec", "at_budget_bool.toml"], "at_budget"),
    (["--spec", "at_budget_outside.toml"], "at_budget = 1e+13 is not one of the study's budgets (1e+12, 3e+12)"),
    (["--spec", "at_budget_no_budgets.toml"], "at_budget = 1e+12 sweeps only at that budget"),
    (["--spec", "sweep_other_family.toml"], "[sweep.mdm] sweeps mdm"),
    (["--spec", "sweep_empty_family.toml"], "sweep: the table for 'ar' is empty"),
    (["--spec", "tpp_twice.toml"], "tokens_per_param: 4.0 given twice (as 4 and 4.0)"),
    (["--spec", "grid_step_bool.toml"], "grid_step"),
    (["--spec", "carry_bool.toml"], "carry_lr"),
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A working folder with a study in it and the study files; private caches, HF_HOME and HOME."""
    root, cache, hf, home = (tmp_path_factory.mktemp(name) for name in ("ws", "cache", "hf", "home"))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (("AOSCALE_CACHE", cache), ("HF_HOME", hf), ("HOME", home)):
            mp.setenv(name, str(value))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.chdir(root)
        study_ledger.prepare(root / "study", build_study({"families": "ar", "sizes": "0.1M", "max_steps": 2, "seq_len": 32}))
        for name, text in TOMLS.items():
            (root / f"{name}.toml").write_text(text)
        yield root, cache, hf, home


@pytest.mark.parametrize("argv, named", CASES, ids=[" ".join(argv)[:60] for argv, _ in CASES])
def test_a_plan_that_cannot_do_what_it_says_is_refused(ws, argv, named, capsys):
    for study_dir in ("study", "new"):  # into an existing study and a new folder: neither is touched
        assert_refused(launch.main, [*SMALL, *argv, "--study-dir", study_dir], named, ws, capsys)
        assert_refused(launch.main, [*[a for a in SMALL if a != "--dry-run"], *argv, "--study-dir", study_dir],
                       named, ws, capsys)


def test_the_budget_check_names_the_numbers(ws, capsys):
    assert launch.main([*SMALL, "--budgets", "1e3", "--study-dir", "new"]) == 2
    line = capsys.readouterr().err
    assert "trains 1 step(s) of 32x32 tokens" in line and "x the budget (a run may exceed it by 25%)" in line


def test_plans_that_meet_their_intent_still_plan(ws):
    """A budget several steps deep, merged sweeps of one name for two families, at_budget on a
    planned budget, and a preset's table for a family the study does not train (dropped)."""
    study = build_study({"families": "ar,mdm", "budgets": [1e12, 3e12], "seq_len": 32, "batch_size": 32,
                         "sweep": ["lr=1e-3,3e-3", "mdm:lr=3e-3,1e-2", "at_budget=1e12"]})
    lrs = {(c.spec.family, dict(c.spec.tracking)["budget_flops"]): set() for c in study.cells}
    for cell in study.cells:
        lrs[cell.spec.family, dict(cell.spec.tracking)["budget_flops"]].add(cell.spec.lr)
    assert lrs[("ar", 1e12)] == {1e-3, 3e-3} and lrs[("mdm", 1e12)] == {3e-3, 1e-2}
    assert len(lrs[("ar", 3e12)]) == len(lrs[("mdm", 3e12)]) == 1
    narrowed = build_study({"preset": "frontier", "budgets": [1e12], "families": "ar"})
    assert {c.spec.family for c in narrowed.cells} == {"ar"}
