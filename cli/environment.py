"""Environment variables that switch aoscale's behaviour: one table, checked when a command starts.

Each entry names the variable, the values it accepts and what they mean. `check_environment()`
runs first in every command (`cli.run_main`), so a bad value is one line and exit status 2 before
anything is read or written; the readers below (`kernels_enabled`, `numerics_change_allowed`)
apply the same rule where a library call meets the variable without a command around it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True)
class Switch:
    """An on/off variable: `on` and `off` are the only values it takes; unset means `default`."""

    name: str
    on: str
    off: str
    default: bool
    meaning: str  # what "on" does, for the refusal line and the docs

    def read(self) -> bool:
        """The variable's value as a bool; an unknown value raises InputError naming it."""
        text = os.environ.get(self.name)
        if text is None:
            return self.default
        if text not in (self.on, self.off):
            state = "on" if self.default else "off"
            raise InputError(f"{self.name}={text!r}: expected {self.on} ({self.meaning}) or {self.off}; "
                             f"unset it for the default ({state})")
        return text == self.on


KERNELS = Switch("AOSCALE_KERNELS", "1", "0", True,
                 "the fused CPU kernels where a C compiler exists; 0 is the eager PyTorch path")
ALLOW_NUMERICS_CHANGE = Switch("AOSCALE_ALLOW_NUMERICS_CHANGE", "1", "0", False,
                               "resume a run on another numerics path; its records then name both")
SWITCHES = (KERNELS, ALLOW_NUMERICS_CHANGE)


def check_environment() -> None:
    """Refuse (InputError, one line) any switch in SWITCHES set to a value it does not take."""
    for switch in SWITCHES:
        switch.read()


def kernels_enabled() -> bool:
    """`AOSCALE_KERNELS`: whether the fused CPU kernels may run (1, the default) or not (0)."""
    return KERNELS.read()


def numerics_change_allowed() -> bool:
    """`AOSCALE_ALLOW_NUMERICS_CHANGE`: whether a resume may continue on another numerics path."""
    return ALLOW_NUMERICS_CHANGE.read()
