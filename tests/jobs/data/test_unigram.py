"""The unigram baseline: add-one-smoothed training-split frequencies, scored by hand."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from jobs.data import corpus as data
from jobs.data.unigram import log_probs, train_counts, unigram_nll


def test_add_one_smoothing_by_hand():
    counts = np.array([3, 0, 1])  # N = 4, V = 3: p = (4, 1, 2) / 7
    assert np.exp(log_probs(counts)) == pytest.approx([4 / 7, 1 / 7, 2 / 7], abs=1e-15)


def test_unigram_nll_on_a_small_corpus_equals_a_hand_computation(tmp_path, monkeypatch):
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("\n\n".join(f"abracadabra {i}" for i in range(40)))  # 40 paragraphs: documents
    train = [int(t) for t in data.token_array(str(corpus), "bytes", "train")]
    chunks = torch.tensor([[ord(c) for c in "cab dab"], [ord(c) for c in "zzzzzzz"]])
    counts, n, vocab = Counter(train), len(train), 257
    by_hand = -sum(math.log((counts[t] + 1) / (n + vocab)) for t in chunks.flatten().tolist()) / chunks.numel()
    assert unigram_nll(str(corpus), "bytes", vocab, chunks) == pytest.approx(by_hand, rel=1e-12)
    cached = train_counts(str(corpus), "bytes", vocab)  # second call reads the cache
    assert cached.sum() == n and cached[ord("a")] == counts[ord("a")]
