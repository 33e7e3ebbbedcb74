"""A user's DeepSpeed config overlay: how runs train (ZeRO offload and buckets, communication,
profiling), never what they compute.

The overlay is a JSON or TOML file (`--deepspeed-config FILE`, or `deepspeed_config` under a
study's `[resources]`, as a path or an inline table). It is validated once, at the edge, and
carried in `RunSpec.deepspeed_config` as canonical JSON: a resource, outside the run id. Keys that
change results are refused with the study setting to use instead; keys outside `ALLOWED` are
refused too, so a result-changing key DeepSpeed adds later cannot slip through.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from cli.paths import special_kind

FIELD = "deepspeed_config"
# key (dotted for nested ones) -> what sets it instead; these change what a run computes.
REFUSED: dict[str, str] = {
    "train_batch_size": "the study's batch_size",
    "train_micro_batch_size_per_gpu": "[run] micro_batch_size",
    "gradient_accumulation_steps": "the study's batch_size and [run] micro_batch_size",
    "gradient_clipping": "[run] grad_clip",
    "optimizer": "[run] weight_decay / beta1 / beta2 and the study's lr",
    "scheduler": "the study's lr, warmup_steps and [run] min_lr_ratio",
    "fp16": "[run] precision",
    "bf16": "[run] precision",
    "amp": "[run] precision",
    "torch_autocast": "[run] precision",
    "data_types": "[run] precision",
    "zero_optimization.stage": "[resources] zero_stage",
    "zero_optimization.memory_efficient_linear": "nothing: it swaps torch's linear for every later run in the process",
    "zero_optimization.zero_quantized_weights": "nothing: quantized weights change results",
    "zero_optimization.zero_quantized_gradients": "nothing: quantized gradients change results",
}
# Top-level keys passed through: they change memory, speed, communication and logging only.
# Not `activation_checkpointing`: the models do not call DeepSpeed's checkpointing API, so it would
# be accepted and do nothing.
ALLOWED = ("zero_optimization", "communication_data_type", "prescale_gradients",
           "gradient_predivide_factor", "sparse_gradients", "zero_allow_untested_optimizer",
           "zero_force_ds_cpu_optimizer", "aio", "checkpoint", "comms_logger", "flops_profiler",
           "wall_clock_breakdown", "memory_breakdown", "steps_per_print", "dump_state", "tensorboard",
           "csv_monitor", "wandb", "timers", "compile")


def read_overlay(value: str | Path | dict[str, Any]) -> dict[str, Any]:
    """The overlay from a file path (.json or .toml) or an inline table; ValueError naming the key."""
    if isinstance(value, dict):
        overlay = value
    elif isinstance(value, str) and value.lstrip().startswith("{"):  # already canonical JSON text
        overlay = json.loads(value)
    else:
        path = Path(value).expanduser()
        if special_kind(path):  # a device or FIFO would block or never end when read
            raise ValueError(f"{FIELD}: {path} is a {special_kind(path)}, not a regular file; pass a DeepSpeed "
                             "config file (.json or .toml)")
        try:
            text = path.read_text()
        except OSError:
            raise ValueError(f"{FIELD}: cannot read {path}; pass a DeepSpeed config file (.json or .toml)") from None
        try:
            overlay = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as error:
            raise ValueError(f"{FIELD}: {path} is not valid {path.suffix.lstrip('.') or 'JSON'} "
                             f"({str(error).splitlines()[0]}); fix the file") from None
    if not isinstance(overlay, dict):
        raise ValueError(f"{FIELD}: the config must be a table of settings, got {type(overlay).__name__}")
    check_overlay(overlay)
    return overlay


def check_overlay(overlay: dict[str, Any]) -> None:
    """Refuse result-changing and unknown keys (ValueError: one line with the key and the fix)."""
    for key in _keys(overlay):
        if key in REFUSED:
            raise ValueError(f"{FIELD}: key '{key}' changes results and is set by aoscale; "
                             f"fix: drop it and use {REFUSED[key]}")
    unknown = sorted(k for k in overlay if k not in ALLOWED)
    if unknown:
        raise ValueError(f"{FIELD}: key '{unknown[0]}' is not a resource setting aoscale passes on; "
                         f"allowed: {', '.join(ALLOWED)}")


def _keys(table: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key, nested ones dotted (`zero_optimization.stage`)."""
    out = []
    for key, value in table.items():
        out.append(prefix + key)
        if isinstance(value, dict):
            out += _keys(value, f"{prefix}{key}.")
    return out


def overlay_json(value: str | Path | dict[str, Any]) -> str:
    """The validated overlay as canonical JSON text (what `RunSpec.deepspeed_config` holds)."""
    return json.dumps(read_overlay(value), sort_keys=True, separators=(",", ":"))


def with_overlay(resources: dict[str, Any]) -> dict[str, Any]:
    """A study's resources with the overlay validated into JSON text; an overlay implies the
    DeepSpeed engine and is refused beside an explicit `engine = "torch"`."""
    if FIELD not in resources:
        return resources
    if resources.get("engine", "deepspeed") != "deepspeed":
        raise ValueError(f"{FIELD}: applies to the DeepSpeed engine, but engine is {resources['engine']!r}; "
                         "fix: drop --engine/engine or use deepspeed")
    return {**resources, "engine": "deepspeed", FIELD: overlay_json(resources[FIELD])}


def merged(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overlay` merged in, table by table (the overlay wins on a leaf)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
