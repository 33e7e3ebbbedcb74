"""Train one run into a run directory; rerunning resumes from the latest valid checkpoint.

    python -m jobs.train --run-dir DIR --family ar --size 0.1M --steps 100 [...]
    python -m jobs.train --run-dir DIR --spec spec.json
    python -m jobs.train --run-dir DIR              # resume the spec.json already in DIR

The loop is nanoGPT's: learning rate for the step, micro-steps (forward, backward), clip,
optimizer step, EMA, then hooks for logging, validation and checkpoints. Batches are a pure
function of (seed, step) and the loss generator is reseeded from (seed, step, chunk) before
every micro-batch, so the step is the whole data position and a resumed run is bitwise equal
to an uninterrupted one on CPU fp32.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cli import InputError, parse, rules, run_main
from cli.environment import ALLOW_NUMERICS_CHANGE, rank, world_size
from jobs.train import checkpoint as ckpt
from jobs.run.allocator import keep_freed_memory
from jobs.data.corpus import Batches, corpus_hash, data_record, token_array, tokenizer_hash, val_batches
from jobs.train.engines import Engine, distributed_env, eval_mode, make_engine
from jobs.train.preflight import check_run, check_run_path
from jobs.run import numerics
from jobs.run.files import (SPEC_FILE, add_status_warning, atomic_write_text, checkpoint_steps, read_metrics,
                            read_status, truncate_metrics, write_status)
from jobs.run.rng import rng_state, seed_everything, set_rng_state
from jobs.run.lock import holding
from jobs.run.spec import RunSpec
from jobs.train.cli import build_parser, spec_from_args
from jobs.train import portable, stopping, wsd_branch
from jobs.run.peaks import FLOP_CONVENTION
from jobs.run.tracking import Progress, Tracker, peak_flops, write_manifest
from models.ema import EMA

TRAIN_SALT, VAL_SALT = 1, 2  # keep the training and validation generator streams apart


def lr_at(step: int, spec: RunSpec) -> float:
    """Linear warm-up over `warmup_steps`, then cosine from the peak to `min_lr_ratio` x peak; or,
    with `schedule = "wsd"`, the peak until the last `decay_fraction` of the steps and a linear
    decay to the floor over them (warmup-stable-decay; every family alike)."""
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    floor = spec.lr * spec.min_lr_ratio
    if spec.schedule == "wsd":
        decay = max(1, round(spec.decay_fraction * spec.steps))
        start = spec.branch_step if spec.branch_from else max(spec.warmup_steps, spec.steps - decay)
        return spec.lr - (spec.lr - floor) * min(1.0, max(0, step + 1 - start) / max(1, spec.steps - start))
    progress = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    return floor + 0.5 * (spec.lr - floor) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def chunk_seed(seed: int, step: int, chunk: int, salt: int = TRAIN_SALT) -> int:
    """A 63-bit seed for the loss generator of one micro-batch, hashed from its coordinates."""
    state = np.random.SeedSequence([seed, step, chunk, salt]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Run:
    """Everything one training call holds: spec, engine, data, EMA, files."""

    run_dir: Path
    spec: RunSpec
    engine: Engine
    batches: Batches
    val_tokens: np.ndarray  # the validation split's tokens (a read-only memory map)
    ema: EMA | None  # None when the run trains without EMA
    generator: torch.Generator
    tracker: Tracker
    flops_per_token: int
    peak_flops: float
    step: int = 0
    window: dict[str, float] = field(default_factory=dict)
    numerics: numerics.NumericsPath | None = None  # the path this call trains on (jobs.run.numerics)
    saved_at: float = field(default_factory=time.monotonic)  # the last save (or this call's start)
    slowest_save_s: float = 0.0  # the slowest save measured (this call's, or the newest checkpoint's)

    @property
    def rank0(self) -> bool:
        return self.engine.rank == 0

    @property
    def batch_tokens(self) -> int:
        return self.spec.batch_size * self.spec.seq_len

    def warn(self, message: str) -> None:
        """A warning in the log (stderr) and in status.json."""
        if self.rank0:
            print(f"warning: {message}", file=sys.stderr, flush=True)
            add_status_warning(self.run_dir, message)


def _data(spec: RunSpec) -> tuple[Batches, np.ndarray]:
    train_tokens = token_array(spec.corpus, spec.tokenizer, "train", spec.text_field)
    val_tokens = token_array(spec.corpus, spec.tokenizer, "validation", spec.text_field)
    return Batches(train_tokens, spec.batch_size, spec.seq_len, spec.seed), val_tokens


def _data_hashes(spec: RunSpec) -> dict[str, Any]:
    return {"corpus": spec.corpus, "tokenizer": spec.tokenizer,
            "tokenizer_hash": tokenizer_hash(spec.tokenizer),
            "corpus_hash": {split: corpus_hash(spec.corpus, spec.tokenizer, split, spec.text_field)
                            for split in ("train", "validation")},
            **data_record(spec.corpus, spec.tokenizer, spec.text_field)}


def _make_ema(model: torch.nn.Module, engine: Engine, rate: float) -> EMA | None:
    if rate <= 0:
        return None
    with engine.gathered():  # collective under ZeRO-3; only rank 0 keeps the EMA
        return EMA(model, rate) if engine.rank == 0 else None


def resume_micro_batch(n_micro: int, batch_size: int, world: int) -> int | None:
    """The per-rank micro-batch that keeps `n_micro` micro-batches per step on `world` ranks
    (each micro-batch's loss noise is seeded by its index, `chunk_seed`, so keeping them keeps
    the losses), or None where `world` does not divide them."""
    if n_micro < 1 or n_micro % world or batch_size % n_micro:
        return None
    return batch_size // n_micro


def _engine_spec(run_dir: Path, spec: RunSpec) -> tuple[RunSpec, str]:
    """The spec the engine is built from: on a resume, with the micro-batch that keeps the newest
    checkpoint's micro-batches per step on this world size (a warning where none can)."""
    n_micro = ckpt.newest_record(run_dir, "n_micro")
    if not n_micro:
        return spec, ""
    if spec.engine == "deepspeed":
        distributed_env()  # WORLD_SIZE from srun's variables, as the engine will read it
    world = 1 if spec.engine == "torch" else world_size()
    micro = resume_micro_batch(int(n_micro), spec.batch_size, world)
    if micro is not None:
        return spec.replace(micro_batch_size=micro), ""
    return spec, (f"the checkpoint's {n_micro} micro-batches per step do not split over {world} ranks; "
                  "the run goes on with its spec's micro-batch, so each micro-batch's loss noise is "
                  "drawn anew (the same data, an equally valid run, not the unmoved run's losses)")


def setup(run_dir: Path, spec: RunSpec) -> Run:
    """Build model, engine, data and tracker; write spec.json and the manifest on rank 0."""
    seed_everything(spec.seed)  # the model's initial weights come from the global RNG
    try:
        model = ckpt.model_from_spec(spec)
        batches, val_tokens = _data(spec)
        flops_per_token = model.flops_per_token(spec.micro_batch)  # the planned count; before any engine partitions
        counts = model.count_params()
        built, regrouped = _engine_spec(run_dir, spec)
        engine = make_engine(model, built)
    except ValueError as error:
        raise InputError(str(error)) from None
    dtype = torch.bfloat16 if engine.bf16 else torch.float32
    path = numerics.current(model, engine.device, engine.bf16, model.core.compiled)
    if path.compiled and numerics.ran_eager(run_dir, max(checkpoint_steps(run_dir), default=0), path):
        model.core.stay_eager()  # its compile fell back before: the resume stays on the eager path it trained on
        path = numerics.current(model, engine.device, engine.bf16, False)
    if engine.rank == 0:  # before anything is written: a resume on another path is refused
        numerics.check_resume(run_dir, spec.run_id, max(checkpoint_steps(run_dir), default=0), path)
    if engine.device.type == "cpu":
        keep_freed_memory()  # activations are allocated again every step: no page faults for them
    peak, peak_source = peak_flops(engine.device, dtype)  # MFU's denominator (jobs.run.peaks)
    if engine.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        ckpt.remove_staging(run_dir)  # what a killed process left half-written
        atomic_write_text(run_dir / SPEC_FILE, spec.to_json() + "\n")
        write_manifest(run_dir, spec, {"engine": engine.name, "world_size": engine.world_size,
                                       "engine_config": engine.config, **_micro_record(engine),
                                       "planned_bytes_per_rank": engine.planned_bytes,
                                       "dtype": str(dtype), "n_params": counts, "numerics": path.label,
                                       "flops_per_token": flops_per_token, "flop_convention": FLOP_CONVENTION,
                                       "peak_flops": peak, "peak_source": peak_source, **_data_hashes(spec)})
    generator = torch.Generator(device=engine.device).manual_seed(spec.seed)
    run = Run(run_dir, spec, engine, batches, val_tokens, _make_ema(model, engine, spec.ema),
              generator, Tracker(run_dir, spec, engine.rank), flops_per_token,
              peak, numerics=path)
    if regrouped:
        run.warn(f"run {spec.run_id}: {regrouped}")
    return run


def engine_layout(engine: Engine) -> dict[str, Any]:
    """How this engine's state is laid out on disk (jobs.train.portable.layout): a checkpoint of
    another layout is loaded through the consolidated state."""
    return {"engine": engine.name, "world_size": engine.world_size, "zero_stage": getattr(engine, "stage", 0)}


def _micro_record(engine: Engine) -> dict[str, int]:
    """The micro-batch and accumulation steps this segment trains with (the manifest, the start row)."""
    return {"micro_batch": engine.micro, "accumulation": engine.n_micro_total // engine.world_size}


def save(run: Run) -> None:
    """Checkpoint the current step (collective: every rank calls it). A failed save (a full disk)
    removes its staging directory before the error goes on. meta.json records the engine's layout
    and the micro-batches per step (`n_micro`), which a resume elsewhere keeps."""
    engine, step, began = run.engine, run.step, time.perf_counter()
    try:
        if run.rank0:
            ckpt.prepare(run.run_dir, step)
        engine.barrier()
        folder = ckpt.temp_dir(run.run_dir, step)
        engine.save(folder)
        weights = engine.full_state_dict()
        ckpt.save_file({"step": step, "rng": rng_state(run.generator)}, folder / f"rank_{engine.rank:04d}.pt")
        if run.rank0:
            ema = run.ema.state_dict() if run.ema is not None else None
            ckpt.save_file({"model": weights, "ema": ema, "step": step}, folder / ckpt.MODEL_FILE)
        engine.barrier()
        digests = _gather_digests(engine, ckpt.digest_own(run.run_dir, step, engine.rank))
        if run.rank0:
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            seconds = time.perf_counter() - began
            ckpt.commit(run.run_dir, step, engine.name, run.spec.keep_checkpoints, digests,
                        layout=engine_layout(engine), n_micro=engine.n_micro_total,
                        micro_batch=run.spec.batch_size // engine.n_micro_total,
                        bytes=size, save_s=round(seconds, 6), write_bytes_per_s=round(size / max(seconds, 1e-9)))
    except BaseException:
        if run.rank0:
            ckpt.remove_staging(run.run_dir)
        raise
    engine.barrier()
    run.saved_at = time.monotonic()
    run.slowest_save_s = max(run.slowest_save_s, time.perf_counter() - began)


def _gather_digests(engine: Engine, mine: dict[str, str]) -> dict[str, str]:
    """Every rank's checksums of its own files, on rank 0 (collective)."""
    if engine.world_size == 1:
        return mine
    gathered: list[dict[str, str] | None] = [None] * engine.world_size if engine.rank == 0 else []
    torch.distributed.gather_object(mine, gathered if engine.rank == 0 else None, dst=0)
    return {name: digest for part in gathered if part for name, digest in part.items()}


def _time_to_save(run: Run) -> bool:
    """Whether `checkpoint_minutes` have passed since the last save or the start of this call:
    rank 0's clock decides and every rank follows (collective when the setting is on)."""
    minutes = run.spec.checkpoint_minutes
    if minutes <= 0:
        return False
    return run.engine.any(run.rank0 and time.monotonic() - run.saved_at >= minutes * 60)


def _choose_checkpoint(run: Run) -> Path | None:
    """Rank 0 picks the newest valid checkpoint and tells the others."""
    chosen = [ckpt.latest_valid(run.run_dir, run.warn) if run.rank0 else None]
    if run.engine.world_size > 1:
        torch.distributed.broadcast_object_list(chosen, src=0)
    return chosen[0]


def resume(run: Run) -> None:
    """Load the newest valid checkpoint (if any) into model, optimizer, EMA and RNGs."""
    path = _choose_checkpoint(run)
    if path is None:
        return
    engine = run.engine
    state = ckpt.load_file(path / ckpt.MODEL_FILE)
    saved, here = ckpt.saved_layout(path), engine_layout(engine)
    if saved == here:
        engine.load(path)
    else:
        _move(run, path, saved, state["model"])
    if run.ema is not None:
        run.ema.load_state_dict(state["ema"])
    rank_file = path / f"rank_{engine.rank:04d}.pt"  # a rank the saved run did not have: rank 0's
    mine = ckpt.load_file(rank_file if rank_file.exists() else path / "rank_0000.pt")
    set_rng_state(mine["rng"], run.generator)
    run.step = int(state["step"])
    run.slowest_save_s = float(ckpt.read_meta(path).get("save_s", 0.0))


def _move(run: Run, path: Path, saved: dict[str, Any], weights: dict[str, torch.Tensor]) -> None:
    """Resume a checkpoint of another engine, world size or ZeRO stage through the consolidated
    state (fp32 weights, AdamW moments, step; jobs.train.portable)."""
    engine = run.engine
    state = portable.read(path, saved["engine"], engine.model, weights)
    portable.LOADERS[engine.name](engine, state, weights)
    if run.rank0:
        print(f"note: run {run.spec.run_id} moves at step {state['step']} from {_layout_text(saved)} to "
              f"{_layout_text(engine_layout(engine))}", file=sys.stderr, flush=True)


def _layout_text(layout: dict[str, Any]) -> str:
    stage = f" ZeRO-{layout['zero_stage']}" if layout["zero_stage"] else ""
    ranks = layout["world_size"]
    return f"{layout['engine']}{stage} on {ranks} rank{'s' if ranks != 1 else ''}"


# ---------------------------------------------------------------------------------------------
# One optimizer step and the hooks after it


def train_step(run: Run) -> tuple[float, float]:
    """One optimizer step over the global batch; returns (mean loss over all ranks, grad norm)."""
    engine, spec, step = run.engine, run.spec, run.step
    engine.set_lr(lr_at(step, spec))
    total = 0.0
    for chunk in engine.local_chunks:
        tokens = run.batches.get(step, chunk, engine.n_micro_total)
        run.generator.manual_seed(chunk_seed(spec.seed, step, chunk))
        loss = engine.loss(tokens, run.generator)
        engine.backward(loss)
        total += float(loss.detach())
    grad_norm = engine.step()
    return engine.mean(total / len(engine.local_chunks)), grad_norm


def validation_loss(run: Run) -> float:
    """Mean loss over the first `eval_batches` fixed validation batches (raw weights)."""
    spec, losses = run.spec, []
    with eval_mode(run.engine):
        batches = val_batches(run.val_tokens, spec.micro_batch, spec.seq_len, spec.eval_batches)
        for index, tokens in enumerate(batches):
            run.generator.manual_seed(chunk_seed(spec.seed, 0, index, VAL_SALT))
            losses.append(_batch_loss(run.engine, tokens, run.generator))
    return float(np.mean(losses))


def _batch_loss(engine: Engine, tokens: torch.Tensor, generator: torch.Generator) -> float:
    """One validation batch's mean loss, in forward passes of at most the engine's micro-batch
    (pieces weighted by their rows; one piece is the batch's own loss, as before the plan)."""
    pieces = [(len(piece), float(engine.loss(piece, generator))) for piece in tokens.split(engine.micro)]
    if len(pieces) == 1:
        return pieces[0][1]
    return sum(rows * loss for rows, loss in pieces) / len(tokens)


def log_train(run: Run, loss: float, grad_norm: float, progress: Progress) -> None:
    """A train row every `log_every` steps (and at the last), with throughput over the window."""
    spec, now = run.spec, time.perf_counter()
    if run.step % spec.log_every and run.step != spec.steps:
        return
    steps = run.step - run.window["step"]
    tokens_per_s = steps * run.batch_tokens / max(now - run.window["time"], 1e-9)
    world = run.engine.world_size
    row = {"kind": "train", "step": run.step, "tokens": run.step * run.batch_tokens, "loss": loss,
           "lr": lr_at(run.step - 1, spec), "grad_norm": grad_norm, "tokens_per_s": tokens_per_s,
           "mfu": run.flops_per_token * tokens_per_s / (run.peak_flops * world)}
    run.tracker.log(row)
    progress.line({**row, "batch_tokens": run.batch_tokens})
    run.window = {"step": run.step, "time": time.perf_counter()}


def _due(step: int, every: int, last: int) -> bool:
    return step == last or (every > 0 and step % every == 0)


def fail(run: Run, reason: str) -> str:
    """Mark the run failed at the current step; checkpoints are left as they are."""
    if run.rank0:
        write_status(run.run_dir, "failed", step=run.step, steps=run.spec.steps, reason=reason)
        print(f"error: run {run.spec.run_id} failed at step {run.step}: {reason}", file=sys.stderr)
    return "failed"


def interrupted(run: Run, reason: str) -> None:
    """Mark a run stopped without a final checkpoint as preempted at its newest checkpoint (the
    step a rerun resumes from), saying how many steps will be redone."""
    if not run.rank0:
        return
    saved = ckpt.checkpoint_dirs(run.run_dir)
    step = ckpt.step_of(saved[-1]) if saved else 0
    write_status(run.run_dir, "preempted", step=step, steps=run.spec.steps,
                 reason=f"{reason} at step {run.step}; a rerun resumes from step {step}")
    print(f"warning: run {run.spec.run_id} interrupted ({reason}) at step {run.step}; "
          f"a rerun resumes from its checkpoint at step {step}", file=sys.stderr, flush=True)


def validate_and_log(run: Run) -> None:
    """Validation loss at the current step into metrics (collective)."""
    val = validation_loss(run)
    run.tracker.log({"kind": "val", "step": run.step, "tokens": run.step * run.batch_tokens, "val_loss": val})


def loop(run: Run, stop_after: int | None, callbacks: Sequence[Callable[[Run], None]]) -> str:
    """Train until done, failure, a stop request or `stop_after` more steps. A step that is
    checkpointed is checkpointed before its validation, so validation cannot lose work."""
    spec, engine = run.spec, run.engine
    progress = Progress(spec.run_id, spec.steps, run.rank0)
    run.window = {"step": run.step, "time": time.perf_counter()}
    first, slowest_step_s = run.step, 0.0
    while run.step < spec.steps:
        began = time.perf_counter()
        loss, grad_norm = train_step(run)
        run.step += 1
        if run.numerics is not None and run.numerics.compiled and not engine.model.core.compiled:  # fell back
            run.numerics = numerics.current(engine.model, engine.device, engine.bf16, False)
            if run.rank0:
                numerics.fell_back(run.run_dir, run.step, run.numerics)
        if not math.isfinite(loss):
            log_train(run, loss, grad_norm, progress)
            return fail(run, f"loss is {loss} at step {run.step} (lr {lr_at(run.step - 1, spec):.3g})")
        if spec.ema > 0:
            with engine.gathered():  # collective under ZeRO-3; only rank 0 keeps the EMA
                if run.ema is not None:
                    run.ema.update()
        log_train(run, loss, grad_norm, progress)
        for callback in callbacks:
            callback(run)
        slowest_step_s = max(slowest_step_s, time.perf_counter() - began)
        asked = stopping.stop_requested() or stopping.near_deadline(run.rank0, run.slowest_save_s, slowest_step_s)
        halt = (engine.any(asked) or (stop_after is not None and run.step - first >= stop_after))
        snapshot = run.step in wsd_branch.snapshot_steps(spec)
        if _time_to_save(run) or halt or snapshot or _due(run.step, spec.checkpoint_every, spec.steps):
            save(run)
        if snapshot and run.rank0:
            wsd_branch.keep_snapshot(run.run_dir, run.step)
        if not halt and _due(run.step, spec.eval_every, spec.steps):
            validate_and_log(run)
        if run.rank0:
            write_status(run.run_dir, "running", step=run.step, steps=spec.steps)
        if halt and run.step < spec.steps:
            return "preempted"
    return "done"


def _catch_up_validation(run: Run) -> None:
    """After a resume at a validation step whose row is missing (stopped between its checkpoint
    and its validation), validate it now."""
    spec = run.spec
    if run.step == 0 or not _due(run.step, spec.eval_every, spec.steps):
        return
    missing = run.rank0 and not any(r.get("step") == run.step for r in read_metrics(run.run_dir, "val"))
    if run.engine.any(missing):
        validate_and_log(run)


def _finished(run_dir: Path, spec: RunSpec) -> bool:
    """Whether the run is done and its final checkpoint verifies; a done run whose newest
    checkpoint is corrupt is reported and trained again from the newest valid one."""
    status = read_status(run_dir)
    if status.get("state") != "done":
        return False
    problems: list[str] = []
    path = ckpt.latest_valid(run_dir, problems.append)
    if path is not None and ckpt.step_of(path) >= spec.steps:
        return True
    message = (f"run {spec.run_id} is marked done at step {status.get('step')} but "
               + ("; ".join(problems) or "has no valid checkpoint") + "; training again from "
               + (f"step {ckpt.step_of(path)}" if path is not None else "the start"))
    print(f"warning: {message}", file=sys.stderr, flush=True)
    add_status_warning(run_dir, message)
    return False


def train(run_dir: str | Path, spec: RunSpec, *, max_steps_this_call: int | None = None,
          handle_signals: bool = True, lock_wait_s: float = 0.0,
          callbacks: Sequence[Callable[[Run], None]] = ()) -> str:
    """Train (or resume) the run in `run_dir`; returns the final state: done|failed|preempted.

    Bad input (see jobs.train.preflight: spec, model, memory, data, a run directory holding another
    run or not writable) raises `cli.InputError` before anything is written; another process
    training the run raises `RunBusy` (after `lock_wait_s`). `max_steps_this_call` stops (with a
    checkpoint, state "preempted") after that many steps; `request_stop()` does the same after
    the current step, and so do SIGTERM/SIGUSR1/SIGUSR2/SIGINT unless `handle_signals` is False.
    Whatever ends the call, status.json says so. `callbacks(run)` run after every optimizer step
    (after logging, before checkpointing and validation).
    """
    run_dir = Path(run_dir)
    check_run(run_dir, spec)
    rank0 = rank() == 0  # cli.environment's rule: RANK=abc is one line before anything is written
    if rank0:
        run_dir.mkdir(parents=True, exist_ok=True)
    with holding(run_dir, lock_wait_s) if rank0 else contextlib.nullcontext():
        if _finished(run_dir, spec):
            return "done"
        stopping.clear_stop()
        with stopping.stop_on_signals(handle_signals):
            try:
                run = setup(run_dir, spec)
            except Exception as error:
                if rank0 and not isinstance(error, InputError) and run_dir.is_dir():
                    write_status(run_dir, "failed", reason=f"setup: {type(error).__name__}: {error}")
                raise
            try:
                return _train(run, max_steps_this_call, callbacks)
            except KeyboardInterrupt:
                interrupted(run, "KeyboardInterrupt")
                raise
            except BaseException as error:
                fail(run, f"{type(error).__name__}: {error}")
                raise
            finally:
                run.engine.close()


def _adopt_trunk(run: Run) -> str | None:
    """A cooldown branch starts from its trunk's state (rank 0 copies it, waiting for it): None
    once adopted; "preempted" when a stop came while waiting; "failed" when the trunk can never
    get there (jobs.train.wsd_branch)."""
    problem, waiting = "", False
    if run.rank0:
        try:
            waiting = not wsd_branch.adopt_trunk(run.run_dir, run.spec, stopped=stopping.stop_requested)
        except wsd_branch.NoTrunk as error:
            problem = str(error)
    if run.engine.any(bool(problem)):
        return fail(run, problem or "the trunk can never get there (see rank 0)")
    if not run.engine.any(waiting):
        return None
    if run.rank0:
        write_status(run.run_dir, "preempted", step=0, steps=run.spec.steps,
                     reason=f"stopped while waiting for trunk {run.spec.branch_from} to reach step "
                            f"{run.spec.branch_step}; a rerun waits again")
    return "preempted"


def _train(run: Run, stop_after: int | None, callbacks: Sequence[Callable[[Run], None]]) -> str:
    adopted = _adopt_trunk(run) if run.spec.branch_from else None
    if adopted is not None:
        run.tracker.close(adopted)
        return adopted
    run.engine.barrier()
    resume(run)
    if run.rank0:
        numerics.record_segment(run.run_dir, run.step, run.numerics)
        truncate_metrics(run.run_dir, run.step)
        run.tracker.log({"kind": "start", "step": run.step, "from_step": run.step,
                         "time": time.time(), "engine": run.engine.name,
                         "world_size": run.engine.world_size, **_micro_record(run.engine)})
        write_status(run.run_dir, "running", step=run.step, steps=run.spec.steps)
    _catch_up_validation(run)
    state = loop(run, stop_after, callbacks)
    run.engine.barrier()
    if run.rank0 and state != "failed":
        asked = stopping.stop_requested() and state == "preempted"
        reason = {"reason": "stop requested (signal or request_stop)"} if asked else {}
        write_status(run.run_dir, state, step=run.step, steps=run.spec.steps, **reason)
    run.tracker.close(state)
    return state


# ---------------------------------------------------------------------------------------------
# Command line (flags and --set parsing live in jobs.train.cli)

EXIT_CODES = {"done": 0, "failed": 1, "preempted": 3}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: exit 0 done, 1 failed, 2 bad input (one line, nothing written),
    3 preempted (checkpointed; rerun to resume), 75 another process holds the run (cli.Busy)."""
    args = parse(build_parser(), argv)
    if isinstance(args, int):
        return args

    def body() -> int:
        check_run_path(args.run_dir)
        if args.allow_numerics_change:
            os.environ[ALLOW_NUMERICS_CHANGE.name] = ALLOW_NUMERICS_CHANGE.on
        spec = spec_from_args(args)
        if args.max_steps_this_call is not None:
            rules.positive_int("--max-steps-this-call", args.max_steps_this_call)
        state = train(args.run_dir, spec, max_steps_this_call=args.max_steps_this_call,
                      handle_signals=args.handle_signals)
        return EXIT_CODES[state]

    return run_main("error", body)


if __name__ == "__main__":
    sys.exit(main())
