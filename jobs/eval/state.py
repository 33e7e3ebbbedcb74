"""Whether a trained run's records are its result: evaluation is part of a run's truth.

A run whose training is done is `done` only when its `eval.parquet` is readable, holds records of
the suite its spec names now (the `suite` column), and scores the final checkpoint (every row's
`step` equals the run's `run_steps`). Otherwise `records_gap` says what is missing, and the ledger
shows the run as `trained`: the next launch evaluates it (and never trains it again).

Records written before the `suite` column existed carry no suite (null): they count as the
current suite's, so existing studies stay done. Likewise for `suite_hash` (what the suite measured
when the rows were written, `Suite.fingerprint`): rows of a suite whose definition has changed
since, or that were evaluated with overrides (`jobs.eval.evaluate --val-chunks ...`), are not the
suite's result, and the next launch evaluates the run again; rows without the column count.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from cli import InputError
from cli.record_checks import record_dtype_problem

from jobs.data.suites import EvalSuite
from jobs.eval.records import EVAL_FILE
from jobs.run.files import read_status

SUITE_COLUMN = "suite"  # the suite the rows were evaluated with (jobs.eval.evaluate's --eval-suite)
HASH_COLUMN = "suite_hash"  # its fingerprint then (jobs.data.suites.Suite.fingerprint)


def read_stamp(path: Path) -> tuple[set[str], int | None, set[str]]:
    """(suites named by the rows, smallest evaluated step, suite fingerprints) of an eval.parquet;
    raises on an unreadable file (truncated, not parquet), InputError on columns of the wrong kind."""
    schema = pl.read_parquet_schema(path)
    problem = record_dtype_problem(schema)  # a string `value` column is no result (cli.record_checks)
    if problem:
        raise InputError(f"{path}: {problem}")
    columns = [c for c in (SUITE_COLUMN, "step", HASH_COLUMN) if c in schema]
    frame = pl.read_parquet(path, columns=columns)

    def values(column: str) -> set[str]:
        return set(frame[column].drop_nulls().unique().to_list()) if column in frame.columns else set()

    step = frame["step"].min() if "step" in frame.columns and frame.height else None
    return values(SUITE_COLUMN), None if step is None else int(step), values(HASH_COLUMN)


def records_gap(run_dir: str | Path, suite: EvalSuite, steps: int) -> str | None:
    """None when the run's records are those of `suite` at its final step `steps`; else one phrase
    saying what is missing (not evaluated, unreadable, another suite, a partial checkpoint)."""
    path = Path(run_dir) / EVAL_FILE
    if not path.exists():
        return "trained but not evaluated"
    try:
        suites, step, hashes = read_stamp(path)
    except InputError as error:
        return f"{EVAL_FILE} breaks the records schema ({str(error).partition(': ')[2]})"
    except Exception as error:  # polars raises several types for a torn file
        return f"{EVAL_FILE} is unreadable (truncated or corrupt: {type(error).__name__})"
    if suites and suites != {str(suite)}:
        return f"records are for suite {', '.join(sorted(suites))}, the study's is now {suite}"
    if hashes and hashes != {suite.suite.fingerprint}:
        return f"records are of an earlier definition of suite {suite} (or of overrides to it)"
    if step is None:
        return f"{EVAL_FILE} holds no records"
    if steps and step < steps:
        return f"records are partial (step {step} of {steps})"
    return None


def check_done(run_dir: str | Path, allow_partial: bool) -> str | None:
    """Refuse (InputError) to evaluate a run whose training is not done unless `allow_partial`;
    returns a warning for a partial run that is evaluated anyway (None for a done run)."""
    status = read_status(run_dir)
    state, step, steps = status.get("state", "pending"), int(status.get("step", 0)), int(status.get("steps", 0))
    if state == "done" and step >= steps:
        return None
    where = f"{state} at step {step} of {steps or '?'}"
    if not allow_partial:
        raise InputError(f"--run-dir: {run_dir} is {where}, not done; finish training it (python -m jobs.train "
                         f"--run-dir {run_dir}) or pass --allow-partial to score its checkpoint anyway")
    return f"eval: partial records: the run is {where}; rows are labelled with their step (run_steps {steps or '?'})"
