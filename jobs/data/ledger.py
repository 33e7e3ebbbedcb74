"""What data a run saw: epochs of its training split and the unique tokens they covered.

Training batches are windows at uniformly drawn starts (`jobs.data.corpus.Batches`), so a run of T
tokens over a split of N tokens makes `epochs` = T / N passes, and the expected number of
distinct split tokens it covered is N·(1 - (1 - 1/N)^T) (each position is missed by every one
of the T draws with probability (1 - 1/N)^T). A run above one epoch repeats data, which
favours masked diffusion (Prabhudesai et al. 2025): status and the report flag it.
"""
from __future__ import annotations

import math

from jobs.data import tokencache


def train_tokens(spec) -> int | None:
    """Tokens of the run's training split, from its token cache's manifest (None before the cache exists)."""
    from jobs.data import corpus as data  # noqa: PLC0415 - imports torch; records and status need only the manifest

    try:
        manifest = tokencache.read_manifest(data.cache_folder(spec.corpus, spec.tokenizer, spec.text_field))
    except (OSError, ValueError):
        return None
    return int(manifest["splits"]["train"]["tokens"]) if manifest else None


def ledger_columns(spec, tokens: int) -> dict:
    """`epochs` and `unique_tokens` of a run that has trained on `tokens` tokens (nulls when unknown)."""
    return coverage_columns(train_tokens(spec), tokens)


def coverage_columns(n: int | None, tokens: int) -> dict:
    """`epochs` and `unique_tokens` of `tokens` tokens drawn from a training split of `n` tokens
    (nulls when `n` is unknown)."""
    if not n:
        return {"epochs": None, "unique_tokens": None}
    unique = n * -math.expm1(tokens * math.log1p(-1 / n)) if n > 1 else min(tokens, n)
    return {"epochs": tokens / n, "unique_tokens": round(unique)}
