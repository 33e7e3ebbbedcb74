"""Global and generator RNG state, saved with each checkpoint so a resumed run draws what an
uninterrupted one would (weights_only-loadable: tensors, ints, floats, strings, tuples)."""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch



def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """torch (CPU and CUDA), numpy, python and loss-generator RNG states."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)},
             "generator": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def seed_everything(seed: int) -> None:
    """Seed torch (all devices), numpy and python's global RNGs."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    """Inverse of `rng_state`."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
