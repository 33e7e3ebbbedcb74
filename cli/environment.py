"""Every environment variable aoscale reads: one table, checked when a command starts.

Each entry (`VARIABLES`) names the variable, the values it takes, what it does and which module
reads it. `check_environment()` runs first in every command (`cli.run_main`), so a bad value is
one line and exit status 2 before anything is read or written: `WORLD_SIZE=0`, `LOCAL_RANK=abc`,
`OMP_NUM_THREADS=abc`, `AOSCALE_CACHE` naming a file, `AOSCALE_PIPELINE` naming a function that
cannot be imported. The readers (`kernels_enabled`, `numerics_change_allowed`, `world_size`,
`rank`, `local_rank`, `pipeline_ref`, `Variable.read`) apply the same rule where a library call
meets the variable without a command around it. Variables aoscale only sets for its workers
(TOKENIZERS_PARALLELISM, OMP_NUM_THREADS under Ray) are listed with the rule a value given to it
must meet. `AOSCALE_FAULT` is for the kill tests only (cli.faults).
"""
from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .faults import FAULT_POINTS


@dataclass(frozen=True)
class Switch:
    """An on/off variable: `on` and `off` are the only values it takes; unset means `default`."""

    name: str
    on: str
    off: str
    default: bool
    meaning: str  # what "on" does, for the refusal line and the docs
    reader: str = ""  # the module that reads it

    @property
    def expects(self) -> str:
        return f"{self.on} ({self.meaning}) or {self.off}"

    def read(self) -> bool:
        """The variable's value as a bool; an unknown value raises InputError naming it."""
        text = os.environ.get(self.name)
        if text is None:
            return self.default
        if text not in (self.on, self.off):
            state = "on" if self.default else "off"
            raise InputError(f"{self.name}={text!r}: expected {self.expects}; unset it for the default ({state})")
        return text == self.on


@dataclass(frozen=True)
class Variable:
    """A variable with a value: `parse` turns its text into the value (ValueError when the text is
    not one of the values `expects` describes); unset means `default`."""

    name: str
    expects: str  # the values it takes, for the refusal line and the docs
    meaning: str
    parse: Callable[[str], Any] = str
    default: Any = None
    reader: str = ""  # the module that reads it
    test_only: bool = False

    def text(self) -> str | None:
        """The variable's raw text (None when unset), unchecked: for a default read at import time."""
        return os.environ.get(self.name)

    def read(self) -> Any:
        """The variable's value; a value outside its rule raises InputError (one line naming it)."""
        text = os.environ.get(self.name)
        if text is None:
            return self.default
        try:
            return self.parse(text)
        except ValueError as error:
            why = f" ({error})" if str(error) else ""
            shown = "<hidden>" if "KEY" in self.name else repr(text)
            raise InputError(f"{self.name}={shown}: expected {self.expects}{why}; set it so, or unset it") from None


# ---- rules: text -> value, ValueError when the text is not one of the values -------------------------
def _count(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < low:
            raise ValueError("")
        return int(text)
    return parse


def _count_or_unset(text: str) -> int | None:
    return None if not text.strip() else _count(1)(text)


def _threads(text: str) -> str:
    """OpenMP's thread count, or its per-level list (4,2)."""
    for item in text.split(","):
        _count(1)(item)
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("")
    return value


def _folder(text: str) -> Path | None:
    """A folder, or a path where one may be made ('' means unset); an existing file is refused."""
    if not text:
        return None
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} exists and is not a folder")
    return path


def _existing_folder(text: str) -> Path | None:
    path = _folder(text)
    if path is not None and not path.is_dir():
        raise ValueError(f"{path} is not a folder")
    return path


def _existing_file(text: str) -> Path:
    if not Path(text).expanduser().is_file():
        raise ValueError(f"{text} is not a file")
    return Path(text).expanduser()


def _one_of(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in values:
            raise ValueError("")
        return text.lower()
    return parse


def _hf_bool(text: str) -> bool:
    """Hugging Face's boolean: 1/true/yes/on or 0/false/no/off (any case); '' is off."""
    return _one_of("1", "true", "yes", "on", "0", "false", "no", "off", "")(text) in ("1", "true", "yes", "on")


def _pattern(regex: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not re.fullmatch(regex, text):
            raise ValueError("")
        return text
    return parse


def _devices(text: str) -> tuple[str, ...]:
    """CUDA_VISIBLE_DEVICES: indices or GPU-/MIG- UUIDs, comma-separated; '' or -1 for none."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    for item in items:
        if not re.fullmatch(r"-?\d+|(GPU|MIG)-[\w/-]+", item):
            raise ValueError(f"{item!r} is neither an index nor a GPU UUID")
    return items


def _url(text: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+.*", text):
        raise ValueError("")
    return text


def pipeline_target(text: str) -> Callable[..., Any]:
    """The function `module:function` names, imported: a pipeline that cannot run is refused at
    start-up, not by every run after the study is written."""
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise ValueError("not module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any failure to import is the one-line refusal
        raise ValueError(f"{module_name} cannot be imported: {type(error).__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else ''}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {attr}")
    return function


DEFAULT_PIPELINE = "jobs.pipeline:execute_run"
ID = r"[A-Za-z0-9_.-]+"

# ---- the table --------------------------------------------------------------------------------------
KERNELS = Switch("AOSCALE_KERNELS", "1", "0", True,
                 "the fused CPU kernels where a C compiler exists; 0 is the eager PyTorch path", "models.kernels")
ALLOW_NUMERICS_CHANGE = Switch("AOSCALE_ALLOW_NUMERICS_CHANGE", "1", "0", False,
                               "resume a run on another numerics path; its records then name both", "jobs.run.numerics")
WANDB = Switch("AOSCALE_WANDB", "1", "0", False, "log every run to wandb, as --wandb does", "jobs.run.tracking")
REQUIRE_PREPARED = Switch("AOSCALE_REQUIRE_PREPARED", "1", "0", False,
                          "never tokenise or download a corpus: a run whose token cache is missing is refused, naming "
                          "`aoscale prepare` (the Slurm and Ray executors set it for their jobs)", "jobs.data.corpus")
SWITCHES = (KERNELS, ALLOW_NUMERICS_CHANGE, WANDB, REQUIRE_PREPARED)

PIPELINE = Variable("AOSCALE_PIPELINE", "module:function naming an importable function, e.g. " + DEFAULT_PIPELINE,
                    "the callable every executor runs on a run folder", pipeline_target, None, "jobs.executors")
WORLD_SIZE = Variable("WORLD_SIZE", "a whole number >= 1", "processes in a distributed run (torchrun sets it)",
                      _count(1), 1, "jobs.train")
RANK = Variable("RANK", "a whole number >= 0, below WORLD_SIZE", "this process's rank (torchrun sets it)",
                _count(0), 0, "jobs.train, jobs.pipeline")
LOCAL_RANK = Variable("LOCAL_RANK", "a whole number >= 0, below WORLD_SIZE", "this process's GPU on its node",
                      _count(0), 0, "jobs.run.device")
HF_HUB_OFFLINE = Variable("HF_HUB_OFFLINE", "1, true, yes, on or 0, false, no, off", "no Hugging Face downloads",
                          _hf_bool, False, "jobs.train.preflight, jobs.data.datasets")
HF_DATASETS_OFFLINE = Variable("HF_DATASETS_OFFLINE", "1, true, yes, on or 0, false, no, off",
                               "no Hugging Face dataset downloads", _hf_bool, False,
                               "jobs.train.preflight, jobs.data.datasets")
VARIABLES: tuple[Switch | Variable, ...] = (
    *SWITCHES, PIPELINE, WORLD_SIZE, RANK, LOCAL_RANK,
    Variable("AOSCALE_ANALYSIS_WORKERS", "a whole number >= 1", "processes the report's fits use",
             _count_or_unset, None, "analysis.fit.background"),
    Variable("AOSCALE_BRANCH_WAIT_S", "a positive number of seconds", "how long a WSD branch waits for its trunk",
             _seconds, 3600.0, "jobs.train.wsd_branch"),
    Variable("AOSCALE_CACHE", "a folder (made when missing), not a file", "the token and corpus cache",
             _folder, None, "jobs.data.corpus"),
    Variable("AOSCALE_KERNEL_CACHE", "a folder (made when missing), not a file", "compiled CPU kernels",
             _folder, None, "models.kernels"),
    Variable("AOSCALE_DATA", "an existing folder", "local copies of evaluation sets", _existing_folder, None,
             "jobs.data.datasets, jobs.eval"),
    Variable("AOSCALE_FAULT", f"one of cli.faults' points ({', '.join(FAULT_POINTS)})", "kill this process at "
             "that point (tests only)", _pattern("|".join(map(re.escape, FAULT_POINTS))), None, "cli.faults", test_only=True),
    Variable("OMP_NUM_THREADS", "a whole number >= 1 (or OpenMP's per-level list, 4,2)", "threads per process",
             _threads, None, "torch; set by jobs.executors.ray_tune"),
    Variable("CUDA_VISIBLE_DEVICES", "GPU indices or GPU-/MIG- UUIDs, comma-separated ('' or -1: none)",
             "the GPUs this process may use", _devices, None, "jobs.executors.local"),
    HF_HUB_OFFLINE, HF_DATASETS_OFFLINE,
    Variable("TIKTOKEN_CACHE_DIR", "a folder (made when missing), not a file", "tiktoken's encodings", _folder,
             None, "jobs.data.tokenizers"),
    Variable("TOKENIZERS_PARALLELISM", "true, false, 1 or 0", "tokenizer threads (aoscale sets false)",
             _one_of("true", "false", "1", "0"), None, "jobs.data.tokencache"),
    Variable("WANDB_MODE", "online, offline, disabled, dryrun, run or shared", "wandb's mode when tracking asks none",
             _one_of("online", "offline", "disabled", "dryrun", "run", "shared"), None, "jobs.run.tracking"),
    Variable("WANDB_API_KEY", "a wandb key", "wandb credentials", str, None, "jobs.run.tracking"),
    Variable("WANDB_BASE_URL", "an http(s) URL", "the wandb server", _url, None, "jobs.run.tracking"),
    Variable("NETRC", "an existing netrc file", "where wandb credentials are looked up", _existing_file, None,
             "jobs.run.tracking"),
    Variable("RAY_ADDRESS", "auto, local, HOST:PORT or ray://HOST:PORT", "the Ray cluster to join",
             _pattern(r"auto|local|((ray|https?)://)?[\w.-]+:\d+"), None, "jobs.executors.ray_tune"),
    Variable("RAY_TMPDIR", "a folder (made when missing), not a file", "Ray's session folder", _folder, None,
             "jobs.executors.ray_tune"),
    Variable("RAY_JOB_ID", "a job id (letters, digits, _ . -)", "the job id status.json records", _pattern(ID),
             None, "jobs.run.files"),
    Variable("SLURM_JOB_ID", "a whole number", "the job id status.json records", _count(0), None, "jobs.run.files"),
    Variable("SLURM_ARRAY_JOB_ID", "a whole number", "the job id status.json records", _count(0), None,
             "jobs.run.files"),
    Variable("SLURM_ARRAY_TASK_ID", "a whole number", "the array task of this run", _count(0), None,
             "jobs.run.files"),
    Variable("SLURM_PROCID", "a whole number", "this task's rank under srun (becomes RANK)", _count(0), None,
             "jobs.train.engines"),
    Variable("SLURM_NTASKS", "a whole number >= 1", "tasks under srun (becomes WORLD_SIZE)", _count(1), None,
             "jobs.train.engines"),
    Variable("SLURM_LOCALID", "a whole number", "this task's GPU on its node under srun (becomes LOCAL_RANK)",
             _count(0), None, "jobs.train.engines"),
    Variable("CC", "a C compiler command", "the compiler of the CPU kernels", _pattern(r"\S.*"), "cc",
             "models.kernels"),
    Variable("PYTHONPATH", "folders separated by ':'", "passed on to the report's workers", str, None,
             "analysis.fit.background"),
)
BY_NAME = {entry.name: entry for entry in VARIABLES}


def check_environment() -> None:
    """Refuse (InputError, one line) the first variable in VARIABLES set to a value it does not
    take, and ranks at or beyond WORLD_SIZE."""
    for entry in VARIABLES:
        entry.read()
    size = world_size()
    for entry in (RANK, LOCAL_RANK):
        if entry.read() >= size:
            raise InputError(f"{entry.name}={entry.text()!r}: expected {entry.expects} "
                             f"(WORLD_SIZE is {size}); set it so, or unset both")


def kernels_enabled() -> bool:
    """`AOSCALE_KERNELS`: whether the fused CPU kernels may run (1, the default) or not (0)."""
    return KERNELS.read()


def numerics_change_allowed() -> bool:
    """`AOSCALE_ALLOW_NUMERICS_CHANGE`: whether a resume may continue on another numerics path."""
    return ALLOW_NUMERICS_CHANGE.read()


def require_prepared() -> bool:
    """`AOSCALE_REQUIRE_PREPARED`: whether this process may only read prepared token caches."""
    return REQUIRE_PREPARED.read()


def world_size() -> int:
    """`WORLD_SIZE`: processes in this distributed run (1 when unset)."""
    return WORLD_SIZE.read()


def rank() -> int:
    """`RANK`: this process's rank (0 when unset)."""
    return RANK.read()


def local_rank() -> int:
    """`LOCAL_RANK`: this process's GPU index on its node (0 when unset)."""
    return LOCAL_RANK.read()


def hf_offline() -> bool:
    """`HF_HUB_OFFLINE` or `HF_DATASETS_OFFLINE` on: no Hugging Face downloads."""
    return HF_HUB_OFFLINE.read() or HF_DATASETS_OFFLINE.read()


def pipeline_ref() -> str:
    """`AOSCALE_PIPELINE`'s `module:function` (unchecked text; check_environment imports it), or the default."""
    return PIPELINE.text() or DEFAULT_PIPELINE
