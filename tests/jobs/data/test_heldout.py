"""The test split held out of validation's windows (jobs.data.heldout)."""
from __future__ import annotations

from jobs.data import corpus as data
from jobs.data import heldout
from jobs.data.tokenizers import get_encoding


def test_windows_split_disjointly_by_the_hash_rule_and_cover_the_split():
    enc = get_encoding("bytes")
    tokens = data.token_array("shakespeare", "bytes", "validation")
    routes = heldout.route_windows(tokens, 32, enc.decode)
    val, test = (set(routes[s].tolist()) for s in ("validation", "test"))
    assert not val & test and len(val | test) == len(tokens) // 32
    assert 0.45 < len(test) / (len(val) + len(test)) < 0.55
    windows = heldout.split_windows(tokens, 32, 256, enc.decode)
    for split, (routed, chosen) in windows.items():
        assert (routed == routes[split]).all() and len(chosen) == 256
        assert chosen[0] == routed[0] and chosen[-1] == routed[-1]  # first to last window
        assert set(chosen.tolist()) <= set(routed.tolist())
    s = routes["test"][0]
    assert heldout.is_held_out(enc.decode(tokens[s:s + 32].tolist()), heldout.TEST_SHARE)
    again = heldout.split_windows(tokens, 32, 256, enc.decode)
    assert all((again[k][1] == windows[k][1]).all() for k in windows)  # the same windows for every run
