"""`ar`: the left-to-right GPT-2 baseline.

Input slots are [S, x_0, ..., x_{L-2}] (S = a learned start token at position 0, token x_i at
position i+1), causal attention, tied head; slot j predicts x_j. With `pos = "rope"` slot j's
query and key are both rotated by j (its own place; the core's default). Like AO-GPT, all L tokens are
scored (the first one from the start slot), so per-token losses of the two are comparable.
Span scoring sees the prefix only; sampling is left to right with a KV cache, one token per step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import sampling as sm
from .base import COMMON_OPTIONS, FamilyModel, FamilySpec


class AR(FamilyModel):
    family = "ar"
    OPTIONS = dict(COMMON_OPTIONS)
    SPEC = FamilySpec(metrics=("l2r",), infill_context="prefix_only", steps_are_length=True)

    def __init__(self, shape, vocab_size, seq_len, options):
        super().__init__(shape, vocab_size, seq_len, options)
        self.start = nn.Parameter(torch.zeros(shape.d_model))
        self._init()

    def embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Embeddings of input slots for tokens at positions offset, offset+1, ...: [B, T, d]."""
        positions = torch.arange(offset, offset + tokens.shape[1], device=tokens.device) + 1
        return self.with_position(self.wte(tokens), positions)

    def start_slot(self, batch: int) -> torch.Tensor:
        """The start slot's embedding [B, 1, d]."""
        return self.start_vector().expand(batch, 1, -1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, V]; slot j predicts tokens[:, j] from tokens[:, :j]."""
        self.check_tokens(tokens)
        x = torch.cat([self.start_slot(tokens.shape[0]), self.embed(tokens[:, :-1])], dim=1)
        return self.logits_from_hidden(self.core(x, is_causal=True))

    def nll(self, tokens: torch.Tensor) -> torch.Tensor:
        """Per-token negative log-likelihood [B, L] in nats."""
        logits = self(tokens)
        return F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none").view_as(tokens)

    def loss(self, tokens, generator=None):
        return self.nll(tokens).mean()

    # ---- capabilities --------------------------------------------------------------------
    def span_logits(self, tokens: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Logits [B, b-a, V] for x_a..x_{b-1} from the prefix x_{<i} alone."""
        return self(tokens)[:, a:b]

    def sample(self, request: sm.Request, generator=None) -> sm.Generation:
        """Left to right with a KV cache (`ar_kv`), one token per step whatever `steps` says."""
        out = sm.generate_ar(self, request.n_samples, request.length, request.sampling, generator)
        out.method = "ar_kv"
        return out
