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


def _train(tmp_path: Path, name: str, cxx: str | None, *flags: str) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}"),  # no kernel built elsewhere is reused
           "AOSCALE_CACHE": str(tmp_path / "cache")}
    env.pop("CXX", None)
    env.update({"CXX": cxx} if cxx else {})
    run_dir = tmp_path / name
    proc = subprocess.Popen([sys.executable, *TRAIN, "--run-dir", str(run_dir), *flags], env=env, cwd=REPO,
                            text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    """A missing compiler is found before training (eager from the start); a broken one (it passes
    inductor's `--version` check, then fails every build) at the first compiled call. The broken run
    stops at step 2 and resumes where the compiler works: it stays on the eager path it trained on
    (one segment, no refusal, no compile)."""
    broken = tmp_path / "broken-g++"
    broken.write_text(BROKEN_CXX)
    broken.chmod(0o755)
    halves = ("--steps", "4", "--checkpoint-every", "2")
    runs = {"missing": _train(tmp_path, "missing", "/nonexistent/g++"),
            "broken": _train(tmp_path, "broken", str(broken), *halves, "--max-steps-this-call", "2")}
    errs = {name: proc.communicate(timeout=600)[1] for name, (proc, _) in runs.items()}
    codes = {name: proc.returncode for name, (proc, _) in runs.items()}
    assert codes == {"missing": 0, "broken": 3}, {n: e[-3000:] for n, e in errs.items()}  # 3: preempted
    assert "torch.compile cannot build here (InvalidCxxCompiler" in errs["missing"], errs["missing"][-2000:]
    assert "torch.compile failed" in errs["broken"], errs["broken"][-2000:]
    assert json.loads((runs["broken"][1] / "status.json").read_text())["state"] == "preempted"
    resumed, _ = _train(tmp_path, "broken", None, *halves)  # this process's compiler works
    err = resumed.communicate(timeout=600)[1]
    assert resumed.returncode == 0, err[-3000:]
    assert "torch.compile" not in err, err[-2000:]
    for name, (_, run_dir) in runs.items():
        assert json.loads((run_dir / "status.json").read_text())["state"] == "done"
        manifest, segments = _records(run_dir)
        assert not manifest["numerics"].endswith("compiled"), (name, manifest["numerics"])
        assert [(s["from_step"], s["path"]["compiled"]) for s in segments] == [(0, False)], (name, segments)
    assert _records(runs["missing"][1])[0]["numerics"] == _records(runs["broken"][1])[0]["numerics"]
