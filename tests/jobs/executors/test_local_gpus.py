"""The local executor on a GPU machine: one run per GPU, so `--max-parallel` above the visible GPUs
is refused in one line (exit 2, nothing written) instead of crashing the launcher mid-study.

There is no GPU here: `visible_gpus()` reads CUDA_VISIBLE_DEVICES first, so setting it names the
GPUs a launcher on a GPU node would see (the executor also takes them as an argument)."""
from __future__ import annotations

import pytest

from jobs.executors.local import LocalExecutor, check_max_parallel, visible_gpus
from scaling import launch, rounds
from scaling.run import study_ledger
from scaling.study.study_spec import build_study

TINY = ["--sizes", "0.1M", "--families", "ar", "--seeds", "1", "--max-steps", "2", "--seq-len", "32", "--no-progress"]


def test_the_rule_is_at_most_one_run_per_visible_gpu():
    check_max_parallel(2, ["0", "1"])
    check_max_parallel(None, ["0", "1"])  # the default: one per GPU
    check_max_parallel(8, [])  # CPU runs: one per core or as asked
    with pytest.raises(ValueError, match=r"^max-parallel: 3 runs at once but 2 GPU\(s\) visible.*fix: --max-parallel 2"):
        check_max_parallel(3, ["0", "1"])
    with pytest.raises(ValueError, match="^max-parallel: 3"):  # the executor itself never starts a run without one
        LocalExecutor(max_parallel=3, gpus=["0", "1"])
    assert LocalExecutor(max_parallel=2, gpus=["0", "1"]).slots == 2 and LocalExecutor(gpus=["0", "1"]).slots == 2


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_max_parallel_above_the_gpus_exits_2_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert launch.main(["--study-dir", "study", "--max-parallel", "3", *TINY]) == 2
    err = capsys.readouterr().err
    assert err == ("launch: max-parallel: 3 runs at once but 2 GPU(s) visible, and each run trains on a GPU of its "
                   "own; fix: --max-parallel 2 or less (or make more GPUs visible in CUDA_VISIBLE_DEVICES)\n")
    assert list(tmp_path.iterdir()) == []
    study_ledger.prepare(tmp_path / "s", build_study({"families": "ar", "sizes": "0.1M", "seeds": 1}))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert rounds.main([str(tmp_path / "s"), "--max-parallel", "3"]) == 2  # the closed loop's local backend too
    assert capsys.readouterr().err.startswith("rounds: max-parallel: 3 runs at once but 2 GPU(s) visible")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
