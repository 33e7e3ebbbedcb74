"""The metric groups of jobs.eval.evaluate (METRIC_ROWS), LAMBADA and infilling, as record rows.

Every group scores a dataset's windows in batches of the placement's size, each batch on one rank
(`per_batch`, jobs.eval.shard); a Monte-Carlo group's batch draws from its own generator
(`per_batch_drawn`), so the rows are the same on any number of ranks.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np
import torch

from jobs.eval import windows as ew
from jobs.eval.records import record
from jobs.data.datasets import load_lambada
from jobs.data.corpus import get_encoding
from models import likelihood as lk
from jobs.eval.inputs import Dataset, Settings, data_folder

LN2 = math.log(2.0)


# ---- metrics -----------------------------------------------------------------------------------
def generator(seed: int, *names: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on `device` seeded from the eval seed and a name, independent of what else runs."""
    return torch.Generator(device).manual_seed(seed * 1_000_003 + zlib.crc32("/".join(names).encode()))


def eval_batch_size(settings: Settings) -> int:
    """Sequences per forward: the placement's (8 without one)."""
    return settings.place.eval_batch if settings.place else 8


def _device(settings: Settings) -> torch.device | str:
    return settings.place.device if settings.place else "cpu"


def per_batch(chunks: torch.Tensor, settings: Settings, score: Callable[[torch.Tensor], object]) -> list:
    """[score(batch) for each batch of the placement's size], each batch scored on the device of
    one rank (dealt in turn: jobs.eval.shard), the results on every rank in order."""
    size = eval_batch_size(settings)
    return settings.shard.map(-(-len(chunks) // size),
                              lambda i: score(chunks[i * size:(i + 1) * size].to(_device(settings))))


def per_batch_drawn(chunks: torch.Tensor, settings: Settings, names: tuple[str, ...],
                    score: Callable[[torch.Tensor, torch.Generator], object]) -> list:
    """`per_batch` for Monte-Carlo metrics: batch i draws from its own generator (`generator` of
    the seed, the names and, past batch 0, the batch's index), so its draws are the same whichever
    rank scores it and however many ranks there are. Batch 0's stream is the one a whole
    (dataset, metric) drew from before evaluation was sharded: one-batch records are unchanged."""
    size = eval_batch_size(settings)

    def scored(i: int) -> object:
        g = generator(settings.seed, *names, *((f"batch{i}",) if i else ()), device=_device(settings))
        return score(chunks[i * size:(i + 1) * size].to(_device(settings)), g)

    return settings.shard.map(-(-len(chunks) // size), scored)


def _row(ctx, ds: Dataset, metric: str, **fields) -> dict:
    return record(ctx, dataset=ds.name, split=ds.split, metric=metric, chunking=ds.chunking, **fields)


def window_row(ctx, ds: Dataset, metric: str, per_window: torch.Tensor, index: np.ndarray | None = None,
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
    row = window_row(ctx, ds, "nll_l2r", nll.mean(1), unit="nats/token", estimator="exact")
    per_byte = nll.numel() / LN2 / ds.n_bytes  # bpb = mean per-window nll x tokens / (ln 2 x bytes)
    bpb = {k: v for k, v in row.items() if k != ew.PAYLOAD}  # a unit conversion: no windows of its own
    bpb.update(metric="bpb_l2r", value=float(nll.sum() / LN2 / ds.n_bytes), unit="bits/byte",
               se=None if row["se"] is None else row["se"] * per_byte)
    return [row, bpb]


def _mc_row(ctx, ds, metric, draws: torch.Tensor, estimator: str, index: np.ndarray | None = None,
            **fields) -> dict:
    return window_row(ctx, ds, metric, draws.double().mean(1), index, unit="nats/token", estimator=estimator,
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
    items = settings.shard.from_rank0(lambda: load_lambada(get_encoding(spec.tokenizer), data_dir=data_folder(settings)))
    groups: dict[tuple[int, int], list[list[int]]] = {}
    for context, target in items:
        context = context[-(model.seq_len - len(target)):]
        groups.setdefault((len(context), len(target)), []).append(context + target)
    size = eval_batch_size(settings)
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
    return [window_row(ctx, ds, "infill_nll", nll, unit="nats/token", estimator=context, chunking=chunking),
            record(ctx, metric="infill_em", value=em.mean(), se=_binomial_se(float(em.mean()), len(em)),
                   unit="fraction", **base)]


