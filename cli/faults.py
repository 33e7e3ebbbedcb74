"""Fault injection for the kill tests: stop this process dead at a named point.

`AOSCALE_FAULT=<point>` makes `fault_point(<point>)` send SIGKILL to its own process, so a test
kills a launcher, a worker or a report writer exactly there instead of polling for a window.
Unset (always, outside tests), `fault_point` does nothing. Each call site names its point once,
in the module that owns that moment; the points are listed where they are called
(`grep -rn fault_point`). It lives in `cli`, which every package may import, so `analysis`
(the report writer) has points too.
"""
from __future__ import annotations

import os
import signal

FAULT_ENV = "AOSCALE_FAULT"
# Every point a call site names (`grep -rn fault_point`); `AOSCALE_FAULT` naming another is refused
# by cli.environment (a misspelt point would kill nothing and the kill test would pass in silence).
FAULT_POINTS = ("tokencache.shard_done", "evaluate.before_records", "relaunch-journalled", "relaunch-study-written",
                "relaunch-spec-written", "build_dir.staged")


def fault_point(name: str) -> None:
    """Kill this process with SIGKILL when `AOSCALE_FAULT` names `name`; otherwise nothing."""
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
