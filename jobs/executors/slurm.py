"""Slurm executor: runs as a submitit job array, checkpoint-and-requeue on preemption/timeout.

`SlurmExecutor(study_dir, options).submit_all(run_dirs)` submits one array task per run (the
array's parallelism capped by `options.array_parallelism`) and returns at once. Each task runs
`RunJob`, a submitit `Checkpointable` around `jobs.pipeline.execute_run`.

Preemption (SIGUSR2, or SIGTERM, which submitit alone would ignore) is consistent with the
optimizer step: submitit's own SIGUSR2 handler would run
`checkpoint()` at whatever bytecode the signal lands on (possibly between `optimizer.step()`
and the RNG/data-position update). `RunJob` therefore *defers* it: its handler only calls
`jobs.train.stopping.request_stop()`; the training loop finishes the step in flight, writes a checkpoint
and returns "preempted"; only then is submitit's handler invoked, which pickles `checkpoint()`
(the same callable: all state is on disk), runs `scontrol requeue` and exits. The requeued task
resumes from that checkpoint.

Logs and submitit pickles go to `<study>/logs/slurm/<submission>/` (a fresh folder per
submission: Slurm job ids restart when a cluster's state is reset, and a stale result pickle
with a reused id would be read as this job's result). Job ids are recorded in
`<study>/logs/slurm/jobs.json` (run_id -> job id) by the submitter and in each run's
status.json (`job_id`) by the task itself.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.run import files as runfiles
from cli import Busy, int_arg, rules
from cli.options import option
from jobs.executors import PIPELINE, failure_count, record_crash, resolve, run_exclusive

STOP_HOOK = "jobs.train.stopping:request_stop"
DEADLINE_HOOK = "jobs.train.stopping:stop_before"  # told the job's end, training keeps its measured save time
REPO = Path(__file__).resolve().parents[2]
SIGNAL_DELAY_S = 90  # USR2 this long before the time limit (submitit's default), time to checkpoint
SLURM_CMD_TIMEOUT_S = 20
JOBS_FILE = "jobs.json"
PREPARE_FILE = "prepare.json"  # the data-preparation job: its id, cache folder and corpora
# Tokenising processes of the prepare job: OpenWebText (~38 GB of text) tokenises at ~1 MB/s per
# core (bench/bench_data.py), so 16 cores take ~40 min; a node with fewer CPUs gets all of them.
PREPARE_CPUS = 16
MEM_PATTERN = re.compile(r"^[0-9]+[KMGT]?$")
TIME_PATTERN = re.compile(r"^(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?$")
# sbatch --mail-type values (sbatch(1)); several may be joined by commas
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")

# Slurm job states (sacct/squeue names) -> ledger states of status.json
QUEUE_TO_LEDGER = {
    "PENDING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending", "REQUEUE_FED": "pending",
    "CONFIGURING": "pending", "SUSPENDED": "pending", "PREEMPTED": "preempted",
    "RUNNING": "running", "COMPLETING": "running", "COMPLETED": "done",
    "FAILED": "failed", "CANCELLED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed",
}


@dataclass(frozen=True)
class SlurmOptions:
    """sbatch-style resources for every array task; plain values, never part of a run id. Each
    field declares its `scaling.launch` flag and help (cli.options)."""

    partition: str = option("", "--slurm-partition", "Slurm partition (default: the cluster's)")
    account: str = option("", "--slurm-account", "Slurm account")
    qos: str = option("", "--slurm-qos", "Slurm QOS")
    time_min: int = option(60, "--slurm-time", "time limit per run: minutes or [D-]HH:MM[:SS]")
    constraint: str = option("", "--slurm-constraint", "Slurm node constraint")
    nodes: int = option(1, "--nodes", "nodes per run", type=int_arg)
    gpus_per_node: int = option(0, "--gpus-per-node", "GPUs per node; >1 GPU in all uses DeepSpeed", type=int_arg)
    cpus_per_task: int = option(1, "--cpus-per-task", "CPUs per task", type=int_arg)
    mem: str = option("", "--mem", "memory per node, e.g. 16G")
    array_parallelism: int = option(64, "--slurm-array-parallelism", "array tasks at once", type=int_arg)
    setup: tuple[str, ...] = option((), "--slurm-setup", "shell line run before each task, e.g. 'module load "
                                    "cuda' (repeatable)", repeat=True)
    exclusive: bool = option(False, "--slurm-exclusive", "whole nodes to each task (sbatch --exclusive)",
                             switch=True)
    signal_delay_s: int = option(SIGNAL_DELAY_S, "--slurm-signal-delay", "seconds before the time limit that "
                                 "USR2 asks the run to checkpoint and requeue", type=int_arg)
    mail_type: str = option("", "--slurm-mail-type", "sbatch --mail-type, e.g. END,FAIL")
    mail_user: str = option("", "--slurm-mail-user", "sbatch --mail-user")
    additional: tuple[tuple[str, str], ...] = option((), "--slurm-additional", "extra sbatch option key=value "
                                                     "(repeatable)", repeat=True)
    prepare_cpus: int = option(PREPARE_CPUS, "--slurm-prepare-cpus", "CPUs of the data-preparation job (tokenises "
                               "the corpora before the runs, which wait for it; at most a node's CPUs)", type=int_arg)

    @property
    def tasks_per_node(self) -> int:
        """One srun task per GPU (DeepSpeed ranks), one task on CPU-only nodes."""
        return max(1, self.gpus_per_node)


def parse_time_min(text: str | int) -> int:
    """`--slurm-time` in minutes: `90`, `HH:MM`, `HH:MM:SS` or `D-HH:MM[:SS]` (seconds round up)."""
    text = str(text).strip()
    if text.isdigit():
        return int(text)
    match = TIME_PATTERN.match(text)
    if not match:
        raise ValueError(f"slurm_time: {text!r} is not a time; fix: give minutes or [D-]HH:MM[:SS]")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def parse_additional(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--slurm-additional key=value` items -> sorted ((key, value), ...) pairs."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.match(r"^[a-z][a-z0-9_-]*$", key.strip()):
            raise ValueError(f"slurm_additional: {item!r} is not key=value; fix: e.g. --slurm-additional mail_type=END")
        pairs[key.strip().replace("-", "_")] = value.strip()
    return tuple(sorted(pairs.items()))


def slurm_partitions() -> list[str]:
    """Partitions the cluster offers (`sinfo`); raises ValueError when Slurm is not reachable."""
    if shutil.which("sinfo") is None:
        raise ValueError("backend: slurm commands (sinfo) not found; fix: run on a Slurm login node or use --backend local")
    proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=SLURM_CMD_TIMEOUT_S)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise ValueError(f"backend: sinfo failed ({first}); fix: check that slurmctld is up (scripts/slurm-cluster.sh start)")
    return [p.strip().rstrip("*") for p in proc.stdout.split() if p.strip()]


def validate_slurm_options(opts: SlurmOptions, check_partition: bool = True) -> None:
    """Check every option (and, with `check_partition`, that the partition exists: this asks the
    controller) before anything is written or submitted."""
    positive = {"nodes": opts.nodes, "cpus_per_task": opts.cpus_per_task, "slurm_time": opts.time_min,
                "slurm_array_parallelism": opts.array_parallelism, "slurm_prepare_cpus": opts.prepare_cpus}
    for name, value in positive.items():
        rules.positive_int(name, value)
    rules.nonneg_int("gpus_per_node", opts.gpus_per_node)
    if opts.mem and not MEM_PATTERN.match(opts.mem):
        raise ValueError(f"mem: {opts.mem!r} is not a size; fix: e.g. --mem 16G")
    _validate_notifications(opts)
    if not check_partition:
        return
    partitions = slurm_partitions()
    if opts.partition and opts.partition not in partitions:
        raise ValueError(f"slurm_partition: unknown partition {opts.partition!r}; fix: use one of {', '.join(partitions)}")


def _validate_notifications(opts: SlurmOptions) -> None:
    """Signal delay inside the time limit; mail types sbatch knows; setup lines of one line each."""
    if not 1 <= opts.signal_delay_s < opts.time_min * 60:
        raise ValueError(f"slurm_signal_delay: {opts.signal_delay_s} s must be >= 1 and below the time limit "
                         f"({opts.time_min * 60} s); fix: pass seconds, e.g. --slurm-signal-delay 120")
    bad = [t for t in opts.mail_type.split(",") if opts.mail_type and t.strip().upper() not in MAIL_TYPES]
    if bad:
        raise ValueError(f"slurm_mail_type: unknown type {bad[0]!r}; fix: use one or more of {', '.join(MAIL_TYPES)}")
    if opts.mail_user and "@" not in opts.mail_user and not opts.mail_user.isidentifier():
        raise ValueError(f"slurm_mail_user: {opts.mail_user!r} is not a user or address; fix: e.g. me@lab.org")
    for line in opts.setup:
        if not line.strip() or "\n" in line:
            raise ValueError(f"slurm_setup: {line!r} must be one non-empty shell line; fix: repeat --slurm-setup per line")


def _record_job_id(run_dir: str) -> None:
    """Write the array task id into status.json (keeping its state) from inside the job."""
    job_id = runfiles.job_id()
    status = runfiles.read_status(run_dir)
    if status.get("job_id") != job_id:
        runfiles.write_status(run_dir, status.get("state", "pending"), job_id=job_id)


class RunJob:
    """The callable each array task runs: `execute_run(run_dir)` with deferred, step-consistent preemption.

    Submitit treats a callable with a `checkpoint` method as checkpointable: on SIGUSR2 it calls
    `checkpoint()`, pickles the returned submission, requeues the job and exits.
    """

    def __init__(self, pipeline: str = PIPELINE, stop_hook: str = STOP_HOOK) -> None:
        self.pipeline = pipeline
        self.stop_hook = stop_hook

    def __call__(self, run_dir: str) -> str:
        import submitit  # noqa: PLC0415 - optional (the slurm extra)

        env = submitit.JobEnvironment()
        if env.num_tasks > 1:
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        if env.global_rank == 0:
            _record_job_id(run_dir)
        deferred = _DeferredSignal(resolve(self.stop_hook))
        end = job_end_epoch_s(env.job_id) if env.global_rank == 0 else None  # rank 0 decides
        if end is not None and self.stop_hook == STOP_HOOK:
            resolve(DEADLINE_HOOK)(end)
        if env.global_rank == 0:  # the run's lock and attempt count belong to rank 0
            result = run_exclusive(run_dir, self.pipeline)
        else:
            result = resolve(self.pipeline)(run_dir)
        if result == "preempted":
            deferred.forward()  # checkpoint() + scontrol requeue + exit, now that the step is whole
        return result

    def checkpoint(self, run_dir: str) -> Any:
        """Resubmit the same call: everything the resumed job needs is in the run's checkpoint."""
        import submitit  # noqa: PLC0415 - optional (the slurm extra)

        return submitit.helpers.DelayedSubmission(self, run_dir)


def job_end_epoch_s(job_id: str) -> float | None:
    """The job's end (epoch seconds) from its time left (`squeue -o %L`); None when unknown
    (no limit, or the controller did not answer)."""
    lines = _run_lines(["squeue", "-h", "-j", str(job_id), "-o", "%L"])
    left = parse_time_left(lines[0]) if lines else None
    return None if left is None else time.time() + left


def parse_time_left(text: str) -> int | None:
    """squeue's `%L` ([D-][HH:]MM:SS, or UNLIMITED / NOT_SET) in seconds, None when unlimited."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3 or (days and not days.isdigit()):
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


class _DeferredSignal:
    """Replace submitit's preemption handler (USR2) and its SIGTERM bypass by one that only asks
    training to stop: a cluster that preempts with SIGTERM and a grace time (Slurm's default
    without `preempt_send_user_signal`: SIGCONT + SIGTERM, SIGKILL after GraceTime) gets the
    same checkpoint and requeue as USR2."""

    def __init__(self, request_stop: Callable[[], None]) -> None:
        import submitit  # noqa: PLC0415 - optional (the slurm extra)

        self.signum = submitit.JobEnvironment._usr_sig()
        self.request_stop = request_stop
        self.received: int | None = None  # the stop signal that came, if any
        self.submitit_handler = signal.getsignal(self.signum)  # checkpoint_and_try_requeue
        for signum in (self.signum, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received = signum
        self.request_stop()

    def forward(self) -> None:
        """Hand the (deferred) signal to submitit: checkpoint, requeue, exit. A run that stopped
        itself before the job's end (its measured save time reserved) is requeued the same way."""
        if callable(self.submitit_handler):
            self.submitit_handler(self.received or self.signum, None)


class SlurmHandle:
    """One submitted run: `done()`, `result()`, `state` (a status.json state), `job_id`."""

    def __init__(self, job: Any, run_dir: Path, failures_before: int = 0) -> None:
        self.job = job
        self.run_dir = Path(run_dir)
        self.failures_before = failures_before  # the run's failure count at submission
        self.error = ""

    @property
    def job_id(self) -> str:
        return str(self.job.job_id)

    @property
    def queue_state(self) -> str:
        """The scheduler's state (PENDING, RUNNING, REQUEUED, COMPLETED, FAILED, ...)."""
        return self.job.state.split()[0].upper()

    @property
    def state(self) -> str:
        """Ledger state: status.json once it says done/failed, else the queue state mapped."""
        ledger = _ledger_state(self.run_dir)
        if ledger in ("done", "failed") or self.error:
            return "failed" if self.error else ledger
        return QUEUE_TO_LEDGER.get(self.queue_state, ledger)

    def done(self) -> bool:
        """True once the task has a result or the scheduler says it ended (even without one)."""
        return bool(self.job.done())

    def result(self, poll_s: float = 2.0) -> str:
        """Block until the task ends; its final state ("done", ...) or "failed" if it died without one.

        A task that ends without a result pickle (killed, OOM, node failure) is recorded in the
        run's status.json as failed, with the scheduler's state as the reason.
        """
        while not self.done():
            time.sleep(poll_s)
        try:  # results(): one per srun task (job.result() refuses multi-task jobs); rank 0's decides
            return str(self.job.results()[0])
        except Exception as exc:  # noqa: BLE001 - submitit raises several types for a dead job
            self.error = (f"slurm job {self.job_id} ended {self.queue_state} without a result "
                          f"({type(exc).__name__}); log: {self.job.paths.stdout}")
            record_crash(self.run_dir, self.error, self.failures_before)
            return "failed"


def _ledger_state(run_dir: Path) -> str:
    return str(runfiles.read_status(run_dir).get("state", "pending"))


class SlurmExecutor:
    """Submit runs to Slurm through submitit (one job array per `submit_all`); `slots` None:
    the scheduler queues them."""

    slots = None
    cache_dir = ""  # the study's token cache (use_data): its runs read it and never tokenise
    prepare_job: Any = None  # a jobs.data.prepare.PrepareJob still to submit before the runs
    prepare_job_id = ""  # the submitted one
    _after = ""  # the prepare job the next run array depends on (afterok), once: later arrays are retries

    def __init__(self, study_dir: str | Path, options: SlurmOptions, *, pipeline: str = PIPELINE,
                 stop_hook: str = STOP_HOOK) -> None:
        self.study_dir = Path(study_dir)
        self.options = options
        self.callable = RunJob(pipeline, stop_hook)

    @property
    def log_root(self) -> Path:
        return self.study_dir / "logs" / "slurm"

    def submit(self, run_dir: str | Path) -> SlurmHandle:
        """Submit one run (an array of one)."""
        return self.submit_all([run_dir])[0]

    def submit_all(self, run_dirs: Sequence[str | Path]) -> list[SlurmHandle]:
        """Submit the runs as one job array and return at once; job ids go to logs/slurm/jobs.json."""
        if not run_dirs:
            return []
        self._submit_prepare()
        executor = self._executor()
        before = [failure_count(d) for d in run_dirs]
        with executor.batch():
            jobs = [executor.submit(self.callable, str(Path(d).resolve())) for d in run_dirs]
        handles = [SlurmHandle(job, Path(d), n) for job, d, n in zip(jobs, run_dirs, before)]
        _merge_json(self.log_root / JOBS_FILE, {h.run_dir.name: h.job_id for h in handles})
        return handles

    def attach(self, run_dirs: Sequence[str | Path]) -> dict[str, QueuedHandle]:
        """Run dir name -> handle, for those of `run_dirs` whose Slurm job (from an earlier
        submission) is still pending or running: a relaunch waits on it instead of resubmitting."""
        poller = _QueuePoller(self.study_dir)
        states = None
        for _ in range(QUEUE_READ_TRIES):
            if (states := queue_states(self.study_dir, strict=False)) is not None:
                break
            time.sleep(QUEUE_POLL_S)
        if states is None:  # a job missed here would be submitted again: never guess
            raise Busy(f"slurm: squeue or sacct failed {QUEUE_READ_TRIES} times, so the study's queued jobs "
                       "are unknown and nothing was submitted; run the launcher again when the controller answers")
        queued = {run: info["job_id"] for run, info in states.items() if queue_active(info["queue_state"])}
        return {Path(d).name: QueuedHandle(poller, Path(d), queued[Path(d).name])
                for d in run_dirs if Path(d).name in queued}

    def shutdown(self) -> None:
        """Nothing to stop here: submitted jobs belong to the cluster (cancel with `scancel`)."""

    def _executor(self) -> Any:
        import submitit  # noqa: PLC0415 - optional (the slurm extra)

        stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        executor = submitit.SlurmExecutor(folder=self.log_root / stamp / "%j")
        executor.update_parameters(**submitit_parameters(self.options, self.study_dir.name))
        executor.update_parameters(**self._data_parameters())
        return executor

    # -- the data-preparation job (jobs.data.prepare): a CPU job of its own the run arrays wait for

    def use_data(self, cache_dir: str, prepare_job: Any = None) -> None:
        """The runs read `cache_dir` and never tokenise (AOSCALE_REQUIRE_PREPARED=1); with a
        `prepare_job`, it is submitted (once, no GPU) before the first run array, which depends on it."""
        self.cache_dir, self.prepare_job, self.prepare_job_id, self._after = cache_dir, prepare_job, "", ""

    def _data_parameters(self) -> dict[str, Any]:
        """The run array's exports of the cache folder and, while a prepare job is pending, its dependency."""
        if not self.cache_dir:
            return {}
        params: dict[str, Any] = {"setup": [*submitit_parameters(self.options, self.study_dir.name)["setup"],
                                            f"export AOSCALE_CACHE={shlex.quote(self.cache_dir)}",
                                            "export AOSCALE_REQUIRE_PREPARED=1"]}
        if self._after:  # a failed prepare job cancels the runs rather than leave them pending forever
            params["dependency"] = f"afterok:{self._after}"
            params["additional_parameters"] = {**dict(self.options.additional), "kill_on_invalid_dep": "yes"}
            self._after = ""
        return params

    def _submit_prepare(self) -> None:
        """Submit the pending prepare job (a CPU job: no GPU, `prepare_cpus` CPUs at most a node's)."""
        if self.prepare_job is None or self.prepare_job_id:
            return
        import submitit  # noqa: PLC0415 - optional (the slurm extra)

        stamp = time.strftime("%Y%m%d-%H%M%S") + "-prepare-" + uuid.uuid4().hex[:6]
        executor = submitit.SlurmExecutor(folder=self.log_root / stamp / "%j")
        executor.update_parameters(**prepare_parameters(self.options, self.study_dir.name))
        job = executor.submit(self.prepare_job)
        self.prepare_job_id = self._after = str(job.job_id)
        runfiles.atomic_write_json(self.log_root / PREPARE_FILE, {
            "job_id": self.prepare_job_id, "cache_dir": self.cache_dir, "what": self.prepare_job.describe()})


def submitit_parameters(opts: SlurmOptions, job_name: str) -> dict[str, Any]:
    """SlurmOptions -> submitit.SlurmExecutor parameters (empty strings mean: cluster default)."""
    params: dict[str, Any] = {
        "job_name": f"aoscale-{job_name}"[:60], "time": opts.time_min, "nodes": opts.nodes,
        "ntasks_per_node": opts.tasks_per_node, "cpus_per_task": opts.cpus_per_task,
        "array_parallelism": opts.array_parallelism, "signal_delay_s": opts.signal_delay_s,
        "stderr_to_stdout": True,
        "setup": [*opts.setup, f"export PYTHONPATH={REPO}${{PYTHONPATH:+:$PYTHONPATH}}"],
    }
    if opts.gpus_per_node:
        params["gpus_per_node"] = opts.gpus_per_node
    named = {"partition": opts.partition, "account": opts.account, "qos": opts.qos,
             "constraint": opts.constraint, "mem": opts.mem, "exclusive": opts.exclusive,
             "mail_type": opts.mail_type.upper(), "mail_user": opts.mail_user}
    params.update({k: v for k, v in named.items() if v})
    if opts.additional:
        params["additional_parameters"] = dict(opts.additional)
    return params


def prepare_parameters(opts: SlurmOptions, job_name: str) -> dict[str, Any]:
    """The prepare job's submitit parameters: one task on one node, `prepare_cpus` CPUs (at most
    the partition's largest node's), no GPU, the runs' partition, account, time and setup."""
    params = submitit_parameters(opts, job_name)
    for key in ("gpus_per_node", "exclusive", "array_parallelism"):
        params.pop(key, None)
    params.update(job_name=f"aoscale-prepare-{job_name}"[:60], nodes=1, ntasks_per_node=1,
                  cpus_per_task=min(opts.prepare_cpus, node_cpus(opts.partition) or opts.prepare_cpus))
    return params


def node_cpus(partition: str = "") -> int:
    """The most CPUs of one node of the partition (sinfo), 0 when sinfo does not answer."""
    cmd = ["sinfo", "-h", "-o", "%c", *(["-p", partition] if partition else [])]
    lines = _run_lines(cmd) if shutil.which("sinfo") else None
    counts = [int(word.rstrip("+")) for line in lines or () for word in line.split() if word.rstrip("+").isdigit()]
    return max(counts, default=0)


def render_submission(opts: SlurmOptions, study_dir: Path, n_runs: int) -> str:
    """What a launch would submit, without asking the controller: the array plan and the sbatch
    script (submitit's own rendering, the folder shown as `<submission>`)."""
    from submitit.slurm.slurm import _make_sbatch_string  # noqa: PLC0415 - submitit's renderer

    folder = study_dir.absolute() / "logs" / "slurm" / "<submission>" / "%j"
    command = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    params = submitit_parameters(opts, study_dir.name)
    script = _make_sbatch_string(command, folder, map_count=n_runs, **params) if n_runs else "(nothing to submit)"
    gpus = f"{opts.gpus_per_node} GPU(s) per node, " if opts.gpus_per_node else ""
    plan = (f"slurm: one job array of {n_runs} task(s) (runs not done), at most {min(n_runs, opts.array_parallelism)} "
            f"at once; each task {opts.nodes} node(s) x {opts.tasks_per_node} srun task(s), {gpus}"
            f"{opts.cpus_per_task} CPU(s) per task, {opts.time_min} min; requeued on preemption/USR2 "
            f"{opts.signal_delay_s} s before the limit")
    return f"{plan}\n--- sbatch script ---\n{script}"


def _merge_json(path: Path, entries: dict[str, str]) -> None:
    current = runfiles.read_json(path, default={})
    current.update(entries)
    runfiles.atomic_write_json(path, current)


ACTIVE_LEDGER_STATES = ("pending", "running", "preempted")  # queue states of a job still to run
QUEUE_POLL_S = 2.0  # squeue/sacct at most this often per study
QUEUE_READ_TRIES = 5  # a relaunch asks this often before it gives up (Busy) rather than guess


def queue_active(queue_state: str) -> bool:
    """Whether a job in this scheduler state will still run (or is running)."""
    return QUEUE_TO_LEDGER.get(queue_state) in ACTIVE_LEDGER_STATES


class _QueuePoller:
    """`queue_states(study_dir)`, asked at most once per QUEUE_POLL_S and shared by handles."""

    def __init__(self, study_dir: Path) -> None:
        self.study_dir = study_dir
        self._states: dict[str, dict[str, str]] = {}
        self._at = float("-inf")

    def get(self, run_id: str) -> str:
        if time.monotonic() - self._at >= QUEUE_POLL_S:
            states = queue_states(self.study_dir, strict=False)
            if states is not None:  # squeue or sacct did not answer: keep the last view, ask again later
                self._states = states
            self._at = time.monotonic()
        return self._states.get(run_id, {}).get("queue_state", "UNKNOWN")


class QueuedHandle:
    """A run an earlier submission queued: done once its job leaves the queue; result = ledger state."""

    def __init__(self, poller: _QueuePoller, run_dir: Path, job_id: str) -> None:
        self.poller = poller
        self.run_dir = Path(run_dir)
        self.job_id = job_id

    @property
    def queue_state(self) -> str:
        return self.poller.get(self.run_dir.name)

    @property
    def state(self) -> str:
        """status.json's state once final, else the queue state mapped to a ledger state."""
        ledger = _ledger_state(self.run_dir)
        return ledger if ledger in ("done", "failed") else QUEUE_TO_LEDGER.get(self.queue_state, ledger)

    def done(self) -> bool:
        return not queue_active(self.queue_state)

    def result(self, poll_s: float = QUEUE_POLL_S) -> str:
        """Wait for the job to leave the queue; the run's ledger state then."""
        while not self.done():
            time.sleep(poll_s)
        return _ledger_state(self.run_dir)


def queue_states(study_dir: str | Path, strict: bool = True) -> dict[str, dict[str, str]] | None:
    """run_id -> {"job_id", "queue_state"} for the study's Slurm jobs (for `scaling.status`).

    Active tasks come from `squeue`, finished ones from `sacct`; "UNKNOWN" when neither knows.
    When either command fails (a busy controller, a timeout) every job reads "UNKNOWN", or with
    `strict=False` the answer is None, so a waiter or a relaunch never takes a silent queue for an
    empty one.
    """
    path = Path(study_dir) / "logs" / "slurm" / JOBS_FILE
    if not path.exists():
        return {}
    jobs = json.loads(path.read_text())
    states = _scheduler_states(sorted({j.split("_")[0] for j in jobs.values()}))
    if states is None and not strict:
        return None
    states = states or {}
    return {run: {"job_id": job, "queue_state": states.get(job, "UNKNOWN")} for run, job in jobs.items()}


def _scheduler_states(array_ids: list[str]) -> dict[str, str] | None:
    if not array_ids or shutil.which("squeue") is None:
        return {}
    joined = ",".join(array_ids)
    states: dict[str, str] = {}
    sacct = _run_lines(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", joined])
    squeue = None if sacct is None else _run_lines(["squeue", "-h", "-r", "-o", "%i|%T", "-j", joined])
    if sacct is None or squeue is None:
        return None
    for line in sacct + squeue:  # squeue last: it is the live view
        job, _, state = line.partition("|")
        if state:
            states[job.strip()] = state.split()[0].upper()
    return states


def _run_lines(cmd: list[str]) -> list[str] | None:
    """The command's stdout lines; None when it failed or timed out."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SLURM_CMD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.splitlines() if proc.returncode == 0 else None
