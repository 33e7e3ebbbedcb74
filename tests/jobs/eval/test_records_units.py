"""Records state exact units: a token of the bytes tokenizer is a byte; the core's depth is a column."""
from __future__ import annotations

from jobs.eval.records import record, run_context, to_frame
from jobs.run.spec import RunSpec

COUNTS = {"core": 10, "family_non_embedding": 12}


def _row(tokenizer: str, unit: str = "nats/token") -> dict:
    spec = RunSpec(family="ar", size="0.3M", steps=4, lr=1e-3, warmup_steps=1, tokenizer=tokenizer)
    return record(run_context(spec, COUNTS, 100, 4, "raw"), dataset="shakespeare", split="validation",
                  metric="nll_l2r", value=1.5, unit=unit, n_samples=8)


def test_per_token_values_of_the_bytes_tokenizer_are_nats_per_byte():
    frame = to_frame([_row("bytes"), _row("gpt2"), _row("bytes", unit="bits/byte")])
    assert frame["unit"].to_list() == ["nats/byte", "nats/token", "bits/byte"]
    assert frame["n_layer"].to_list() == [3, 3, 3]  # 0.3M is 3/96/3
    assert "_token_unit" not in frame.columns
