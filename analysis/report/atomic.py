"""Every file the report keeps written atomically, and the report directory replaced as a whole.

`write_bytes` / `write_text` / `write_table` write one file: a temporary file in the same folder,
fsynced, then renamed into place, so a reader never sees half a file. `safe_name` makes the stems
of the report's figure and table names.

A directory is built in a temporary sibling folder, then swapped in:

`build_dir(target, write)` calls `write(tmp)` on `.<name>.tmp-<pid>@<host>-<random>` beside the target,
then exchanges the two folders in one `renameat2(RENAME_EXCHANGE)` (Linux; elsewhere, or where
the file system lacks it, two renames with a moment in between), and deletes the old one. A kill
or a full disk at any moment leaves the previous report whole; what the dead writer left beside
it (`.<name>.tmp-*`, `.<name>.old-*` of a process that no longer runs, or of another machine's
process untouched for hours) is removed by the next write. Entries of the target folder that the
report does not write (a README beside the report) are carried over into the new one as hard links.
"""
from __future__ import annotations

import ctypes
import errno
import io
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cli.durable import fsync_dir
from cli.faults import fault_point

if TYPE_CHECKING:
    import polars as pl

RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100
_STAGES = (".tmp-", ".old-")


FOREIGN_STALE_S = 6 * 3600  # another machine's leftovers (shared storage) are removed after this long


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


def _stage_name(target: Path, kind: str) -> str:
    return f".{target.name}{kind}{os.getpid()}@{socket.gethostname()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()


def _stale(path: Path, rest: str) -> bool:
    """Whether the writer of a staging folder (`<pid>@<host>-<random>`) is gone: a dead process
    on this machine, or one on another machine that has not touched it for FOREIGN_STALE_S."""
    pid, _, host_and_random = rest.partition("@")
    host = host_and_random.rpartition("-")[0]
    if not pid.isdigit():
        return False
    if host == socket.gethostname():
        return not _alive(int(pid))
    try:
        return time.time() - path.stat().st_mtime > FOREIGN_STALE_S
    except OSError:
        return False


def remove_stale(target: Path) -> list[Path]:
    """Delete the staging folders a killed or failed writer left beside `target`; returns them.
    A previous report a writer was killed while swapping out (`.old-*/<name>`) is put back first."""
    removed = []
    parent = target.parent
    for path in sorted(parent.glob(f".{target.name}.old-*/{target.name}")) if parent.is_dir() else ():
        if not target.exists():
            os.rename(path, target)
    for path in parent.glob(f".{target.name}.*-*") if parent.is_dir() else ():
        rest = next((path.name[len(f".{target.name}{kind}"):] for kind in _STAGES
                     if path.name.startswith(f".{target.name}{kind}")), None)
        if rest is not None and _stale(path, rest):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _link(src: str | Path, dest: str | Path) -> None:
    try:
        os.link(src, dest)
    except OSError:  # no hard links here: a copy
        shutil.copy2(src, dest)


def _carry_over(old: Path, new: Path, owned: tuple[str, ...]) -> None:
    """Hard-link the old folder's entries that the new one lacks and the writer does not own
    (`owned`: names only it writes); a torn `.*.tmp` file of an older writer is left behind."""
    for entry in old.iterdir():
        dest = new / entry.name
        torn = entry.name.startswith(".") and entry.name.endswith(".tmp")
        if entry.name in owned or torn or dest.exists() or dest.is_symlink():
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), dest)
        elif entry.is_dir():
            shutil.copytree(entry, dest, symlinks=True, copy_function=_link)
        else:
            _link(entry, dest)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def build_dir(target: Path, write: Callable[[Path], None], owned: tuple[str, ...] = ()) -> Path:
    """Build a folder with `write(tmp)` and put it in `target`'s place as a whole; returns `target`.
    The old folder's other entries are kept, except those named in `owned` (the writer's own)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target)
    tmp = Path(tempfile.mkdtemp(prefix=_stage_name(target, ".tmp-"), dir=target.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 would hide the report from others
        write(tmp)
        if target.is_dir():
            _carry_over(target, tmp, owned)
        fault_point("build_dir.staged")  # the new folder written in full, the old one still in place
        _swap(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _swap(tmp: Path, target: Path) -> None:
    """Put `tmp` at `target`; the old target (if any) is deleted afterwards."""
    fsync_dir(tmp)
    if not target.exists():
        os.rename(tmp, target)
    elif _exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old report
    else:
        old = Path(tempfile.mkdtemp(prefix=_stage_name(target, ".old-"), dir=target.parent))
        os.rename(target, old / target.name)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(target.parent)


def failure_line(error: OSError, target: Path) -> str:
    """One line for a report that could not be written (a full disk, a file size limit, ...)."""
    where = f" ({error.filename})" if getattr(error, "filename", None) else ""
    kept = "the previous report there is intact" if Path(target).is_dir() else "nothing was written"
    return (f"report: not written to {target}: {error.strerror or error}{where}; {kept}; "
            f"free space (or fix the folder) and rerun")
