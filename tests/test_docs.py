"""Every design citation in the project points at a section of docs/DESIGN.md that exists, and
every package says in its docstring what it holds."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "DESIGN.md"
CITATION = re.compile(r"DESIGN(?:\.md)?`?\s*§\s*(\d+(?:\.\d+)?)")
PACKAGES = ("scaling", "jobs", "models", "analysis", "cli")


def cited_files() -> list[Path]:
    roots = [REPO / p for p in (*PACKAGES, "tests", "bench", "scripts", "docs")]
    files = [f for root in roots for f in root.rglob("*") if f.suffix in (".py", ".md", ".toml", ".sh")]
    return sorted(files + [REPO / "README.md"])


def design_sections() -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DESIGN.read_text(), flags=re.M))


def test_every_design_citation_names_an_existing_section():
    sections = design_sections()
    assert {"1", "4.2", "6.1", "12"} <= sections
    bad = []
    for path in cited_files():
        text = path.read_text(errors="replace")
        bad += [f"{path.relative_to(REPO)}: §{n}" for n in CITATION.findall(text) if n not in sections]
        if path not in (DESIGN, Path(__file__).resolve()) and re.search(r"(?<![/\w])(DESIGN|REFERENCES)(\.md)?\b(?!`? *§)", text):
            bad += [f"{path.relative_to(REPO)}: a design citation without docs/DESIGN.md §N"]
    assert not bad, "; ".join(bad)


@pytest.mark.parametrize("package", sorted({*PACKAGES, *(f"jobs.{p.parent.name}" for p in
                                                       (REPO / "jobs").glob("*/__init__.py"))}))
def test_every_package_docstring_says_what_it_holds(package):
    path = REPO.joinpath(*package.split("."), "__init__.py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert len(doc.split()) >= 12 and doc.strip() != "aoscale package.", f"{package}: {doc!r}"
