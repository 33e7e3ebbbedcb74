"""Ray executor: the run matrix as a Ray Tune grid, one trial per run directory.

`RayExecutor(study_dir, options).submit_all(run_dirs)` starts one Tune experiment over the runs
in a background thread and returns handles at once; `handle.result()` waits for its run.
Trials run `run_exclusive(run_dir)` (lock + `jobs.pipeline.execute_run`), so a trial always
resumes from the run's own latest checkpoint in the study directory: the trial checkpoint *is*
the run checkpoint (nothing is copied into Tune's storage). Hence:

- `FailureConfig(max_failures=max_retries)`: a crashed trial (worker killed, exception) is
  restarted and resumes from the run's last checkpoint;
- a relaunch after the driver died restores the experiment with `Tuner.restore` (finished
  trials are not rerun, unfinished and errored ones are resumed) when the experiment stored in
  `<study>/ray/` covers the runs asked for; otherwise it starts a new experiment. Either way a
  finished run returns "done" at once and is never retrained.

Tune's storage lives in `<study>/ray/` (on a multi-node cluster the study directory must be on
shared storage). Without `address` a local Ray is started (and shut down afterwards); with one
(`auto` for the cluster `ray start` left on this machine, or `host:port`) the driver joins it with
a `runtime_env`: the aoscale checkout as working directory (so workers on other nodes import this
code, not whatever their Python has installed) and the environment variables aoscale reads.

A trial is one training process. A trial asking for more than one GPU is refused before
submission: Tune would reserve the GPUs and train on one (multi-GPU runs go through Slurm, where
srun starts one DeepSpeed rank per GPU).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.run import files as runfiles
from cli import float_arg, int_arg
from cli.options import add_flags, flags, option
from jobs.executors import BUSY, PIPELINE, failure_count, record_crash, run_exclusive

EXPERIMENT_FILE = "experiment.json"
CONNECT_TIMEOUT_S = 3.0
REPO = Path(__file__).resolve().parents[2]
# Environment variables a trial inherits from the driver: what aoscale, torch and wandb read.
FORWARDED_ENV_PREFIXES = ("AOSCALE_", "WANDB_", "HF_", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM",
                          "TORCH_EXTENSIONS_DIR", "DS_ACCELERATOR")
# Kept out of the uploaded working directory: history, outputs and caches.
WORKING_DIR_EXCLUDES = [".git", "studies", "**/__pycache__", "*.egg-info", ".pytest_cache"]
BUSY_WAIT_S = 600.0  # a trial whose run is still locked (an orphaned worker) waits this long
BUSY_POLL_S = 1.0


@dataclass(frozen=True)
class RayOptions:
    """Ray Tune resources; plain values, never part of a run id. Each field declares its
    `scaling.launch` flag and help (cli.options); `max_retries` comes from `--max-retries`."""

    address: str = option("", "--ray-address", "Ray cluster to join: auto (the one `ray start` runs here) or "
                          "host:port (default: start a local Ray)")
    working_dir: str = option("", "--ray-working-dir", "code folder shipped to the workers when joining a "
                              "cluster (default: this aoscale checkout)")
    env: tuple[tuple[str, str], ...] = option((), "--ray-env", "environment variable KEY=VALUE for every trial "
                                              "(repeatable; AOSCALE_*, WANDB_*, HF_* and OMP_NUM_THREADS are "
                                              "passed on anyway)", repeat=True)
    cpus_per_trial: float = option(1.0, "--cpus-per-trial", "CPUs per run", type=float_arg)
    gpus_per_trial: float | None = option(None, "--gpus-per-trial", "GPUs per run, 0 to 1 (default: 1 when the Ray "
                                          "cluster has GPUs, else 0); a run spanning GPUs needs --backend slurm",
                                          type=float_arg)
    num_cpus: int = option(0, "--ray-num-cpus", "CPUs of a locally started Ray (0 = all)", type=int_arg)
    max_concurrent: int = option(0, "--max-concurrent-trials", "runs at once (0 = as resources allow)",
                                 type=int_arg)
    max_retries: int = 1


def validate_ray_options(opts: RayOptions) -> None:
    """Check the options, that Ray is importable and `address` answers, before anything is written."""
    if not ray_importable():
        raise ValueError("backend: ray is not installed; fix: pip install 'aoscale[ray]' or use --backend local")
    if opts.cpus_per_trial <= 0:
        raise ValueError(f"cpus_per_trial: {opts.cpus_per_trial} must be > 0; fix: e.g. --cpus-per-trial 1")
    checks = {"gpus_per_trial": opts.gpus_per_trial, "max_retries": opts.max_retries,
              "ray_num_cpus": opts.num_cpus, "max_concurrent_trials": opts.max_concurrent}
    for name, value in checks.items():
        if value is not None and value < 0:
            raise ValueError(f"{name}: {value} must be >= 0; fix: pass a non-negative number")
    if (opts.gpus_per_trial or 0) > 1:
        raise ValueError(f"gpus_per_trial: {opts.gpus_per_trial:g} GPUs for a trial that trains in one process "
                         "would leave all but one idle; fix: --gpus-per-trial 1 (or less), or run multi-GPU "
                         "runs with --backend slurm --gpus-per-node N")
    if opts.working_dir and not Path(opts.working_dir).is_dir():
        raise ValueError(f"ray_working_dir: {opts.working_dir} is not a directory; fix: pass the code folder")
    if opts.address:
        check_reachable(resolve_address(opts.address))


def trial_gpus(gpus_per_trial: float | None, cluster_resources: dict[str, float]) -> float:
    """GPUs each trial reserves: the `--gpus-per-trial` given, else 1 when the cluster has a GPU
    (`ray.cluster_resources()["GPU"]`; a trial with none would train on CPU beside idle GPUs) and 0
    on a CPU cluster."""
    if gpus_per_trial is not None:
        return float(gpus_per_trial)
    return 1.0 if float(cluster_resources.get("GPU", 0)) >= 1 else 0.0


def resolve_address(address: str) -> str:
    """`auto` -> the address of the Ray cluster running on this machine (as `ray.init("auto")`
    finds it: `RAY_ADDRESS`, else the file `ray start` writes); other addresses unchanged."""
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS", "auto") != "auto":
        return os.environ["RAY_ADDRESS"]
    current = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "ray_current_cluster"
    try:
        return current.read_text().strip()
    except OSError:
        raise ValueError("ray_address: auto found no Ray cluster on this machine; fix: start one with "
                         "`ray start --head` (or give host:port)") from None


def parse_env(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--ray-env KEY=VALUE` items -> sorted pairs."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"ray_env: {item!r} is not KEY=VALUE; fix: e.g. --ray-env HF_HOME=/shared/hf")
        pairs[key.strip()] = value
    return tuple(sorted(pairs.items()))


def runtime_env(opts: RayOptions) -> dict[str, Any]:
    """The runtime_env of a driver joining a cluster: code folder and environment variables."""
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}
    env.update(dict(opts.env))
    return {"working_dir": opts.working_dir or str(REPO), "excludes": WORKING_DIR_EXCLUDES, "env_vars": env}


def ray_importable() -> bool:
    """Whether `ray.tune` can be imported (a broken install that raises on import counts as absent)."""
    try:
        return importlib.util.find_spec("ray") is not None and importlib.util.find_spec("ray.tune") is not None
    except (ImportError, ValueError):
        return False


def check_reachable(address: str) -> None:
    """`host:port` or `ray://host:port` must accept a TCP connection within CONNECT_TIMEOUT_S."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ray_address: {address!r} is not host:port; fix: e.g. --ray-address 10.0.0.1:6379")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as error:
        raise ValueError(f"ray_address: cannot reach {address} ({error.strerror or error}); "
                         "fix: start the cluster (ray start --head) or drop --ray-address") from None


def run_trial(config: dict[str, Any]) -> None:
    """The Tune trainable: one run directory, resumed from its own checkpoint."""
    from ray import tune  # noqa: PLC0415 - optional (the ray extra); seconds to import

    run_dir = config["run_dir"]
    threads = max(1, int(config.get("threads", 1)))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    _set_torch_threads(threads)
    context = tune.get_context()
    status = runfiles.read_status(run_dir)
    import ray  # noqa: PLC0415 - optional (the ray extra); seconds to import

    runfiles.write_status(run_dir, status.get("state", "pending"), job_id=f"ray:{context.get_trial_id()}",
                          worker_pid=os.getpid(), node_id=ray.get_runtime_context().get_node_id())
    state = _run_when_free(run_dir, config.get("pipeline", PIPELINE))
    tune.report({"state": state, "step": int(runfiles.read_status(run_dir).get("step", 0))})


def _set_torch_threads(threads: int) -> None:
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        import torch  # noqa: PLC0415 - only where the worker has torch (checked above)

        torch.set_num_threads(threads)


def _run_when_free(run_dir: str, pipeline: str) -> str:
    """run_exclusive, waiting while a worker orphaned by a dead driver still holds the run."""
    deadline = time.monotonic() + BUSY_WAIT_S
    state = run_exclusive(run_dir, pipeline)
    while state == BUSY and time.monotonic() < deadline:
        time.sleep(BUSY_POLL_S)
        state = run_exclusive(run_dir, pipeline)
    if state == BUSY:
        raise RuntimeError(f"run {run_dir} stayed locked by another process for {BUSY_WAIT_S:.0f} s")
    return state


class RayHandle:
    """One run in the Tune experiment: `done()`, `result()`, `state` (status.json's), `job_id`."""

    def __init__(self, experiment: _Experiment, run_dir: Path) -> None:
        self.experiment = experiment
        self.run_dir = Path(run_dir)

    @property
    def job_id(self) -> str:
        return str(runfiles.read_status(self.run_dir).get("job_id", f"ray:{self.experiment.name}"))

    @property
    def state(self) -> str:
        """Ledger state of the run (pending until its trial writes status.json)."""
        self.experiment.start()
        return str(runfiles.read_status(self.run_dir).get("state", "pending"))

    def done(self) -> bool:
        """True once the experiment has finished (every trial ended)."""
        self.experiment.start()
        return not self.experiment.running()

    def result(self) -> str:
        """Wait for the experiment; the run's final ledger state."""
        self.experiment.start()
        self.experiment.wait()
        return self.experiment.final_state(self.run_dir)


class RayExecutor:
    """Run study runs as a Ray Tune grid (see the module docstring)."""

    slots = None
    cache_dir = ""  # the study's token cache (use_data): trials read it and never tokenise
    prepare_job: Any = None  # a jobs.data.prepare.PrepareJob run as a CPU task before the trials

    def __init__(self, study_dir: str | Path, options: RayOptions, *, pipeline: str = PIPELINE) -> None:
        self.study_dir = Path(study_dir).resolve()
        self.options = options
        self.pipeline = pipeline
        self._pending: list[Path] = []
        self._experiments: list[_Experiment] = []

    def submit(self, run_dir: str | Path) -> RayHandle:
        """Queue a run; the experiment starts when a handle is first polled (or at `submit_all`)."""
        if not self._pending:
            self._experiments.append(_Experiment(self, []))
        self._pending.append(Path(run_dir).resolve())
        experiment = self._experiments[-1]
        experiment.run_dirs = list(self._pending)
        return RayHandle(experiment, Path(run_dir))

    def submit_all(self, run_dirs: Sequence[str | Path]) -> list[RayHandle]:
        """One Tune experiment over `run_dirs`, started at once in the background."""
        handles = [self.submit(d) for d in run_dirs]
        if handles:
            handles[0].experiment.start()
        return handles

    def shutdown(self) -> None:
        """Wait for running experiments (their trials own the runs' locks)."""
        for experiment in self._experiments:
            if experiment.thread is not None:
                experiment.wait()

    def _seal(self) -> None:
        self._pending = []

    def use_data(self, cache_dir: str, prepare_job: Any = None) -> None:
        """Trials read `cache_dir` with AOSCALE_REQUIRE_PREPARED=1; a `prepare_job` runs first, as a
        Ray CPU task (once), before the first grid's trials start."""
        self.cache_dir, self.prepare_job = cache_dir, prepare_job

    def data_env(self) -> dict[str, str]:
        """The environment variables every trial gets for the study's data."""
        return {"AOSCALE_CACHE": self.cache_dir, "AOSCALE_REQUIRE_PREPARED": "1"} if self.cache_dir else {}


class _Experiment:
    """One `tuner.fit()` over a fixed set of run directories, in a background thread."""

    def __init__(self, executor: RayExecutor, run_dirs: list[Path]) -> None:
        self.executor = executor
        self.run_dirs = run_dirs
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.errored: dict[str, str] = {}
        self.failures_before: dict[str, int] = {}  # run dir -> failure count when the grid started
        self.name = ""

    def start(self) -> None:
        if self.thread is None:
            self.executor._seal()
            self.failures_before = {str(d.resolve()): failure_count(d) for d in self.run_dirs}
            self.thread = threading.Thread(target=self._fit, name="aoscale-ray-tune", daemon=True)
            self.thread.start()

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def final_state(self, run_dir: Path) -> str:
        key = str(run_dir.resolve())
        reason = self.errored.get(key) or (self.error and f"ray: {self.error}")
        if reason:
            record_crash(run_dir, str(reason)[:300], self.failures_before.get(key, 0))
        state = str(runfiles.read_status(run_dir).get("state", "pending"))
        return state if state in ("done", "failed", "preempted") else "failed"

    def _fit(self) -> None:
        try:
            self.errored = fit_grid(self.executor.study_dir, self.run_dirs, self.executor.options,
                                    self.executor.pipeline, self, data=self.executor)
        except BaseException as error:  # noqa: BLE001 - reported through every handle
            self.error = error


def fit_grid(study_dir: Path, run_dirs: Sequence[Path], opts: RayOptions, pipeline: str,
             experiment: _Experiment | None = None, data: RayExecutor | None = None) -> dict[str, str]:
    """Run (or restore) the grid and wait; returns {run_dir: reason} for trials that errored.
    With `data` (its `use_data`), its prepare job runs first and the trials get its data_env."""
    import ray  # noqa: PLC0415 - optional (the ray extra); seconds to import

    started = _init_ray(opts, data.data_env() if data is not None else {})
    try:
        if data is not None and data.prepare_job is not None:
            run_prepare_task(data.prepare_job)
            data.prepare_job = None
        tuner, name = _tuner(study_dir, run_dirs, opts, pipeline)
        if experiment is not None:
            experiment.name = name
        results = tuner.fit()
        return {r.config["run_dir"]: f"ray trial failed: {_one_line(r.error)}"
                for r in results if r.error is not None}
    finally:
        if started:
            ray.shutdown()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _init_ray(opts: RayOptions, env_vars: dict[str, str] | None = None) -> bool:
    """Join `opts.address` or start a local Ray, its workers given `env_vars` too; False when this
    process was already connected."""
    import ray  # noqa: PLC0415 - optional (the ray extra); seconds to import

    if ray.is_initialized():
        return False
    if opts.address:
        env = runtime_env(opts)
        env["env_vars"] = {**env["env_vars"], **(env_vars or {})}
        ray.init(address=opts.address, runtime_env=env, log_to_driver=False)
    else:
        ray.init(num_cpus=opts.num_cpus or None, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": env_vars} if env_vars else None)
    return True


def run_prepare_task(job: Any) -> None:
    """The data-preparation job as one Ray task on the CPUs of the largest node (no GPU), waited
    for before any trial; it raises what the task raised (the grid then does not start)."""
    import ray  # noqa: PLC0415 - optional (the ray extra); seconds to import

    cpus = max((node["Resources"].get("CPU", 0) for node in ray.nodes() if node.get("Alive")), default=1)
    task = ray.remote(num_cpus=cpus, num_gpus=0, max_retries=0)(_prepare_in_task)
    ray.get(task.remote(job, int(cpus)))


def _prepare_in_task(job: Any, cpus: int) -> str:
    """In the task: the job with one tokenising process per CPU the task holds (unless it names its own)."""
    return dataclasses.replace(job, workers=job.workers or cpus)()


def trial_dirname(trial: Any) -> str:
    """Trial folders are named by run id."""
    return Path(trial.config["run_dir"]).name


def _tuner(study_dir: Path, run_dirs: Sequence[Path], opts: RayOptions, pipeline: str) -> tuple[Any, str]:
    """`Tuner.restore` of the stored experiment when it covers `run_dirs`, else a new grid."""
    import ray  # noqa: PLC0415 - optional (the ray extra); seconds to import
    from ray import tune  # noqa: PLC0415

    storage = study_dir / "ray"
    gpus = trial_gpus(opts.gpus_per_trial, ray.cluster_resources())
    trainable = tune.with_resources(run_trial, {"cpu": opts.cpus_per_trial, "gpu": gpus})
    wanted = sorted(str(Path(d).resolve()) for d in run_dirs)
    stored = runfiles.read_json(storage / EXPERIMENT_FILE, default={})
    path = storage / stored.get("name", "-")
    if stored and set(wanted) <= set(stored.get("runs", [])) and tune.Tuner.can_restore(str(path)):
        return tune.Tuner.restore(str(path), trainable, resume_unfinished=True, restart_errored=True), path.name
    name = "grid-" + hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:8] + time.strftime("-%Y%m%d-%H%M%S")
    runfiles.atomic_write_json(storage / EXPERIMENT_FILE, {"name": name, "runs": wanted, "gpus_per_trial": gpus})
    space = {"run_dir": tune.grid_search(wanted), "pipeline": pipeline,
             "threads": max(1, int(opts.cpus_per_trial))}
    tune_config = tune.TuneConfig(max_concurrent_trials=opts.max_concurrent or None,
                                  trial_dirname_creator=trial_dirname)
    run_config = tune.RunConfig(name=name, storage_path=str(storage), verbose=0,
                                failure_config=tune.FailureConfig(max_failures=opts.max_retries))
    return tune.Tuner(trainable, param_space=space, tune_config=tune_config, run_config=run_config), name


def options_from_flags(given: dict[str, Any], max_retries: int) -> RayOptions:
    """Validated RayOptions from the Ray flags given (field -> value, `--ray-env` items as typed)
    and `--max-retries`; ValueError naming the field and the fix. The launcher and the driver
    below both build their options here."""
    if "env" in given:
        given = {**given, "env": parse_env(given["env"])}
    options = RayOptions(max_retries=max_retries, **given)
    validate_ray_options(options)
    return options


def driver_parser() -> argparse.ArgumentParser:
    """The driver's command line: the study, its run folders, `--max-retries` and the flags
    declared on RayOptions, named as `scaling.launch` names them."""
    parser = argparse.ArgumentParser(prog="python -m jobs.executors.ray_tune")
    parser.add_argument("study")
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--max-retries", type=int_arg, default=1, help="retries of a crashed trial (default 1)")
    add_flags(parser, flags(RayOptions))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jobs.executors.ray_tune STUDY RUN_DIR... [--max-retries R] [the launcher's Ray
    flags: --ray-address, --cpus-per-trial, --ray-num-cpus, ...]`: run the grid in the foreground
    (a driver you can kill)."""
    args = driver_parser().parse_args(argv)
    given = {f.field: getattr(args, f.dest) for f in flags(RayOptions) if getattr(args, f.dest) is not None}
    try:
        opts = options_from_flags(given, args.max_retries)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    handles = RayExecutor(args.study, opts).submit_all(args.run_dirs)
    states = [h.result() for h in handles]
    print(json.dumps({h.run_dir.name: s for h, s in zip(handles, states)}), flush=True)
    return 0 if all(s == "done" for s in states) else 1


if __name__ == "__main__":
    sys.exit(main())
