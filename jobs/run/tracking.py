"""Tracking: local metrics/status/manifest files always, wandb when installed and asked for.

wandb is asked for by the study (`--wandb [PROJECT]`, or a `[tracking]` table: `wandb`, `project`,
`entity`, `group`, `tags`, `mode`), or by `AOSCALE_WANDB=1`. It runs online whenever wandb is
logged in (`WANDB_API_KEY`, or the netrc entry `wandb login` writes) unless `mode` or `WANDB_MODE`
asks for offline, and keeps its files in `run_dir/wandb`. The project defaults to the study, the
group to the study, the run name is `{family}-{variant}-{size}-s{seed}` and wandb's run id is the
run id. A run resumed from a checkpoint behind wandb's last logged step rewinds wandb's history
to that checkpoint (`resume_from`), so the redone steps replace the old ones.

wandb never fails a run. Before starting online it checks that its server answers (a TCP connection
to wandb's `base_url` within WANDB_REACH_TIMEOUT_S) and gives `wandb.init` WANDB_INIT_TIMEOUT_S; a
server that does not answer (a compute node without internet), or an init that fails, makes the run
log offline into `run_dir/wandb` (`wandb sync` uploads it later), and if even that fails the run goes
on with its local files alone. Either way the run's status.json says so (`tracking`).
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import netrc
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from jobs.run.peaks import datasheet_flops
from jobs.run.files import MANIFEST_FILE, append_metrics, atomic_write_json, read_status, write_status
from jobs.run.spec import RunSpec
from cli import environment, rules

PACKAGES = ("torch", "numpy", "deepspeed", "tiktoken", "polars", "wandb", "aoscale")
DEFAULT_PROJECT = "aoscale"
WANDB_KEYS = ("wandb", "project", "entity", "group", "tags", "mode")  # a study's [tracking] table
WANDB_MODES = ("online", "offline", "disabled")
WANDB_STATE = "wandb/aoscale.json"  # the last step this run logged to wandb (for rewinds)
DEFAULT_HOST = "https://api.wandb.ai"
WANDB_REACH_TIMEOUT_S = 3.0  # a TCP connection to wandb's server; a reachable one answers in well under 1 s
WANDB_INIT_TIMEOUT_S = 30.0  # wandb.init online (wandb's own default is 90 s), after the server answered


def check_tracking(table: dict[str, Any], where: str = "tracking") -> dict[str, Any]:
    """A validated `[tracking]` table (cli.InputError naming `tracking.KEY`); `project` alone turns
    wandb on."""
    rules.known_keys(where, table, WANDB_KEYS)
    if "mode" in table:
        rules.one_of(f"{where}.mode", table["mode"], WANDB_MODES)
    tags = table.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise rules.fail(f"{where}.tags", tags, "must be a list of non-empty strings")
    for key in ("project", "entity", "group"):
        if key in table:
            rules.text(f"{where}.{key}", table[key])
    if "wandb" in table:
        rules.switch(f"{where}.wandb", table["wandb"])
    return {**table, "wandb": table.get("wandb", "project" in table)}


def wandb_enabled(spec: RunSpec) -> bool:
    """True when wandb is asked for (spec.tracking wandb=true or AOSCALE_WANDB=1) and installed."""
    asked = bool(dict(spec.tracking).get("wandb", False)) or environment.WANDB.read()
    if not asked:
        return False
    try:
        import wandb  # noqa: F401, PLC0415 - optional (the wandb extra) and slow to import
    except ImportError:
        return False
    return True


def logged_in() -> bool:
    """Whether wandb has credentials: `WANDB_API_KEY`, or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode(tracking: dict[str, Any]) -> str:
    """The study's `mode`, else `WANDB_MODE`, else online when logged in and offline otherwise."""
    return tracking.get("mode") or os.environ.get("WANDB_MODE") or ("online" if logged_in() else "offline")


def run_name(spec: RunSpec) -> str:
    """The readable wandb name: `{family}-{variant}-{size}-s{seed}`."""
    return f"{spec.family}-{spec.variant or 'base'}-{spec.size}-s{spec.seed}"


def wandb_settings(spec: RunSpec, run_dir: Path, from_step: int) -> dict[str, Any]:
    """The keyword arguments of `wandb.init` for this run resuming at `from_step`."""
    tracking = dict(spec.tracking)
    config = {k: v for k, v in spec.to_dict().items() if k != "tracking"}
    config.update({k: v for k, v in tracking.items() if k.startswith("factor_")})
    settings = dict(project=tracking.get("project") or spec.study or DEFAULT_PROJECT, entity=tracking.get("entity"),
                    group=tracking.get("group") or spec.study or None, tags=list(tracking.get("tags", [])) or None,
                    name=run_name(spec), id=spec.run_id, config=config, dir=str(run_dir),
                    mode=wandb_mode(tracking), reinit="finish_previous")
    logged = _last_logged_step(run_dir)
    if logged is not None and logged > from_step:  # steps after the checkpoint will be redone
        settings["resume_from"] = f"{spec.run_id}?_step={from_step + 1}"
    else:
        settings["resume"] = "allow"
    return settings


def _last_logged_step(run_dir: Path) -> int | None:
    try:
        return int(json.loads((run_dir / WANDB_STATE).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unreachable(base_url: str, timeout_s: float = WANDB_REACH_TIMEOUT_S) -> str | None:
    """Why wandb's server at `base_url` cannot be reached (no name lookup, no TCP connection within
    `timeout_s`), or None when it answers."""
    url = urlparse(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"{url.hostname}:{port} unreachable ({error.strerror or type(error).__name__})"


def _one_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:200]


class Tracker:
    """Writes metric rows to `metrics.ndjson` (rank 0 only) and mirrors them to wandb.

    wandb starts at the run's `start` row, which says the step training resumes from."""

    def __init__(self, run_dir: str | Path, spec: RunSpec, rank: int = 0):
        self.run_dir, self.spec, self.active = Path(run_dir), spec, rank == 0
        self.use_wandb = self.active and wandb_enabled(spec)
        self.wandb: Any = None

    def start_wandb(self, from_step: int) -> None:
        """Start (or resume, rewinding past `from_step` when needed) this run's wandb run; offline
        when its server does not answer or init fails, and off when even that fails (module doc)."""
        import wandb  # noqa: PLC0415 - optional (the wandb extra) and slow to import

        (self.run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        settings = wandb_settings(self.spec, self.run_dir, from_step)
        why = unreachable(wandb.Settings().base_url) if settings["mode"] == "online" else None
        if why is None:
            try:
                self.wandb = wandb.init(**settings, settings=wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT_S))
                self._record_tracking(f"wandb {settings['mode']}", quiet=True)
                return
            except Exception as error:  # noqa: BLE001 - wandb's errors vary; none may fail the run
                why = _one_line(error)
        if settings["mode"] != "offline":
            try:
                self.wandb = wandb.init(**{**settings, "mode": "offline"})
                self._record_tracking(f"wandb offline: {why}; upload later with wandb sync "
                                      f"{self.run_dir / 'wandb'}/offline-run-*")
                return
            except Exception as error:  # noqa: BLE001
                why = f"{why}; offline too: {_one_line(error)}"
        self.use_wandb = False
        self._record_tracking(f"wandb off: {why}; metrics in metrics.ndjson only")

    def _record_tracking(self, line: str, quiet: bool = False) -> None:
        """Say in status.json (and on stderr unless `quiet`) where this run's metrics went."""
        if not quiet:
            print(f"[{self.spec.run_id}] {line}", file=sys.stderr, flush=True)
        status = read_status(self.run_dir)
        write_status(self.run_dir, status.get("state", "running"), tracking=line)

    def log(self, row: dict[str, Any]) -> None:
        """Append one row (must carry `kind`); train/val rows also go to wandb at their step."""
        if not self.active:
            return
        append_metrics(self.run_dir, [row])
        if self.use_wandb and self.wandb is None and row.get("kind") in ("start", "train", "val"):
            self.start_wandb(int(row.get("from_step", row["step"])))
        if self.wandb is not None and row.get("kind") in ("train", "val"):
            values = {f"{row['kind']}/{k}": v for k, v in row.items()
                      if k not in ("kind", "step") and isinstance(v, (int, float))}
            self.wandb.log(values, step=int(row["step"]))
            atomic_write_json(self.run_dir / WANDB_STATE, {"step": int(row["step"])})

    def close(self, state: str) -> None:
        """Finish the wandb run (exit code 0 unless the run failed)."""
        if self.wandb is not None:
            self.wandb.finish(exit_code=1 if state == "failed" else 0)
            self.wandb = None


# ---------------------------------------------------------------------------------------------
# Manifest


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str | None:
    repo = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def hardware() -> dict[str, Any]:
    """CPU, thread count and GPUs of this machine."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "gpus": gpus, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "hostname": platform.node()}


def write_manifest(run_dir: str | Path, spec: RunSpec, extra: dict[str, Any]) -> dict[str, Any]:
    """manifest.json: package versions, torch/CUDA, hardware, data hashes, engine facts."""
    manifest = {
        "run_id": spec.run_id,
        "written_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "git_commit": _git_commit(),
        "hardware": hardware(),
        **extra,
    }
    atomic_write_json(Path(run_dir) / MANIFEST_FILE, manifest)
    return manifest


# ---------------------------------------------------------------------------------------------
# Progress line


def format_eta(seconds: float) -> str:
    """h:mm:ss."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """A periodic line on stderr: step, loss, lr, tokens/s, MFU, ETA."""

    def __init__(self, run_id: str, total_steps: int, active: bool):
        self.run_id, self.total_steps, self.active = run_id, total_steps, active

    def line(self, row: dict[str, Any]) -> None:
        if not self.active:
            return
        remaining = self.total_steps - row["step"]
        eta_s = remaining * row["batch_tokens"] / max(row["tokens_per_s"], 1e-9)
        print(f"[{self.run_id}] step {row['step']}/{self.total_steps} loss {row['loss']:.4f} "
              f"lr {row['lr']:.2e} {row['tokens_per_s']:,.0f} tok/s mfu {100 * row['mfu']:.1f}% "
              f"eta {format_eta(eta_s)}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Peak FLOP/s for MFU

_PEAK_CACHE: dict[tuple[str, str, int], float] = {}
PEAK_MATMUL_N = {"cpu": 1024, "cuda": 8192}  # square matmul sizes big enough to reach peak
PEAK_MEASURE_S = 0.5  # wall time spent per measurement


def peak_flops(device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """(FLOP/s, source) that this process's MFU divides by (jobs.run.peaks): the datasheet's dense
    peak of this GPU in the run's precision; on the CPU or an unlisted GPU the measured matmul
    peak (`measure_peak_flops`), its source starting `measured:`."""
    if device.type == "cuda" and torch.cuda.is_available():
        found = datasheet_flops(torch.cuda.get_device_name(device), dtype == torch.bfloat16)
        if found is not None:
            return found
    n = PEAK_MATMUL_N[device.type]
    return measure_peak_flops(device, dtype), (f"measured: {device.type} {str(dtype).removeprefix('torch.')} "
                                               f"{n}x{n} matmul, {torch.get_num_threads()} threads")


def measure_peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    """Achievable matmul FLOP/s of this process (cached): square n x n matmuls, 2n^3 FLOPs each.

    Measured rather than taken from a datasheet, in the run's dtype and thread count, so MFU
    is achieved model FLOP/s over what this machine's matmul reaches in the same conditions.
    """
    key = (str(device), str(dtype), torch.get_num_threads())
    if key not in _PEAK_CACHE:
        _PEAK_CACHE[key] = time_matmuls(device, dtype, PEAK_MATMUL_N[device.type])
    return _PEAK_CACHE[key]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_matmuls(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of the fastest of >= 3 n x n matmuls over ~PEAK_MEASURE_S (uncached)."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    torch.mm(a, b)  # warm-up
    _sync(device)
    best_s, spent_s, count = float("inf"), 0.0, 0
    while spent_s < PEAK_MEASURE_S or count < 3:
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        elapsed = time.perf_counter() - start
        best_s, spent_s, count = min(best_s, elapsed), spent_s + elapsed, count + 1
    return 2 * n**3 / best_s
