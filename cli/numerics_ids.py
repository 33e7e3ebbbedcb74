"""Reading numerics path ids (the `numerics` record column written by jobs/run/numerics.py).

An id is `<machine>.<kernels>`: 8 hex digits hashing everything that picks the rounding but the
fused kernels, then the kernels' build key, `off`, or `-` where a pass never reaches them. Runs
from before the split carry one 12-hex id; it reads as its own machine with kernels unknown (`-`).
Shared by status (scaling) and the fairness notes (analysis), which may not import each other.
"""

from __future__ import annotations

NOT_REACHED = "-"  # the kernels part of a pass that never reaches the fused kernels


def parts(value: str) -> list[tuple[str, str]]:
    """(machine, kernels) for each segment of a column value ("+"-joined where a resume changed path)."""
    out = []
    for part in value.split("+"):
        machine, _, kernel = part.partition(".")
        out.append((machine, kernel or NOT_REACHED))
    return out


def machines_and_builds(values: list[str]) -> tuple[list[str], list[str]]:
    """The distinct machine parts and the distinct kernel builds (passes that reach them) of `values`."""
    found = [p for value in values for p in parts(value)]
    return sorted({m for m, _ in found}), sorted({k for _, k in found} - {NOT_REACHED})


def conflicting(values: list[str]) -> bool:
    """Whether the ids name more than one path: two machine parts, or two kernel parts among the
    passes that use the kernels (an AR run and an AO-GPT run of one machine share a path)."""
    machines, builds = machines_and_builds(values)
    return len(machines) > 1 or len(builds) > 1
