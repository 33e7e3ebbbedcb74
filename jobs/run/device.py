"""Where a run's model runs: the one device rule for training, evaluation and generation.

`pick_device()` is the GPU of this process's local rank where CUDA exists, else the CPU.
`placement(spec)` adds what evaluation and generation need on top: bf16 autocast where the run
trained with it (`use_bf16`), sequences per evaluation forward pass that fill the device, and
whether the model's block stack goes through `torch.compile` (`use_compile`).
"""
from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from cli import environment
from jobs.run.cpu_compile import compile_pays

CPU_EVAL_BATCH = 8  # sequences per forward on the CPU: larger batches are no faster there
CUDA_EVAL_BATCH = 32  # on a GPU: 32 x 1024 tokens keep a 125M-760M model's matmuls large
# (its logits are split by models.likelihood.row_chunks, so memory stays bounded)


def pick_device(cuda: bool | None = None, local_rank: int | None = None) -> torch.device:
    """The GPU of this process's local rank (`LOCAL_RANK`, default 0) when CUDA is available,
    else the CPU. `cuda` and `local_rank` override what this machine reports (for tests)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if not cuda:
        return torch.device("cpu")
    rank = environment.local_rank() if local_rank is None else local_rank
    return torch.device("cuda", rank)


def device_bytes(device: torch.device) -> int:
    """Memory one training process on `device` plans with (jobs.train.preflight.plan_micro_batch):
    the GPU's total memory, else the machine's physical RAM shared by the run's `WORLD_SIZE`
    processes (all of them taken to be on this machine: exact for one node, cautious for more)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    ranks = environment.world_size()
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // ranks


def use_bf16(spec, device: torch.device) -> bool:
    """`precision` auto: bf16 autocast on GPU, fp32 on CPU; `fp32`/`bf16` as stated. bf16 is one
    regime on every engine and world size: autocast to bf16 over fp32 weights, gradients and
    optimizer state (jobs.train.engines)."""
    return spec.precision == "bf16" or (spec.precision == "auto" and device.type == "cuda")


def use_compile(spec, device: torch.device, training: bool = True) -> bool:
    """`compile` auto: torch.compile on GPU; on the CPU only for training runs long enough to pay
    it back, by the measured rule of `jobs.run.cpu_compile` (evaluation there stays eager: a few
    passes of many shapes); `on`/`off` as stated."""
    if spec.compile != "auto":
        return spec.compile == "on"
    return device.type == "cuda" or (training and device.type == "cpu" and compile_pays(spec))


@dataclass(frozen=True)
class Placement:
    """How evaluation and generation run a model: device, precision, batch, compilation."""

    device: torch.device
    bf16: bool
    eval_batch: int  # sequences per forward pass
    compile: bool

    @property
    def label(self) -> str:
        """What records carry in `device`: `cpu`, or `cuda (<GPU name>)`."""
        if self.device.type != "cuda":
            return self.device.type
        return f"cuda ({torch.cuda.get_device_name(self.device)})" if torch.cuda.is_available() else "cuda"

    @property
    def precision(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    def columns(self) -> dict[str, str]:
        """The record columns that say where a value was computed (`device`, `precision`)."""
        return {"device": self.label, "precision": self.precision}

    def autocast(self) -> AbstractContextManager:
        """bf16 autocast when the run trained with it, else nothing."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def generator(self, seed: int) -> torch.Generator:
        """A generator on the device, seeded: draws happen where the model runs."""
        return torch.Generator(self.device).manual_seed(seed)


def placement(spec, cuda: bool | None = None, local_rank: int | None = None) -> Placement:
    """The placement of a run's model for evaluation and generation: its training device rule
    (`pick_device`), bf16 where training used it, a batch that fills the device, and compilation
    per the run's `compile` setting."""
    device = pick_device(cuda, local_rank)
    batch = CUDA_EVAL_BATCH if device.type == "cuda" else CPU_EVAL_BATCH
    return Placement(device, use_bf16(spec, device), batch, use_compile(spec, device, training=False))
