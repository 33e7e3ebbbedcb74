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
`sigma_gpt` (sigma_gpt.py) is this family with σ-GPT's defaults. Span scoring uses the order
[prefix, suffix, span left to right]; sampling decodes k positions per step along a random order
with a KV cache (models.sampling.generate_aogpt).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import sampling as sm
from ..orders import parse_order, sample_orders
from .base import COMMON_OPTIONS, FamilyModel, FamilySpec, choice, positive_int

TARGET_PE = ("adaln", "input", "layer_shared", "layer_distinct")
PAPER_L2R_MIX = "mix:0.1"  # AO-GPT's "CL_0.1": 10 % of sequences left-to-right (scxue/AO-GPT-MDM)


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
        "order": (PAPER_L2R_MIX, (_valid_order, "l2r, r2l, uniform, mix:P, fixed:SEED or blockwise:B")),
        "target_pe": ("adaln", choice(*TARGET_PE)),
        "cond_dim": (128, positive_int()),  # AO-GPT's target-embedding width for AdaLN
    }
    GROUP_PREFIXES = {"target_cond": ("tpe",)}
    COND_ROWS = "position"  # adaLN: every target position's row projected once per forward pass
    SPEC = FamilySpec(metrics=("l2r", "perm_mc", "ctx_ensemble"), infill_context="prefix_suffix",
                      default_arm={"target_pe": "adaln", "order": PAPER_L2R_MIX})

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


    # ---- capabilities --------------------------------------------------------------------
    def span_logits(self, tokens: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Logits [B, b-a, V] for x_a..x_{b-1} under the order [prefix, suffix, span]."""
        B, L = tokens.shape
        return self(tokens, infill_order(L, a, b, B, tokens.device))[:, L - (b - a):]

    def sample(self, request: sm.Request, generator=None) -> sm.Generation:
        """Any-order decoding with a KV cache along a uniform order, `steps` (at most the length)
        steps of the request's schedule (`aogpt_kv_<schedule>`)."""
        out = sm.generate_aogpt(self, request.n_samples, request.length, min(request.steps, request.length),
                                request.schedule, request.sampling, generator)
        out.method = f"aogpt_kv_{request.schedule}"
        return out

    @torch.no_grad()
    def decode_order_nll(self, n_samples: int, length: int, tokens_per_step: int, sampling: sm.Sampling,
                         generator=None) -> tuple[torch.Tensor, int]:
        """(joint NLL per sample [N], steps run) of samples decoded `tokens_per_step` tokens per
        step (linear schedule), scored by this model along their decode order: the cost of the
        factorised parallel step against one token per step (exact ancestral sampling)."""
        out = sm.generate_aogpt(self, n_samples, length, math.ceil(length / tokens_per_step), "linear",
                                sampling, generator)
        return self.nll(out.tokens, out.order).mean(1), len(out.counts)


def infill_order(length: int, a: int, b: int, batch: int, device=None) -> torch.Tensor:
    """The order [prefix, suffix, span left to right] as a LongTensor [batch, length]."""
    order = torch.cat([torch.arange(a), torch.arange(b, length), torch.arange(a, b)])
    return order.to(device).expand(batch, length).clone()
