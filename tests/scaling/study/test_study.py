"""Study specs: stable run ids, what enters them, presets, TOML layering and the run rules."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs.run.spec import RunSpec
from models.ladder import core_params, get_shape, train_flops_per_token
from jobs.run import recipes
from scaling.plan.dry_run import VOCAB_SIZES, gpu_hours, plan_rows
from scaling.study.presets import PRESETS, QUICKSTART_TOKENS
from scaling.study.study_spec import StudyError, build_study, load_toml

GOLDEN = Path(__file__).parents[1] / "golden" / "quickstart_run_ids.json"


def flags(**kw):
    return dict(kw)


def golden_doc() -> dict:
    study = build_study({})
    return {"name": study.name, "hash": study.study_hash,
            "runs": [{"run_id": c.run_id, "family": c.spec.family, "variant": c.spec.variant,
                      "size": c.spec.size, "seed": c.spec.seed, "steps": c.spec.steps} for c in study.cells]}


def test_quickstart_run_ids_match_golden_file():
    if os.environ.get("AOSCALE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(golden_doc(), indent=2) + "\n")
    assert golden_doc() == json.loads(GOLDEN.read_text())


def test_no_flags_is_the_quickstart_3_families_x_2_sizes_x_3_seeds():
    study = build_study({})
    assert study.name == "quickstart"
    cells = {(c.spec.family, c.spec.size, c.spec.seed) for c in study.cells}
    assert len(study.cells) == len(cells) == 18
    assert {c.spec.size for c in study.cells} == {"2/48/2", "0.1M"} and {c.spec.seed for c in study.cells} == {0, 1, 2}
    assert {c.spec.family for c in study.cells} == {"ar", "aogpt", "mdm"}
    assert {c.spec.tokenizer for c in study.cells} == {"bytes"}
    assert {c.spec.corpus for c in study.cells} == {"shakespeare"}
    assert {(c.spec.tokens, c.spec.seq_len, c.spec.eval_suite) for c in study.cells} == {(QUICKSTART_TOKENS, 32, "cpu")}
    aogpt = next(c.spec for c in study.cells if c.spec.family == "aogpt")
    assert aogpt.variant == "adaln+mix:0.1"
    assert len({(c.spec.ema, c.spec.options["norm"], c.spec.options["tie_head"]) for c in study.cells}) == 1


def test_same_flags_same_run_ids():
    a = build_study(flags(sizes="0.1M,0.3M", seeds=2, families="ar,mdm"))
    b = build_study(flags(sizes="0.1M,0.3M", seeds=2, families="ar,mdm"))
    assert a.run_ids == b.run_ids and a.study_hash == b.study_hash and a.name == b.name


@pytest.mark.parametrize("change", [{"lr": 1e-3}, {"seq_len": 64}, {"max_steps": 3}, {"tokens": 4096},
                                    {"batch_size": 8}, {"corpus": "other.txt"}])
def test_result_field_changes_every_run_id(change):
    base = build_study(flags(sizes="0.1M", seeds=1, families="ar"))
    changed = build_study(flags(sizes="0.1M", seeds=1, families="ar", **change))
    assert set(base.run_ids).isdisjoint(changed.run_ids)


def test_resource_fields_keep_run_ids():
    base = build_study(flags(sizes="0.1M", seeds=2, families="ar,aogpt"))
    moved = build_study(flags(sizes="0.1M", seeds=2, families="ar,aogpt", name="elsewhere",
                              resources={"engine": "deepspeed", "checkpoint_every": 5, "log_every": 1}))
    assert moved.run_ids == base.run_ids
    assert {c.spec.engine for c in moved.cells} == {"deepspeed"}
    spec = moved.cells[0].spec
    assert RunSpec.from_dict(json.loads(spec.to_json())) == spec


def test_toml_then_flags_override(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text('preset = "quickstart"\nseeds = 3\nsizes = ["0.1M"]\n[run]\nweight_decay = 0.05\n')
    from_file = build_study({}, load_toml(path))
    assert {c.spec.seed for c in from_file.cells} == {0, 1, 2}
    assert {c.spec.weight_decay for c in from_file.cells} == {0.05}
    overridden = build_study(flags(seeds=1), load_toml(path))
    assert {c.spec.seed for c in overridden.cells} == {0}
    assert overridden.name.startswith("quickstart-")


def test_toml_arms_table(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text('sizes = "0.1M"\nseeds = 1\n[[arms]]\nfamily = "aogpt"\nema = 0.99\n'
                    '[arms.options]\ntarget_pe = "input"\norder = "l2r"\n')
    study = build_study({}, load_toml(path))
    (cell,) = study.cells
    assert cell.spec.options == {"target_pe": "input", "order": "l2r", "cond_dim": 128, "norm": "layernorm",
                                 "qk_norm": False, "tie_head": True, "pos": "learned", "init": "gpt2"}  # defaults resolved
    assert cell.spec.ema == 0.99 and cell.spec.variant == "input+ema0.99+l2r"


@pytest.mark.parametrize("bad, field", [
    (flags(sizes="12X"), "size"), (flags(families="ar,gru"), "families"), (flags(seeds=0), "seeds"),
    (flags(preset="nope"), "preset"), (flags(tokenizer="sentencepiece"), "tokenizer"),
    (flags(seq_len=0), "seq_len"), (flags(run={"dropout": 0.1}), "run"),
    (flags(resources={"engine": "jax"}), "engine"),
])
def test_bad_settings_name_the_field(bad, field):
    with pytest.raises(StudyError) as info:
        build_study(bad)
    message = str(info.value)
    assert message.startswith(field) and "\n" not in message


def test_malformed_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("seeds = = 3\n")
    with pytest.raises(StudyError, match="^spec: .*not valid TOML"):
        load_toml(path)


def test_families_filter_a_preset_and_add_defaults():
    study = build_study(flags(preset="quickstart", families="mdm"))
    assert {c.spec.family for c in study.cells} == {"mdm"}
    study = build_study(flags(preset="pe", families="aogpt,ar"))
    labels = {(c.spec.family, c.spec.variant) for c in study.cells}
    assert labels == {("aogpt", v) for v in ("adaln+mix:0.1", "input+mix:0.1", "layer_shared+mix:0.1",
                                              "layer_distinct+mix:0.1")} | {("ar", "base")}


def test_factorial_is_a_full_2x2x2_design_with_factor_levels():
    study = build_study(flags(preset="factorial", sizes="0.1M", seeds=1))
    levels = [dict(c.factors) for c in study.cells]
    combos = {(lv["pe"], lv["ema"], lv["l2r_mix"]) for lv in levels}
    assert len(study.cells) == len(combos) == 8
    for cell in study.cells:
        tracking = dict(cell.spec.tracking)
        assert tracking["factor_pe"] == cell.spec.options["target_pe"]
        assert tracking["factor_ema"] == cell.spec.ema
        assert cell.spec.options["order"] == f"mix:{tracking['factor_l2r_mix']}"
    doc = study.to_dict()
    assert doc["runs"][study.cells[0].run_id]["factors"] == dict(study.cells[0].factors)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_builds_and_its_options_are_valid_for_the_models(preset):
    import models
    study = build_study(flags(preset=preset, sizes="0.1M", seeds=1))
    for cell in study.cells:
        model = models.build_model(cell.spec.family, "0.1M", vocab_size=257, seq_len=16, **cell.spec.options)
        assert model.family == cell.spec.family


def test_paper_preset_is_the_ao_gpt_recipe():
    study = build_study(flags(preset="paper"))
    specs = [c.spec for c in study.cells if c.spec.role == "compared"]
    assert {s.size for s in specs} == {"125M", "350M", "760M"} and {s.seed for s in specs} == {0, 1, 2}
    assert {(s.tokenizer, s.seq_len, s.batch_size * s.seq_len) for s in specs} == {("gpt2", 1024, 2**20)}
    assert {s.size: s.lr for s in specs} == {"125M": 6e-4, "350M": 3e-4, "760M": 2.5e-4}
    assert {(s.weight_decay, s.beta2, s.min_lr_ratio) for s in specs} == {(0.05, 0.95, 0.1)}
    aogpt = next(s for s in specs if s.family == "aogpt")
    assert aogpt.options == {"norm": "rmsnorm", "qk_norm": True, "tie_head": False, "cond_dim": 128,
                             "target_pe": "adaln", "order": "mix:0.1", "pos": "learned",
                             "init": "official"}  # learned positions and the official init, as the paper
    for spec in specs:  # every family on the official network with EMA 0.9999
        assert (spec.options["norm"], spec.options["qk_norm"], spec.options["tie_head"], spec.ema) == \
            ("rmsnorm", True, False, 0.9999)
    (judge,) = [c.spec for c in study.cells if c.spec.role == "judge"]
    assert (judge.family, judge.size, judge.seed, judge.variant) == ("ar", "760M", 3, "judge")
    assert study.cells[0].spec is judge  # trained first
    assert {s.judge for s in specs} == {judge.run_id}


def test_gpt3_sizes_without_preset_use_the_paper_base():
    study = build_study(flags(sizes="125M", seeds=1, families="ar"))
    (spec,) = [c.spec for c in study.cells]
    assert (spec.tokenizer, spec.seq_len, spec.lr) == ("gpt2", 1024, 6e-4)


def test_run_rules():
    assert recipes.rule_for("1.3B") == recipes.Rule(2**20, 2e-4, "GPT-3 Table 2.1")
    assert recipes.rule_for("13B").batch_tokens == 2**21
    assert recipes.rule_for("10M").lr == pytest.approx(6e-4 * 768 / 320)
    assert recipes.rule_for("0.1M").lr == recipes.LR_CAP
    budget = recipes.Budget(seq_len=128)
    plan = recipes.schedule("1M", budget)
    params = core_params(get_shape("1M"))
    assert plan.params == params
    assert plan.steps == -(-round(20 * params) // 2048) and plan.tokens == plan.steps * 2048
    assert plan.warmup_steps == int(0.1 * plan.steps)
    capped = recipes.schedule("1M", recipes.Budget(seq_len=128, max_tokens=4096, max_steps=1))
    assert (capped.steps, capped.warmup_steps) == (1, 1)


def test_plan_rows_use_the_analytic_flops():
    study = build_study(flags(sizes="0.3M", seeds=1, families="ar"))
    (row,) = plan_rows(study)
    spec = study.cells[0].spec
    shape = get_shape("0.3M")
    assert row.flops == train_flops_per_token(shape, 128, VOCAB_SIZES["bytes"]) * spec.tokens
    assert gpu_hours(989e12 * 0.4 * 3600) == pytest.approx(1.0)


def test_plan_rows_carry_each_familys_own_flops():
    """AO-GPT's adaLN modulation is charged as executed (once per position and forward pass of the
    run's micro-batch), so its plan FLOPs exceed AR's at the same tokens."""
    from models import build_model
    study = build_study(flags(sizes="0.3M", seeds=1, families="ar,aogpt"))
    rows = {row.family: row for row in plan_rows(study)}
    spec = next(c.spec for c in study.cells if c.spec.family == "aogpt")
    model = build_model("aogpt", "0.3M", vocab_size=VOCAB_SIZES["bytes"], seq_len=spec.seq_len, **spec.options)
    assert rows["aogpt"].flops == model.flops_per_token(spec.micro_batch) * spec.tokens > rows["ar"].flops
    assert rows["aogpt"].flops < model.flops_per_token() * spec.tokens  # not per token: the table is shared


def test_vocab_sizes_match_the_tokenizers():
    from jobs.data.corpus import get_encoding
    for name, size in VOCAB_SIZES.items():
        assert get_encoding(name).n_vocab == size


def test_a_relative_local_corpus_reaches_the_runs_as_an_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_text("some text\n" * 100)
    monkeypatch.chdir(tmp_path)  # workers train in other folders: a relative path would break there
    study = build_study(flags(sizes=["0.1M"], families=["ar"], seeds=1, corpus="corpus.txt"))
    assert {cell.spec.corpus for cell in study.cells} == {str(tmp_path / "corpus.txt")}
    named = build_study(flags(sizes=["0.1M"], families=["ar"], seeds=1, corpus="org/dataset"))
    assert {cell.spec.corpus for cell in named.cells} == {"org/dataset"}  # a dataset name stays a name


# ---- one network and one EMA per study (docs/DESIGN.md §7) -----------------------------------------------
def _overrides(cell) -> set[str]:
    """What an arm overrides explicitly, read from its label (`net:<name>`, `ema<rate>`)."""
    parts = cell.spec.variant.split("+")
    return ({"network"} if any(p.startswith("net:") for p in parts) else set()) | \
        ({"ema"} if any(p.startswith("ema") for p in parts) else set())


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_shares_network_and_ema_unless_an_arm_overrides_explicitly(preset):
    from scaling.study.arms import NETWORK_KEYS

    study = build_study(flags(preset=preset, sizes="0.1M,0.3M", seeds=2))
    networks = {tuple(c.spec.options[k] for k in NETWORK_KEYS) for c in study.cells if "network" not in _overrides(c)}
    emas = {c.spec.ema for c in study.cells if "ema" not in _overrides(c)}
    assert len(networks) <= 1 and len(emas) <= 1, (preset, networks, emas)
    for cell in study.cells:  # an override is a labelled factor of the design
        for what in _overrides(cell):
            assert what in dict(cell.factors), (preset, cell.spec.variant)


def test_the_network_preset_measures_the_architecture_apart():
    from scaling.study.arms import NETWORKS

    study = build_study(flags(preset="network", sizes="0.1M", seeds=1))
    seen = {(c.spec.family, dict(c.factors)["network"]): c.spec.options for c in study.cells}
    assert set(seen) == {(f, n) for f in ("ar", "aogpt") for n in NETWORKS}
    for (_, name), options in seen.items():
        assert {k: options[k] for k in NETWORKS[name]} == NETWORKS[name]


def test_a_study_network_and_ema_apply_to_every_family():
    study = build_study(flags(sizes="0.1M", seeds=1, families="ar,aogpt,sigma_gpt,mdm", network="official", ema=0.99))
    assert {(c.spec.options["norm"], c.spec.options["qk_norm"], c.spec.options["tie_head"], c.spec.ema)
            for c in study.cells} == {("rmsnorm", True, False, 0.99)}
    with pytest.raises(StudyError, match="^network: unknown network"):
        build_study(flags(sizes="0.1M", network="resnet"))
    with pytest.raises(StudyError, match=r"^network: pos = 'alibi' is invalid; expected one of \['learned', 'rope'\]"):
        build_study(flags(sizes="0.1M", network="gpt2,pos=alibi"))
    with pytest.raises(StudyError, match="^ema: "):
        build_study(flags(sizes="0.1M", ema=1.5))


@pytest.mark.parametrize("network", ["gpt2,pos=rope", "pos=rope", {"pos": "rope"}, "official,pos=rope"])
def test_rotary_positions_are_a_network_setting_every_family_shares(network):
    from scaling.study.arms import network_name

    base = "official" if str(network).startswith("official") else "gpt2"
    families = "ar,aogpt,sigma_gpt,mdm"
    study = build_study(flags(sizes="0.1M", seeds=1, families=families, network=network))
    default = build_study(flags(sizes="0.1M", seeds=1, families=families, network=base))
    assert {c.spec.options["pos"] for c in study.cells} == {"rope"}
    assert {c.spec.options["pos"] for c in default.cells} == {"learned"}
    assert {network_name(c.spec.options) for c in study.cells} == {f"{base},pos=rope"}  # the dry-run's column
    assert {c.spec.variant for c in study.cells} == {c.spec.variant for c in default.cells}  # a study setting
    assert not set(study.run_ids) & set(default.run_ids)


def test_learned_positions_leave_run_ids_as_they_were_before_the_option():
    spec = build_study(flags(sizes="0.1M", seeds=1, families="aogpt", network="gpt2")).cells[0].spec
    assert spec.options["pos"] == "learned"
    before = spec.replace(model_options={k: v for k, v in spec.options.items() if k != "pos"})
    assert spec.run_id == before.run_id
    assert spec.replace(model_options={**spec.options, "pos": "rope"}).run_id != spec.run_id
    options = {"norm": "layernorm", "qk_norm": False, "tie_head": True, "cond_dim": 128, "target_pe": "adaln",
               "order": "mix:0.1", "pos": "learned"}
    old = RunSpec("aogpt", "0.1M", steps=600, lr=3e-3, warmup_steps=60, model_options=options, seq_len=32, batch_size=32)
    assert old.run_id == "c2a3c1083a35"  # this spec's id before `pos` existed


def test_the_pos_preset_crosses_each_family_with_both_encodings():
    study = build_study(flags(preset="pos", sizes="0.1M", seeds=1))
    seen = {(c.spec.family, dict(c.factors)["pos"]): c.spec.options["pos"] for c in study.cells}
    assert seen == {(f, p): p for f in ("ar", "aogpt", "mdm") for p in ("learned", "rope")}


def test_a_changed_option_default_changes_the_run_id_and_a_resource_does_not(monkeypatch):
    from models.families.aogpt import AOGPT

    base = build_study(flags(sizes="0.1M", seeds=1, families="ar,aogpt"))
    ids = {c.spec.family: c.run_id for c in base.cells}
    moved = build_study(flags(sizes="0.1M", seeds=1, families="ar,aogpt",
                              resources={"engine": "deepspeed", "checkpoint_every": 7, "keep_checkpoints": 5}))
    assert {c.spec.family: c.run_id for c in moved.cells} == ids
    default, check = AOGPT.OPTIONS["cond_dim"]
    monkeypatch.setitem(AOGPT.OPTIONS, "cond_dim", (default * 2, check))
    changed = {c.spec.family: c.run_id for c in build_study(flags(sizes="0.1M", seeds=1, families="ar,aogpt")).cells}
    assert changed["aogpt"] != ids["aogpt"] and changed["ar"] == ids["ar"]


def test_a_study_dir_of_the_previous_format_is_refused_with_one_line(tmp_path):
    from scaling.run import study_ledger

    study = build_study(flags(sizes="0.1M", seeds=1, families="ar"))
    (tmp_path / "study.json").write_text(json.dumps({"name": "old", "hash": study.study_hash, "order": []}))
    with pytest.raises(StudyError, match="^study-dir: .*another aoscale version") as info:
        study_ledger.check_study_dir(tmp_path, study)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("preset", ["quickstart", "laptop"])
def test_cpu_compile_auto_keeps_the_cpu_presets_eager_by_the_measured_table(preset):
    """jobs/run/cpu_compile.py's table: compile pays only past ~8,000 steps at 0.1M-0.3M."""
    from jobs.run.cpu_compile import MEASURED, compile_pays

    specs = [c.spec for c in build_study({"preset": preset}).cells]
    measured = {(row["size"], row["family"]) for row in MEASURED}
    assert {(s.size, s.family) for s in specs if s.size in ("0.1M", "0.3M")} <= measured
    assert not any(compile_pays(s) for s in specs)
    ar = next(s for s in specs if s.family == "ar" and s.size == "0.1M")
    assert compile_pays(ar.replace(steps=9_000)) and not compile_pays(ar.replace(steps=8_000))  # break-even 8,130
