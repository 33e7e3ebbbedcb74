"""One run end to end: train (resuming) then evaluate; the callable every executor runs."""
from __future__ import annotations

from pathlib import Path

from jobs.run.files import SPEC_FILE
from jobs.run.spec import RunSpec
from jobs.train.loop import train
from jobs.train.stopping import stop_on_signals
from jobs.eval.evaluate import Stopped, evaluate
from jobs.eval.shard import ranks
from jobs.eval.state import records_gap
from jobs.data.suites import EvalSuite
from jobs.run.device import pick_device


def execute_run(run_dir: str | Path, *, handle_signals: bool = False) -> str:
    """Train the run in `run_dir` (from its spec.json, resuming), then evaluate it unless its
    records are already those of its suite at its final step (jobs.eval.state).

    Idempotent: a done run is not retrained and current records are not recomputed; missing,
    unreadable, partial or other-suite records are replaced by a fresh evaluation. Every rank
    evaluates (its share of the windows, jobs.eval.shard; rank 0 decides whether and writes). A
    stop during evaluation keeps the sets scored so far and returns "preempted", so the job is
    requeued and the rerun scores the rest. Returns done | failed | preempted.
    """
    run_dir = Path(run_dir)
    spec = RunSpec.load(run_dir / SPEC_FILE)
    state = train(run_dir, spec, handle_signals=handle_signals)
    if state != "done":
        return state
    suite = EvalSuite.parse(spec.eval_suite)
    with ranks(pick_device()) as shard:
        if not shard.from_rank0(lambda: records_gap(run_dir, suite, spec.steps) is not None):
            return state
        try:
            with stop_on_signals(handle_signals):
                evaluate(run_dir, suite, fresh=True)
        except Stopped:
            return "preempted"
    return state
