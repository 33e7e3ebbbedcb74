"""bench/gpu_check.py --tiny: the prepared GPU check runs end to end on the CPU and prints its table."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_tiny_prints_every_row_with_a_finite_value(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOSCALE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "bench/gpu_check.py", "--tiny"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {}
    for line in out.stdout.splitlines():
        match = re.match(r"^(train|eval|gen)\s+(.+?)\s{2,}([\d,.]+) (%|tok/s|s|x)", line)
        if match:
            rows[match[2]] = float(match[3].replace(",", ""))
    expected = {"ar torch eager", "ar torch compiled", "aogpt torch eager", "aogpt torch compiled",
                "ar deepspeed zero-2 (eager)", "ar nll_l2r", "aogpt nll_anyorder", "mdm nll_elbo", "ar", "aogpt",
                "mdm (ancestral, cached)", "mdm / aogpt", "aogpt / ar"}
    assert set(rows) == expected, out.stdout
    assert all(value > 0 for value in rows.values()), rows
    assert 0 < rows["ar torch eager"] < 100 and "compile failed" not in out.stdout
