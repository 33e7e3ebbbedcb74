"""Checkpoint directories (atomic commit, checksums, fallback, pruning), RNG state round trips
through weights_only loading, and the run-directory files (status, metrics truncation)."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from jobs.train import checkpoint as ckpt
from jobs.run.files import (append_metrics, read_metrics, read_status, truncate_metrics,
                           write_status)
from jobs.run.rng import rng_state, set_rng_state


def make_checkpoint(run_dir, step, keep=3, payload=None):
    folder = ckpt.prepare(run_dir, step)
    ckpt.save_file({"step": step, "w": torch.full((4,), float(step))}, folder / ckpt.MODEL_FILE)
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.bin").write_bytes(payload or bytes([step]) * 100)
    return ckpt.commit(run_dir, step, "torch", keep)


def test_commit_writes_checksums_and_prunes(tmp_path):
    for step in (2, 4, 6, 8):
        make_checkpoint(tmp_path, step, keep=3)
    names = [p.name for p in ckpt.checkpoint_dirs(tmp_path)]
    assert names == ["step_00000004", "step_00000006", "step_00000008"]
    meta = ckpt.read_meta(ckpt.step_dir(tmp_path, 8))
    assert meta["step"] == 8 and meta["engine"] == "torch"
    assert sorted(meta["files"]) == ["model.pt", "sub/extra.bin"]
    assert meta["files"]["sub/extra.bin"] == ckpt.sha256_file(ckpt.step_dir(tmp_path, 8) / "sub/extra.bin")
    assert not list((tmp_path / "ckpt").glob(".tmp_*"))


def test_half_written_staging_dir_is_ignored_and_cleared(tmp_path):
    make_checkpoint(tmp_path, 3)
    stale = ckpt.temp_dir(tmp_path, 6)
    stale.mkdir()
    (stale / "model.pt").write_bytes(b"partial")
    assert [p.name for p in ckpt.checkpoint_dirs(tmp_path)] == ["step_00000003"]
    assert ckpt.latest_valid(tmp_path) == ckpt.step_dir(tmp_path, 3)
    assert list(ckpt.prepare(tmp_path, 6).iterdir()) == []


@pytest.mark.parametrize("damage", ["flip", "delete", "meta"])
def test_corruption_is_detected_and_previous_used(tmp_path, damage):
    make_checkpoint(tmp_path, 1)
    latest = make_checkpoint(tmp_path, 2)
    target = latest / "sub" / "extra.bin"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[10] ^= 1
        target.write_bytes(bytes(data))
    elif damage == "delete":
        target.unlink()
    else:
        (latest / ckpt.META_FILE).write_text("{")
    assert ckpt.verify(latest) is not None
    warnings = []
    assert ckpt.latest_valid(tmp_path, warnings.append) == ckpt.step_dir(tmp_path, 1)
    assert len(warnings) == 1 and "step_00000002 is corrupt" in warnings[0]


def test_no_valid_checkpoint_means_none(tmp_path):
    assert ckpt.latest_valid(tmp_path) is None
    latest = make_checkpoint(tmp_path, 1)
    (latest / ckpt.MODEL_FILE).write_bytes(b"")
    assert ckpt.latest_valid(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        ckpt.load_model(tmp_path)  # also no spec.json


def test_rng_state_round_trips_through_weights_only_load(tmp_path):
    generator = torch.Generator().manual_seed(3)
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    torch.randn(5), np.random.rand(3), random.random(), torch.rand(2, generator=generator)
    ckpt.save_file({"rng": rng_state(generator)}, tmp_path / "rng.pt")

    def draw():
        return (torch.randn(5), np.random.rand(3), random.random(), torch.rand(2, generator=generator))

    expected = draw()
    draw()  # move every stream on
    set_rng_state(ckpt.load_file(tmp_path / "rng.pt")["rng"], generator)
    got = draw()
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    assert got[2] == expected[2] and torch.equal(got[3], expected[3])


def test_truncate_metrics_drops_later_rows_keeps_events_and_skips_torn_line(tmp_path):
    append_metrics(tmp_path, [{"kind": "start", "step": 0, "from_step": 0}])
    append_metrics(tmp_path, [{"kind": "train", "step": s, "loss": 1.0 / s} for s in range(1, 7)])
    append_metrics(tmp_path, [{"kind": "val", "step": 4, "val_loss": 0.5}])
    with open(tmp_path / "metrics.ndjson", "a") as handle:
        handle.write('{"kind": "train", "st')  # killed mid-write
    assert truncate_metrics(tmp_path, 4) == 2
    rows = read_metrics(tmp_path)
    assert [(r["kind"], r["step"]) for r in rows] == [("start", 0)] + [("train", s) for s in range(1, 5)] + [("val", 4)]
    assert json.loads((tmp_path / "metrics.ndjson").read_text().splitlines()[-1])["kind"] == "val"


def test_nonfinite_values_stay_parseable(tmp_path):
    append_metrics(tmp_path, [{"kind": "train", "step": 1, "loss": float("nan"), "grad_norm": float("inf")}])
    row = read_metrics(tmp_path, "train")[0]
    assert row["loss"] == "nan" and row["grad_norm"] == "inf"


def test_status_updates_and_reason_lifecycle(tmp_path):
    assert read_status(tmp_path)["state"] == "pending"
    write_status(tmp_path, "failed", step=3, reason="loss is nan at step 3")
    assert read_status(tmp_path)["reason"] == "loss is nan at step 3"
    write_status(tmp_path, "running", step=4)
    status = read_status(tmp_path)
    assert status["state"] == "running" and status["step"] == 4 and "reason" not in status
    assert "job_id" in status and "updated_at" in status
    with pytest.raises(ValueError, match="state"):
        write_status(tmp_path, "exploded")
