"""analysis.records.cells.CellKey: a cell's key read by name, and still the plain tuple it was (the
same hash, order and equality), so fits keyed by it and the report's order are unchanged."""
from __future__ import annotations

import polars as pl

from analysis.records.cells import CELL_KEYS, Cell, CellKey, build_cells


def test_the_key_names_every_cell_column_in_order():
    assert CellKey._fields == CELL_KEYS
    key = CellKey("aogpt", "", "nll_l2r", "owt", "test", 4)
    assert (key.family, key.metric, key.data, key.m, key.conditions) == ("aogpt", "nll_l2r", ("owt", "test"), 4,
                                                                         (4, None, None, None, None))


def test_the_key_hashes_compares_and_sorts_as_the_plain_tuple():
    plain = [("mdm", "", "nll_l2r", "owt", "test", None, None, None, None, None),
             ("ar", "", "nll_l2r", "owt", "test", None, None, None, None, None)]
    named = [CellKey(*k) for k in plain]
    assert named == plain and sorted(named) == sorted(plain)
    assert {k: i for i, k in enumerate(named)}[plain[1]] == 1
    assert Cell(plain[0], ()).key == named[0] and isinstance(Cell(plain[0], ()).key, CellKey)


def test_build_cells_gives_named_keys():
    rows = [dict(family="ar", variant="", metric="nll_l2r", dataset="owt", split="test", m=None, size=s, seed=seed,
                 value=3.0 - 0.1 * seed, n_params=n) for s, n in (("s", 1e6), ("m", 4e6)) for seed in (0, 1)]
    frame = pl.DataFrame(rows, schema_overrides={"m": pl.Int64})
    (cell,) = build_cells(frame, "n_params")
    assert isinstance(cell.key, CellKey) and cell.key.family == "ar" and cell.key.data == ("owt", "test")
    assert [p.label for p in cell.points] == ["s", "m"]
