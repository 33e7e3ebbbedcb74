"""Import rules between packages (DESIGN.md §1), read from the source with `ast`.

scaling -> jobs, models, analysis; jobs -> models; models -> nothing of ours;
analysis -> nothing of ours and not torch; every package -> cli (the shared CLI helpers), which
imports nothing of ours.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("scaling", "jobs", "models", "analysis", "cli")
ALLOWED = {
    "scaling": {"scaling", "jobs", "models", "analysis", "cli"},
    "jobs": {"jobs", "models", "cli"},
    "models": {"models", "cli"},
    "analysis": {"analysis", "cli"},
    "cli": {"cli"},
}
FORBIDDEN_THIRD_PARTY = {"analysis": {"torch"}, "cli": {"torch"}}


def imported_roots(source: str, package: str) -> set[str]:
    """Top-level package names a module imports (relative imports resolve to its own package)."""
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add(package if node.level else (node.module or "").split(".")[0])
    return roots


def violations(package: str, path: Path, source: str) -> list[str]:
    roots = imported_roots(source, package)
    bad = sorted((roots & set(OURS)) - ALLOWED[package]) + sorted(roots & FORBIDDEN_THIRD_PARTY.get(package, set()))
    return [f"{path} imports {root}" for root in bad]


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", OURS)
def test_package_imports_follow_the_rules(package):
    assert modules(package), f"{package} has no modules"
    bad = [v for path in modules(package) for v in violations(package, path.relative_to(REPO), path.read_text())]
    assert not bad, "; ".join(bad)


def test_the_checker_sees_violations():
    source = "from scaling import launch\nimport torch.nn as nn\nfrom . import ladder\nimport numpy\n"
    assert violations("models", Path("m.py"), source) == ["m.py imports scaling"]
    assert violations("analysis", Path("a.py"), source) == ["a.py imports scaling", "a.py imports torch"]
    assert violations("scaling", Path("s.py"), source) == []


def test_the_run_rules_and_size_rules_import_no_torch():
    """scaling.recipes and models.ladder plan studies without torch (models/__init__ loads its
    torch parts on first use), and the lazy names still resolve."""
    code = ("import sys, scaling.recipes, models.ladder, models; bad = 'torch' in sys.modules; "
            "assert models.build_model and models.FAMILIES['ar'] and models.EMA and 'torch' in sys.modules; "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
