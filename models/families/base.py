"""What all families share: option validation, token embeddings, the head, parameter groups.

A family subclass declares its options (`OPTIONS`: name -> (default, validator)), builds its
embeddings and conditioning, and implements `loss(tokens, generator)`. Parameter groups are
declared by module name prefix so `count_params` can account for every parameter exactly once.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..core import NORMS, POSITIONS, CoreConfig, Transformer, column_major, init_weights
from ..ladder import Shape

Validator = Callable[[Any], bool]


def choice(*values: Any) -> tuple[Validator, str]:
    return (lambda v: v in values), f"one of {list(values)}"


def boolean() -> tuple[Validator, str]:
    return (lambda v: isinstance(v, bool)), "true or false"


def positive_int() -> tuple[Validator, str]:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0), "a positive integer"


# Options every family accepts; the defaults are GPT-2's, so families differ only in formulation.
COMMON_OPTIONS: dict[str, tuple[Any, tuple[Validator, str]]] = {
    "norm": ("layernorm", choice(*NORMS)),
    "qk_norm": (False, boolean()),
    "tie_head": (True, boolean()),
    # learned: an absolute position table added to the inputs (GPT-2, the AO-GPT paper); rope:
    # no table, queries and keys rotated in every block (`FamilyModel.rope_positions` says by what)
    "pos": ("learned", choice(*POSITIONS)),
}

GROUPS = ("embedding", "core", "target_cond", "time_cond", "head")
_SKIP_INIT = False  # set by `shapes_only()`


_INITS = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "zeros_", "ones_")


@contextmanager
def shapes_only():
    """Build models without initialising their weights, to count parameters on the `meta` device
    (torch's first random init on `meta` alone takes ~6 s; the shapes take milliseconds). Swaps
    torch.nn.init's fillers for no-ops while it lasts: not for use beside real model building."""
    global _SKIP_INIT
    saved = {name: getattr(nn.init, name) for name in _INITS}
    previous, _SKIP_INIT = _SKIP_INIT, True
    for name in _INITS:
        setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        _SKIP_INIT = previous
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def resolve_options(family: str, schema: dict, given: dict) -> dict[str, Any]:
    """Defaults overlaid with `given`; unknown names and invalid values are ValueErrors."""
    unknown = sorted(set(given) - set(schema))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown option for family {family!r}; valid options: {sorted(schema)}")
    options = {name: default for name, (default, _) in schema.items()}
    for name, value in given.items():
        check, expected = schema[name][1]
        if not check(value):
            raise ValueError(f"{name}: invalid value {value!r} for family {family!r}; expected {expected}")
        options[name] = value
    return options


class FamilyModel(nn.Module):
    """Base of every family: one core, a token table, positions (a learned table, or RoPE in the
    core) and a head."""

    family = "base"
    OPTIONS: dict[str, tuple[Any, tuple[Validator, str]]] = {}
    GROUP_PREFIXES: dict[str, tuple[str, ...]] = {}
    n_extra_tokens = 0  # rows of the token table beyond the vocabulary (e.g. the MDM mask)
    MODULATION_GROUP = "target_cond"  # which group the core's adaLN projections belong to

    def __init__(self, shape: Shape, vocab_size: int, seq_len: int, options: dict, cond_dim: int = 0):
        super().__init__()
        self.shape, self.vocab_size, self.seq_len, self.options = shape, vocab_size, seq_len, options
        self.rope = options["pos"] == "rope"
        cfg = CoreConfig(shape.n_layer, shape.d_model, shape.n_head, options["norm"], options["qk_norm"],
                         cond_dim=cond_dim, pos="rope" if self.rope else "learned")
        self.core = Transformer(cfg)
        self.wte = nn.Embedding(vocab_size + self.n_extra_tokens, shape.d_model)
        # slot 0 is the start slot's position; with RoPE the core turns queries and keys instead
        self.wpe = None if self.rope else nn.Embedding(seq_len + 1, shape.d_model)
        self.head = None if options["tie_head"] else nn.Linear(shape.d_model, vocab_size, bias=True)
        self._decode_head: tuple[torch.Tensor, torch.Tensor | None] | None = None  # see decoding

    def _init(self) -> None:
        if not _SKIP_INIT:
            init_weights(self, self.shape.n_layer)

    # ---- shared pieces -------------------------------------------------------------------
    def with_position(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Input embeddings x plus the learned embeddings of `positions` (table rows: 0 is the
        start slot's, token i's is i + 1); x itself with RoPE (positions enter the core)."""
        return x if self.wpe is None else x + self.wpe(positions)

    def start_vector(self) -> torch.Tensor:
        """The start slot's input [d]: the learned start token at position 0."""
        return self.start if self.wpe is None else self.start + self.wpe.weight[0]

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        """[B, T, d] -> [B, T, V]; never scores rows beyond the vocabulary (e.g. the mask)."""
        if self._decode_head is not None:
            return F.linear(h, *self._decode_head)
        if self.head is not None:
            return self.head(h)
        return F.linear(h, self.wte.weight[: self.vocab_size])

    @contextmanager
    def decoding(self):
        """Within the `with` block, KV-cached decoding steps: the core's (`Transformer.decoding`),
        and on the CPU the head read from a column-major copy of its weight (same values; a tied
        head cannot change layout: embedding lookups gather its rows). At V = 50257 the head's
        8-row product takes 1.9 instead of 5.3 ms at d = 192."""
        head = self.head
        weight = self.wte.weight[: self.vocab_size] if head is None else head.weight
        with self.core.decoding():
            if weight.device.type == "cpu":
                with torch.no_grad():
                    self._decode_head = (column_major(weight), None if head is None else head.bias)
            try:
                yield
            finally:
                self._decode_head = None

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Validate a [B, L] LongTensor against the vocabulary and the context length."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens: expected a LongTensor [B, L], got {tuple(tokens.shape)} {tokens.dtype}")
        if tokens.shape[1] > self.seq_len:
            raise ValueError(f"seq_len: sequence of {tokens.shape[1]} exceeds the model's maximum {self.seq_len}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"tokens: ids must lie in [0, {self.vocab_size}) (vocab_size)")

    # ---- accounting ----------------------------------------------------------------------
    def count_params(self) -> dict[str, int]:
        """Parameters per group (embedding, core, target_cond, time_cond, head); they sum to total.

        `non_embedding` = total - embedding; `family_non_embedding` is the same count (the
        family's own), kept beside `core`, the shape's block stack shared by all families.
        """
        counts = dict.fromkeys(GROUPS, 0)
        prefixes = {"embedding": ("wte", "wpe", "start"), "core": ("core",), "head": ("head",),
                    **self.GROUP_PREFIXES}
        for name, p in self.named_parameters():
            if "modulation" in name:
                group = self.MODULATION_GROUP
            else:
                group = next(g for g, pre in prefixes.items() if name.split(".")[0] in pre)
            counts[group] += p.numel()
        counts["total"] = sum(p.numel() for p in self.parameters())
        counts["non_embedding"] = counts["total"] - counts["embedding"]
        counts["family_non_embedding"] = counts["non_embedding"]
        return counts

    def flops_per_token(self) -> int:
        """Training FLOPs per token: 6 x (matmul weights incl. the head) + 6·L·n_ctx·d attention.

        Conditioning projections (adaLN `modulation`, the time MLP) run once per position-table
        row or per sequence, not per token, so they are left out (O(seq_len) per sequence).
        """
        matmul = sum(m.weight.numel() for name, m in self.named_modules()
                     if isinstance(m, nn.Linear) and "modulation" not in name and not name.startswith("time_"))
        if self.head is None:
            matmul += self.shape.d_model * self.vocab_size  # tied head still multiplies
        attention = self.shape.n_layer * self.seq_len * self.shape.d_model
        return 6 * (matmul + attention)

    def loss(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The family's training objective, mean nats per token."""
        raise NotImplementedError
