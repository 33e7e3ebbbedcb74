"""A test split beside validation, held out by the validation split's own hash rule.

Studies that choose settings on validation (scaling.study.sweep, analysis.records.selection) report another
split so that the choice cannot flatter what is reported. A corpus's validation split is cut into
the non-overlapping `seq_len` windows evaluation scores; each window goes to `test` when
blake2b-64 of its text falls below TEST_SHARE · 2^64 (`jobs.data.tokencache.is_held_out`, the rule that
holds validation documents out of a corpus without a validation split), to `validation`
otherwise. Windows, not documents: Shakespeare's validation split is 3 plays. Each split then
scores `n` of its windows spaced evenly over the whole split (all of them when it has fewer), so
both cover the split from its first window to its last and every run of a study scores the same.
"""
from __future__ import annotations

import numpy as np

from jobs.data.tokencache import is_held_out

TEST_SPLIT = "test"
TEST_SHARE = 0.5


def route_windows(tokens: np.ndarray, seq_len: int, decode) -> dict[str, np.ndarray]:
    """Window start offsets of each split: {"validation": [...], "test": [...]}."""
    starts = np.arange(len(tokens) // seq_len) * seq_len
    test = np.array([is_held_out(decode(tokens[s:s + seq_len].tolist()), TEST_SHARE) for s in starts], dtype=bool)
    return {"validation": starts[~test], TEST_SPLIT: starts[test]}


def spread(starts: np.ndarray, n: int) -> np.ndarray:
    """`n` of the starts, evenly spaced over them (all when there are no more than n)."""
    if len(starts) <= n:
        return starts
    return starts[np.linspace(0, len(starts) - 1, n).round().astype(int)]


def split_windows(tokens: np.ndarray, seq_len: int, n: int, decode) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per split, (the start offsets routed to it, up to `n` of them spread as the module docstring says)."""
    return {split: (starts, spread(starts, n)) for split, starts in route_windows(tokens, seq_len, decode).items()}
