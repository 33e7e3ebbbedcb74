"""jobs.train.ds_config: a DeepSpeed overlay passes resource keys on, refuses result-changing and
unknown keys by name, and merges into the base config table by table. No DeepSpeed needed."""
from __future__ import annotations

import pytest

from jobs.train.ds_config import check_overlay, merged, overlay_json, read_overlay, with_overlay


def test_a_resource_overlay_is_canonical_json_from_a_table_a_file_or_json_text(tmp_path):
    overlay = {"zero_optimization": {"overlap_comm": True}, "steps_per_print": 10}
    text = '{"steps_per_print":10,"zero_optimization":{"overlap_comm":true}}'
    toml = tmp_path / "ds.toml"
    toml.write_text("steps_per_print = 10\n[zero_optimization]\noverlap_comm = true\n")
    assert overlay_json(overlay) == overlay_json(str(toml)) == overlay_json(text) == text
    assert read_overlay(text) == overlay


@pytest.mark.parametrize("overlay, message", [
    ({"zero_optimization": {"stage": 3}}, "deepspeed_config: key 'zero_optimization.stage' changes results and is "
                                          "set by aoscale; fix: drop it and use [resources] zero_stage"),
    ({"bf16": {"enabled": True}}, "deepspeed_config: key 'bf16' changes results and is set by aoscale; "
                                  "fix: drop it and use [run] precision"),
    ({"zero_optimization": {"memory_efficient_linear": True}},
     "deepspeed_config: key 'zero_optimization.memory_efficient_linear' changes results and is set by aoscale"),
    ({"activation_checkpointing": {}}, "deepspeed_config: key 'activation_checkpointing' is not a resource "
                                       "setting aoscale passes on; allowed: zero_optimization,"),
])
def test_result_changing_and_unknown_keys_are_refused_by_name(overlay, message):
    with pytest.raises(ValueError) as error:
        check_overlay(overlay)
    assert str(error.value).startswith(message)


def test_a_broken_or_unreadable_file_is_named(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text("{nope")
    with pytest.raises(ValueError, match=r"^deepspeed_config: .*ds\.json is not valid json \("):
        read_overlay(bad)
    with pytest.raises(ValueError, match=r"^deepspeed_config: cannot read .*missing\.json"):
        read_overlay(tmp_path / "missing.json")
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(ValueError, match="must be a table of settings, got list"):
        read_overlay(listed)


def test_an_overlay_implies_deepspeed_and_refuses_the_torch_engine():
    assert with_overlay({"nodes": 2}) == {"nodes": 2}
    out = with_overlay({"deepspeed_config": {"steps_per_print": 5}})
    assert out == {"engine": "deepspeed", "deepspeed_config": '{"steps_per_print":5}'}
    with pytest.raises(ValueError, match="but engine is 'torch'"):
        with_overlay({"engine": "torch", "deepspeed_config": {"steps_per_print": 5}})


def test_merging_keeps_base_tables_and_the_overlay_wins_on_a_leaf():
    base = {"zero_optimization": {"stage": 2, "overlap_comm": False}, "train_batch_size": 16}
    out = merged(base, {"zero_optimization": {"overlap_comm": True}, "steps_per_print": 1})
    assert out == {"zero_optimization": {"stage": 2, "overlap_comm": True}, "train_batch_size": 16,
                   "steps_per_print": 1}
    assert base["zero_optimization"]["overlap_comm"] is False  # the base is not changed
