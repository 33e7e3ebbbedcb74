"""Keep freed CPU memory in the process for the next step (glibc's malloc).

Training and evaluation free and allocate the same activation-sized blocks every step. By
default glibc maps each block above a dynamic threshold (128 KB at first) fresh from the OS and
trims the heap when much of it is free, so the next step pays page faults to get the memory
back. At the 3M rung (batch 8 x 256) a training step took 5,000-43,000 minor faults (~3 with
this setting) and an aogpt(adaln) step got ~6 % faster (3 paired runs: 290 -> 273 ms; ar's
change was within noise); MDM sampling (64 steps) took 250,000 faults per batch, 15,000 with
it (~2 % of its time). The trainer (on CPU) and `jobs.eval.evaluate.load_run` apply it; so do the
benches, to time what the jobs run.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, glibc <malloc.h>
MMAP_THRESHOLD_BYTES = 32 << 20  # above every activation of the CPU rungs (10M, batch 16: 21 MB)
TRIM_THRESHOLD_BYTES = 1 << 30  # free memory kept at the heap's top before it is returned


def keep_freed_memory() -> bool:
    """Serve blocks up to 32 MiB from the heap and keep up to 1 GiB of freed memory in it.

    Process-wide and permanent (the peak of one training step is reached again by the next).
    Returns False, changing nothing, where the C library has no `mallopt` (macOS, musl).
    """
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD_BYTES))
