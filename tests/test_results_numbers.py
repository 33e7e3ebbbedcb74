"""Every `x [lo, hi]` quoted in docs/results/**/*.md is found in the tables shipped beside it.

A Markdown file's sources are the `tables/*.csv` and `fits.json` of the nearest folder at or above
it (within docs/results) that ships them, and of the folders below that one (laptop/README.md and
reanalysis.md quote the first-1024-windows tables beside the whole-split ones). A quoted triple is
found when one record holds all three numbers within the printed precision (half a unit of the last
printed digit; for 1.751e+04, half of 10): a CSV row, or one JSON object of fits.json with the
numbers of its lists (a `value` and its `ci95`). `inf` is not looked up (JSON stores it as null).

Folders that ship no tables (the top-level files) are a known gap: their triples cannot be
checked, and `KNOWN_GAP` holds how many each file quotes, so the gap cannot grow unnoticed.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
NUMBER = r"[−+\-]?(?:\d+(?:\.\d+)?(?:e[+\-−]?\d+)?|inf|∞)"
TRIPLE = re.compile(rf"(?<![\w.])({NUMBER})\s+\[({NUMBER}),\s+({NUMBER})[\])]")  # a line may break inside
# quoted triples in files whose folder ships no tables: none since issue 36 (the review book's sections
# ship their studies; the quickstart tuner's log moved to docs/design-log/); a count may never rise
KNOWN_GAP: dict[str, int] = {}


def triples(text: str) -> list[tuple[str, str, str]]:
    """Every `x [lo, hi]` (or `x [lo, hi)`) in a text, as printed."""
    return TRIPLE.findall(text)


def value_of(printed: str) -> float:
    return float(printed.replace("−", "-").replace("∞", "inf"))


def tolerance(printed: str) -> float:
    """Half a unit of the last printed digit."""
    mantissa, _, exponent = printed.replace("−", "-").lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals) * (1 + 1e-9) + 1e-12


def home(md: Path) -> Path | None:
    """The nearest folder at or above `md` (up to docs/results) that ships tables or fits.json."""
    for folder in [md.parent, *md.parent.parents]:
        if (folder / "tables").is_dir() or (folder / "fits.json").is_file():
            return folder
        if folder == RESULTS:
            return None
    return None


def _json_records(node, out: list[list[float]]) -> None:
    """One record per JSON object: its numbers and those of its lists of numbers (a ci95)."""
    if isinstance(node, dict):
        numbers = []
        for value in node.values():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                numbers.append(float(value))
            elif isinstance(value, list) and all(isinstance(v, (int, float, type(None))) for v in value):
                numbers += [float(v) for v in value if v is not None and not isinstance(v, bool)]
        out.append(numbers)
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        if isinstance(child, (dict, list)):
            _json_records(child, out)


class Index:
    """The records of a folder's sources: every number with the id of the record that holds it."""

    def __init__(self, folder: Path):
        records: list[list[float]] = []
        for path in sorted(folder.rglob("tables/*.csv")):
            frame = pl.read_csv(path, infer_schema_length=None)
            numeric = frame.select([c for c in frame.columns if frame[c].dtype.is_numeric()])
            records += [[float(v) for v in row if v is not None] for row in numeric.iter_rows()]
        for path in sorted(folder.rglob("fits.json")):
            _json_records(json.loads(path.read_text()), records)
        pairs = sorted((v, i) for i, row in enumerate(records) for v in row if v == v)
        self.values = np.array([v for v, _ in pairs])
        self.ids = np.array([i for _, i in pairs])

    def holders(self, printed: str) -> set[int] | None:
        """The records holding this printed number within rounding (None: not looked up, inf)."""
        x = value_of(printed)
        if np.isinf(x):
            return None
        tol = tolerance(printed)
        start = np.searchsorted(self.values, x - tol, side="left")
        stop = np.searchsorted(self.values, x + tol, side="right")
        return set(self.ids[start:stop].tolist())

    def found(self, triple: tuple[str, str, str]) -> bool:
        """Whether one record holds all three numbers."""
        common: set[int] | None = None
        for printed in triple:
            holders = self.holders(printed)
            if holders is not None:
                common = holders if common is None else common & holders
        return bool(common)


def markdown_files() -> list[Path]:
    return sorted(RESULTS.rglob("*.md"))


def _name(md: Path) -> str:
    return md.relative_to(RESULTS).as_posix()


BOUND = [md for md in markdown_files() if home(md) is not None]
UNBOUND = [md for md in markdown_files() if home(md) is None]
INDEXES: dict[Path, Index] = {}


@pytest.mark.parametrize("md", BOUND, ids=_name)
def test_every_quoted_interval_is_in_the_folders_tables(md):
    folder = home(md)
    index = INDEXES.setdefault(folder, Index(folder))
    quoted = triples(md.read_text())
    missing = [f"{x} [{lo}, {hi}]" for x, lo, hi in quoted if not index.found((x, lo, hi))]
    where = folder.relative_to(RESULTS).as_posix()
    assert not missing, f"{_name(md)}: {len(missing)} of {len(quoted)} not in {where}/tables or fits.json: {missing}"


def test_folders_without_tables_are_a_known_gap_that_does_not_grow():
    counts = {_name(md): len(triples(md.read_text())) for md in UNBOUND}
    new = sorted(set(counts) - set(KNOWN_GAP))
    assert not new, f"ship tables beside these, or they are unchecked: {new}"
    grown = {name: (n, KNOWN_GAP[name]) for name, n in counts.items() if n > KNOWN_GAP[name]}
    assert not grown, f"more unchecked intervals than known (now, known): {grown}"
    assert {"frontier/README.md", "laptop/README.md", "review/README.md"} <= {_name(md) for md in BOUND}


def test_a_triple_is_found_only_in_one_record_and_within_its_printed_rounding(tmp_path):
    (tmp_path / "tables").mkdir()
    pl.DataFrame({"mean": [2.3797, 5.0], "lo": [1.6424, 1.8794], "hi": [2.5385, 2.4989]}).write_csv(
        tmp_path / "tables" / "t.csv")
    (tmp_path / "fits.json").write_text(json.dumps({"fit": {"value": 1.751e4, "ci95": [356.9, 3.099e4]}}))
    index = Index(tmp_path)
    assert index.found(("2.380", "1.642", "2.539")) and index.found(("2.38", "1.64", "2.54"))
    assert not index.found(("2.379", "1.642", "2.539"))  # 2.3797 prints as 2.380, not 2.379
    assert not index.found(("2.380", "1.879", "2.499"))  # the numbers exist, but in another row
    assert index.found(("1.751e+04", "356.9", "3.099e+04")) and not index.found(("1.75e+04", "357.9", "3.1e+04"))
    assert triples("L_opt 2.380 [1.642, 2.539] and k 5.27 [3.7, inf) and −0.244 [−0.325, −0.163]") == [
        ("2.380", "1.642", "2.539"), ("5.27", "3.7", "inf"), ("−0.244", "−0.325", "−0.163")]
