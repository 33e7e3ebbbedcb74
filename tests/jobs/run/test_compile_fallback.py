"""A torch.compile that cannot build, or that fails at its first call, trains on the eager core and
every record says eager (the manifest's numerics label, numerics.json's segment, the path's id),
in real processes whose C++ compiler is missing or broken; nothing is mocked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.core import compile_problem

REPO = Path(__file__).resolve().parents[3]
TRAIN = ["-m", "jobs.train", "--family", "ar", "--size", "0.1M", "--steps", "3", "--seq-len", "32",
         "--batch-size", "4", "--compile", "on"]
BROKEN_CXX = """#!/bin/sh
# answers inductor's `--version` check like a compiler, then fails every build
if [ "$1" = "--version" ]; then echo "g++ (broken) 1.0"; exit 0; fi
echo "broken compiler: cannot build $*" >&2
exit 1
"""


def _train(tmp_path: Path, name: str, cxx: str) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CXX": cxx, "OMP_NUM_THREADS": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}"),  # no kernel built elsewhere is reused
           "AOSCALE_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / name
    proc = subprocess.Popen([sys.executable, *TRAIN, "--run-dir", str(run_dir)], env=env, cwd=REPO, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, run_dir


def _records(run_dir: Path) -> tuple[dict, list[dict]]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return manifest, json.loads((run_dir / "numerics.json").read_text())["segments"]


def test_the_compiler_check_names_a_missing_cxx(monkeypatch):
    from torch._inductor import config
    from torch._inductor.cpp_builder import cpp_compiler_search

    monkeypatch.setattr(config.cpp, "cxx", (None, "/nonexistent/g++"))
    cpp_compiler_search.cache_clear()
    try:
        assert compile_problem(torch.device("cpu")).startswith("InvalidCxxCompiler: No working C++ compiler")
    finally:
        cpp_compiler_search.cache_clear()


@pytest.mark.slow
def test_a_compile_that_cannot_build_or_fails_trains_eager_and_records_eager(tmp_path, data_kit):
    broken = tmp_path / "broken-g++"
    broken.write_text(BROKEN_CXX)
    broken.chmod(0o755)
    runs = {"missing": _train(tmp_path, "missing", "/nonexistent/g++"), "broken": _train(tmp_path, "broken", str(broken))}
    errs = {}
    for name, (proc, run_dir) in runs.items():
        _, errs[name] = proc.communicate(timeout=600)
        assert proc.returncode == 0, (name, errs[name][-3000:])
        assert json.loads((run_dir / "status.json").read_text())["state"] == "done"
        manifest, segments = _records(run_dir)
        assert not manifest["numerics"].endswith("compiled"), (name, manifest["numerics"])
        assert [(s["from_step"], s["path"]["compiled"]) for s in segments] == [(0, False)], (name, segments)
    # the missing compiler is found before training (eager from the start), the broken one at its first call
    assert "torch.compile cannot build here (InvalidCxxCompiler" in errs["missing"], errs["missing"][-2000:]
    assert "torch.compile failed" in errs["broken"], errs["broken"][-2000:]
    assert _records(runs["missing"][1])[0]["numerics"] == _records(runs["broken"][1])[0]["numerics"]
