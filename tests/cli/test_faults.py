"""cli.faults: the named point kills its process, any other name or none does nothing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

CODE = "from cli.faults import fault_point; fault_point('a'); fault_point('b'); print('past')"


def run(env_value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AOSCALE_FAULT"}
    if env_value is not None:
        env["AOSCALE_FAULT"] = env_value
    return subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=60)


def test_the_named_point_kills_and_others_pass():
    assert run("b").returncode == -signal.SIGKILL and run("b").stdout == ""
    for value in (None, "c", ""):
        done = run(value)
        assert done.returncode == 0 and done.stdout == "past\n"
