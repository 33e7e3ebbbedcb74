"""User paths (`--study-dir`, `--run-dir`, `--out`, a corpus): checked once, before anything is
written, each failure one `cli.InputError` line naming the flag and the path.

`user_path` refuses an empty path, a path or component too long for the file system, a symlink
loop, a dangling symlink, a device, a FIFO or a socket (`refuse_special`, the one check for
special files wherever a file or folder is expected), and any other OS error met while resolving
it. `not_nested` refuses a
folder inside another study or run (a folder holding one of the marker files), so one study
never writes into another's files. `within` is the one rule for an id or name read from a file
(study.json's `order` and `name`, a run id, `branch_from`) or a study's own folder (`rounds/`,
`predictions/`, `report/`) that becomes a path: safe path components (`cli.rules.name`) whose
path, symbolic links resolved, stays inside its root.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cli import InputError, rules

NAME_MAX = 255  # bytes in one path component (ext4, xfs, btrfs, APFS)
PATH_MAX = 4096  # bytes in a whole path (Linux)


SPECIAL = ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"),
           (stat.S_ISSOCK, "socket"))


def special_kind(path: str | os.PathLike) -> str | None:
    """What `path` is if it is a device, a FIFO or a socket (links followed), else None: such a
    file blocks or never ends when read, so it is refused before it is opened."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((name for test, name in SPECIAL if test(mode)), None)


def refuse_special(field: str, path: str | os.PathLike) -> None:
    """InputError where `path` is a device, a FIFO or a socket: a file or folder was expected."""
    kind = special_kind(path)
    if kind is not None:
        raise InputError(f"{field}: {os.fspath(path)} is a {kind}, not a regular file or folder; "
                         "pass a regular file or folder")


def _shown(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:40]}...{text[-20:]} ({len(text)} characters)"


def user_path(field: str, text: str | os.PathLike) -> Path:
    """`text` as a Path that can be looked up here (it need not exist); InputError otherwise."""
    raw = os.fspath(text)
    if not raw.strip():
        raise InputError(f"{field}: empty path; give a folder or file name")
    if "\0" in raw:
        raise InputError(f"{field}: {raw!r} holds a NUL byte; give a plain path")
    longest = max(raw.split(os.sep), key=lambda part: len(part.encode()))
    if len(longest.encode()) > NAME_MAX or len(raw.encode()) > PATH_MAX:
        raise InputError(f"{field}: {_shown(raw)} is too long for the file system (a name may hold {NAME_MAX} "
                         f"bytes, a path {PATH_MAX}); choose a shorter path")
    path = Path(raw).expanduser()
    try:
        path.resolve(strict=False)
        refuse_special(field, path)
        if path.is_symlink() and not path.exists():
            raise InputError(f"{field}: {raw} is a symbolic link to {os.readlink(path)}, which does not exist; "
                             "fix or remove the link")
    except RuntimeError:  # Python < 3.13 reports a symlink loop this way
        raise InputError(f"{field}: {raw} is a symbolic link loop; fix or remove the link") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise InputError(f"{field}: {raw} is a symbolic link loop; fix or remove the link") from None
        raise InputError(f"{field}: {raw}: {error.strerror or error}; give a path you can reach") from None
    return path


def marked(folder: Path, files: tuple[str, ...]) -> bool:
    """Whether `folder` holds every one of the marker `files` (unreadable counts as not)."""
    try:
        return all((folder / name).is_file() for name in files)
    except OSError:
        return False


def not_nested(field: str, path: Path, markers: dict[str, tuple[str, ...]], allowed: tuple[str, ...] = ()) -> None:
    """Refuse `path` inside a folder holding a kind's marker files (`{"run": ("spec.json",
    "manifest.json")}`): that folder is the kind's and is written by it. `allowed` names
    sub-folders of a marked folder where `path` may sit directly (a study's `runs/`)."""
    resolved = path.expanduser().resolve()
    for parent in resolved.parents:
        for kind, files in markers.items():
            if not marked(parent, files) or (resolved.parent.name in allowed and resolved.parent.parent == parent):
                continue
            raise InputError(f"{field}: {path} is inside the {kind} directory {parent}; pass a folder outside "
                             f"any {kind}")


def within(field: str, root: str | os.PathLike, *names: object) -> Path:
    """`root / name / ...` for ids or fixed folder names that become a path below `root` (a run id
    read from a file, a study's `rounds/`, `predictions/` or `report/` and the files in them): each
    name is one safe path component (`rules.name`: no `/`, no `..`, no leading dot) and the path,
    symbolic links resolved first (where it exists, and each folder on the way), stays inside
    `root`. InputError naming `field` otherwise; nothing is created."""
    path = Path(root)
    for name in names:
        rules.name(field, name)
        path = path / str(name)
    try:
        escapes = not path.resolve().is_relative_to(Path(root).resolve())
    except (OSError, RuntimeError):
        escapes = True
    if escapes:
        raise InputError(f"{field}: {path} is a symbolic link leading outside {root}; replace the link with "
                         "the folder or file itself")
    return path
