"""The `aoscale` console script: one command over the existing entry points' `main(argv)`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli import aoscale

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_every_command(capsys):
    assert aoscale.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in ("launch", "status", "fit", "train", "evaluate", "generate"))


@pytest.mark.parametrize("argv, fragment", [([], "no command given"), (["bogus"], "unknown command 'bogus'")])
def test_no_or_an_unknown_command_is_one_line_and_status_2(capsys, argv, fragment):
    assert aoscale.main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


@pytest.mark.parametrize("command, prog", [("status", "python -m scaling.status"), ("fit", "python -m analysis.fit_curves"),
                                           ("train", "python -m jobs.train"), ("generate", "python -m jobs.eval.generate")])
def test_each_command_is_the_existing_main(capsys, command, prog):
    assert aoscale.main([command, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: {prog}")


def test_a_command_passes_its_exit_status_through(tmp_path, capsys):
    assert aoscale.main(["status", str(tmp_path / "nowhere")]) == 2
    assert "status" in capsys.readouterr().err


def test_the_module_form_runs_without_torch():
    code = "import sys; from cli.aoscale import main; rc = main(['--help']); sys.exit(10 if 'torch' in sys.modules else rc)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-m", "cli.aoscale", "--help"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and "generate" in proc.stdout
