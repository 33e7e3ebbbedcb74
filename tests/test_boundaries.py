"""Import rules between packages (docs/DESIGN.md §2), read from the source with `ast`.

scaling -> jobs, models, analysis; jobs -> models; models -> nothing of ours;
analysis -> nothing of ours and not torch; every package -> cli (the shared CLI helpers), which
imports nothing of ours; bench (benchmarks run as scripts) and reference (the reference studies'
drivers) -> any package but each other, and no package -> bench or reference. And no module of
ours takes part in an import cycle, counting imports inside functions.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("scaling", "jobs", "models", "analysis", "cli", "bench", "reference")
ALLOWED = {
    "bench": set(OURS) - {"reference"},
    "reference": set(OURS) - {"bench"},
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
    assert violations("bench", Path("b.py"), source + "from bench import networks\n") == []
    assert violations("scaling", Path("s.py"), "import reference.review_book\n") == ["s.py imports reference"]
    assert violations("bench", Path("b.py"), "from reference import review_book\n") == ["b.py imports reference"]
    assert violations("cli", Path("c.py"), "from bench.networks import x\n") == ["c.py imports bench"]


def test_the_run_rules_and_size_rules_import_no_torch():
    """jobs.run.recipes and models.ladder plan studies without torch (models/__init__ loads its
    torch parts on first use), and the lazy names still resolve."""
    code = ("import sys, jobs.run.recipes, models.ladder, models; bad = 'torch' in sys.modules; "
            "assert models.build_model and models.FAMILIES['ar'] and models.EMA and 'torch' in sys.modules; "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- no import cycles -------------------------------------------------------------------------
def module_name(path: Path) -> str:
    """Dotted name of a module file under the repository (a package is its __init__)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports anywhere in its text (module level and inside
    functions alike). `sources` maps a module name to (its source, whether it is a package).
    `from pkg import name` points at `pkg.name` where that is a module, else at `pkg`."""
    def known(name: str) -> str | None:
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, (source, is_package) in sources.items():
        package = name if is_package else name.rpartition(".")[0]
        targets = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
        graph[name] = {t for t in map(known, targets) if t and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def project_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(path): (path.read_text(), path.name == "__init__.py")
            for package in OURS for path in modules(package)}


def test_no_import_cycles_counting_imports_inside_functions():
    found = cycles(import_graph(project_sources()))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import():
    sources = {"p": ("", True), "p.a": ("from . import b\n", False),
               "p.b": ("def f():\n    from p.c import x\n", False), "p.c": ("from .a import y\n", False),
               "p.d": ("import p.a\n", False)}
    graph = import_graph(sources)
    assert graph["p.b"] == {"p.c"} and graph["p.d"] == {"p.a"}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]


# ---- the order inside jobs --------------------------------------------------------------------
# Each sub-package of jobs imports only those before it (and itself); jobs' own modules
# (pipeline) may import every sub-package,
# and no sub-package imports them (the executors name the pipeline as a string, resolved at run time).
JOBS_ORDER = ("run", "data", "train", "eval", "executors")


def part_of(module: str, root: str) -> str | None:
    """The sub-package (or top-level module) of `root` a module belongs to; None outside it."""
    parts = module.split(".")
    return parts[1] if parts[0] == root and len(parts) > 1 else None


def order_violations(graph: dict[str, set[str]], root: str, order: tuple[str, ...]) -> list[str]:
    """Each import from a sub-package of `root` (in `order`) to a later one."""
    bad = []
    for module, targets in sorted(graph.items()):
        part = part_of(module, root)
        if part not in order:
            continue  # outside root, its __init__ or a top-level module of it: may import any part
        allowed = set(order[:order.index(part) + 1])
        bad += [f"{module} imports {t}" for t in sorted(targets)
                if part_of(t, root) is not None and part_of(t, root) not in allowed]
    return bad


def jobs_part(module: str) -> str | None:
    return part_of(module, "jobs")


def jobs_order_violations(graph: dict[str, set[str]]) -> list[str]:
    return order_violations(graph, "jobs", JOBS_ORDER)


def test_jobs_subpackages_import_in_one_direction():
    graph = import_graph(project_sources())
    parts = {jobs_part(m) for m in graph if jobs_part(m)}
    subpackages = {p for p in parts if (REPO / "jobs" / p / "__init__.py").exists()}
    assert subpackages - {"evaluate", "generate"} == set(JOBS_ORDER), "a jobs sub-package is not in JOBS_ORDER"
    bad = jobs_order_violations(graph)
    assert not bad, "; ".join(bad)


def test_the_order_check_sees_an_upward_import():
    graph = {"jobs.run.spec": {"jobs.train.loop"}, "jobs.train.loop": {"jobs.run.spec", "models.core"},
             "jobs.pipeline": {"jobs.eval.evaluate"}, "jobs.data.corpus": {"jobs.pipeline"}}
    assert jobs_order_violations(graph) == ["jobs.data.corpus imports jobs.pipeline",
                                            "jobs.run.spec imports jobs.train.loop"]


def test_the_tests_mirror_the_jobs_layout():
    for part in JOBS_ORDER:
        assert (REPO / "tests" / "jobs" / part / "__init__.py").exists(), f"tests/jobs/{part}/ is missing"
    assert not sorted((REPO / "tests" / "jobs").glob("test_*.py")), "jobs tests belong in a sub-folder"


# ---- the order inside analysis ----------------------------------------------------------------
# records -> fit -> compare -> report: each sub-package of analysis imports only those before it
# (and itself); analysis/__init__ (the bootstrap constants) and the entry point fit_curves sit
# above them all, and no sub-package imports fit_curves.
ANALYSIS_ORDER = ("records", "fit", "compare", "report")


def analysis_part(module: str) -> str | None:
    return part_of(module, "analysis")


def analysis_order_violations(graph: dict[str, set[str]]) -> list[str]:
    return order_violations(graph, "analysis", ANALYSIS_ORDER)


def test_analysis_subpackages_import_in_one_direction():
    graph = import_graph(project_sources())
    parts = {analysis_part(m) for m in graph if analysis_part(m)}
    subpackages = {p for p in parts if (REPO / "analysis" / p / "__init__.py").exists()}
    assert subpackages == set(ANALYSIS_ORDER), "an analysis sub-package is not in ANALYSIS_ORDER"
    assert parts - subpackages == {"fit_curves"}, "analysis keeps one top-level module, the entry point"
    bad = analysis_order_violations(graph)
    assert not bad, "; ".join(bad)


def test_the_analysis_order_check_sees_an_upward_import():
    graph = {"analysis.records.read": {"analysis.report.render"}, "analysis.fit.fits": {"analysis.records.cells"},
             "analysis.fit_curves": {"analysis.report.summary"}}
    assert analysis_order_violations(graph) == ["analysis.records.read imports analysis.report.render"]


def test_the_tests_mirror_the_analysis_layout():
    for part in ANALYSIS_ORDER:
        assert (REPO / "tests" / "analysis" / part / "__init__.py").exists(), f"tests/analysis/{part}/ is missing"


# ---- the order inside scaling -----------------------------------------------------------------
# study -> plan -> run: each sub-package of scaling imports only those before it (and itself); the
# entry points (launch, status, rounds, prepare: `python -m scaling.launch` and the others) sit above them all, and no
# sub-package imports an entry point.
SCALING_ORDER = ("study", "plan", "run")
SCALING_ENTRY_POINTS = {"launch", "status", "rounds", "prepare"}


def scaling_order_violations(graph: dict[str, set[str]]) -> list[str]:
    """Upward imports between scaling's sub-packages, and any import of an entry point from one."""
    return order_violations(graph, "scaling", SCALING_ORDER)


def test_scaling_subpackages_import_in_one_direction():
    graph = import_graph(project_sources())
    parts = {part_of(m, "scaling") for m in graph if part_of(m, "scaling")}
    subpackages = {p for p in parts if (REPO / "scaling" / p / "__init__.py").exists()}
    assert subpackages == set(SCALING_ORDER), "a scaling sub-package is not in SCALING_ORDER"
    assert parts - subpackages == SCALING_ENTRY_POINTS, "scaling keeps its entry points at the top, nothing else"
    bad = scaling_order_violations(graph)
    assert not bad, "; ".join(bad)


def test_the_scaling_order_check_sees_an_upward_import():
    graph = {"scaling.study.sweep": {"scaling.run.journal"}, "scaling.run.scheduler": {"scaling.study.arms"},
             "scaling.plan.dry_run": {"scaling.launch"}, "scaling.launch": {"scaling.run.scheduler"}}
    assert scaling_order_violations(graph) == ["scaling.plan.dry_run imports scaling.launch",
                                               "scaling.study.sweep imports scaling.run.journal"]


def test_the_tests_mirror_the_scaling_layout():
    for part in SCALING_ORDER:
        assert (REPO / "tests" / "scaling" / part / "__init__.py").exists(), f"tests/scaling/{part}/ is missing"
