"""Atomic writes (temp file in the same directory + fsync + rename) for everything the report keeps."""
from __future__ import annotations

import io
import os
import re
import tempfile
from pathlib import Path

import polars as pl


def safe_name(*parts: object) -> str:
    """A file-name stem from `parts` (None skipped): every run of characters outside [A-Za-z0-9._-]
    becomes one underscore (no ':' or '+' in figure names)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(str(p) for p in parts if p is not None))


def write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: Path, text: str) -> Path:
    """Write UTF-8 text atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_table(directory: Path, name: str, frame: pl.DataFrame) -> list[Path]:
    """`name`.parquet and `name`.csv (nested columns dropped from the CSV)."""
    buf = io.BytesIO()
    frame.write_parquet(buf)
    flat = frame.select([c for c, t in frame.schema.items() if not t.is_nested()])
    return [write_bytes(directory / f"{name}.parquet", buf.getvalue()),
            write_text(directory / f"{name}.csv", flat.write_csv())]
