"""Both engines implement the one `Engine` protocol the training loop is typed with."""
from __future__ import annotations

import inspect

import torch

from jobs.run.spec import RunSpec
from jobs.train.engines import ENGINES, DeepSpeedEngine, Engine, TorchEngine
from models import build_model

METHODS = sorted(n for n, v in vars(Engine).items() if callable(v) and not n.startswith("_"))
ATTRIBUTES = sorted(Engine.__annotations__)


def test_the_torch_engine_is_an_engine():
    torch.set_num_threads(1)
    spec = RunSpec(family="ar", size="0.1M", steps=1, lr=1e-3, warmup_steps=0, seq_len=16, batch_size=2, micro_batch_size=1,
                   precision="fp32", compile="off")
    engine = TorchEngine(build_model("ar", "0.1M", vocab_size=257, seq_len=16), spec)
    assert isinstance(engine, Engine)
    assert (engine.name, engine.rank, engine.world_size, engine.n_micro_total) == ("torch", 0, 1, 2)


def test_the_deepspeed_engine_defines_every_member():
    """Without starting DeepSpeed: every method on the class, every attribute set by the class or
    its constructor."""
    source = inspect.getsource(DeepSpeedEngine.__init__)
    assert all(callable(getattr(DeepSpeedEngine, name, None)) for name in METHODS)
    missing = [a for a in ATTRIBUTES if not hasattr(DeepSpeedEngine, a) and f"self.{a}" not in source]
    assert not missing, missing
    assert set(ENGINES.values()) == {TorchEngine, DeepSpeedEngine} and len(METHODS) >= 10
