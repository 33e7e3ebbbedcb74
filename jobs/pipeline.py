"""One run end to end: train (resuming) then evaluate; the callable every executor runs."""
from __future__ import annotations

from pathlib import Path

from cli.environment import rank
from jobs.run.files import SPEC_FILE
from jobs.run.spec import RunSpec
from jobs.train.loop import train
from jobs.eval.evaluate import evaluate
from jobs.eval.state import records_gap
from jobs.data.suites import EvalSuite


def execute_run(run_dir: str | Path, *, handle_signals: bool = False) -> str:
    """Train the run in `run_dir` (from its spec.json, resuming), then evaluate it unless its
    records are already those of its suite at its final step (jobs.eval.state).

    Idempotent: a done run is not retrained and current records are not recomputed; missing,
    unreadable, partial or other-suite records are replaced by a fresh evaluation. Evaluation
    runs on rank 0 only. Returns the training state: done | failed | preempted.
    """
    run_dir = Path(run_dir)
    spec = RunSpec.load(run_dir / SPEC_FILE)
    state = train(run_dir, spec, handle_signals=handle_signals)
    rank0 = rank() == 0
    suite = EvalSuite.parse(spec.eval_suite)
    if state == "done" and rank0 and records_gap(run_dir, suite, spec.steps) is not None:
        evaluate(run_dir, suite, fresh=True)
    return state
