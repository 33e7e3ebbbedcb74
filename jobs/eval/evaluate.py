"""Evaluate one run: likelihoods on its validation split and zero-shot sets, LAMBADA, infilling.

`evaluate(run_dir, suite=DEFAULT_SUITE) -> polars.DataFrame` writes `run_dir/eval.parquet` (records
schema in jobs/records.py). Each family declares its metric groups (`FamilySpec.metrics`, in its
module under models/families); this module computes each group (METRIC_ROWS):
  l2r            nll_l2r and bpb_l2r (exact; an MDM predicts x_k from x_<k with x_>=k masked)
  perm_mc        nll_anyorder (K permutations, estimator perm_mc)
  ctx_ensemble   nll_ensemble for M = 1, 2, 4, ... (estimator ctx_ensemble, n_targets scored
                 slots per sequence)
  elbo           nll_anyorder (the family's ELBO estimator: its loss when mdlm/kdce, else kdce)
                 plus nll_elbo_mdlm and nll_elbo_kdce (both estimators, K draws each)
  paper suite    + lambada_acc, infill_nll / infill_em (estimator: the family's declared
                 `infill_context`, prefix_only or prefix_suffix), generation (jobs.eval.generate)
All randomness derives from `--seed` (default EVAL_SEED), the (dataset, metric) name and the
batch's index, so a rerun writes the same rows, on any number of ranks. The validation windows
are spread uniformly over the whole split and are the same for every run of a study; each
record's value is the mean of per-window values, kept in `run_dir/eval_windows.parquet`, and its
`se` their standard error (jobs.eval.windows).
Under WORLD_SIZE > 1 every rank evaluates: each set's batches are shared out over the ranks and
gathered in order (jobs.eval.shard; each batch draws from its own generator), and rank 0 writes
the records, equal to one rank's. An evaluation is a list of sets (`eval_sets`) whose finished
rows wait in `eval_progress/` (jobs.eval.progress): a stop between sets (`Stopped`, exit 3) loses
none of them, and the rerun scores only the rest.
CLI: `python -m jobs.eval.evaluate --run-dir DIR [--eval-suite quick|paper|SUITE:SET,SET]` (alias `--suite`).
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from collections.abc import Callable

import polars as pl
import torch

from cli import Busy, InputError, Parser, int_arg, parse, run_main
from cli.faults import fault_point
from jobs.train import checkpoint
from jobs.eval import windows as ew
from jobs.run.allocator import keep_freed_memory
from jobs.run.device import placement
from jobs.run.numerics import record_columns
from jobs.eval.generate import GenSettings, generation_sweep, write_samples
from models.sampling import Sampling
from jobs.train.cli import add_field_flag
from jobs.train.preflight import check_eval_dir
from jobs.eval.records import concat_frames, run_context, to_frame, write_records
from jobs.run.lock import holding
from jobs.data.suites import DEFAULT_SUITE, EvalSuite
from jobs.run.files import add_status_warning
from jobs.data.unigram import unigram_window_nll
from jobs.eval.state import check_done
from jobs.eval.progress import Progress, progress_key
from jobs.eval.shard import Shard, ranks
from jobs.run.device import pick_device
from jobs.train.stopping import clear_stop, stop_on_signals, stop_requested
from cli import rules

from jobs.eval.inputs import (EVAL_SEED, SUITE_FLAG, Dataset, Settings, data_folder, positive_setting,  # noqa: F401
                              load_datasets, make_settings)
from jobs.eval.metrics import (METRIC_ROWS, eval_batch_size, window_row, ensemble_sweep, generator,  # noqa: F401
                               infill_rows, lambada_rows)

EXIT_STOPPED = 3  # as jobs.train's exit status for a preempted run: rerun to finish


# ---- the job -----------------------------------------------------------------------------------
class Stopped(Exception):
    """A stop (a stop signal, jobs.train.stopping.request_stop) came between two sets: the finished
    sets are kept (jobs.eval.progress) and a rerun scores the others."""


def load_run(run_dir: str | Path, weights: str, compile: bool = True):
    """(model, spec, info) of the run's newest checkpoint, on the run's device with its compile
    setting (`jobs.run.device.placement`); InputError when there is none or a newer one is corrupt
    (see jobs.train.checkpoint.load_run)."""
    model, spec, info = checkpoint.load_run(run_dir, weights, device="auto")
    place = placement(spec)
    if compile and place.compile:
        model.core.compile_stack()
    if place.device.type == "cpu":
        keep_freed_memory()  # batches of the same shapes again and again: no page faults for them
    return model, spec, info


def load_weights(model, run_dir: str | Path, weights: str) -> checkpoint.CheckpointInfo:
    """Put the run's `weights` (ema | raw) into `model` in place: a compiled stack stays compiled,
    so an evaluation compiles once whatever it scores."""
    other, _, info = checkpoint.load_run(run_dir, weights)
    model.load_state_dict(other.state_dict())
    return info


def _seq_len(model, settings: Settings) -> int:
    L = settings.seq_len or model.seq_len
    if L > model.seq_len or L < 2:
        raise InputError(f"--seq-len: {L} must be in [2, {model.seq_len}] (the model's context)")
    return L


def weight_kinds(spec, weights: str) -> tuple[str, ...]:
    """Which weights to score: `auto` scores both the EMA and the raw weights of an EMA run (the
    `weights` column says which each row used), and the raw weights otherwise."""
    if weights != "auto":
        return (weights,)
    return ("ema", "raw") if spec.ema > 0 else ("raw",)


@dataclass(frozen=True)
class EvalSet:
    """One resumable piece of an evaluation: `rows(model, spec, ctx, settings)` with the `weights`
    loaded. `every_rank`: scored by all ranks together (else by rank 0 alone, after them)."""

    name: str
    weights: str
    every_rank: bool
    rows: Callable[..., list[dict]]


def eval_sets(datasets: list[Dataset], settings: Settings, kinds: tuple[str, ...], run_dir: Path,
              missing: list[str]) -> list[EvalSet]:
    """The evaluation's sets in record order: per weights, each dataset's metrics, infilling,
    LAMBADA; generation (rank 0, the first weights only)."""
    suite, out = settings.suite, []
    for kind in kinds:
        out += [EvalSet(f"{kind}/{ds.name}/{ds.split}", kind, True, partial(dataset_rows, ds=ds)) for ds in datasets]
        if suite.infill_span:
            target = datasets[-1 if len(datasets) == 1 else 1]
            out.append(EvalSet(f"{kind}/infill", kind, True,
                               lambda model, spec, ctx, s, ds=target: infill_rows(model, ds, ctx, s)))
        if suite.lambada:
            out.append(EvalSet(f"{kind}/lambada", kind, True, partial(_lambada_or_missing, missing=missing)))
    if suite.generate:
        out.append(EvalSet(f"{kinds[0]}/generate", kinds[0], False, partial(generation_rows, run_dir=run_dir)))
    return out


def dataset_rows(model, spec, ctx: dict, settings: Settings, ds: Dataset) -> list[dict]:
    """The family's metric groups (`FamilySpec.metrics`) on one dataset."""
    return [row for group in model.SPEC.metrics for row in METRIC_ROWS[group](model, ds, ctx, settings)]


def _lambada_or_missing(model, spec, ctx: dict, settings: Settings, missing: list[str]) -> list[dict]:
    """lambada_rows; a LAMBADA that cannot be had goes to `missing` unless the sets were named."""
    try:
        return lambada_rows(model, spec, ctx, settings)
    except ValueError as error:
        if settings.require_zero_shot:
            raise
        missing.append(f"lambada_acc: {str(error)[:300]}")
        return []


def generation_rows(model, spec, ctx: dict, settings: Settings, run_dir: Path) -> list[dict]:
    """The suite's generation sweep; its samples go to samples.parquet (the judge scores them
    later if it is not trained yet)."""
    suite = settings.suite
    gen = [GenSettings(n_samples=suite.gen_samples, steps=suite.gen_steps, sampling=Sampling(t, top_p),
                       seed=settings.seed, repeats=suite.gen_repeats) for t, top_p in suite.gen_sampling]
    gen_rows, samples = generation_sweep(model, spec, ctx, run_dir, gen)
    write_samples(run_dir, samples)
    return gen_rows


def evaluate(run_dir: str | Path, suite: EvalSuite | str = DEFAULT_SUITE, fresh: bool = False,
             **overrides) -> pl.DataFrame | None:
    """Evaluate the run's checkpoint with a suite; writes and returns run_dir/eval.parquet's rows.

    Overrides: k_mc, m_max, n_targets, val_chunks, ensemble_chunks, zero_shot (names),
    zero_shot_chunks, seed, weights (auto|ema|raw), seq_len, data_dir. Besides the family's
    metrics, each dataset gets its `nll_unigram` baseline (a property of the data, weights null).
    Every row names `suite`; `fresh` drops the run's earlier records instead of merging into them.

    Under WORLD_SIZE > 1 every rank calls this: the windows are scored by all ranks
    (jobs.eval.shard), rank 0 writes the records and returns them, the others return None. A
    stop between sets raises `Stopped`; the finished sets are kept for the rerun (jobs.eval.progress).
    """
    suite = EvalSuite.parse(suite, SUITE_FLAG)  # text from a caller: parsed once, here
    settings = make_settings(suite, **overrides)
    run_dir = Path(run_dir)
    with ranks(pick_device()) as shard:
        model, spec, info = load_run(run_dir, settings.weights)  # `auto`: the first of weight_kinds
        settings = replace(settings, place=placement(spec), shard=shard)
        L = _seq_len(model, settings)
        missing: list[str] = []

        def load() -> tuple[list[Dataset], list[str]]:
            try:
                return load_datasets(spec, settings, L, missing), missing
            except ValueError as error:
                raise InputError(str(error)) from None

        datasets, missing = shard.from_rank0(load)
        kinds = weight_kinds(spec, settings.weights)
        sets = eval_sets(datasets, settings, kinds, run_dir, missing)
        key = progress_key(suite=str(suite), suite_hash=settings.suite.fingerprint, seed=settings.seed,
                           weights=kinds, seq_len=L, data_dir=data_folder(settings), step=info.step,
                           checkpoint=info.path.name, place=settings.place.columns(), batch=eval_batch_size(settings))
        progress = Progress(run_dir, key) if shard.rank0 else None
        done = shard.from_rank0(lambda: sorted(progress.done))
        state = _Scorer(model, spec, info, settings, suite, run_dir)
        for es in [s for s in sets if s.every_rank] + [s for s in sets if not s.every_rank]:
            if es.name in done or not (es.every_rank or shard.rank0):
                continue
            if shard.any(stop_requested()) if es.every_rank else stop_requested():
                raise Stopped(f"eval: stopped between sets, {len(done)} of {len(sets)} scored (kept in "
                              f"{run_dir / 'eval_progress'}); rerun to score the rest")
            before = len(missing)
            rows = state.score(es)
            if shard.rank0:
                progress.save(es.name, to_frame(rows), ew.take(rows), missing[before:])
            done.append(es.name)
        if not shard.rank0:
            return None
        parts = [progress.load(es.name) for es in sets]
        return _write(run_dir, parts, state, datasets, settings, fresh, progress, missing)


class _Scorer:
    """The model with the weights of the set in hand (swapped in place, never recompiled) and the
    record context of each weights kind."""

    def __init__(self, model, spec, info, settings: Settings, suite: EvalSuite, run_dir: Path):
        self.model, self.spec, self.info, self.settings = model, spec, info, settings
        self.suite, self.run_dir = suite, run_dir

    def use(self, weights: str) -> None:
        if weights != self.info.weights:
            self.info = load_weights(self.model, self.run_dir, weights)

    def context(self) -> dict:
        model, settings = self.model, self.settings
        return {**run_context(self.spec, model.count_params(), model.flops_per_token(self.spec.micro_batch), self.info.step,
                              self.info.weights),
                "eval_seed": settings.seed, "suite": str(self.suite), "suite_hash": settings.suite.fingerprint,
                **settings.place.columns(), **record_columns(self.run_dir, model, settings.place)}

    def score(self, es: EvalSet) -> list[dict]:
        """The set's rows; every-rank sets under no_grad and the run's autocast (generation as it runs)."""
        self.use(es.weights)
        scoring = (torch.no_grad(), self.settings.place.autocast()) if es.every_rank else ()
        with contextlib.ExitStack() as stack:
            for manager in scoring:
                stack.enter_context(manager)
            return es.rows(self.model, self.spec, self.context(), self.settings)


def _write(run_dir: Path, parts: list[tuple[pl.DataFrame, pl.DataFrame, list[str]]], state: _Scorer,
           datasets: list[Dataset], settings: Settings, fresh: bool, progress: Progress,
           missing: list[str]) -> pl.DataFrame:
    """Rank 0: every set's rows in record order, then the unigram baselines, into the run's
    records and windows; the run's status names each zero-shot set that could not be had."""
    rows = unigram_rows(state.spec, state.model.vocab_size, datasets, {**state.context(), "weights": None})
    windows = pl.concat([w for _, w, _ in parts] + [ew.take(rows)])
    records = concat_frames([r for r, _, _ in parts] + [to_frame(rows)])
    missing = missing + [note for *_, notes in parts for note in notes]
    fault_point("evaluate.before_records")  # every metric computed, no record written yet
    frame = write_records(run_dir, records, drop=("gen_ppl",) if settings.suite.generate else (), fresh=fresh)
    ew.write_windows(run_dir, windows, fresh=fresh)
    _report_missing(run_dir, missing)
    progress.clear()
    return frame


def _report_missing(run_dir: Path, missing: list[str]) -> None:
    """Name every zero-shot set the suite wanted but could not have, in status.json and stderr."""
    for entry in dict.fromkeys(missing):  # once each, though both weight kinds looked
        message = f"eval: zero-shot set not evaluated: {entry}"
        print(f"warning: {message}", file=sys.stderr, flush=True)
        add_status_warning(run_dir, message)


def unigram_rows(spec, vocab_size: int, datasets: list[Dataset], ctx: dict) -> list[dict]:
    """nll_unigram per dataset: the cross-entropy (nats/token) of the training split's add-one-
    smoothed unigram distribution on that dataset's evaluated chunks. A model not clearly below it
    has learned nothing beyond token frequencies (docs/DESIGN.md §7: the plateau)."""
    return [window_row(ctx, ds, "nll_unigram",
                        unigram_window_nll(spec.corpus, spec.tokenizer, vocab_size, ds.chunks, spec.text_field),
                        unit="nats/token", estimator="unigram_add1_train")
            for ds in datasets]


# ---- CLI ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The `python -m jobs.eval.evaluate` argument parser."""
    p = Parser(prog="python -m jobs.eval.evaluate", description="Evaluate one run's checkpoint.")
    p.add_argument("--run-dir", required=True)
    add_field_flag(p, "eval_suite")  # the RunSpec field's flag, as jobs.train and scaling.launch name it
    p.set_defaults(eval_suite=str(DEFAULT_SUITE))
    p.add_argument("--k-mc", type=int_arg, help="MC draws per sequence (permutations / ELBO samples)")
    p.add_argument("--m-max", type=int_arg, help="largest ensemble size M (sweep 1, 2, 4, ..., M)")
    p.add_argument("--n-targets", type=int_arg, help="target slots scored per sequence when ensembling")
    p.add_argument("--val-chunks", type=int_arg, help="validation windows, drawn over the whole split (all if fewer)")
    p.add_argument("--gen-samples", type=int_arg, help="samples per step count (suites that generate: paper)")
    p.add_argument("--datasets", help="comma-separated zero-shot sets (wikitext2,ptb,lm1b,lambada,shakespeare)")
    p.add_argument("--max-chunks", type=int_arg, help="chunks per zero-shot set")
    p.add_argument("--seq-len", type=int_arg, help="chunk length (at most the model's context)")
    p.add_argument("--weights", default="auto", help="auto | ema | raw")
    p.add_argument("--data-dir", help="folder laid out like the offline data kit (default $AOSCALE_DATA)")
    p.add_argument("--seed", type=int_arg, default=EVAL_SEED,
                   help="evaluation seed: the windows and MC draws (every run of a study uses the default)")
    p.add_argument("--allow-partial", action="store_true", help="score a run that is not done (failed, "
                   "preempted) at its newest checkpoint; rows keep their step beside run_steps")
    return p


@contextlib.contextmanager
def _rank0_lock(shard: Shard, run_dir: str):
    """The run's lock, held by rank 0 for all ranks (jobs.run.lock); Busy on every rank when
    another process holds it."""
    with contextlib.ExitStack() as stack:
        def take() -> str:
            try:
                stack.enter_context(holding(run_dir))
            except Busy as busy:
                return str(busy)
            return ""

        busy = shard.from_rank0(take)
        if busy:
            raise Busy(busy)
        yield


def main(argv: list[str] | None = None) -> int:
    """CLI: exit 0 on success, 2 on bad input (one line on stderr, nothing written), 3 when a stop
    signal came between sets (the finished ones are kept; rerun to score the rest), 75 when
    another process holds the run (jobs.run.lock). Under WORLD_SIZE > 1 (torchrun, srun) every
    rank runs it and scores its share; rank 0 writes."""
    args = parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    overrides = dict(k_mc=args.k_mc, m_max=args.m_max, n_targets=args.n_targets, val_chunks=args.val_chunks,
                     gen_samples=args.gen_samples,
                     zero_shot_chunks=args.max_chunks, seq_len=args.seq_len, weights=args.weights,
                     data_dir=args.data_dir, seed=args.seed)
    if args.datasets is not None:
        overrides["zero_shot"] = tuple(n.strip() for n in args.datasets.split(",") if n.strip())

    def body() -> int:
        if args.max_chunks is not None:
            positive_setting("max_chunks", args.max_chunks)
        rules.seed("--seed", args.seed)
        suite = EvalSuite.parse(args.eval_suite, SUITE_FLAG)
        make_settings(suite, **overrides)  # every flag checked before the lock is taken
        check_eval_dir(Path(args.run_dir))
        partial_run = check_done(args.run_dir, args.allow_partial)
        clear_stop()  # a stop asked of this process before the command is not this command's
        with ranks(pick_device()) as shard, _rank0_lock(shard, args.run_dir), stop_on_signals(True):
            try:
                frame = evaluate(args.run_dir, suite, **overrides)
            except Stopped as stopped:
                print(stopped, file=sys.stderr)
                return EXIT_STOPPED
        if frame is None:  # another rank's share is done; rank 0 writes
            return 0
        if partial_run:
            print(f"warning: {partial_run}", file=sys.stderr)
            add_status_warning(args.run_dir, partial_run)
        print(f"wrote {len(frame)} records to {Path(args.run_dir) / 'eval.parquet'}")
        return 0

    return run_main("error", body)


if __name__ == "__main__":
    sys.exit(main())
