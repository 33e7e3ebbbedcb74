"""No behaviour change: eval.parquet and samples.parquet of tiny runs of every family, to the bit.

Each arm (every family; MDM under each of its losses) trains 2 steps on one thread, is evaluated
with a shrunken quick suite and generates 2 samples judged by a tiny AR judge. Every value must
equal the recorded one exactly (tolerance 0: the CPU path is deterministic on one thread); only
wall time (`gen_time_s`) is left out. A change that is meant to move these numbers regenerates
the file: `AOSCALE_REGEN_GOLDEN=1 python -m pytest tests/jobs/eval/test_golden_records.py`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
import torch

from jobs.eval import evaluate as ev
from jobs.eval import generate as gen
from jobs.run.spec import RunSpec
from jobs.train.loop import train

GOLDEN = Path(__file__).parent / "golden" / "tiny_records.json"
ARMS = {"ar": ("ar", {}), "aogpt": ("aogpt", {}), "sigma_gpt": ("sigma_gpt", {}),
        "mdm-mdlm": ("mdm", {"loss": "mdlm"}), "mdm-kdce": ("mdm", {"loss": "kdce"}),
        "mdm-sedd": ("mdm", {"loss": "sedd"})}
WALL_TIME_METRICS = ("gen_time_s",)


def tiny_spec(family: str, variant: str, **changes) -> RunSpec:
    """A 2-step, 16-token run at the smallest rung."""
    return RunSpec(family=family, size="0.1M", steps=2, lr=3e-3, warmup_steps=1, seq_len=16, batch_size=4,
                   eval_batches=1, log_every=1, study="golden", variant=variant, **changes)


def records(run_dir: Path) -> dict:
    """The run's eval and sample rows as plain JSON values, wall times blanked."""
    frame = pl.read_parquet(run_dir / "eval.parquet")
    timed = pl.col("metric").is_in(WALL_TIME_METRICS)
    frame = frame.with_columns(pl.when(timed).then(None).otherwise(pl.col(c)).alias(c) for c in ("value", "se"))
    frame = frame.sort(["metric", "dataset", "estimator", "weights", "m", "steps", "tokens_per_step"],
                       nulls_last=True)
    samples = pl.read_parquet(run_dir / gen.SAMPLES_FILE).sort(["steps", "sample"])
    return json.loads(json.dumps({"eval": frame.to_dicts(), "samples": samples.to_dicts()}))


@pytest.fixture(scope="module")
def actual(tmp_path_factory) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("golden") / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("AOSCALE_DATA", raising=False)
        judge = tiny_spec("ar", "judge", seed=7, role="judge")
        assert train(root / judge.run_id, judge) == "done"
        out = {}
        for name, (family, options) in ARMS.items():
            spec = tiny_spec(family, name, model_options=options)
            run_dir = root / spec.run_id
            assert train(run_dir, spec) == "done"
            ev.evaluate(run_dir, "quick", val_chunks=2, k_mc=2, m_max=2, n_targets=4, ensemble_chunks=2,
                        zero_shot=())
            gen.generate(run_dir, gen.GenSettings(n_samples=2, length=16, steps=(4,), tokens_per_step=(1, 2)),
                         judge_run=root / judge.run_id)
            out[name] = records(run_dir)
    torch.set_num_threads(threads)
    if os.environ.get("AOSCALE_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("part", ("eval", "samples"))
def test_records_equal_the_golden_ones(actual, arm, part):
    golden = json.loads(GOLDEN.read_text())[arm][part]
    got = actual[arm][part]
    assert len(got) == len(golden), f"{arm} {part}: {len(got)} rows, golden has {len(golden)}"
    for row, want in zip(got, golden):  # JSON text compares NaN to NaN and floats to the last bit
        assert json.dumps(row, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_the_golden_covers_every_family():
    from models.families import FAMILIES

    assert {family for family, _ in ARMS.values()} == set(FAMILIES)
    golden = json.loads(GOLDEN.read_text())
    assert all(golden[arm]["eval"] and golden[arm]["samples"] for arm in ARMS)
