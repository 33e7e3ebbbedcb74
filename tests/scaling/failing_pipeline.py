"""A pipeline that always fails (AOSCALE_PIPELINE=tests.scaling.failing_pipeline:run): a run
failing at run time, now that bad inputs are refused by the launcher's preflight."""
from __future__ import annotations

REASON = "synthetic failure of the retry test"


def run(run_dir: str) -> str:
    raise RuntimeError(REASON)
