"""What an evaluation reads: its settings (a suite with the caller's overrides) and its datasets
(the run's validation windows, a held-out test split where the suite asks, the zero-shot sets).
jobs.eval.evaluate runs them; jobs.eval.metrics scores them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import torch

from cli import InputError
from jobs.eval import windows as ew
from jobs.run.device import Placement
from jobs.train.cli import field_flag
from jobs.data.suites import DEFAULT_SUITE, EvalSuite, Suite
from jobs.data.datasets import EVAL_SET_NAMES, load_eval_set, token_byte_lengths
from jobs.data import corpus as data
from jobs.data.corpus import get_encoding
from jobs.data import heldout
from jobs.eval.shard import Shard
from cli import rules

SUITE_FLAG = field_flag("eval_suite")  # `--eval-suite`, as every command names it; `--suite` is its alias
EVAL_SEED = 20240917  # any fixed number; recorded in every row as eval_seed




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
def positive_setting(name: str, value) -> None:
    """InputError naming the flag (`--name`) unless `value` is a positive integer."""
    rules.positive_int(f"--{name.replace('_', '-')}", value)


def make_settings(suite: EvalSuite | str = DEFAULT_SUITE, **overrides) -> Settings:
    """Suite `suite` with overrides (k_mc, m_max, n_targets, val_chunks, zero_shot, ...).

    `suite` may name its zero-shot sets (`EvalSuite.sets`, `SUITE:SET,SET` as text, parsed here
    for a caller that passes text): they replace the suite's and are required."""
    suite = EvalSuite.parse(suite, SUITE_FLAG)
    outer = {k: overrides.pop(k) for k in ("seed", "weights", "seq_len", "data_dir") if k in overrides}
    chosen = replace(suite.suite, **{k: v for k, v in overrides.items() if v is not None})
    for name in ("val_chunks", "k_mc", "m_max", "n_targets", "ensemble_chunks", "gen_samples"):
        positive_setting(name, getattr(chosen, name))
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


def data_folder(settings: Settings) -> str | None:
    """The folder laid out like the offline data kit: the setting's, else $AOSCALE_DATA (None: the Hub)."""
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
            s = load_eval_set(name, enc, seq_len, data_dir=data_folder(settings),
                              max_chunks=settings.suite.zero_shot_chunks)
        except ValueError as error:
            if settings.require_zero_shot or missing is None:
                raise
            missing.append(f"{name}: {str(error)[:300]}")
            continue
        tiling = ew.consecutive(len(s.chunks), seq_len, s.n_tokens + s.dropped_tokens)
        out.append(Dataset(s.name, s.split, s.chunks, s.n_bytes, s.chunking, tiling))
    return out


