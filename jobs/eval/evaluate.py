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
import math
import os
import sys
import zlib
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from collections.abc import Callable

import numpy as np
import polars as pl
import torch

from cli import Busy, InputError, Parser, int_arg, parse, run_main
from cli.faults import fault_point
from jobs.train import checkpoint
from jobs.eval import windows as ew
from jobs.run.allocator import keep_freed_memory
from jobs.run.device import Placement, placement
from jobs.run.numerics import record_columns
from jobs.eval.generate import GenSettings, generation_sweep, write_samples
from models.sampling import Sampling
from jobs.train.cli import add_field_flag, field_flag
from jobs.train.preflight import check_eval_dir
from jobs.eval.records import concat_frames, record, run_context, to_frame, write_records
from jobs.run.lock import holding
from jobs.data.suites import DEFAULT_SUITE, EvalSuite, Suite
from jobs.data.datasets import EVAL_SET_NAMES, load_eval_set, load_lambada, token_byte_lengths
from jobs.data import corpus as data
from jobs.data.corpus import get_encoding
from jobs.run.files import add_status_warning
from jobs.data.unigram import unigram_window_nll
from jobs.data import heldout
from jobs.eval.state import check_done
from jobs.eval.progress import Progress, progress_key
from jobs.eval.shard import Shard, ranks
from jobs.run.device import pick_device
from jobs.train.loop import clear_stop, stop_on_signals, stop_requested
from cli import rules
from models import likelihood as lk

SUITE_FLAG = field_flag("eval_suite")  # `--eval-suite`, as every command names it; `--suite` is its alias
EVAL_SEED = 20240917  # any fixed number; recorded in every row as eval_seed
LN2 = math.log(2.0)
EXIT_STOPPED = 3  # as jobs.train's exit status for a preempted run: rerun to finish




@dataclass(frozen=True)
class Settings:
    """A suite with the caller's overrides, validated."""

    suite: Suite
    seed: int = EVAL_SEED
    weights: str = "auto"
    seq_len: int | None = None  # chunk length; defaults to the model's context
    data_dir: str | None = None
    require_zero_shot: bool = False  # the caller named the sets: a missing one is an error
    place: Placement | None = None  # device, precision and batch (`jobs.run.device.placement` of the run)
    shard: Shard = Shard()  # this rank among the evaluating ranks (jobs.eval.shard)


@dataclass(frozen=True)
class Dataset:
    """Evaluation sequences with the byte count behind them (for bits per byte)."""

    name: str
    split: str
    chunks: torch.Tensor  # [N, L]
    n_bytes: int
    chunking: str
    tiling: ew.Tiling | None = None  # where the chunks lie in the split (None: consecutive from 0)

    @property
    def windows(self) -> ew.Tiling:
        """The chunks' windows: their tiling, or consecutive tiles of a split of just these chunks."""
        if self.tiling is not None:
            return self.tiling
        n, L = self.chunks.shape
        return ew.consecutive(n, L, n * L)


# ---- settings ----------------------------------------------------------------------------------
def _positive(name: str, value) -> None:
    rules.positive_int(f"--{name.replace('_', '-')}", value)


def make_settings(suite: EvalSuite | str = DEFAULT_SUITE, **overrides) -> Settings:
    """Suite `suite` with overrides (k_mc, m_max, n_targets, val_chunks, zero_shot, ...).

    `suite` may name its zero-shot sets (`EvalSuite.sets`, `SUITE:SET,SET` as text, parsed here
    for a caller that passes text): they replace the suite's and are required."""
    suite = EvalSuite.parse(suite, SUITE_FLAG)
    outer = {k: overrides.pop(k) for k in ("seed", "weights", "seq_len", "data_dir") if k in overrides}
    chosen = replace(suite.suite, **{k: v for k, v in overrides.items() if v is not None})
    for name in ("val_chunks", "k_mc", "m_max", "n_targets", "ensemble_chunks", "gen_samples"):
        _positive(name, getattr(chosen, name))
    for name in chosen.zero_shot:
        if name not in EVAL_SET_NAMES:
            raise InputError(f"--datasets: unknown dataset {name!r}; choose from {list(EVAL_SET_NAMES)}")
    return Settings(chosen, require_zero_shot=bool(suite.sets) or overrides.get("zero_shot") is not None,
                    **{k: v for k, v in outer.items() if v is not None})


# ---- data --------------------------------------------------------------------------------------
def _validation(spec, enc, seq_len: int, n: int, seed: int) -> Dataset:
    """`n` windows spread uniformly over the whole validation split (all of it when it holds <= n)."""
    tokens = data.token_array(spec.corpus, spec.tokenizer, "validation", spec.text_field)
    tiling = ew.draw_windows(len(tokens), seq_len, n, seed)
    chunks = torch.from_numpy(np.asarray(tokens[tiling.starts[:, None] + np.arange(seq_len)], dtype=np.int64))
    n_bytes = int(token_byte_lengths(enc)[chunks.numpy()].sum())
    return Dataset(spec.corpus, "validation", chunks, n_bytes, tiling.describe("validation"), tiling)


def _validation_and_test(spec, enc, seq_len: int, n: int) -> list[Dataset]:
    """Validation and a disjoint test split of the corpus's validation windows (jobs.data.heldout)."""
    tokens = data.token_array(spec.corpus, spec.tokenizer, "validation", spec.text_field)
    lengths = token_byte_lengths(enc)
    out = []
    for split, (routed, chosen) in heldout.split_windows(tokens, seq_len, n, enc.decode).items():
        chunks = torch.from_numpy(np.asarray(tokens[chosen[:, None] + np.arange(seq_len)], dtype=np.int64))
        # the routed windows are this split's tiles: coverage is counted against them
        tiling = ew.Tiling(chosen, seq_len, len(routed) * seq_len, len(routed), 0)
        chunking = (f"{len(chunks)} of the {len(routed)} {seq_len}-token windows routed to {split} (blake2b-64 of "
                    f"each window's text < {heldout.TEST_SHARE} x 2^64: test), spaced evenly over the split")
        out.append(Dataset(spec.corpus, split, chunks, int(lengths[chunks.numpy()].sum()), chunking, tiling))
    return out


def _data_dir(settings: Settings) -> str | None:
    return settings.data_dir or os.environ.get("AOSCALE_DATA") or None


def load_datasets(spec, settings: Settings, seq_len: int,
                  missing: list[str] | None = None) -> list[Dataset]:
    """The run's validation split, then each zero-shot set (from the data folder or the Hub).

    A set that cannot be had is an error when the caller named the sets; otherwise it is
    appended to `missing` as "name: reason" (never skipped in silence)."""
    enc = get_encoding(spec.tokenizer)
    n = settings.suite.val_chunks
    out = (_validation_and_test(spec, enc, seq_len, n) if settings.suite.test_split
           else [_validation(spec, enc, seq_len, n, settings.seed)])
    for name in settings.suite.zero_shot:
        try:
            s = load_eval_set(name, enc, seq_len, data_dir=_data_dir(settings),
                              max_chunks=settings.suite.zero_shot_chunks)
        except ValueError as error:
            if settings.require_zero_shot or missing is None:
                raise
            missing.append(f"{name}: {str(error)[:300]}")
            continue
        tiling = ew.consecutive(len(s.chunks), seq_len, s.n_tokens + s.dropped_tokens)
        out.append(Dataset(s.name, s.split, s.chunks, s.n_bytes, s.chunking, tiling))
    return out


# ---- metrics -----------------------------------------------------------------------------------
def generator(seed: int, *names: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on `device` seeded from the eval seed and a name, independent of what else runs."""
    return torch.Generator(device).manual_seed(seed * 1_000_003 + zlib.crc32("/".join(names).encode()))


def _batch_size(settings: Settings) -> int:
    """Sequences per forward: the placement's (8 without one)."""
    return settings.place.eval_batch if settings.place else 8


def _device(settings: Settings) -> torch.device | str:
    return settings.place.device if settings.place else "cpu"


def per_batch(chunks: torch.Tensor, settings: Settings, score: Callable[[torch.Tensor], object]) -> list:
    """[score(batch) for each batch of the placement's size], each batch scored on the device of
    one rank (batch i by rank i mod N: jobs.eval.shard), the results on every rank in order."""
    size = _batch_size(settings)
    return settings.shard.map(-(-len(chunks) // size),
                              lambda i: score(chunks[i * size:(i + 1) * size].to(_device(settings))))


def per_batch_drawn(chunks: torch.Tensor, settings: Settings, names: tuple[str, ...],
                    score: Callable[[torch.Tensor, torch.Generator], object]) -> list:
    """`per_batch` for Monte-Carlo metrics: batch i draws from its own generator (`generator` of
    the seed, the names and, past batch 0, the batch's index), so its draws are the same whichever
    rank scores it and however many ranks there are. Batch 0's stream is the one a whole
    (dataset, metric) drew from before evaluation was sharded: one-batch records are unchanged."""
    size = _batch_size(settings)

    def scored(i: int) -> object:
        g = generator(settings.seed, *names, *((f"batch{i}",) if i else ()), device=_device(settings))
        return score(chunks[i * size:(i + 1) * size].to(_device(settings)), g)

    return settings.shard.map(-(-len(chunks) // size), scored)


def _row(ctx, ds: Dataset, metric: str, **fields) -> dict:
    return record(ctx, dataset=ds.name, split=ds.split, metric=metric, chunking=ds.chunking, **fields)


def _window_row(ctx, ds: Dataset, metric: str, per_window: torch.Tensor, index: np.ndarray | None = None,
                chunking: str | None = None, **fields) -> dict:
    """A row whose value is the mean of `per_window` values (of the dataset's windows, or of those
    at `index`) and whose se is their standard error; the values travel with it (jobs.eval.windows)."""
    tiling = ds.windows
    index = np.arange(len(tiling.starts)) if index is None else index
    value, se = ew.mean_se(per_window)
    row = record(ctx, dataset=ds.name, split=ds.split, metric=metric, chunking=chunking or ds.chunking,
                 value=value, se=se, n_samples=len(index), coverage_tokens=len(index) * tiling.seq_len,
                 split_tokens=tiling.split_tokens, **fields)
    return ew.attach(row, tiling.ids[index], tiling.starts[index], per_window)


def l2r_rows(model, ds: Dataset, ctx: dict, settings: Settings) -> list[dict]:
    """nll_l2r (nats/token) and bpb_l2r (bits/byte), exact given the windows."""
    nll = torch.cat(per_batch(ds.chunks, settings, lambda b: lk.l2r_nll(model, b))).double()
    row = _window_row(ctx, ds, "nll_l2r", nll.mean(1), unit="nats/token", estimator="exact")
    per_byte = nll.numel() / LN2 / ds.n_bytes  # bpb = mean per-window nll x tokens / (ln 2 x bytes)
    bpb = {k: v for k, v in row.items() if k != ew.PAYLOAD}  # a unit conversion: no windows of its own
    bpb.update(metric="bpb_l2r", value=float(nll.sum() / LN2 / ds.n_bytes), unit="bits/byte",
               se=None if row["se"] is None else row["se"] * per_byte)
    return [row, bpb]


def _mc_row(ctx, ds, metric, draws: torch.Tensor, estimator: str, index: np.ndarray | None = None,
            **fields) -> dict:
    return _window_row(ctx, ds, metric, draws.double().mean(1), index, unit="nats/token", estimator=estimator,
                       **fields)


def anyorder_rows(model, ds: Dataset, ctx: dict, settings: Settings) -> list[dict]:
    """nll_anyorder over K uniform permutations per sequence."""
    k = settings.suite.k_mc
    draws = torch.cat(per_batch_drawn(ds.chunks, settings, (ds.name, "nll_anyorder"),
                                      lambda b, g: lk.anyorder_draws(model, b, k, g)))
    return [_mc_row(ctx, ds, "nll_anyorder", draws, "perm_mc", k_mc=k)]


def ensemble_sweep(m_max: int) -> list[int]:
    """1, 2, 4, ... up to m_max (m_max itself included)."""
    ms = [1 << i for i in range(m_max.bit_length()) if 1 << i <= m_max]
    return ms if ms[-1] == m_max else ms + [m_max]


def ensemble_rows(model, ds: Dataset, ctx: dict, settings: Settings) -> list[dict]:
    """nll_ensemble for M in the sweep, sharing targets and orders across M."""
    s = settings.suite
    index = ew.ensemble_subset(len(ds.chunks), s.ensemble_chunks, settings.seed)
    chunks = ds.chunks[torch.from_numpy(index)]
    n_targets = min(s.n_targets, chunks.shape[1])
    logp = torch.cat(per_batch_drawn(chunks, settings, (ds.name, "nll_ensemble"),
                                     lambda b, g: lk.ensemble_logprobs(model, b, s.m_max, n_targets, g)[0]))
    return [_mc_row(ctx, ds, "nll_ensemble", lk.ensemble_losses(logp, m), "ctx_ensemble", index, m=m,
                    n_targets=n_targets) for m in ensemble_sweep(s.m_max)]


def elbo_rows(model, ds: Dataset, ctx: dict, settings: Settings) -> list[dict]:
    """nll_elbo_mdlm, nll_elbo_kdce (+ nll_elbo_sedd for a sedd model: SEDD's own score-entropy
    bound), and nll_anyorder = the family's default estimator (its loss when mdlm/kdce, else the
    kdce bound of its softmax-normalised logits; the `estimator` column says which)."""
    k, rows = settings.suite.k_mc, []
    for est in lk.elbo_estimators(model):
        draws = torch.cat(per_batch_drawn(ds.chunks, settings, (ds.name, f"nll_elbo_{est}"),
                                          lambda b, g, est=est: lk.mdm_elbo_draws(model, b, k, est, g)))
        rows.append(_mc_row(ctx, ds, f"nll_elbo_{est}", draws, est, k_mc=k))
        if est == lk.default_elbo_estimator(model):
            rows.append(_mc_row(ctx, ds, "nll_anyorder", draws, est, k_mc=k))
    return rows


Metric = Callable[..., list[dict]]
# The rows of each metric group a family may declare (models.families.base.METRIC_GROUPS).
METRIC_ROWS: dict[str, Metric] = {"l2r": l2r_rows, "perm_mc": anyorder_rows, "ctx_ensemble": ensemble_rows,
                                  "elbo": elbo_rows}


# ---- LAMBADA and infilling ---------------------------------------------------------------------
def _binomial_se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def lambada_rows(model, spec, ctx: dict, settings: Settings) -> list[dict]:
    """Last-word accuracy: every target token is the argmax given the (truncated) context.

    Decoders use the identity order and MDMs mask the target, so all families see the left
    context only here. Items are batched by (context, target) length."""
    items = settings.shard.from_rank0(lambda: load_lambada(get_encoding(spec.tokenizer), data_dir=_data_dir(settings)))
    groups: dict[tuple[int, int], list[list[int]]] = {}
    for context, target in items:
        context = context[-(model.seq_len - len(target)):]
        groups.setdefault((len(context), len(target)), []).append(context + target)
    size = _batch_size(settings)
    batches = [(a, t, seqs[i:i + size]) for (a, t), seqs in sorted(groups.items()) for i in range(0, len(seqs), size)]

    def hits(i: int) -> int:
        a, t, seqs = batches[i]
        return int(lk.span_scores(model, torch.tensor(seqs, device=_device(settings)), a, a + t)[1].all(1).sum())

    acc = sum(settings.shard.map(len(batches), hits)) / len(items)
    ds = Dataset("lambada", "test", torch.empty(0), 0, "OpenAI LAMBADA test; context truncated to the "
                 "model context; target = last word with its leading space")
    return [_row(ctx, ds, "lambada_acc", value=acc, se=_binomial_se(acc, len(items)), unit="fraction",
                 n_samples=len(items), estimator="greedy_left_context")]


def infill_rows(model, ds: Dataset, ctx: dict, settings: Settings) -> list[dict]:
    """NLL per span token and exact match of a middle span given prefix (and suffix)."""
    L = ds.chunks.shape[1]
    span = min(settings.suite.infill_span, L - 2)
    a = (L - span) // 2

    def scored(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, hits = lk.span_scores(model, batch, a, a + span)
        return n.double().mean(1), hits.all(1).double()

    parts = per_batch(ds.chunks, settings, scored)
    nll, em = torch.cat([n for n, _ in parts]), torch.cat([e for _, e in parts])
    context = model.SPEC.infill_context
    chunking = f"{ds.chunking}; span = tokens [{a}, {a + span}) of each chunk"
    base = dict(dataset=ds.name, split=ds.split, n_samples=len(nll), estimator=context, chunking=chunking)
    return [_window_row(ctx, ds, "infill_nll", nll, unit="nats/token", estimator=context, chunking=chunking),
            record(ctx, metric="infill_em", value=em.mean(), se=_binomial_se(float(em.mean()), len(em)),
                   unit="fraction", **base)]


# ---- the job -----------------------------------------------------------------------------------
class Stopped(Exception):
    """A stop (a stop signal, jobs.train.loop.request_stop) came between two sets: the finished
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
                           weights=kinds, seq_len=L, data_dir=_data_dir(settings), step=info.step,
                           checkpoint=info.path.name, place=settings.place.columns(), batch=_batch_size(settings))
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
        return {**run_context(self.spec, model.count_params(), model.flops_per_token(), self.info.step,
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
    return [_window_row(ctx, ds, "nll_unigram",
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
            _positive("max_chunks", args.max_chunks)
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
