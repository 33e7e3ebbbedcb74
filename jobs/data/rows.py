"""Every row of a local corpus checked before anything is written: one line naming the file, the
row (or line) and the field.

`datasets` reads local files in bulk and fails, if at all, deep in tokenisation, without naming
the file (a JSON error "in row 200"), or skips what it cannot use. `check_rows` reads each local
file itself, cheaply and without writing: every `.jsonl` line must be a JSON object whose text
field is a string, and a parquet or Arrow file's text column must hold strings without nulls.
Empty strings are allowed (they are skipped as documents). Plain-text files have no fields.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli import InputError

ROW_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")
# Local corpora up to this size are read row by row before a run (about 1 s per 100 MB of JSON
# lines); larger ones are checked as they are tokenised (jobs.data.tokencache names the row and field).
CHECK_MAX_BYTES = 1 << 30


def _kind(value: Any) -> str:
    return "null" if value is None else f"{value!r:.40} ({type(value).__name__})"


def _text_error(file: Path, where: str, field: str, value: Any) -> InputError:
    return InputError(f"corpus: {file} {where}: \"{field}\" is {_kind(value)}, not a string; every "
                      f"record needs a \"{field}\" string (or pass --text-field NAME)")


def check_jsonl(file: Path, field: str) -> None:
    """Each non-blank line of a JSON-lines file: an object whose `field` is a string."""
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(f"corpus: {file} line {number} is not JSON ({error.msg} at column {error.colno}); "
                                 "write one JSON object per line") from None
            if not isinstance(record, dict):
                raise InputError(f"corpus: {file} line {number} is a JSON {type(record).__name__}, not an object; "
                                 f"write one object with a \"{field}\" string per line")
            if field not in record:
                raise InputError(f"corpus: {file} line {number} has no \"{field}\" field (keys: "
                                 f"{', '.join(sorted(record))[:80] or 'none'}); add it or pass --text-field NAME")
            if not isinstance(record[field], str):
                raise _text_error(file, f"line {number}", field, record[field])


def _json_array(file: Path) -> bool:
    with open(file, encoding="utf-8") as handle:
        start = handle.read(4096).lstrip()
    return start.startswith("[")


def check_table(file: Path, field: str, table: Any) -> None:
    """A pyarrow table's `field` column: present, of a string type, without nulls."""
    import pyarrow as pa  # noqa: PLC0415 - only for parquet/arrow corpora

    if field not in table.column_names:
        raise InputError(f"corpus: {file} has no \"{field}\" column (columns: {', '.join(table.column_names)}); "
                         "pass --text-field NAME")
    column = table.column(field)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        first = next((v for v in column.to_pylist() if v is not None), None)
        raise _text_error(file, "row 0" if first is None else f"row {column.to_pylist().index(first)}", field, first)
    if column.null_count:
        row = column.to_pylist().index(None)
        raise _text_error(file, f"row {row}", field, None)


def _read_table(file: Path, field: str) -> Any:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    if file.suffix == ".parquet":
        schema = pq.read_schema(file)
        return pq.read_table(file, columns=[field] if field in schema.names else None)
    with pa.memory_map(str(file)) as source:
        try:
            return pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_file(source).read_all()


def check_rows(files: list[Path], field: str) -> None:
    """Every row of every local corpus file with fields (see the module docstring), when they
    hold CHECK_MAX_BYTES or less in all."""
    for file in files:  # every file can be opened (a chmod 000 file is named here)
        try:
            with open(file, "rb") as handle:
                handle.read(1)
        except OSError as error:
            raise InputError(f"corpus: {file}: {error.strerror or error}; check the file and its permissions") from None
    files = [file for file in files if file.suffix in ROW_SUFFIXES]
    try:
        if sum(file.stat().st_size for file in files) > CHECK_MAX_BYTES:
            return
    except OSError:
        pass  # named below, file by file
    for file in files:
        if file.suffix not in ROW_SUFFIXES:
            continue
        try:
            if file.suffix in (".jsonl", ".json") and not (file.suffix == ".json" and _json_array(file)):
                check_jsonl(file, field)
            elif file.suffix in (".parquet", ".arrow"):
                check_table(file, field, _read_table(file, field))
        except UnicodeDecodeError as error:
            raise InputError(f"corpus: {file} is not UTF-8 text ({error.reason}); convert the file to UTF-8") from None
        except OSError as error:
            raise InputError(f"corpus: {file}: {error.strerror or error}; check the file and its permissions") from None
        except InputError:
            raise
        except Exception as error:  # pyarrow's own errors: an unreadable table
            raise InputError(f"corpus: {file} cannot be read as {file.suffix.lstrip('.')} "
                             f"({type(error).__name__}); check the file") from None
