"""What every aoscale command line shares: one input-error type and one argument parser.

Bad input anywhere (a flag, a spec field, a study file, a records file) raises `InputError`,
whose message is one line naming the field or file and the fix. `Parser` is argparse with that
contract: a parse error prints one line and exits with status 2. `run_main` turns an
`InputError` raised by a command into the same line and status 2 (and `Busy`, a run another
process holds, into status 75).

This package imports nothing else of ours, so every other package (`analysis` included) may use it.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from .environment import check_environment
from .errors import Busy, InputError

__all__ = ["Busy", "InputError", "Parser", "check_environment", "float_arg", "int_arg", "one_line", "parse",
           "run_main"]

EXIT_BAD_INPUT = 2  # argparse's own status for a usage error
EXIT_BUSY = 75  # EX_TEMPFAIL (sysexits.h): the resource is in use; try again later


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line `<name>: <message>; see --help`, exit 2."""

    def __init__(self, *args, error_prefix: str = "error", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.error_prefix = error_prefix

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.error_prefix}: {message}; see --help", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace | int:
    """`parser.parse_args(argv)`, or the exit status of `--help` / a parse error (already printed)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def run_main(prefix: str, body: Callable[[], int]) -> int:
    """`body()`'s exit status, or one line `<prefix>: <message>` on stderr and 2 on InputError
    (75 on Busy). The environment's switches (`cli.environment`) are checked first."""
    try:
        check_environment()
        return body()
    except InputError as error:
        print(f"{prefix}: {one_line(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Busy as error:
        print(f"{prefix}: {one_line(str(error))}", file=sys.stderr)
        return EXIT_BUSY


def one_line(text: str) -> str:
    """The first non-empty line of `text` (messages must fit on one line)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


def int_arg(text: str) -> int:
    """argparse type: an integer, with a one-line error."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def float_arg(text: str) -> float:
    """argparse type: a finite number, with a one-line error (`inf` and `nan` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value
