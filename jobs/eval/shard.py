"""Evaluation on every rank: each rank scores its share of the batches, and every rank gets all
the results, in batch order.

Under N ranks (the training job's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT; jobs.train.engines.distributed_env fills them under srun) the batches of every set
are dealt to the ranks in turn, one deal running on from set to set. Each batch's result is a
function of the batch alone (its windows, the weights, and a generator seeded from the batch's
index: jobs.eval.metrics), and the gathered results are put back in batch order before any sum
or mean is taken, so the records of N ranks equal 1 rank's bit for bit on one numerics path.
Results travel as CPU objects (`all_gather_object`), gloo on the CPU and NCCL on a GPU; the
process group is the training's when one is up, else one made here.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from cli import InputError, environment


@dataclass(frozen=True)
class Shard:
    """This process's place among the evaluating ranks."""

    rank: int = 0
    world_size: int = 1
    # items dealt so far: each map's items continue the deal where the last one stopped, so a
    # set's few batches do not all fall to the first ranks (every rank calls map alike)
    dealt: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    @property
    def rank0(self) -> bool:
        """The rank that writes records, status and samples."""
        return self.rank == 0

    def mine(self, n_items: int) -> list[int]:
        """The indices of the next `n_items` items this rank scores: item i goes to rank
        (dealt + i) mod N."""
        start = self.dealt[0]
        return [i for i in range(n_items) if (start + i) % self.world_size == self.rank]

    def map(self, n_items: int, compute: Callable[[int], Any]) -> list[Any]:
        """[compute(0), ..., compute(n_items - 1)] on every rank, each item computed by one rank
        (CPU copies of its tensors), in item order."""
        own = {i: _to_cpu(compute(i)) for i in self.mine(n_items)}
        self.dealt[0] += n_items
        if self.world_size == 1:
            return [own[i] for i in range(n_items)]
        parts: list[dict[int, Any]] = [{} for _ in range(self.world_size)]
        dist.all_gather_object(parts, own)
        merged = {i: value for part in parts for i, value in part.items()}
        return [merged[i] for i in range(n_items)]

    def any(self, flag: bool) -> bool:
        """True on every rank when `flag` is true on any (a stop asked of one rank stops all)."""
        if self.world_size == 1:
            return flag
        flags = [False] * self.world_size
        dist.all_gather_object(flags, bool(flag))
        return any(flags)

    def from_rank0(self, compute: Callable[[], Any]) -> Any:
        """compute() on rank 0, its value (or its InputError / ValueError) on every rank: one
        reader of the data, the Hub and the run's files for all ranks."""
        if self.world_size == 1:
            return compute()
        box: list[Any] = [None]
        if self.rank0:
            try:
                box[0] = ("ok", _to_cpu(compute()))
            except (InputError, ValueError) as error:
                box[0] = (type(error).__name__, str(error))
        dist.broadcast_object_list(box, src=0)
        kind, value = box[0]
        if kind == "ok":
            return value
        raise (InputError if kind == "InputError" else ValueError)(value)


def _to_cpu(value: Any) -> Any:
    """The value with every tensor inside (tuples, lists, dicts) moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def ranks(device: torch.device | None = None) -> Iterator[Shard]:
    """The Shard of this process: one rank without WORLD_SIZE > 1; otherwise this rank of the
    training's process group, or of one started here (gloo on the CPU, NCCL on `device` when it
    is a GPU). A group started here stays up for the process's later evaluations, as the
    training's does: a second group on the same MASTER_PORT in one process can hang."""
    if environment.world_size() <= 1:
        yield Shard()
        return
    from jobs.train.engines import distributed_env  # noqa: PLC0415 - only multi-rank evaluation needs it

    distributed_env()
    if device is not None and device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's object collectives use the current device
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device is not None and device.type == "cuda" else "gloo")
    yield Shard(dist.get_rank(), dist.get_world_size())
