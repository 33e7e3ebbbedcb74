"""analysis reads files only: it imports neither torch nor any other package of ours."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_analysis_imports_no_torch_and_no_sibling_package():
    code = ("import sys, analysis.fit_curves, analysis.compare.ablations; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'models', 'jobs', 'scaling')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
