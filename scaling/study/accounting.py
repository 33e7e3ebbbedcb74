"""Each family's own accounting at a size: its non-embedding parameters and training FLOPs per token,
read from a model built on the meta device (no weights allocated), and tokenizer vocabularies.

Its own module so that study planning (scaling.study.sweep) and the dry-run (scaling.plan.dry_run) share it
without importing each other."""
from __future__ import annotations

import functools
import json

import torch

from jobs.data.tokenizers import get_encoding
from models import build_model
from models.families.base import shapes_only

# Known without loading the tokenizer: 256 bytes + EOT; GPT-2's 50,257 (Radford et al. 2019).
# Any other tokenizer's vocabulary is read from the tokenizer itself.
VOCAB_SIZES = {"bytes": 257, "gpt2": 50257}


@functools.cache
def family_accounting(family: str, size: str, options_json: str, vocab: int, seq_len: int,
                      sequences_per_pass: int = 1) -> tuple[int, float]:
    """(the family's own non-embedding parameters, its training FLOPs per token as executed by a
    run whose forward passes hold `sequences_per_pass` sequences) at this size, from a model on
    the meta device (`FamilyModel.flops_per_token`)."""
    with torch.device("meta"), shapes_only():
        model = build_model(family, size, vocab_size=vocab, seq_len=seq_len, **json.loads(options_json))
    return int(model.count_params()["family_non_embedding"]), float(model.flops_per_token(sequences_per_pass))


def vocab_of(tokenizer: str) -> int:
    """The vocabulary size of a tokenizer (known ones without loading it)."""
    return VOCAB_SIZES.get(tokenizer) or get_encoding(tokenizer).n_vocab
