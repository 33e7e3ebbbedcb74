"""A run's training state in one engine- and world-size-independent form, so a run can move.

A checkpoint holds its engine's own state: `optimizer.pt` (torch) or DeepSpeed's ZeRO shards
(`ds/`, one optimizer partition per rank). That state loads back only into the same engine at the
same world size and ZeRO stage. To resume elsewhere (2 ranks -> 1, 1 -> 8, torch <-> DeepSpeed,
ZeRO-2 -> ZeRO-3), the trainer rebuilds the *consolidated* state from whatever was written,

    {"step": int, "fp32": {name: tensor}, "exp_avg": {...}, "exp_avg_sq": {...}}

(full fp32 master weights and both AdamW moments per parameter, named as
`model.named_parameters()` names them), and loads it into the new engine and optimizer. Nothing
extra is written at save time: each rank's DeepSpeed partition is merged at load time, the way
DeepSpeed's own `zero_to_fp32` merges the weights (stage 1/2: each rank's `param_slice_mappings`;
stage 3: each parameter split in ceil(numel / ranks) pieces), here for the moments as well.

Every rank reads the whole consolidated state (memory-mapped): 3 x 4 bytes per parameter, about
9 GB of host memory at 760M, once per move.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

KEYS = ("exp_avg", "exp_avg_sq")  # torch AdamW's moments
WRAPPER_PREFIX = "model."  # DeepSpeed sees the model inside jobs.train.engines._LossModule
OPTIMIZER_FILE, DS_STATE = "optimizer.pt", Path("ds") / "state"  # as jobs.train.engines writes them
_OPTIM = re.compile(r"zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt")

Consolidated = dict[str, Any]


def layout(folder: Path, engine: str) -> dict[str, Any]:
    """How a checkpoint's engine state is laid out: engine, world size and ZeRO stage (0 for the
    torch engine). Read from the files, so it holds for checkpoints from before meta.json said."""
    files = _optim_files(folder) if engine == "deepspeed" else []
    if not files:
        return {"engine": engine, "world_size": 1, "zero_stage": 0}
    stage3 = (folder / DS_STATE / "zero_pp_rank_0_mp_rank_00_model_states.pt").exists()
    return {"engine": engine, "world_size": len(files), "zero_stage": 3 if stage3 else _stage12(files[0])}


def _stage12(path: Path) -> int:
    return int(_load(path)["optimizer_state_dict"]["zero_stage"])


def _load(path: Path) -> Any:
    # DeepSpeed's files hold its own classes (ZeroStageEnum, fragment_address): not weights_only.
    # Only files of this run's checksummed checkpoint are read here.
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except ModuleNotFoundError as error:  # the one move that cannot happen: no DeepSpeed to read them
        raise ValueError(f"checkpoint {path.parent.parent.parent.name}: its DeepSpeed partitions need "
                         f"DeepSpeed to be read ({error}); pip install -e '.[deepspeed]' here, or resume "
                         "with --engine deepspeed where it is installed") from None


def _optim_files(folder: Path) -> list[Path]:
    root = folder / DS_STATE
    found = {int(m.group(1)): p for p in root.glob("*_optim_states.pt") if (m := _OPTIM.fullmatch(p.name))}
    return [found[r] for r in sorted(found)]


def read(folder: Path, engine: str, model: nn.Module, weights: dict[str, torch.Tensor]) -> Consolidated:
    """The consolidated state of the checkpoint in `folder`, written by `engine`; `model` names the
    parameters (its architecture, not its values), `weights` is the checkpoint's full state dict."""
    state = READERS[engine](folder, model, weights)
    names = dict(trainable(model))
    missing = sorted(set(names) - set(state["fp32"]))
    if missing:
        raise ValueError(f"checkpoint {folder.name}: no state for parameters {missing[:3]}")
    for key in ("fp32", *KEYS):
        state[key] = {n: state[key][n].reshape(shape(p)) for n, p in names.items()}
    return state


def trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters the optimizer steps, by name (a tied weight once)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def torch_order(model: nn.Module) -> list[str]:
    """Parameter names in the torch optimizer's index order (jobs.train.engines.param_groups:
    matrices and embeddings first, then vectors)."""
    named = [(n, len(shape(p))) for n, p in trainable(model)]
    return [n for n, dims in named if dims >= 2] + [n for n, dims in named if dims < 2]


def shape(param: nn.Parameter) -> torch.Size:
    """A parameter's full shape (under ZeRO-3 its data is a partition; `ds_shape` keeps it)."""
    return getattr(param, "ds_shape", param.shape)


def _from_torch(folder: Path, model: nn.Module, weights: dict[str, torch.Tensor]) -> Consolidated:
    saved = torch.load(folder / OPTIMIZER_FILE, map_location="cpu", weights_only=True, mmap=True)["optimizer"]
    order = torch_order(model)
    state: Consolidated = {"fp32": {n: weights[n].float() for n in order}, "exp_avg": {}, "exp_avg_sq": {}}
    steps = set()
    for index, entry in saved["state"].items():
        for key in KEYS:
            state[key][order[index]] = entry[key]
        steps.add(int(float(entry["step"])))
    state["step"] = _one_step(steps, folder)
    return state


def _one_step(steps: set[int], folder: Path) -> int:
    if len(steps) != 1:
        raise ValueError(f"checkpoint {folder.name}: optimizer steps disagree ({sorted(steps)})")
    return steps.pop()


def _from_deepspeed(folder: Path, model: nn.Module, weights: dict[str, torch.Tensor]) -> Consolidated:
    shards = [_load(p)["optimizer_state_dict"] for p in _optim_files(folder)]
    if not shards:
        raise ValueError(f"checkpoint {folder.name}: no DeepSpeed optimizer partitions under {DS_STATE}")
    steps = {int(float(s["step"])) for shard in shards for s in _inner(shard)["state"].values()}
    merge = _merge_zero3 if int(shards[0]["zero_stage"]) == 3 else _merge_zero12
    state = merge(folder, shards)
    state["step"] = _one_step(steps, folder)
    return state


def _inner(shard: dict[str, Any]) -> dict[str, Any]:
    """The wrapped torch optimizer's state_dict inside one rank's ZeRO optimizer state."""
    return shard.get("base_optimizer_state") or shard["optimizer_state_dict"]


def _flats(shard: dict[str, Any], key: str) -> list[torch.Tensor]:
    """One rank's flat fp32 partitions per group (`fp32`) or the moment `key` per group."""
    if key == "fp32":
        return shard.get("single_partition_of_fp32_groups") or shard["fp32_flat_groups"]
    inner = _inner(shard)["state"]
    return [inner[g][key] for g in sorted(inner)]


def _merge_zero12(folder: Path, shards: list[dict[str, Any]]) -> Consolidated:
    """Stage 1/2: each rank's partition of each group's flat buffer, with the (start, numel)
    of every parameter fragment it holds (`param_slice_mappings`); fragments join in rank order."""
    state: Consolidated = {}
    for key in ("fp32", *KEYS):
        pieces: dict[str, list[torch.Tensor]] = {}
        for shard in shards:
            for flat, mapping in zip(_flats(shard, key), shard["param_slice_mappings"], strict=True):
                for name, address in mapping.items():
                    pieces.setdefault(name, []).append(flat.narrow(0, address.start, address.numel))
        state[key] = {_plain_name(n): torch.cat(p).float() for n, p in pieces.items()}
    return state


def _merge_zero3(folder: Path, shards: list[dict[str, Any]]) -> Consolidated:
    """Stage 3: every parameter is split in ceil(numel / ranks) pieces (the last padded), laid
    one after another in each rank's flat groups, in the order of `param_shapes`."""
    world = len(shards)
    shapes = _load(folder / DS_STATE / "zero_pp_rank_0_mp_rank_00_model_states.pt")["param_shapes"]
    ordered = [(n, s) for group in shapes for n, s in group.items()]
    state: Consolidated = {}
    for key in ("fp32", *KEYS):
        flats = [torch.cat(_flats(shard, key)) for shard in shards]
        offset, merged = 0, {}
        for name, shape in ordered:
            numel = int(torch.Size(shape).numel())
            part = -(-numel // world)
            merged[_plain_name(name)] = torch.cat([f.narrow(0, offset, part) for f in flats])[:numel].float()
            offset += part
        state[key] = merged
    return state


def _plain_name(name: str) -> str:
    return name[len(WRAPPER_PREFIX):] if name.startswith(WRAPPER_PREFIX) else name


READERS: dict[str, Callable[[Path, nn.Module, dict[str, torch.Tensor]], Consolidated]] = {
    "torch": _from_torch, "deepspeed": _from_deepspeed}


# ---------------------------------------------------------------------------------------------
# Loading the consolidated state into an engine


def load_torch(engine: Any, state: Consolidated, weights: dict[str, torch.Tensor]) -> None:
    """Weights (buffers from the checkpoint's state dict, parameters from the fp32 masters), then
    torch AdamW's state, index by index."""
    model = engine.model
    model.load_state_dict(weights)
    params = dict(trainable(model))
    with torch.no_grad():
        for name, value in state["fp32"].items():
            params[name].copy_(value)
    saved = engine.optimizer.state_dict()
    saved["state"] = {i: {"step": torch.tensor(float(state["step"])),
                          **{key: state[key][name] for key in KEYS}}
                      for i, name in enumerate(torch_order(model))}
    engine.optimizer.load_state_dict(saved)


def load_deepspeed(engine: Any, state: Consolidated, weights: dict[str, torch.Tensor]) -> None:
    """Each rank writes its own partition from the full tensors through DeepSpeed's public
    `safe_set_full_*` calls, once the wrapped optimizer's state exists (it is created lazily at
    the first step); then the module's own (bf16 or fp32) weights are set from the masters."""
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state  # noqa: PLC0415

    zero = engine.ds.optimizer
    masters = getattr(zero, "fp32_partitioned_groups_flat", None) or zero.single_partition_of_fp32_groups
    for flat in masters:  # the wrapped optimizer's state is keyed by this rank's flat fp32 masters
        zero.optimizer.state[flat] = {"step": torch.tensor(float(state["step"]), dtype=torch.float32,
                                                           device=flat.device),
                                      **{key: torch.zeros_like(flat) for key in KEYS}}
    if hasattr(zero, "_lazy_init_hp_params_optimizer_state"):  # stage 1/2: link the fragments
        zero._hp_optimizer_states_linked = False
        zero._lazy_init_hp_params_optimizer_state()
    for name, param in trainable(engine.model):
        safe_set_full_fp32_param(param, state["fp32"][name].to(engine.device))
        for key in KEYS:
            safe_set_full_optimizer_state(param, state[key][name].to(engine.device), key)
    _module_weights_from_masters(engine, zero, state)


def _module_weights_from_masters(engine: Any, zero: Any, state: Consolidated) -> None:
    """The module's weights equal to the masters (rounded to bf16 under DeepSpeed's bf16)."""
    if hasattr(zero, "fp32_partitioned_groups_flat"):  # stage 3: as after its own optimizer step
        for sub_group in range(len(zero.fp16_groups)):
            zero._reassign_or_swap_out_partitioned_parameters(sub_group)
        zero.checkpoint_event_epilogue()  # the persistent (small, never partitioned) ones gathered
        return
    with torch.no_grad():  # stage 1/2: every rank holds the whole module
        for name, param in trainable(engine.model):
            param.copy_(state["fp32"][name])


LOADERS: dict[str, Callable[[Any, Consolidated, dict[str, torch.Tensor]], None]] = {
    "torch": load_torch, "deepspeed": load_deepspeed}
