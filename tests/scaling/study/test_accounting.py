"""scaling.study.accounting: a family's parameters and FLOPs per token, counted on the meta device,
are those of the real model; known vocabularies need no tokenizer."""
from __future__ import annotations

import json

import pytest

from jobs.data.tokenizers import get_encoding
from models import build_model
from scaling.study.accounting import VOCAB_SIZES, family_accounting, vocab_of


@pytest.mark.parametrize("family, options", [("ar", {}), ("mdm", {}), ("aogpt", {})])
def test_meta_device_accounting_matches_the_real_model(family, options):
    real = build_model(family, "0.1M", vocab_size=257, seq_len=32, **options)
    own, per_token = family_accounting(family, "0.1M", json.dumps(options), 257, 32)
    assert own == real.count_params()["family_non_embedding"] and own > 0
    assert per_token == float(real.flops_per_token()) and per_token > 6 * own


def test_known_vocabularies_are_the_tokenizers_sizes():
    assert vocab_of("bytes") == VOCAB_SIZES["bytes"] == get_encoding("bytes").n_vocab == 257
    assert vocab_of("gpt2") == 50257
