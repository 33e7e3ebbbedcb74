"""A user's DeepSpeed config overlay: resource keys reach DeepSpeed, result keys are refused with
exit 2 naming the key, and run ids never change."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.run.files import read_metrics, read_status
from scaling import launch
from scaling.study.study_spec import build_study
from tests.jobs.executors.cluster_runs import train_here

REPO = Path(__file__).resolve().parents[3]
STUDY = {"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 6, "seq_len": 32, "batch_size": 4}
# Buckets change how gradients travel, not what they sum to; the breakdown makes DeepSpeed print
# per-step timings, which shows that DeepSpeed itself took the overlay.
OVERLAY = """wall_clock_breakdown = true
steps_per_print = 1

[zero_optimization]
reduce_bucket_size = 12345
allgather_bucket_size = 23456
"""
TOLERANCE = 1e-4  # fp32 on both engines (as tests/jobs/train/test_deepspeed.py)


@pytest.fixture()
def overlay_file(tmp_path) -> Path:
    path = tmp_path / "ds.toml"
    path.write_text(OVERLAY)
    return path


def test_the_overlay_keeps_run_ids_and_implies_the_deepspeed_engine(overlay_file):
    plain = build_study(STUDY)
    with_overlay = build_study({**STUDY, "resources": {"deepspeed_config": str(overlay_file)}})
    assert with_overlay.run_ids == plain.run_ids and with_overlay.name == plain.name
    spec = with_overlay.cells[0].spec
    assert spec.engine == "deepspeed"
    assert json.loads(spec.deepspeed_config)["zero_optimization"] == {"reduce_bucket_size": 12345,
                                                                      "allgather_bucket_size": 23456}
    inline = build_study({**STUDY, "resources": {"deepspeed_config": {"zero_optimization": {"overlap_comm": False}}}})
    assert json.loads(inline.cells[0].spec.deepspeed_config) == {"zero_optimization": {"overlap_comm": False}}


@pytest.mark.parametrize("text, key", [
    ('{"gradient_clipping": 0.5}', "gradient_clipping"),
    ('{"train_batch_size": 64}', "train_batch_size"),
    ('{"optimizer": {"type": "Adam"}}', "optimizer"),
    ('{"scheduler": {"type": "WarmupLR"}}', "scheduler"),
    ('{"bf16": {"enabled": true}}', "bf16"),
    ('{"zero_optimization": {"stage": 3}}', "zero_optimization.stage"),
    ('{"curriculum_learning": {"enabled": true}}', "curriculum_learning"),
])
def test_result_changing_keys_exit_2_naming_the_key_and_write_nothing(text, key, tmp_path, monkeypatch, capsys):
    (tmp_path / "ds.json").write_text(text)
    monkeypatch.chdir(tmp_path)
    argv = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--deepspeed-config", "ds.json"]
    assert launch.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"launch: deepspeed_config: key '{key}'"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.json"]


def test_an_overlay_beside_the_torch_engine_is_refused(overlay_file, capsys):
    argv = ["--families", "ar", "--sizes", "0.1M", "--engine", "torch", "--deepspeed-config", str(overlay_file)]
    assert launch.main([*argv, "--dry-run"]) == 2
    assert "deepspeed_config: applies to the DeepSpeed engine" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_deepspeed_run_takes_the_overlay_and_matches_the_torch_engine(overlay_file, tmp_path, cache_dir):
    spec = build_study({**STUDY, "resources": {"deepspeed_config": str(overlay_file), "log_every": 1}}).cells[0].spec
    spec_path, run_dir = tmp_path / "spec.json", tmp_path / "run"
    spec_path.write_text(spec.to_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir), "--spec", str(spec_path)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and read_status(run_dir)["state"] == "done", proc.stderr[-3000:]
    assert "time (ms) | fwd" in proc.stdout + proc.stderr  # DeepSpeed's own wall-clock breakdown
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["engine_config"]["zero_optimization"] == {"stage": 2, "reduce_bucket_size": 12345,
                                                              "allgather_bucket_size": 23456,
                                                              "memory_efficient_linear": False}
    assert manifest["engine_config"]["gradient_clipping"] == spec.grad_clip  # generated keys kept

    reference = tmp_path / "torch"
    train_here(reference, spec.replace(engine="torch", deepspeed_config=""))
    ds = {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}
    ref = {r["step"]: r["loss"] for r in read_metrics(reference, "train")}
    assert sorted(ds) == sorted(ref) == list(range(1, 7))
    assert all(abs(ds[s] - ref[s]) < TOLERANCE for s in ref), (ds, ref)
