"""Every product module (each .py file of analysis, cli, jobs, models and scaling but the packages'
__init__) is imported by some test, or is listed in UNTESTED with a one-line reason. A listed module
that a test imports is taken off the list, so the list only shrinks."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("analysis", "cli", "jobs", "models", "scaling")

UNTESTED = {
    "analysis.records.values": "reached through analysis.fit_curves in tests/analysis/records/test_record_values.py",
    "analysis.report.scope": "reached through analysis.fit_curves (which runs enter a fit) in tests/analysis",
    "analysis.fit.varpro": "the power-law solver of analysis.fit.powerlaw, pinned by tests/analysis/fit/test_powerlaw.py",
    "cli.durable": "fsync_dir: no observable result short of a power cut; run by every atomic write in the tests",
    "cli.errors": "the InputError and Busy types, imported by the tests through `cli`",
    "cli.outputs": "the output-folder markers, driven through the report and book commands in tests/test_bad_inputs.py",
    "cli.paths": "user paths and special files, driven through every command in tests/test_bad_inputs*.py",
    "jobs.data.rows": "rows of a local corpus, reached through jobs.data.corpus in tests/jobs/data",
    "jobs.eval.state": ("records_gap, reached through the ledger and the pipeline in tests/scaling/study/test_study.py "
                        "and tests/scaling/test_study_faults.py"),
    "jobs.train.__main__": "a 6-line `python -m` entry point forwarding to jobs.train.loop.main",
    "jobs.run.allocator": "imported by the child process that tests/jobs/run/test_allocator.py runs (a code string)",
    "models.families.sigma_gpt": "a 20-line alias of aogpt, built through models.build_model in tests/models",
    "scaling.run.backends": "driven through scaling.launch --backend in tests/scaling/run/test_backends.py",
    "scaling.plan.launch_checks": "driven through scaling.launch in tests/scaling/test_launch*.py",
}


def product_modules() -> set[str]:
    """Dotted names of every product module (packages' __init__ files left out)."""
    return {".".join(path.relative_to(REPO).with_suffix("").parts) for package in PRODUCT
            for path in (REPO / package).rglob("*.py") if path.name != "__init__.py"}


def imported_by(source: str) -> set[str]:
    """What a source imports: `import a.b` names a.b; `from a import b` names a and a.b."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def modules_tests_import() -> set[str]:
    return {name for path in (REPO / "tests").rglob("*.py") for name in imported_by(path.read_text())}


def test_every_product_module_is_imported_by_a_test_or_says_why_not():
    missing = sorted(product_modules() - modules_tests_import() - set(UNTESTED))
    assert not missing, "no test imports these (add one, or a reason to UNTESTED): " + ", ".join(missing)


def test_the_untested_list_names_only_untested_modules_that_exist():
    assert not set(UNTESTED) - product_modules(), "UNTESTED names modules that do not exist"
    tested = sorted(set(UNTESTED) & modules_tests_import())
    assert not tested, "a test imports these now; take them off UNTESTED: " + ", ".join(tested)
    assert all(reason.strip() for reason in UNTESTED.values())


def test_imports_are_read_from_the_source():
    names = imported_by("import jobs.run.spec\nfrom cli import rules\nfrom . import x\ndef f():\n    import models.rope\n")
    assert names == {"jobs.run.spec", "cli", "cli.rules", "models.rope"}
