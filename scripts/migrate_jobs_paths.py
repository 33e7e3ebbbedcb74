"""One-off: rewrite the module paths of jobs/ from before its grouping by concern (issue 23) to the new ones.

    python scripts/migrate_jobs_paths.py [--docs] [FILE ...]     (default: every tracked .py file)

Import lines (module level and inside functions, `from jobs.X import ...` and `from jobs import X`)
are rewritten always; with `--docs`, mentions in docstrings, comments and Markdown too
(`jobs.spec` -> `jobs.run.spec`, ...). Idempotent: new paths are left alone. Prints each file it
changes. For merging branches that still use the old paths; delete it once none are left.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MOVES = {
    "jobs.spec": "jobs.run.spec", "jobs.runfiles": "jobs.run.files", "jobs.runlock": "jobs.run.lock",
    "jobs.rng": "jobs.run.rng", "jobs.tracking": "jobs.run.tracking", "jobs.device": "jobs.run.device",
    "jobs.allocator": "jobs.run.allocator",
    "jobs.data": "jobs.data.corpus", "jobs.tokenizers": "jobs.data.tokenizers", "jobs.tokencache": "jobs.data.tokencache",
    "jobs.unigram": "jobs.data.unigram", "jobs.datasets": "jobs.data.datasets", "jobs.suites": "jobs.data.suites",
    "jobs.preflight": "jobs.train.preflight", "jobs.run_checks": "jobs.train.spec_rules", "jobs.train": "jobs.train.loop",
    "jobs.train_cli": "jobs.train.cli", "jobs.engines": "jobs.train.engines", "jobs.ds_config": "jobs.train.ds_config",
    "jobs.checkpoint": "jobs.train.checkpoint",
    "jobs.evaluate": "jobs.eval.evaluate", "jobs.generate": "jobs.eval.generate", "jobs.records": "jobs.eval.records",
    "jobs.evalwindows": "jobs.eval.windows", "jobs.data_ledger": "jobs.data.ledger",
    "jobs.heldout": "jobs.data.heldout", "jobs.wsd_branch": "jobs.train.wsd_branch",
    "jobs.cpu_compile": "jobs.run.cpu_compile", "jobs.evalstate": "jobs.eval.state",
    "jobs.corpus_rows": "jobs.data.rows",
}
REPO = Path(__file__).resolve().parents[1]
FROM = re.compile(r"^(\s*)from (jobs(?:\.\w+)?) import (.*)$")
# In prose, `jobs.data`, `jobs.train`, `jobs.evaluate` and `jobs.generate` stay: they still name a
# package or a `python -m` command.
PROSE = {old: new for old, new in MOVES.items() if old not in ("jobs.data", "jobs.train", "jobs.evaluate", "jobs.generate")}
PROSE_RE = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(PROSE, key=len, reverse=True)) + r")\b")


def _names(text: str) -> list[tuple[str, str]]:
    """(name, alias) pairs of an import's name list."""
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, alias = (s.strip() for s in part.partition(" as "))
        pairs.append((name, alias or name))
    return pairs


def _already_new(module: str, names: list[tuple[str, str]]) -> bool:
    """`from jobs.data import corpus`, `from jobs.train import checkpoint`: submodules of a new package."""
    package = REPO.joinpath(*module.split("."))
    return package.is_dir() and all((package / f"{name}.py").exists() for name, _ in names)


def rewrite_import(line: str) -> str:
    """One import line with old module paths replaced (a `from jobs import a, b` split per name)."""
    m = FROM.match(line)
    if not m:
        return line
    indent, module, names = m.groups()
    if module != "jobs":
        listed = names.split("#")[0].strip("() \\")
        moved = module in MOVES and not _already_new(module, _names(listed))
        return f"{indent}from {MOVES[module]} import {names}" if moved else line
    if "(" in names or "#" in names:
        return line  # a parenthesised or commented `from jobs import ...`: left for a person
    out = []
    for name, alias in _names(names):
        parent, _, leaf = MOVES.get(f"jobs.{name}", f"jobs.{name}").rpartition(".")
        out.append(f"{indent}from {parent} import {leaf}" + ("" if leaf == alias else f" as {alias}"))
    return "\n".join(out)


def _prose(line: str) -> str:
    return line if FROM.match(line) else PROSE_RE.sub(lambda m: PROSE[m.group(1)], line)


def main(argv: list[str]) -> int:
    docs = "--docs" in argv
    patterns = ["*.py", "*.md"] if docs else ["*.py"]
    files = [Path(a) for a in argv if a != "--docs"] or [
        REPO / p for p in subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True,
                                         check=True).stdout.split()]
    for path in files:
        text = path.read_text()
        lines = text.split("\n")
        if path.suffix == ".py":
            lines = [rewrite_import(line) for line in lines]
        if docs:
            lines = [_prose(line) for line in lines]
        new = "\n".join(lines)
        if new != text:
            path.write_text(new)
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
