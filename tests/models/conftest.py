"""What the model tests share: a seeded model in eval mode and a seeded batch of random tokens.
Each test file binds its own vocabulary, length and size with functools.partial."""
from __future__ import annotations

import torch

from models import build_model


def make_model(family: str, size: str = "0.1M", *, vocab_size: int, seq_len: int, **options) -> torch.nn.Module:
    """`build_model` after `torch.manual_seed(0)`, in eval mode."""
    torch.manual_seed(0)
    return build_model(family, size, vocab_size=vocab_size, seq_len=seq_len, **options).eval()


def make_tokens(batch: int = 3, seed: int = 0, *, vocab_size: int, seq_len: int) -> torch.Tensor:
    """LongTensor[batch, seq_len] uniform over the vocabulary, a pure function of `seed`."""
    return torch.randint(0, vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(seed))
