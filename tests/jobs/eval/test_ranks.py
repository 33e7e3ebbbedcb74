"""Evaluation on every rank (jobs.eval.shard): 2 ranks over gloo, in two real processes, write the
records 1 rank writes, bit for bit; the weights swap in place (one compile per evaluation)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
import torch

from jobs.eval import evaluate as ev
from jobs.eval.shard import Shard
from jobs.eval.windows import WINDOWS_FILE
from jobs.run.device import Placement
from jobs.run.spec import RunSpec
from jobs.train.loop import train

REPO = Path(__file__).resolve().parents[3]
WORKER = "tests.jobs.eval.ranks_worker"
# 20 validation windows in batches of 8 (8, 8, 4: rank 0 scores batches 0 and 2, rank 1 batch 1),
# the ensemble on all 20, 10 wikitext2 chunks (2 batches), infilling and LAMBADA (sharded too)
KWARGS = {"val_chunks": 20, "ensemble_chunks": 20, "zero_shot": ["wikitext2"], "zero_shot_chunks": 10,
          "infill_span": 4, "lambada": True}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("AOSCALE_DATA", raising=False)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cache) -> dict[str, Path]:
    """Tiny trained runs: AO-GPT (permutations, ensembles) and MDLM with EMA (ELBOs, exact L2R,
    both weights)."""
    root = tmp_path_factory.mktemp("ranks") / "runs"
    out = {}
    for family, ema in (("aogpt", 0.0), ("mdm", 0.9)):
        spec = RunSpec(family=family, size="0.1M", steps=4, lr=3e-3, warmup_steps=1, seq_len=32, batch_size=8,
                       eval_batches=1, log_every=1, study="ranks", variant=family, ema=ema)
        assert train(root / spec.run_id, spec) == "done"
        out[family] = root / spec.run_id
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _evaluate_on_ranks(run_dirs: list[Path], n_ranks: int, suite: str, kwargs: dict | None) -> list[str]:
    """Run the worker on `n_ranks` processes (gloo); each one's stdout (`suite` pipeline: the run's
    pipeline, train then evaluate)."""
    port = str(_free_port())
    procs = []
    for rank in range(n_ranks):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(n_ranks), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        args = [] if kwargs is None else [json.dumps(kwargs)]
        procs.append(subprocess.Popen([sys.executable, "-m", WORKER, suite, *args, *map(str, run_dirs)],
                                      cwd=REPO, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [out for out, _ in outs]


def _kwargs(family: str, data_kit: Path) -> dict:
    """KWARGS; LAMBADA for AO-GPT only (MDM's, under both weights, would cost a minute here)."""
    return {**KWARGS, "data_dir": str(data_kit), "lambada": family == "aogpt"}


def test_two_ranks_write_the_records_of_one(trained, data_kit, tmp_path):
    for family, run_dir in trained.items():
        one, two = (Path(shutil.copytree(run_dir, tmp_path / side / family)) for side in ("one", "two"))
        kwargs = _kwargs(family, data_kit)
        ev.evaluate(one, "quick", **{k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()})
        records = pl.read_parquet(one / "eval.parquet")
        outs = _evaluate_on_ranks([two], 2, "quick", kwargs)
        assert ["records" in out for out in outs] == [True, False]  # rank 0 writes
        shares = [int(out.split("scored")[1]) for out in outs]
        # each window scored by one rank: 20 validation + 10 wikitext2 windows per weights
        assert all(shares) and sum(shares) == 30 * len(set(records["weights"].drop_nulls())), shares
        assert records.equals(pl.read_parquet(two / "eval.parquet")), family
        assert pl.read_parquet(one / WINDOWS_FILE).equals(pl.read_parquet(two / WINDOWS_FILE)), family
        assert {"validation", "test"} <= set(records["split"])  # the run's split and wikitext2's
        assert "infill_nll" in set(records["metric"]) and not (two / "eval_progress").exists()
        expected = {"aogpt": {"nll_anyorder", "nll_ensemble", "lambada_acc"},
                    "mdm": {"nll_elbo_mdlm", "nll_elbo_kdce", "nll_l2r"}}[family]
        assert expected <= set(records["metric"]), family
    both = pl.read_parquet(tmp_path / "one" / "mdm" / "eval.parquet")
    assert set(both["weights"].drop_nulls()) == {"ema", "raw"}


def test_an_evaluation_compiles_once_for_both_weights(trained, tmp_path, monkeypatch):
    from models.core import Transformer

    run_dir = Path(shutil.copytree(trained["mdm"], tmp_path / "mdm"))
    calls, compile_stack = [], Transformer.compile_stack

    def counted(self, compiler=None):  # the real wrapper, an identity compiler (no C compiler needed)
        calls.append(self)
        compile_stack(self, lambda fn: fn)

    monkeypatch.setattr(Transformer, "compile_stack", counted)
    monkeypatch.setattr(ev, "placement", lambda spec: Placement(torch.device("cpu"), False, 8, True))
    frame = ev.evaluate(run_dir, "quick", val_chunks=2, zero_shot=())
    assert len(calls) == 1 and set(frame["weights"].drop_nulls()) == {"ema", "raw"}


def test_each_batch_goes_to_one_rank_in_one_deal_over_the_sets():
    from jobs.eval.inputs import make_settings
    from jobs.eval.metrics import per_batch

    settings = replace(make_settings("quick"), shard=Shard(0, 1))
    assert [b.tolist() for b in per_batch(torch.arange(20).view(10, 2), settings, lambda b: b[:, 0])] == [
        [0, 2, 4, 6, 8, 10, 12, 14], [16, 18]]  # batches of 8 windows, in order
    shards = [Shard(rank, 3) for rank in range(3)]
    assert [s.mine(7) for s in shards] == [[0, 3, 6], [1, 4], [2, 5]]
    for s in shards:
        s.dealt[0] += 7  # as map deals them; the next set's deal runs on from rank 1
    assert [s.mine(2) for s in shards] == [[], [0], [1]]
    assert Shard().map(3, lambda i: torch.tensor([i])) == [torch.tensor([0]), torch.tensor([1]), torch.tensor([2])]
    assert Shard().any(True) and not Shard().any(False)


def test_a_two_rank_deepspeed_run_is_evaluated_by_both_ranks_as_one_rank_would(cache, tmp_path):
    pytest.importorskip("deepspeed")
    from jobs.run.files import SPEC_FILE, atomic_write_text

    spec = RunSpec(family="mdm", size="0.1M", steps=3, lr=3e-3, warmup_steps=1, seq_len=32, batch_size=8,
                   micro_batch_size=4, eval_batches=1, log_every=1, engine="deepspeed", zero_stage=1,
                   study="ranks", model_options={"loss": "kdce"}, eval_suite="frontier")  # 2 x 64 batches
    run_dir = tmp_path / "two" / spec.run_id
    run_dir.mkdir(parents=True)
    atomic_write_text(run_dir / SPEC_FILE, spec.to_json())
    outs = _evaluate_on_ranks([run_dir], 2, "pipeline", None)  # DeepSpeed's gloo group evaluates too
    shares = [int(out.split("scored")[1]) for out in outs]
    l2r = pl.read_parquet(run_dir / "eval.parquet").filter(pl.col("metric") == "nll_l2r")
    assert min(shares) > 0 and sum(shares) == l2r["n_samples"].sum() == 1024, shares  # each window once
    one = Path(shutil.copytree(run_dir, tmp_path / "one" / spec.run_id))
    for name in ("eval.parquet", WINDOWS_FILE):
        (one / name).unlink()
    ev.evaluate(one, spec.eval_suite, fresh=True)  # as the pipeline evaluates, on one rank
    assert pl.read_parquet(one / "eval.parquet").equals(pl.read_parquet(run_dir / "eval.parquet"))
    assert pl.read_parquet(one / WINDOWS_FILE).equals(pl.read_parquet(run_dir / WINDOWS_FILE))


def test_the_evaluate_command_runs_on_two_ranks_and_rank_0_writes(trained, tmp_path):
    run_dir = Path(shutil.copytree(trained["aogpt"], tmp_path / "aogpt"))
    port, procs = str(_free_port()), []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        procs.append(subprocess.Popen([sys.executable, "-m", "jobs.eval.evaluate", "--run-dir", str(run_dir),
                                       "--val-chunks", "20", "--datasets", "shakespeare", "--max-chunks", "9"],
                                      cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert "wrote" in outs[0][0] and outs[1][0] == ""  # the lock and the records are rank 0's
    assert set(pl.read_parquet(run_dir / "eval.parquet")["dataset"]) >= {"shakespeare"}
