"""The unigram baseline of a corpus: token counts of its training split, add-one smoothed.

`nll_unigram` is the cross-entropy of p(v) = (c_v + 1) / (N + V) on evaluation tokens, in nats per
token like `nll_l2r`. Counts are a chunked bincount over the training split's token map (flat
memory), cached per split hash under the token cache so a study counts each corpus once.
"""
from __future__ import annotations

import io

import numpy as np
import torch

from jobs.data import corpus as data
from jobs.run.files import atomic_write_bytes

COUNT_CHUNK_TOKENS = 1 << 24  # tokens per bincount pass (64 MiB of int32 indices at most)


def train_counts(corpus: str, tokenizer: str, vocab_size: int,
                 text_field: str = data.DEFAULT_TEXT_FIELD) -> np.ndarray:
    """Occurrences of each token id in the training split: int64 [vocab_size], cached."""
    split_hash = data.corpus_hash(corpus, tokenizer, "train", text_field)
    path = data.cache_root() / "unigram" / f"{split_hash}-{vocab_size}.npy"
    if path.exists():
        return np.load(path)
    tokens = data.token_array(corpus, tokenizer, "train", text_field)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), COUNT_CHUNK_TOKENS):
        counts += np.bincount(tokens[start:start + COUNT_CHUNK_TOKENS], minlength=vocab_size)[:vocab_size]
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.save(buffer, counts)
    atomic_write_bytes(path, buffer.getvalue())
    return counts


def log_probs(counts: np.ndarray) -> np.ndarray:
    """log p(v) of the add-one-smoothed unigram distribution: log((c_v + 1) / (N + V))."""
    return np.log(counts + 1.0) - np.log(counts.sum() + len(counts))


def unigram_window_nll(corpus: str, tokenizer: str, vocab_size: int, chunks: torch.Tensor,
                       text_field: str = data.DEFAULT_TEXT_FIELD) -> np.ndarray:
    """Mean -log p(x) over each chunk's tokens [N] under the training split's unigram (float64)."""
    logp = log_probs(train_counts(corpus, tokenizer, vocab_size, text_field))
    return -logp[chunks.numpy()].mean(axis=1)


def unigram_nll(corpus: str, tokenizer: str, vocab_size: int, chunks: torch.Tensor,
                text_field: str = data.DEFAULT_TEXT_FIELD) -> float:
    """Mean -log p(x) over every token of `chunks` [N, L] under the training split's unigram."""
    return float(unigram_window_nll(corpus, tokenizer, vocab_size, chunks, text_field).mean())
