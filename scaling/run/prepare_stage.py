"""The launcher's prepare stage (`stage`, `run_stage`) and the study's cache folder (`cache_folder`).

`scaling.launch` prepares before any run starts. Locally it calls `jobs.data.prepare.prepare` in its
own process; with `--backend slurm` it submits a CPU job of its own (`--slurm-prepare-cpus`) that the
run array depends on (`--dependency=afterok:<id>`); with `--backend ray` a CPU task runs before the
trials. Runs launched by Slurm or Ray carry AOSCALE_REQUIRE_PREPARED=1 and AOSCALE_CACHE=<the cache
folder>: they never download or tokenise, and a run that finds its cache missing is refused in one
line naming `aoscale prepare` (exit 2, nothing written). A local run may tokenise on first use.

The cache folder: `--cache-dir` (the study setting `cache_dir`), else the folder the study recorded
in `<study>/data.json` when it was launched or prepared, else `$AOSCALE_CACHE`, else with
`--backend slurm` or `ray` the folder `aoscale-cache` beside the study directory (on the study's
shared file system; never a home-directory cache a compute node may not see), else
`~/.cache/aoscale`. The command itself is `python -m scaling.prepare` (scaling/prepare.py).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.data import corpus as data
from jobs.data.prepare import Corpus, PrepareJob, default_workers, prepare, stopping
from jobs.run.files import atomic_write_json, read_json

DATA_FILE = "data.json"  # <study>/data.json: the cache folder the study's runs read, and its corpora
CLUSTER_CACHE = "aoscale-cache"  # beside the study dir, on a cluster backend
CLUSTER_BACKENDS = ("slurm", "ray")
CACHE_ENV = "AOSCALE_CACHE"


@dataclass(frozen=True)
class Stage:
    """What a study's runs read and where: the cache folder (and why it is that one) and the corpora."""

    cache_dir: Path
    source: str  # --cache-dir | recorded in data.json | $AOSCALE_CACHE | beside the study dir | default
    corpora: tuple[Corpus, ...]

    def unprepared(self) -> tuple[Corpus, ...]:
        """The corpora whose cache is not complete in `cache_dir`."""
        with cache_env(self.cache_dir):
            return tuple(item for item in self.corpora if item.manifest() is None)


def study_corpora(specs: Any) -> tuple[Corpus, ...]:
    """The distinct (corpus, tokenizer, text field) of the runs (RunSpec objects), sorted."""
    return tuple(sorted({Corpus(s.corpus, s.tokenizer, s.text_field) for s in specs}))


def cache_folder(setting: str | None, study_dir: Path, backend: str) -> tuple[Path, str]:
    """The study's token cache folder and where that choice came from (module docstring)."""
    if setting:
        return Path(setting).expanduser().absolute(), "--cache-dir"
    recorded = read_json(study_dir / DATA_FILE, default={}).get("cache_dir") if study_dir.is_dir() else None
    if recorded:
        return Path(recorded), f"recorded in {study_dir / DATA_FILE}"
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().absolute(), _CHOSEN.get(os.environ[CACHE_ENV], f"${CACHE_ENV}")
    if backend in CLUSTER_BACKENDS:
        return study_dir.absolute().parent / CLUSTER_CACHE, f"--backend {backend}: beside the study dir"
    return data.cache_root().absolute(), "default"


def stage(study: Any, study_dir: Path, backend: str) -> Stage:
    """The prepare stage of a study (a `StudySpec`) launched into `study_dir` on `backend`."""
    folder, source = cache_folder(dict(study.settings).get("cache_dir"), Path(study_dir), backend)
    return Stage(folder, source, study_corpora(cell.spec for cell in study.cells))


@contextlib.contextmanager
def cache_env(cache_dir: Path | None) -> Iterator[None]:
    """AOSCALE_CACHE names `cache_dir` inside the block (None: as it is); its value before the
    block comes back after (a launcher's `use_cache` inside it included)."""
    saved = os.environ.get(CACHE_ENV)
    if cache_dir is not None:
        os.environ[CACHE_ENV] = str(cache_dir)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = saved


_CHOSEN: dict[str, str] = {}  # cache folders `use_cache` chose in this process -> why (for the dry-run)


def use_cache(stage_: Stage) -> None:
    """This process (and the workers it starts, which inherit it) reads and writes the stage's cache folder."""
    os.environ[CACHE_ENV] = str(stage_.cache_dir)
    _CHOSEN[str(stage_.cache_dir)] = stage_.source


def record(study_dir: Path, stage_: Stage) -> None:
    """`<study>/data.json`: the cache folder and the corpora (a relaunch and `aoscale prepare
    STUDY_DIR` read the same folder)."""
    doc = {"cache_dir": str(stage_.cache_dir),
           "corpora": [{"corpus": c.corpus, "tokenizer": c.tokenizer, "text_field": c.text_field}
                       for c in stage_.corpora]}
    if read_json(study_dir / DATA_FILE, default=None) != doc:
        atomic_write_json(study_dir / DATA_FILE, doc)


def describe(stage_: Stage, backend: str, options: Any = None, workers: int | None = None) -> str:
    """The dry-run's lines: the cache folder, each corpus prepared or not, and how it will be."""
    todo = stage_.unprepared()
    lines = [f"data: token cache {stage_.cache_dir} ({stage_.source})"]
    lines += [f"  {item}: {'to prepare' if item in todo else 'prepared'}" for item in stage_.corpora]
    if not todo:
        lines.append("  nothing to prepare")
    elif backend == "slurm":
        lines.append(f"  prepared by a Slurm CPU job of its own ({options.prepare_cpus} CPUs at most, no GPU); the "
                     "run array waits for it (--dependency=afterok:<its id>)")
    elif backend == "ray":
        lines.append("  prepared by a Ray CPU task before the trials start")
    else:
        lines.append(f"  prepared in this process with {workers or default_workers()} worker(s) before the runs")
    if backend in CLUSTER_BACKENDS:
        lines.append("  runs read it with AOSCALE_REQUIRE_PREPARED=1: they never download or tokenise")
    return "\n".join(lines)


def run_stage(stage_: Stage, study_dir: Path, executor: Any) -> None:
    """Before any run: record the cache folder; then prepare here (an executor without
    `use_data`: local), or hand the job to the executor (Slurm: a CPU job the array depends on;
    Ray: a CPU task first), which also gives its runs the cache folder and
    AOSCALE_REQUIRE_PREPARED=1."""
    record(Path(study_dir), stage_)
    todo = stage_.unprepared()
    job = PrepareJob(str(stage_.cache_dir), todo) if todo else None
    use_data = getattr(executor, "use_data", None)
    if use_data is not None:
        use_data(str(stage_.cache_dir), job)
    elif job is not None:
        with stopping():
            prepare(todo)


# ---------------------------------------------------------------------------------------------
# The command


