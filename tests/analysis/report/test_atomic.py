"""A report folder is replaced as a whole: what the writer owns is new, the rest is kept, a failed
write leaves the old folder and no leftovers, a dead writer's leftovers go at the next write."""
from __future__ import annotations

import socket

import pytest

from analysis.report import atomic

OWNED = ("fits.json", "tables")


def _write(version: str):
    def write(tmp):
        (tmp / "fits.json").write_text(version)
        (tmp / "tables").mkdir()
        (tmp / "tables" / f"{version}.csv").write_text(version)
    return write


def test_the_new_folder_replaces_the_owned_entries_and_keeps_the_others(tmp_path):
    target = tmp_path / "report"
    atomic.build_dir(target, _write("v1"), owned=OWNED)
    (target / "README.md").write_text("mine")
    (target / ".fits.json.x.tmp").write_text("torn")
    atomic.build_dir(target, _write("v2"), owned=OWNED)
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "fits.json", "tables"]
    assert (target / "fits.json").read_text() == "v2" and [p.name for p in (target / "tables").iterdir()] == ["v2.csv"]
    assert (target / "README.md").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_failed_write_leaves_the_previous_folder_and_nothing_beside_it(tmp_path):
    target = tmp_path / "report"
    atomic.build_dir(target, _write("v1"), owned=OWNED)

    def fail(tmp):
        _write("v2")(tmp)
        raise OSError(28, "No space left on device", str(tmp / "report.html"))

    with pytest.raises(OSError):
        atomic.build_dir(target, fail, owned=OWNED)
    assert (target / "fits.json").read_text() == "v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    line = atomic.failure_line(OSError(28, "No space left on device", "x"), target)
    assert "\n" not in line and "previous report there is intact" in line and "No space left" in line


def test_a_dead_writers_leftovers_are_removed_and_a_swapped_out_report_is_put_back(tmp_path):
    host = socket.gethostname()
    target = tmp_path / "report"
    dead = 2**22 + 12345  # above the default pid_max: no such process
    (tmp_path / f".report.tmp-{dead}@{host}-abc").mkdir()
    old = tmp_path / f".report.old-{dead}@{host}-abc"
    (old / "report").mkdir(parents=True)
    (old / "report" / "fits.json").write_text("v0")  # killed between the two renames of a swap
    atomic.remove_stale(target)
    assert (target / "fits.json").read_text() == "v0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_notes_that_say_the_same_of_several_runs_are_one_line():
    from analysis.records.health import group_notes

    notes = [f"run r{i}: its checkpoints are missing (ckpt/ holds none)" for i in range(8)]
    notes.insert(3, "run x: eval.parquet is unreadable")
    assert group_notes(notes) == [
        "8 runs (r0, r1, r2, r3, r4, r5 and 2 more): their checkpoints are missing (ckpt/ holds none)",
        "run x: eval.parquet is unreadable"]
    assert group_notes(["run a: its final checkpoint is corrupt", "a plain note"]) == [
        "run a: its final checkpoint is corrupt", "a plain note"]
