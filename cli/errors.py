"""The two errors every aoscale command line shares (re-exported by `cli`)."""
from __future__ import annotations


class InputError(ValueError):
    """Bad input found before anything was written; the message names the field and the fix."""


class Busy(RuntimeError):
    """What the command needs is in use by another process (exit status 75, try again later)."""
