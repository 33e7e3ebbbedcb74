"""Every dotted path of ours that a docstring or a comment names (`jobs.run.spec`, `analysis.compare.gap.compute_gaps`)
still resolves: to a module of the tree, or to a name that module binds at its top level (and, past
a class, to a name in the class body). A module moved by a regroup leaves no stale path behind.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("analysis", "bench", "cli", "jobs", "models", "scaling")
SCANNED = (*PACKAGES, "tests", "scripts", "docs", "examples")
EXEMPT: set[str] = set()
# Prose read by people: README and the maintained docs (design-log/ keeps dated notes as written).
MARKDOWN = ("README.md", "analysis/README.md", "docs/USAGE.md", "docs/DESIGN.md", "docs/CONTRACTS.md",
            "docs/recipe-fidelity.md")
FILE_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join((*PACKAGES, "tests", "scripts", "docs", "examples", "reference"))
                       + r")/[\w./-]*[\w/])")
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)")


@cache
def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every module and package of ours."""
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def bound_names(body: list[ast.stmt]) -> set[str]:
    """The names a module or class body binds, looking inside if/try blocks but not functions."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            names |= bound_names(node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", []))
    return names


@cache
def module_tree(module: str) -> ast.Module:
    return ast.parse(module_files()[module].read_text())


def lazy_names(tree: ast.Module) -> set[str]:
    """Keys of a module-level `_LAZY` dict: names a package's __getattr__ imports on first use."""
    return {k.value for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)
            and isinstance(node.value, ast.Dict) for k in node.value.keys if isinstance(k, ast.Constant)}


def resolves(dotted: str) -> bool:
    """Whether `dotted` names a module of ours, or a name bound in one (then a class member)."""
    modules = module_files()
    parts = dotted.split(".")
    k = len(parts)
    while k and ".".join(parts[:k]) not in modules:
        k -= 1
    if k == len(parts):
        return True
    if k == 0:
        return False
    tree = module_tree(".".join(parts[:k]))
    name, rest = parts[k], parts[k + 1:]
    if name not in bound_names(tree.body) | lazy_names(tree):
        return False
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return not rest or cls is None or rest[0] in bound_names(cls.body)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring or bare string statement in a source."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out += [(node.lineno + i, line) for i, line in enumerate(node.value.value.splitlines())]
    return out


def stale_paths(source: str) -> list[tuple[int, str]]:
    """(line, dotted path) of each path of ours in the comments and docstrings that does not resolve."""
    return [(line, m.group(1).rstrip(".")) for line, text in prose(source)
            for m in DOTTED.finditer(text) if not resolves(m.group(1).rstrip("."))]


def test_no_docstring_or_comment_names_a_path_that_moved():
    files = sorted(f for root in SCANNED for f in (REPO / root).rglob("*.py"))
    bad = [f"{f.relative_to(REPO)}:{line}: {dotted}" for f in files if str(f.relative_to(REPO)) not in EXEMPT
           for line, dotted in stale_paths(f.read_text())]
    assert not bad, "stale paths:\n" + "\n".join(bad)


def stale_in_markdown(text: str) -> list[tuple[int, str]]:
    """(line, path) of each dotted path or repository file path in markdown that does not resolve
    (a glob or placeholder such as `models/families/<name>.py` is checked up to its last folder)."""
    bad = []
    for number, line in enumerate(text.splitlines(), 1):
        bad += [(number, m.group(1).rstrip(".")) for m in DOTTED.finditer(line)
                if not resolves(m.group(1).rstrip("."))]
        bad += [(number, m.group(1)) for m in FILE_PATH.finditer(line) if not (REPO / m.group(1)).exists()]
    return bad


def test_no_readme_or_doc_names_a_path_that_moved():
    bad = [f"{name}:{line}: {path}" for name in MARKDOWN for line, path in stale_in_markdown((REPO / name).read_text())]
    assert not bad, "stale paths:\n" + "\n".join(bad)


def test_the_markdown_check_sees_a_moved_file():
    assert stale_in_markdown("`jobs/cpu_compile.py` and `jobs/run/cpu_compile.py`; jobs.run.spec.RunSpec") == [
        (1, "jobs/cpu_compile.py")]


def test_the_check_sees_a_moved_module_and_a_missing_name():
    source = ('"""Reads `jobs.run_checks` and jobs.run.spec.RunSpec, then jobs.run.spec.Nope."""\n'
              "x = 1  # see cli.faults.fault_point and analysis.compare.gap, not jobs.cpu_compile\n"
              "y = 'jobs.tokencache'  # a string in code is not prose; models.FAMILIES is lazy\n")
    assert stale_paths(source) == [(2, "jobs.cpu_compile"), (1, "jobs.run_checks"), (1, "jobs.run.spec.Nope")]


def test_a_class_member_resolves_and_a_missing_one_does_not():
    assert resolves("jobs.run.spec.RunSpec") and resolves("cli.faults.FAULT_ENV")
    assert not resolves("jobs.run.spec.RunSpec.no_such_member") and not resolves("jobs.evalstate")
