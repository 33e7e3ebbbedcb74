"""One independent part of an analysis computed on a second core while the caller does the rest.

The ensemble fits (analysis.fit.ensemble) need nothing the size fits produce, and with 1,000
resamples they are about 40 % of a report's fit time (bench/bench_fit_curves.py). `in_background`
runs such a part in a fresh `python -m analysis.fit.background` process and returns a handle whose
`result()` is the part's value. A plain child process, not multiprocessing: "fork" does not suit
polars' thread pool, and "spawn" re-imports the caller's main script, which would run an
unguarded script's work twice. The part and its arguments travel as a pickle in a temporary
folder, and so does the value. Every fit draws its resamples from its own (seed, key), so the
value is the same wherever it is computed (tests/analysis/fit/test_background.py).

The child is used only when it can pay: at least MIN_RESAMPLES resamples (a fresh interpreter
starts in ~1 s) and at least 2 usable cores. `AOSCALE_ANALYSIS_WORKERS=1` keeps everything in the
calling process. Should the child fail, the part is computed in the caller, and one line says why.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKERS_ENV = "AOSCALE_ANALYSIS_WORKERS"
MIN_RESAMPLES = 200  # below this a part costs less than the ~1 s a fresh interpreter takes to start
_ROOT = Path(__file__).resolve().parents[1]  # the folder holding the `analysis` package


def workers_from_env() -> int | None:
    """AOSCALE_ANALYSIS_WORKERS as a count >= 1, or None when unset; ValueError (one line naming
    the variable and the fix) for anything else, so a typo is refused before any work, not later."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{WORKERS_ENV}: {raw!r} is not a whole number >= 1; "
                         "set it to 1 (everything in one process) or 2, or unset it")
    return int(raw)


def usable_cores() -> int:
    """Cores this process may run on, or AOSCALE_ANALYSIS_WORKERS when set."""
    workers = workers_from_env()
    if workers is not None:
        return workers
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Pending:
    """A part's value: from the child when one runs it, else computed on `result()`."""

    def __init__(self, fn: Callable, args: tuple, child: subprocess.Popen | None = None, folder=None):
        self._fn, self._args, self._child, self._folder = fn, args, child, folder

    def result(self) -> Any:
        if self._child is None:
            return self._fn(*self._args)
        try:
            code = self._child.wait()
            out = Path(self._folder.name)
            if code == 0:
                return pickle.loads((out / "value.pkl").read_bytes())
            lines = (out / "stderr.txt").read_text(errors="replace").strip().splitlines() or [f"exit status {code}"]
            print(f"analysis: background part failed ({lines[-1]}); computing it in this process", file=sys.stderr)
        finally:
            self._folder.cleanup()
        return self._fn(*self._args)


def in_background(fn: Callable, *args: Any, resamples: int) -> Pending:
    """Start `fn(*args)` (a module-level function) in a child process when it pays (module docstring)."""
    if resamples < MIN_RESAMPLES or usable_cores() < 2:
        return Pending(fn, args)
    folder = tempfile.TemporaryDirectory(prefix="aoscale-analysis-")
    out = Path(folder.name)
    (out / "part.pkl").write_bytes(pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OMP_NUM_THREADS": "1"}
    with open(out / "stderr.txt", "wb") as err:
        child = subprocess.Popen([sys.executable, "-m", "analysis.fit.background", str(out)], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    return Pending(fn, args, child, folder)


def _child(folder: Path) -> None:
    fn, args = pickle.loads((folder / "part.pkl").read_bytes())
    value = pickle.dumps(fn(*args), protocol=pickle.HIGHEST_PROTOCOL)
    (folder / "value.tmp").write_bytes(value)
    os.replace(folder / "value.tmp", folder / "value.pkl")


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
