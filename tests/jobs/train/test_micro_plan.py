"""The micro-batch each rank trains with comes from the memory model and the device's memory
(jobs.train.preflight.plan_micro_batch) and is not part of the run id; validation runs in its
pieces; the records say which micro-batch trained (the dry-run's plan: tests/scaling/plan)."""
from __future__ import annotations

import json

import pytest
import torch

from cli import InputError
from jobs.run.files import read_metrics
from jobs.run.spec import RunSpec
from jobs.train import preflight
from jobs.train.engines import TorchEngine
from jobs.train.loop import _batch_loss, train
from jobs.train.preflight import USABLE_FRACTION, memory_bytes, model_params, plan_micro_batch
from models import build_model

GIB = 2**30


def gpt(size: str = "125M", **changes) -> RunSpec:
    """A run of the used-by command's shape: context 1,024, a batch of 1,024 sequences, GPT-2 BPE."""
    base = dict(family="ar", size=size, steps=10, lr=6e-4, warmup_steps=1, seq_len=1024, batch_size=1024,
                tokenizer="gpt2", ema=0.9999, engine="deepspeed", zero_stage=2)
    return RunSpec(**{**base, **changes})


def test_micro_batch_size_is_not_in_the_run_id_and_old_ids_stay():
    plain = gpt()
    assert {gpt(micro_batch_size=m).run_id for m in (1, 4, 16, 1024)} == {plain.run_id}
    assert plain._hash({}) == plain.run_id  # micro 0, every spec before the rule: the same id
    legacy = gpt(micro_batch_size=4)._hash({})  # what a spec.json with micro 4 was written with
    assert legacy != plain.run_id
    loaded = RunSpec.from_dict({**gpt(micro_batch_size=4).to_dict(), "run_id": legacy})
    assert loaded.run_id == plain.run_id and loaded.micro_batch_size == 4
    with pytest.raises(ValueError, match="does not match"):
        RunSpec.from_dict({**plain.to_dict(), "run_id": "0" * 12})


def test_the_plan_takes_the_largest_divisor_of_each_ranks_share_that_fits():
    spec = gpt("760M")
    device = 80 * GIB
    micro, accumulation, need = plan_micro_batch(spec, 8, device)
    n = model_params(spec)
    fits = [m for m in range(1, 129) if 128 % m == 0 and memory_bytes(spec, n, 8, m) <= device * USABLE_FRACTION]
    assert (micro, accumulation) == (max(fits), 128 // max(fits)) and micro * accumulation * 8 == spec.batch_size
    assert need == memory_bytes(spec, n, 8, micro) <= device * USABLE_FRACTION
    bigger = min(m for m in range(micro + 1, 129) if 128 % m == 0)
    assert memory_bytes(spec, n, 8, bigger) > device * USABLE_FRACTION  # the next divisor would not fit
    # ZeRO partitions: stage 1 the optimizer state, 2 also the gradients, 3 also the weights
    states = [preflight.state_bytes(spec.replace(zero_stage=s), n, 8) for s in (1, 2, 3)]
    assert states == [n * (4 + 4 + 4) + n * (4 + 8) // 8, n * (4 + 4) + n * (4 + 4 + 8) // 8,
                      n * 4 + n * (4 + 4 + 4 + 8) // 8]  # (+ the EMA's 4 on rank 0)
    assert preflight.state_bytes(spec.replace(engine="torch"), n, 1) == n * (4 + 4 + 8 + 4)


def test_an_explicit_micro_batch_always_wins_and_must_divide_the_share():
    spec = gpt("125M", micro_batch_size=2)
    assert plan_micro_batch(spec, 8, 80 * GIB)[:2] == (2, 64)
    assert plan_micro_batch(spec, 8, 1 * GIB)[:2] == (2, 64)  # wins even where it does not fit (refused below)
    with pytest.raises(InputError, match=r"^micro_batch_size: 3 does not divide each rank's 128"):
        plan_micro_batch(gpt(micro_batch_size=3), 8, 80 * GIB)
    with pytest.raises(InputError, match=r"^batch_size: 1024 does not split over 3 ranks"):
        plan_micro_batch(gpt(), 3, 80 * GIB)


def test_where_the_whole_share_fits_it_is_one_forward_per_step_as_before():
    spec = RunSpec(family="ar", size="0.1M", steps=1, lr=1e-3, warmup_steps=0, seq_len=32, batch_size=8)
    assert plan_micro_batch(spec, 1, 8 * GIB)[:2] == (8, 1)
    assert plan_micro_batch(spec.replace(engine="deepspeed"), 2, 8 * GIB)[:2] == (4, 1)


def test_a_run_that_cannot_fit_at_micro_batch_one_is_refused_naming_the_field():
    with pytest.raises(InputError, match=r"^size: 760M needs about \d+\.\d GiB per rank to train even at micro-batch 1"):
        preflight.check_memory(gpt("760M"), 8, have=1 * GIB, what="GPU memory")
    with pytest.raises(InputError, match=r"^micro_batch_size: 64 sequences of 1024 tokens need about"):
        preflight.check_memory(gpt("125M", micro_batch_size=64), 8, have=8 * GIB, what="GPU memory")
    preflight.check_memory(gpt("760M"), 8, have=80 * GIB, what="GPU memory")  # fits: no error


def test_validation_in_micro_batch_pieces_is_the_whole_batch_loss(one_thread_cache):
    spec = RunSpec(family="ar", size="0.1M", steps=1, lr=1e-3, warmup_steps=0, seq_len=16, batch_size=8,
                   precision="fp32", compile="off")
    engine = TorchEngine(build_model("ar", "0.1M", vocab_size=257, seq_len=16), spec)
    tokens = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(0))
    engine.train(False)
    with torch.no_grad():
        whole = float(engine.loss(tokens, torch.Generator()))
        assert engine.micro == 8 and _batch_loss(engine, tokens, torch.Generator()) == whole  # one piece: bitwise
        engine.micro = 3  # pieces of 3, 3, 2 rows, weighted by their rows
        assert _batch_loss(engine, tokens, torch.Generator()) == pytest.approx(whole, rel=1e-6)


def test_accumulation_is_the_same_step_and_the_record_says_which_micro_batch_trained(tmp_path, one_thread_cache):
    base = RunSpec(family="ar", size="0.1M", steps=3, lr=3e-3, warmup_steps=1, seq_len=32, batch_size=8,
                   eval_batches=1, log_every=1, precision="fp32", compile="off")
    split = base.replace(micro_batch_size=2)
    assert split.run_id == base.run_id
    train(tmp_path / "whole", base)
    train(tmp_path / "split", split)
    starts = [read_metrics(tmp_path / name, "start")[0] for name in ("whole", "split")]
    assert [(s["micro_batch"], s["accumulation"]) for s in starts] == [(8, 1), (2, 4)]
    manifest = json.loads((tmp_path / "split" / "manifest.json").read_text())
    assert (manifest["micro_batch"], manifest["accumulation"]) == (2, 4) and manifest["planned_bytes_per_rank"] > 0
    whole, parts = ([r["loss"] for r in read_metrics(tmp_path / name, "train")] for name in ("whole", "split"))
    assert whole == pytest.approx(parts, rel=1e-5)  # AR draws nothing: only the summation order differs
