"""Fixtures shared by the jobs tests."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread_cache(tmp_path_factory):
    """One tokenised-corpus cache for the module (and its subprocesses); one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield
    torch.set_num_threads(threads)
