"""Durability of a rename: the one `fsync_dir`, shared by the run files (`jobs.run.files`) and the
report folders (`analysis.report.atomic`), which both rename a finished temporary into place."""
from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: str | Path) -> None:
    """Flush a directory's entries (a rename inside it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
