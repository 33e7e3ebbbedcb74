"""The warmup-stable-decay schedule: its shape, ids unchanged under cosine, exact resume."""
from __future__ import annotations

import pytest

from jobs.train.loop import lr_at, train
from tests.jobs.train.test_train import tiny, train_losses

pytestmark = pytest.mark.usefixtures("one_thread_cache")


def test_wsd_holds_the_peak_then_decays_linearly_to_the_floor():
    spec = tiny(steps=100, warmup_steps=10, lr=1.0, schedule="wsd", decay_fraction=0.2)
    assert [lr_at(s, spec) for s in (0, 9)] == pytest.approx([0.1, 1.0])
    assert all(lr_at(s, spec) == 1.0 for s in range(10, 80))
    assert lr_at(80, spec) == pytest.approx(1.0 - 0.9 / 20) and lr_at(99, spec) == pytest.approx(0.1)
    lrs = [lr_at(s, spec) for s in range(80, 100)]
    assert all(b < a for a, b in zip(lrs, lrs[1:]))


def test_cosine_keeps_the_run_id_and_wsd_gets_its_own():
    plain = tiny()
    assert tiny(schedule="cosine", decay_fraction=0.2).run_id == plain.run_id
    assert len({plain.run_id, tiny(schedule="wsd").run_id, tiny(schedule="wsd", decay_fraction=0.1).run_id}) == 3


@pytest.mark.slow
def test_a_killed_wsd_run_resumes_bit_identically(tmp_path):
    spec = tiny(schedule="wsd", decay_fraction=0.5)
    assert train(tmp_path / "whole", spec) == "done"
    assert train(tmp_path / "cut", spec, max_steps_this_call=7) == "preempted"
    assert train(tmp_path / "cut", spec) == "done"
    assert train_losses(tmp_path / "cut") == train_losses(tmp_path / "whole")


def _trunk_and_branch():
    trunk = tiny(schedule="wsd", decay_fraction=0.25, snapshot_steps="6")
    branch = trunk.replace(branch_from=trunk.run_id, branch_step=6, steps=9, snapshot_steps="")
    return trunk, branch


def test_a_branch_id_derives_from_its_trunk_and_branch_point():
    trunk, branch = _trunk_and_branch()
    assert trunk.run_id == tiny(schedule="wsd", decay_fraction=0.25).run_id  # snapshots are not hashed
    assert branch.run_id == _trunk_and_branch()[1].run_id != trunk.run_id
    assert branch.replace(branch_step=5).run_id != branch.run_id
    assert branch.replace(branch_from=tiny(schedule="wsd", seed=1).run_id).run_id != branch.run_id
    assert lr_at(5, branch) == branch.lr and lr_at(8, branch) == pytest.approx(branch.lr * branch.min_lr_ratio)


@pytest.mark.slow
def test_a_branch_starts_from_the_trunk_and_a_killed_branch_resumes_bit_identically(tmp_path):
    trunk, branch = _trunk_and_branch()
    assert train(tmp_path / trunk.run_id, trunk) == "done"
    assert train(tmp_path / branch.run_id, branch) == "done"
    trunk_losses, branch_losses = train_losses(tmp_path / trunk.run_id), train_losses(tmp_path / branch.run_id)
    assert sorted(branch_losses) == [7, 8, 9] and branch_losses[7] == trunk_losses[7]  # the trunk's state at step 6
    again = tmp_path / "again"
    (again / trunk.run_id).mkdir(parents=True)
    (again / trunk.run_id / "snapshots").symlink_to(tmp_path / trunk.run_id / "snapshots")
    assert train(again / branch.run_id, branch, max_steps_this_call=1) == "preempted"
    assert train(again / branch.run_id, branch) == "done"
    assert train_losses(again / branch.run_id) == branch_losses
