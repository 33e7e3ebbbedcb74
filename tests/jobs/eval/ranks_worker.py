"""One rank of a multi-rank evaluation in its own process (tests/jobs/eval/test_ranks.py).

`python -m tests.jobs.eval.ranks_worker pipeline RUN_DIR` runs `jobs.pipeline.execute_run` (train,
then evaluate on every rank) and prints `scored N` once the run is done (-1 otherwise).
`python -m tests.jobs.eval.ranks_worker SUITE KWARGS_JSON RUN_DIR...`: evaluates each run with
`jobs.eval.evaluate.evaluate(run_dir, SUITE, **kwargs)` under the RANK / WORLD_SIZE / MASTER_*
environment the test sets, on one thread. Prints `scored N` (the windows whose exact L2R score
this rank computed: its share) and `records` where evaluate returned the records (rank 0)."""
from __future__ import annotations

import json
import sys

import torch

from jobs.eval import evaluate as ev
from models import likelihood as lk


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    scored, l2r_nll = [0], lk.l2r_nll

    def counted(model, tokens):
        scored[0] += tokens.shape[0]
        return l2r_nll(model, tokens)

    lk.l2r_nll = counted
    if argv[0] == "pipeline":
        from jobs.pipeline import execute_run  # noqa: PLC0415 - this mode only

        print("scored", scored[0] if execute_run(argv[1]) == "done" else -1, flush=True)
        return 0
    suite, kwargs, run_dirs = argv[0], json.loads(argv[1]), argv[2:]
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    for run_dir in run_dirs:
        if ev.evaluate(run_dir, suite, **kwargs) is not None:
            print("records", flush=True)
    print("scored", scored[0], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
