"""Epochs and unique tokens per run (jobs.data.ledger), their records columns, status and report flags."""
from __future__ import annotations

import math

import polars as pl

from analysis.records.data_ledger import repetition_notes
from jobs.data import corpus as data
from jobs.data.ledger import ledger_columns, train_tokens
from jobs.eval.records import run_context
from jobs.run.spec import RunSpec
from scaling.status import repeats_data


def _spec(steps):
    return RunSpec(family="ar", size="0.1M", steps=steps, lr=1e-3, warmup_steps=1, seq_len=32, batch_size=32)


def test_epochs_and_expected_unique_tokens():
    data.token_array("shakespeare", "bytes", "train")  # the cache the manifest is read from
    n = train_tokens(_spec(1))
    assert n == len(data.token_array("shakespeare", "bytes", "train"))
    one = ledger_columns(_spec(1), n)
    assert one["epochs"] == 1.0 and abs(one["unique_tokens"] / n - (1 - math.exp(-1))) < 1e-3
    spec = _spec(10)
    ctx = run_context(spec, {"core": 1, "family_non_embedding": 1}, 1.0, 10, "raw")
    assert ctx["epochs"] == 10 * 32 * 32 / n and ctx["unique_tokens"] < 10 * 32 * 32


def test_a_run_past_one_epoch_is_flagged_in_status_and_the_report():
    n = train_tokens(_spec(1))
    long = _spec(math.ceil(2.5 * n / 1024))
    (line,) = repeats_data("abc", long)
    assert "repeats data" in line and "2.5" in line
    assert repeats_data("abc", _spec(10)) == []
    final = pl.DataFrame({"run_id": ["a", "b"], "family": ["mdm", "ar"], "size": ["0.1M"] * 2, "epochs": [2.5, 0.5]})
    (note,) = repetition_notes(final)
    assert "1 run(s)" in note and "a (mdm 0.1M: 2.50)" in note
