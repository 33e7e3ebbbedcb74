"""`aogpt` and `sigma_gpt`: decoder-only any-order autoregression.

Slots are [S, x_{σ0}, ..., x_{σ(L-2)}]; token x_{σj} enters with the embedding of its own
position σj; slot j is conditioned on the *target* position σj and predicts x_{σj}; causal
attention over slots. How the target position enters (`target_pe`, paper Fig. 6/7):
  adaln          target embedding of width `cond_dim` -> SiLU -> per-block shift/scale/gate (default)
  input          target embedding (width d) added once to the input (σ-GPT)
  layer_shared   the same target embedding added before every block
  layer_distinct a separate target embedding per block
With `pos = "rope"` there is no position table: in every block a slot's query is rotated by its
target position σj and its key by its own token's position σ(j-1) (the start slot's by 0, tokens'
by position + 1), so attention sees target-to-context distances; the target conditioning above
stays as it is.
`sigma_gpt` is this family with σ-GPT's defaults: `input` injection, LayerNorm, tied head,
uniform orders (EMA off is a run rule).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..orders import parse_order, sample_orders
from .base import COMMON_OPTIONS, FamilyModel, choice, positive_int

TARGET_PE = ("adaln", "input", "layer_shared", "layer_distinct")


def _valid_order(value) -> bool:
    try:
        parse_order(value)
    except ValueError:
        return False
    return True


class AOGPT(FamilyModel):
    family = "aogpt"
    OPTIONS = {
        **COMMON_OPTIONS,
        "order": ("mix:0.1", (_valid_order, "l2r, r2l, uniform, mix:P, fixed:SEED or blockwise:B")),
        "target_pe": ("adaln", choice(*TARGET_PE)),
        "cond_dim": (128, positive_int()),  # AO-GPT's target-embedding width for AdaLN
    }
    GROUP_PREFIXES = {"target_cond": ("tpe",)}

    def __init__(self, shape, vocab_size, seq_len, options):
        mode = options["target_pe"]
        super().__init__(shape, vocab_size, seq_len, options, cond_dim=options["cond_dim"] if mode == "adaln" else 0)
        self.order = parse_order(options["order"])
        self.start = nn.Parameter(torch.zeros(shape.d_model))
        width = options["cond_dim"] if mode == "adaln" else shape.d_model
        n_tables = shape.n_layer if mode == "layer_distinct" else 1
        self.tpe = nn.ModuleList(nn.Embedding(seq_len, width) for _ in range(n_tables))
        self._init()

    # ---- inputs --------------------------------------------------------------------------
    def slot_inputs(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Embeddings of real-token slots: token plus its own position: [B, T, d]."""
        return self.with_position(self.wte(tokens), positions + 1)

    def start_slot(self, batch: int) -> torch.Tensor:
        return self.start_vector().expand(batch, 1, -1)

    def slot_sources(self, order: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """Own positions [B, hi - lo] of slots lo..hi-1 in position-table rows: 0 for the start
        slot (slot 0), order[:, m - 1] + 1 for slot m (the token it holds)."""
        rows = order[:, max(lo, 1) - 1:hi - 1] + 1
        return torch.cat([rows.new_zeros(len(order), 1), rows], 1) if lo == 0 < hi else rows

    def conditioning(self, targets: torch.Tensor) -> dict:
        """Core keyword arguments that inject target positions [B, T] per `target_pe`."""
        mode = self.options["target_pe"]
        if mode == "adaln":
            return {"cond": self.tpe[0].weight, "cond_index": targets}  # projected once per position
        if mode == "layer_shared":
            return {"adds": [self.tpe[0](targets)] * self.shape.n_layer}
        if mode == "layer_distinct":
            return {"adds": [table(targets) for table in self.tpe]}
        return {}

    def modulation_tables(self) -> list[torch.Tensor] | None:
        """adaLN projections of every target position (fixed weights: compute once per decode),
        packed into one [6·L + 2, P, d] so that a decoding step gathers its rows in one op."""
        if self.options["target_pe"] != "adaln":
            return None
        return [torch.cat(self.core.modulation_tables(self.tpe[0].weight))]

    def hidden(self, x: torch.Tensor, targets: torch.Tensor, sources: torch.Tensor, **core_kwargs) -> torch.Tensor:
        """Run the core on slot embeddings x [B, T, d] conditioned on targets [B, T]; `sources`
        [B, T] are the slots' own positions (`slot_sources`), which RoPE rotates keys by."""
        if self.options["target_pe"] == "input":
            x = x + self.tpe[0](targets)
        if self.rope:
            core_kwargs["positions"] = (targets + 1, sources)  # queries: target, keys: own position
        return self.core(x, **self.conditioning(targets), **core_kwargs)

    # ---- objective -----------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, V] in slot order: slot j predicts tokens[b, order[b, j]]."""
        self.check_tokens(tokens)
        ordered = tokens.gather(1, order)  # [B, L] tokens in decoding order
        x = torch.cat([self.start_slot(tokens.shape[0]), self.slot_inputs(ordered[:, :-1], order[:, :-1])], 1)
        sources = self.slot_sources(order, 0, tokens.shape[1])
        return self.logits_from_hidden(self.hidden(x, order, sources, is_causal=True))

    def nll(self, tokens: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        """Per-slot NLL [B, L]: entry j is -log p(x_{σj} | x_{σ<j}) under the given order."""
        logits = self(tokens, order)
        target = tokens.gather(1, order)
        return F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view_as(tokens)

    def loss(self, tokens, generator=None):
        order = sample_orders(self.order, tokens.shape[0], tokens.shape[1], generator, tokens.device)
        return self.nll(tokens, order).mean()


class SigmaGPT(AOGPT):
    family = "sigma_gpt"
    OPTIONS = {
        **AOGPT.OPTIONS,
        "order": ("uniform", AOGPT.OPTIONS["order"][1]),
        "target_pe": ("input", AOGPT.OPTIONS["target_pe"][1]),
    }
