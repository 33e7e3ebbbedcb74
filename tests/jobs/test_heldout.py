"""The test split held out of validation's windows (jobs.heldout)."""
from __future__ import annotations

import numpy as np

from jobs import data, heldout
from jobs.tokenizers import get_encoding


def test_windows_split_disjointly_by_the_hash_rule_and_cover_the_split():
    enc = get_encoding("bytes")
    tokens = data.token_array("shakespeare", "bytes", "validation")
    routes = heldout.route_windows(tokens, 32, enc.decode)
    val, test = (set(routes[s].tolist()) for s in ("validation", "test"))
    assert not val & test and len(val | test) == len(tokens) // 32
    assert 0.45 < len(test) / (len(val) + len(test)) < 0.55
    windows = heldout.split_windows(tokens, 32, 256, enc.decode)
    for split, chunks in windows.items():
        starts = [routes[split][0], routes[split][-1]]
        first = np.asarray(tokens[starts[0]:starts[0] + 32])
        last = np.asarray(tokens[starts[1]:starts[1] + 32])
        assert chunks.shape == (256, 32)
        assert (chunks[0].numpy() == first).all() and (chunks[-1].numpy() == last).all()  # first to last window
    s = routes["test"][0]
    assert heldout.is_held_out(enc.decode(tokens[s:s + 32].tolist()), heldout.TEST_SHARE)
    again = heldout.split_windows(tokens, 32, 256, enc.decode)
    assert all((again[k] == windows[k]).all() for k in windows)  # the same windows for every run
