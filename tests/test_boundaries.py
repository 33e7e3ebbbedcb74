"""Import rules between packages (DESIGN.md §1), read from the source with `ast`.

scaling -> jobs, models, analysis; jobs -> models; models -> nothing of ours;
analysis -> nothing of ours and not torch; every package -> cli (the shared CLI helpers), which
imports nothing of ours.
"""
from __future__ import annotations

import ast
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
