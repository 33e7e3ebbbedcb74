"""Study axes (scaling.study.sweep): swept run settings, isoFLOP plans and the data axis."""
from __future__ import annotations

import math

import pytest

from jobs.eval.records import run_context
from models.ladder import core_params, get_shape
from scaling import launch
from scaling.plan.dry_run import plan_rows
from scaling.study.study_spec import build_study, load_toml
from scaling.study.sweep import grid_sizes

BASE = {"families": "ar,mdm", "sizes": "0.1M", "seeds": 1, "seq_len": 32, "batch_size": 32}


def _by(study, *keys):
    return sorted(tuple(getattr(c.spec, k) for k in keys) for c in study.cells)


def test_each_swept_value_is_its_own_run_and_toml_equals_the_flag(tmp_path):
    flag = build_study({**BASE, "sweep": ["lr=1e-3,3e-3,1e-2"]})
    (tmp_path / "s.toml").write_text('[sweep]\nlr = [1e-2, 1e-3, 3e-3]\n')
    toml = build_study(BASE, load_toml(tmp_path / "s.toml"))
    assert sorted(flag.run_ids) == sorted(toml.run_ids) and len(set(flag.run_ids)) == 6
    assert _by(flag, "family", "lr") == sorted((f, lr) for f in ("ar", "mdm") for lr in (1e-3, 3e-3, 1e-2))
    assert all(dict(c.spec.tracking)["sweep_lr"] == c.spec.lr for c in flag.cells)
    plain = build_study(BASE)
    same = {c.spec.family: c.run_id for c in flag.cells if c.spec.lr == plain.cells[0].spec.lr}
    assert sorted(same.values()) == sorted(plain.run_ids)  # the study's own value keeps its id


def test_a_family_sweep_replaces_the_study_wide_one():
    study = build_study({**BASE, "sweep": ["lr=1e-3,3e-3", "mdm:lr=3e-3,1e-2,3e-2", "beta2=0.95,0.99"]})
    lrs = {f: sorted({c.spec.lr for c in study.cells if c.spec.family == f}) for f in ("ar", "mdm")}
    assert lrs == {"ar": [1e-3, 3e-3], "mdm": [3e-3, 1e-2, 3e-2]}
    assert {c.spec.beta2 for c in study.cells} == {0.95, 0.99} and len(study.cells) == 2 * 2 + 3 * 2


def test_a_batch_sweep_keeps_the_tokens_and_records_carry_sweep_columns():
    study = build_study({**BASE, "families": "ar", "tokens": 65536, "sweep": ["batch_size=16,64"]})
    assert sorted((c.spec.batch_size, c.spec.steps) for c in study.cells) == [(16, 128), (64, 32)]
    spec = study.cells[0].spec
    ctx = run_context(spec, {"core": 1, "family_non_embedding": 1}, 10, spec.steps, "raw")
    assert ctx["sweep_batch_size"] == spec.batch_size and ctx["budget_flops"] is None


def test_budgets_plan_isoflop_profiles_of_each_familys_own_flops():
    study = build_study({**BASE, "families": "ar,aogpt", "budgets": "1e12,1e13", "sizes": None})
    rows = plan_rows(study)
    for family in ("ar", "aogpt"):
        for budget in (1e12, 1e13):
            mine = [r for r in rows if r.family == family and f"C={budget:.0e}" in r.axes]
            assert len({r.size for r in mine}) == 5
            # tokens = budget / the family's FLOPs per token, rounded up to whole steps of 1,024
            assert all(budget <= r.flops <= budget * (1 + 2 * 1024 / r.tokens) for r in mine)
    cell = next(c for c in study.cells if c.spec.family == "aogpt")
    ctx = run_context(cell.spec, {"core": 1, "family_non_embedding": 1}, 1.0, 1, "raw")
    assert ctx["budget_flops"] == 1e12 and ctx["plan_tokens"] >= 1


def test_a_budget_plans_aogpt_on_its_executed_flops_at_each_swept_batch():
    """AO-GPT's adaLN table costs once per forward pass, so its FLOPs per token depend on the pass:
    each swept batch plans its own tokens (AR's do not move) and spends the budget as executed."""
    from models import build_model  # noqa: PLC0415

    study = build_study({**BASE, "families": "ar,aogpt", "budgets": "1e12", "sizes": None,
                         "sweep": ["batch_size=4,32"]})
    tokens = {}
    for cell in study.cells:
        spec = cell.spec
        tokens.setdefault((spec.family, spec.size), {})[spec.batch_size] = dict(spec.tracking)["plan_tokens"]
        if spec.family == "aogpt":
            model = build_model("aogpt", spec.size, vocab_size=257, seq_len=spec.seq_len, **spec.options)
            per_token = model.flops_per_token(spec.batch_size)
            assert dict(spec.tracking)["plan_tokens"] == int(1e12 / per_token)
            assert 1e12 <= per_token * spec.tokens <= 1e12 + per_token * spec.batch_size * spec.seq_len
    assert all(t[4] == t[32] for (family, _), t in tokens.items() if family == "ar")
    assert all(t[4] < t[32] for (family, _), t in tokens.items() if family == "aogpt")


def test_the_grid_is_logarithmic_around_the_optimum_and_seeds_gather_there():
    sizes = grid_sizes(3e5, 5, 2.0)
    params = [core_params(get_shape(s)) for s in sizes]
    ratios = [b / a for a, b in zip(params, params[1:])]
    assert len(sizes) == 5 and all(1.4 < r < 2.9 for r in ratios)
    assert math.isclose(math.log(params[2]), math.log(3e5), abs_tol=math.log(1.3))
    study = build_study({**BASE, "families": "ar", "budgets": "1e12", "sizes": None, "optimum_seeds": 2,
                         "optimum_span": 3})
    seeds = {c.spec.size: c.spec.seed + 1 for c in study.cells}
    by_size = sorted(seeds, key=lambda s: core_params(get_shape(s)))
    assert [seeds[s] for s in by_size] == [1, 2, 2, 2, 1]


def test_sweep_at_one_budget_only():
    study = build_study({**BASE, "families": "ar", "budgets": "1e12,1e13", "sizes": None,
                         "sweep": {"lr": [1e-3, 3e-3, 1e-2], "at_budget": 1e12}})
    per_budget = {b: len([c for c in study.cells if dict(c.spec.tracking)["budget_flops"] == b]) for b in (1e12, 1e13)}
    assert per_budget == {1e12: 15, 1e13: 5}


def test_tokens_per_param_list_is_the_data_axis():
    study = build_study({**BASE, "families": "ar", "tokens_per_param": "4,8,16"})
    params = core_params(get_shape("0.1M"))
    plan = sorted(dict(c.spec.tracking)["plan_tokens"] for c in study.cells)
    assert plan == [round(r * params) for r in (4, 8, 16)]
    assert all(c.spec.tokens >= dict(c.spec.tracking)["plan_tokens"] for c in study.cells)


@pytest.mark.parametrize("argv, field", [
    (["--sweep", "momentum=1,2"], "sweep"),
    (["--sweep", "lr=0.1,abc"], "sweep"),
    (["--sweep", "xyz:lr=0.1"], "sweep"),
    (["--budgets", "1e12,-3"], "budgets"),
    (["--tokens-per-param", "4,x"], "argument --tokens-per-param"),
])
def test_bad_axes_exit_2_in_one_line(argv, field, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = launch.main(["--families", "ar", "--sizes", "0.1M", "--dry-run", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"launch: {field}"), err
    assert list(tmp_path.iterdir()) == []


def test_wsd_branches_follow_their_trunk_and_cost_their_decay_only():
    study = build_study({**BASE, "families": "ar", "tokens": 32 * 32 * 100, "run": {"schedule": "wsd"},
                         "branches": [0.25, 0.5]})
    trunk, *branches = study.cells
    assert trunk.spec.snapshot_steps == "25,50" and [b.spec.branch_from for b in branches] == [trunk.run_id] * 2
    assert [(b.spec.branch_step, b.spec.steps) for b in branches] == [(25, 30), (50, 60)]
    rows = plan_rows(study)
    per_token = rows[0].flops / trunk.spec.tokens
    assert [r.flops / per_token for r in rows[1:]] == [5 * 32 * 32, 10 * 32 * 32]
    plain = build_study({**BASE, "families": "ar", "tokens": 32 * 32 * 100, "run": {"schedule": "wsd"}})
    assert trunk.run_id == plain.cells[0].run_id  # a trunk is the run it would be without branches


def test_a_step_cap_that_merges_planned_runs_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """Neighbouring isoFLOP profiles share a shape; capped at 2 steps their runs are one run."""
    monkeypatch.chdir(tmp_path)
    code = launch.main(["--preset", "frontier", "--max-steps", "2", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("launch: max_steps: 2 caps two planned runs into one, "), err
    assert "raise --max-steps" in err[0] and list(tmp_path.iterdir()) == []
    assert launch.main(["--preset", "frontier", "--dry-run"]) == 0  # uncapped, every planned run is its own


def test_two_identical_arms_are_refused_naming_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "twice.toml"
    spec.write_text('sizes = ["0.1M"]\nseeds = 1\n[[arms]]\nfamily = "ar"\n[[arms]]\nfamily = "ar"\n')
    code = launch.main(["--spec", str(spec), "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("launch: arms: two arms describe the same runs (ar base 0.1M s0 ("), err


def test_widening_a_sweep_in_place_keeps_the_trained_runs_and_nothing_else_does(tmp_path, capsys):
    """The fix an edge warning asks for ("widen the sweep") extends the study in its directory:
    same name, every old run kept, only the new values added. Dropping a value, or changing any
    other setting beside the wider sweep, is still a different study."""
    from scaling.run import study_ledger
    from scaling.study.study_spec import StudyError
    common = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--study-dir", str(tmp_path / "s")]

    def check(*argv):
        return launch._check(launch.parser().parse_args([*common, *argv]))

    first, study_dir, _ = check("--sweep", "lr=1e-3,3e-3")
    study_ledger.prepare(study_dir, first)
    wide, _, _ = check("--sweep", "lr=1e-3,3e-3,1e-2")
    assert set(first.run_ids) < set(wide.run_ids) and len(wide.run_ids) == 3 and wide.name == first.name
    study_ledger.prepare(study_dir, wide, study_ledger.widens(study_dir, wide))
    assert study_ledger.read_study(study_dir)["hash"] == wide.study_hash
    for argv in (["--sweep", "lr=1e-3,1e-2"], ["--sweep", "lr=1e-3,3e-3,1e-2,3e-2", "--seq-len", "64"]):
        with pytest.raises(StudyError, match="holds a different study"):
            check(*argv)


def test_a_family_table_sweeps_only_its_family_and_a_narrowed_preset_drops_it():
    """The frontier preset sweeps MDLM's lr one value wider: narrowed to AR and AO-GPT it plans
    their 4 values and no MDLM; a table for a family that does not exist is refused."""
    from scaling.study.presets import FRONTIER_LRS, FRONTIER_MDM_LRS
    full = build_study({"preset": "frontier", "budgets": [1e12]})
    lrs = {f: {c.spec.lr for c in full.cells if c.spec.family == f} for f in ("ar", "aogpt", "mdm")}
    assert lrs == {"ar": set(FRONTIER_LRS), "aogpt": set(FRONTIER_LRS), "mdm": set(FRONTIER_MDM_LRS)}
    narrow = build_study({"preset": "frontier", "budgets": [1e12], "families": "ar,aogpt"})
    assert {c.spec.family for c in narrow.cells} == {"ar", "aogpt"}
    assert set(narrow.run_ids) < set(full.run_ids)
    with pytest.raises(ValueError, match="'gpt5' is not a family of this study"):
        build_study({**BASE, "sweep": {"lr": [1e-3, 3e-3], "gpt5": {"lr": [1e-2, 3e-2]}}})
