"""Evaluation resumes per set (jobs.eval.progress): a stop signal between sets keeps the finished
sets, writes no records, and the rerun scores only the missing sets, to the records of an
evaluation that was never stopped."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import polars as pl
import pytest
import torch

from jobs.eval import evaluate as ev
from jobs.eval.progress import PROGRESS_DIR
from jobs.eval.windows import WINDOWS_FILE
from jobs.pipeline import execute_run
from jobs.run.files import read_status
from jobs.run.spec import RunSpec
from jobs.train.loop import train
from jobs.train.stopping import clear_stop, request_stop


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny MDLM run with EMA: 4 sets (ema and raw x validation and wikitext2)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("AOSCALE_DATA", raising=False)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        spec = RunSpec(family="mdm", size="0.1M", steps=4, lr=3e-3, warmup_steps=1, seq_len=32, batch_size=8,
                       eval_batches=1, log_every=1, study="resume", ema=0.9)
        run_dir = tmp_path_factory.mktemp("resume") / spec.run_id
        assert train(run_dir, spec) == "done"
        yield run_dir
        torch.set_num_threads(threads)


def _args(run_dir: Path, data_kit: Path) -> list[str]:
    return ["--run-dir", str(run_dir), "--val-chunks", "12", "--max-chunks", "6", "--data-dir", str(data_kit)]


def test_a_stop_signal_between_sets_keeps_them_and_the_rerun_scores_the_rest(trained, data_kit, tmp_path,
                                                                              monkeypatch, capsys):
    whole, stopped = (Path(shutil.copytree(trained, tmp_path / name)) for name in ("whole", "stopped"))
    assert ev.main(_args(whole, data_kit)) == 0
    scored, dataset_rows, signalled = [], ev.dataset_rows, []

    def first_then_sigterm(model, spec, ctx, settings, ds):
        rows = dataset_rows(model, spec, ctx, settings, ds)
        scored.append((ctx["weights"], ds.name))
        if not signalled:
            signalled.append(os.kill(os.getpid(), signal.SIGTERM))  # the CLI's handler asks for a stop
        return rows

    monkeypatch.setattr(ev, "dataset_rows", first_then_sigterm)
    capsys.readouterr()
    assert ev.main(_args(stopped, data_kit)) == ev.EXIT_STOPPED
    assert "1 of 4 scored" in capsys.readouterr().err
    (first,) = scored
    assert first[0] == "ema"  # the EMA weights' validation set comes first
    assert not (stopped / "eval.parquet").exists() and (stopped / PROGRESS_DIR).is_dir()
    assert read_status(stopped)["state"] == "done"  # training's truth; the ledger reads the records' gap
    scored.clear()
    assert ev.main(_args(stopped, data_kit)) == 0  # the rerun: the three other sets only
    assert len(scored) == 3 and first not in scored
    assert pl.read_parquet(stopped / "eval.parquet").equals(pl.read_parquet(whole / "eval.parquet"))
    assert pl.read_parquet(stopped / WINDOWS_FILE).equals(pl.read_parquet(whole / WINDOWS_FILE))
    assert not (stopped / PROGRESS_DIR).exists()


def test_a_stop_before_evaluation_leaves_the_run_trained_and_preempted(trained, tmp_path):
    run_dir = Path(shutil.copytree(trained, tmp_path / "run"))
    request_stop()  # as a stop signal at the end of training would
    try:
        assert execute_run(run_dir) == "preempted"
    finally:
        clear_stop()
    assert not (run_dir / "eval.parquet").exists()
    assert execute_run(run_dir) == "done" and (run_dir / "eval.parquet").exists()
