"""Engines: how one optimizer step runs. `torch` (one process, CPU or one GPU) and `deepspeed`
(ZeRO stage 1/2/3, one or many processes, CPU with gloo or GPU with NCCL).

The trainer sees one small interface: `set_lr`, `loss`, `backward`, `step` (clip + optimizer
step, returns the pre-clip gradient norm), `save`/`load` of the engine's own state,
`full_state_dict` (gathered model weights on rank 0), `gathered()` (full parameters visible,
for EMA), and the collectives `mean`/`any` (identity on one process).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from cli.environment import BY_NAME, world_size
from jobs.train import ds_config
from jobs.train.checkpoint import MODEL_FILE, load_file, save_file
from jobs.run.device import device_bytes, pick_device, use_bf16, use_compile
from jobs.run.spec import RunSpec
from jobs.train.preflight import plan_micro_batch

OPTIMIZER_FILE = "optimizer.pt"
DS_DIR, DS_TAG = "ds", "state"


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: weight decay on tensors with >= 2 dims (matrices, embeddings) only."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, spec: RunSpec) -> torch.optim.AdamW:
    """torch AdamW with the spec's betas (eps 1e-8, torch's default), as one fused kernel over
    all tensors (CPU and CUDA): the same update, ~6x faster than the per-tensor loop on CPU."""
    return torch.optim.AdamW(param_groups(model, spec.weight_decay), lr=spec.lr,
                             betas=(spec.beta1, spec.beta2), fused=True)


@runtime_checkable
class Engine(Protocol):
    """What the training loop, checkpoints and tracking need of an engine; `TorchEngine` and
    `DeepSpeedEngine` implement it. A step is: `loss` and `backward` per local micro-batch, then
    `step` (clip, optimizer step; returns the gradient norm)."""

    name: str  # the spec's `engine`
    rank: int
    world_size: int
    device: torch.device
    model: nn.Module  # the full model (under ZeRO-3 its weights are gathered by `gathered()`)
    bf16: bool  # bf16 autocast on
    config: dict[str, Any] | None  # the engine's own config, recorded in the manifest (DeepSpeed)
    n_micro_total: int  # micro-batches per optimizer step over all ranks
    local_chunks: list[int]  # which of them this rank computes
    micro: int  # sequences per forward pass on this rank (jobs.train.preflight.plan_micro_batch)
    planned_bytes: int  # the memory model's bytes per rank at that micro-batch

    def set_lr(self, lr: float) -> None: ...
    def loss(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor: ...
    def backward(self, loss: torch.Tensor) -> None: ...
    def step(self) -> float: ...
    def train(self, mode: bool = True) -> None: ...
    def save(self, folder: Path) -> None: ...
    def load(self, folder: Path) -> None: ...
    def full_state_dict(self) -> dict[str, torch.Tensor] | None: ...
    def gathered(self) -> contextlib.AbstractContextManager: ...
    def mean(self, value: float) -> float: ...
    def any(self, flag: bool) -> bool: ...
    def barrier(self) -> None: ...
    def close(self) -> None: ...


class TorchEngine:
    """Plain PyTorch on one device; gradient accumulation over all micro-batches of a step."""

    name = "torch"
    rank, world_size = 0, 1
    config = None  # no engine config (DeepSpeed's is recorded in the manifest)

    def __init__(self, model: nn.Module, spec: RunSpec):
        if world_size() > 1:
            raise ValueError("engine: 'torch' runs in one process; launch with --engine deepspeed "
                             "for several ranks")
        self.device = pick_device()
        self.model = model.to(self.device)
        self.bf16 = use_bf16(spec, self.device)
        if use_compile(spec, self.device):
            model.core.compile_stack(device=self.device)
        self.optimizer = make_optimizer(model, spec)
        self.grad_clip = spec.grad_clip
        self.micro, self.n_micro_total, self.planned_bytes = plan_micro_batch(spec, 1, device_bytes(self.device))
        self.local_chunks = list(range(self.n_micro_total))

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def loss(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.model.loss(tokens.to(self.device), generator)

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.n_micro_total).backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    def save(self, folder: Path) -> None:
        save_file({"optimizer": self.optimizer.state_dict()}, folder / OPTIMIZER_FILE)

    def load(self, folder: Path) -> None:
        self.model.load_state_dict(load_file(folder / MODEL_FILE)["model"])
        self.optimizer.load_state_dict(load_file(folder / OPTIMIZER_FILE)["optimizer"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def gathered(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def mean(self, value: float) -> float:
        return value

    def any(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# DeepSpeed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def distributed_env() -> None:
    """Fill RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* from Slurm (srun) or for a single process.

    torchrun sets all five itself; under srun they come from SLURM_PROCID/NTASKS/LOCALID, with
    the port derived from the job id (29500 + id mod 1000) so every task agrees on it.
    """
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env and (BY_NAME["SLURM_NTASKS"].read() or 1) > 1:
        env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
        env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
        env.setdefault("MASTER_ADDR", env.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"))
        env.setdefault("MASTER_PORT", str(29500 + (BY_NAME["SLURM_JOB_ID"].read() or 0) % 1000))
    env.setdefault("RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    env.setdefault("LOCAL_RANK", "0")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(_free_port()))
    if not torch.cuda.is_available():
        env.setdefault("DS_ACCELERATOR", "cpu")


class _LossModule(nn.Module):
    """Wraps a family model so DeepSpeed's forward is the training loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.model.loss(tokens, generator)


def deepspeed_config(spec: RunSpec, world_size: int, bf16: bool, micro: int | None = None) -> dict[str, Any]:
    """The DeepSpeed config for a spec: same global batch, client AdamW, clip, ZeRO stage, with
    the user's overlay (`spec.deepspeed_config`, checked again here) merged in. `micro` is the
    planned micro-batch per rank (default: the explicit one, else the rank's whole share).

    bf16 is the torch engine's regime: DeepSpeed's `bf16` section (which casts the module to bf16,
    leaving fp32 buffers such as rotary angles and SEDD's time features to meet bf16 weights) stays
    off, and its `torch_autocast` section runs the forward under bf16 autocast over fp32 weights,
    gradients and optimizer state. `lower_precision_safe_modules` is empty so every gradient is
    reduced in fp32, as on one rank."""
    micro = micro or spec.micro_batch_size or spec.batch_size // world_size
    if micro < 1 or spec.batch_size % (micro * world_size):
        raise ValueError(f"batch_size: {spec.batch_size} must be a multiple of micro_batch_size "
                         f"({micro}) x ranks ({world_size})")
    generated = {
        "train_batch_size": spec.batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": spec.batch_size // (micro * world_size),
        "gradient_clipping": spec.grad_clip,
        # ZeRO-3's memory-efficient linear replaces torch.nn.functional.linear for the whole
        # process and never restores it, so a later run in the same process computes differently.
        "zero_optimization": {"stage": spec.zero_stage, "memory_efficient_linear": False},
        "zero_allow_untested_optimizer": True,  # the client optimizer is torch's AdamW
        "zero_force_ds_cpu_optimizer": False,  # ... also under an overlay's optimizer offload
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
        "torch_autocast": {"enabled": bf16, "dtype": "bfloat16", "lower_precision_safe_modules": []},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    overlay = json.loads(spec.deepspeed_config) if spec.deepspeed_config else {}
    ds_config.check_overlay(overlay)
    return ds_config.merged(generated, overlay)


class DeepSpeedEngine:
    """DeepSpeed ZeRO 1/2/3 with torch's AdamW (no DeepSpeed op builds); gloo on CPU, NCCL on GPU.
    The run's `compile` setting applies under ZeRO-1/2; ZeRO-3 runs the eager core.

    Each rank takes its slice of every step's global batch (chunks rank*A .. rank*A + A - 1 of
    the step's batch_size/micro chunks, A = accumulation steps), so the data are the same as the
    torch engine's. Under ZeRO-3 DeepSpeed's hooks gather each submodule's weights for its
    forward; weights used outside their module (the tied head) are fetched as external
    parameters (checked against the torch engine with stage3_param_persistence_threshold=0).
    """

    name = "deepspeed"

    def __init__(self, model: nn.Module, spec: RunSpec):
        distributed_env()
        import deepspeed  # noqa: PLC0415 - optional (the deepspeed extra); seconds to import

        self.device = pick_device()
        deepspeed.init_distributed(dist_backend="nccl" if self.device.type == "cuda" else "gloo")
        self.rank, self.world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.bf16, self.stage = use_bf16(spec, self.device), spec.zero_stage
        if use_compile(spec, self.device) and self.stage < 3:  # ZeRO-3's gather hooks stay eager
            model.core.compile_stack(device=self.device)
        self.micro, accumulation, self.planned_bytes = plan_micro_batch(spec, self.world_size,
                                                                        device_bytes(self.device))
        self.config = config = deepspeed_config(spec, self.world_size, self.bf16, self.micro)
        wrapper = _LossModule(model)
        self.optimizer = make_optimizer(model, spec)
        self.ds, _, _, _ = deepspeed.initialize(model=wrapper, optimizer=self.optimizer, config=config)
        self.model = model
        self.local_chunks = [self.rank * accumulation + a for a in range(accumulation)]
        self.n_micro_total = accumulation * self.world_size

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def loss(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.ds(tokens.to(self.device), generator)

    def backward(self, loss: torch.Tensor) -> None:
        # DeepSpeed scales by 1/accumulation and steps only at the accumulation boundary; it
        # must see step() after every micro-batch to know where that boundary is.
        self.ds.backward(loss)
        self.ds.step()

    def step(self) -> float:
        return float(self.ds.get_global_grad_norm())

    def train(self, mode: bool = True) -> None:
        self.ds.train(mode)

    def save(self, folder: Path) -> None:
        self.ds.save_checkpoint(str(folder / DS_DIR), tag=DS_TAG, save_latest=False)

    def load(self, folder: Path) -> None:
        path, _ = self.ds.load_checkpoint(str(folder / DS_DIR), tag=DS_TAG,
                                          load_optimizer_states=True, load_lr_scheduler_states=False)
        if path is None:
            raise RuntimeError(f"deepspeed could not load {folder / DS_DIR}")

    def gathered(self) -> contextlib.AbstractContextManager:
        if self.stage != 3:
            return contextlib.nullcontext()
        import deepspeed  # noqa: PLC0415 - optional (the deepspeed extra); seconds to import

        return deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=None)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """fp32 copies of the full weights on rank 0 (None elsewhere); collective under ZeRO-3."""
        with self.gathered():
            if self.rank != 0:
                return None
            return {k: v.detach().float().cpu().clone() for k, v in self.model.state_dict().items()}

    def mean(self, value: float) -> float:
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(tensor)
        return float(tensor.item()) / self.world_size

    def any(self, flag: bool) -> bool:
        tensor = torch.tensor([int(flag)], device=self.device)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return bool(tensor.item())

    def barrier(self) -> None:
        torch.distributed.barrier()

    def close(self) -> None:
        pass  # no collective here: after an error on one rank the others may never arrive


ENGINES = {"torch": TorchEngine, "deepspeed": DeepSpeedEngine}


def make_engine(model: nn.Module, spec: RunSpec) -> Engine:
    """The engine the spec names."""
    return ENGINES[spec.engine](model, spec)


@contextlib.contextmanager
def eval_mode(engine: Engine) -> Iterator[None]:
    """Eval mode and no gradients for the duration (validation), then back to training."""
    engine.train(False)
    try:
        with torch.no_grad():
            yield
    finally:
        engine.train(True)
