"""What all families share: option validation, token embeddings, the head, parameter groups, and
the form of a family's declaration.

A family is one module: its model class (a `FamilyModel` subclass) declares its options
(`OPTIONS`: name -> (default, validator)), builds its embeddings and conditioning, implements
`loss(tokens, generator)` and the capability methods (`CAPABILITIES`: span scoring, sampling,
...), and carries a `FamilySpec` (`SPEC`) of plain values for everything else the rest of aoscale
reads: its likelihood metrics, its infilling context and its default arm. Nothing outside
`models/families` names a family. Parameter groups are declared by module name prefix so
`count_params` can account for every parameter exactly once.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..core import INITS, NORMS, POSITIONS, CoreConfig, Transformer, column_major, init_start, init_weights
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
    # no table, queries and keys rotated in every block (`Transformer.forward`'s `positions`; AO-GPT
    # passes target and own positions)
    "pos": ("learned", choice(*POSITIONS)),
    # gpt2: untruncated N(0, 0.02) and a zero start token (nanoGPT/GPT-2); official: the AO-GPT
    # code's normal truncated at ±3σ, the start token drawn like every embedding (models.core.INITS)
    "init": ("gpt2", choice(*INITS)),
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


# Likelihood metric groups a family may declare (`FamilySpec.metrics`); jobs.eval.evaluate computes each:
#   l2r           nll_l2r and bpb_l2r, exact (from `span_logits` over the whole sequence)
#   perm_mc       nll_anyorder over K uniform permutations (models.likelihood.anyorder_draws)
#   ctx_ensemble  nll_ensemble, context-order ensembling (models.likelihood.ensemble_logprobs)
#   elbo          nll_elbo_* bounds and nll_anyorder = the default bound (models.likelihood.mdm_elbo_draws)
METRIC_GROUPS = ("l2r", "perm_mc", "ctx_ensemble", "elbo")
# What an infilling prediction conditions on (the `estimator` of infill rows).
INFILL_CONTEXTS = ("prefix_only", "prefix_suffix")
# Capability methods a family's model class may implement; None on FamilyModel means "not provided".
#   span_logits(tokens, a, b)       logits [B, b-a, V] predicting x_a..x_{b-1} left to right from
#                                   everything outside the span plus the span's prefix (l2r, LAMBADA, infilling)
#   sample(request, generator)      a `models.sampling.Generation` for a `models.sampling.Request`,
#                                   its `method` label set (generation)
#   decode_order_nll(n_samples, length, tokens_per_step, sampling, generator)
#                                   (per-sample NLL [N] of samples decoded k tokens per step, scored
#                                   along their decode order; steps run): generation's gen_self_nll
CAPABILITIES = ("span_logits", "sample", "decode_order_nll")


@dataclass(frozen=True)
class FamilySpec:
    """A family's declaration of plain values, read by evaluation, generation and study planning.

    `metrics`: the likelihood metric groups evaluation reports for it (METRIC_GROUPS), in row
    order. `infill_context`: what its infilling conditions on (INFILL_CONTEXTS). `default_arm`:
    the formulation options of its default variant in a study (its label derives from them,
    `scaling.study.arms.make_label`). `steps_are_length`: its sampler makes one step per token, so the
    step counts asked of generation do not apply (it runs `length` steps once).
    """

    metrics: tuple[str, ...]
    infill_context: str
    default_arm: tuple[tuple[str, Any], ...] = ()
    steps_are_length: bool = False

    def __post_init__(self) -> None:
        unknown = [m for m in self.metrics if m not in METRIC_GROUPS]
        if unknown or not self.metrics:
            raise ValueError(f"metrics: {unknown or 'none'} declared; each must be one of {list(METRIC_GROUPS)}")
        if self.infill_context not in INFILL_CONTEXTS:
            raise ValueError(f"infill_context: {self.infill_context!r} must be one of {list(INFILL_CONTEXTS)}")
        object.__setattr__(self, "default_arm", tuple(sorted(dict(self.default_arm).items())))


def capabilities(family: type[FamilyModel]) -> tuple[str, ...]:
    """The capability methods (CAPABILITIES) a family's model class provides."""
    return tuple(name for name in CAPABILITIES if getattr(family, name, None) is not None)


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


# Conditioning rows projected per token, by a family's COND_ROWS, for context length T and b
# sequences per forward pass (FamilyModel.flops_per_token).
COND_ROW_SHARE: dict[str, Callable[[int, int], float]] = {
    "token": lambda seq_len, passes: 1.0,
    "sequence": lambda seq_len, passes: 1.0 / seq_len,
    "position": lambda seq_len, passes: seq_len / (passes * seq_len),
}


def _positive_pass(sequences_per_pass: int) -> int:
    if isinstance(sequences_per_pass, bool) or not isinstance(sequences_per_pass, int) or sequences_per_pass < 1:
        raise ValueError(f"sequences_per_pass: must be a positive integer, got {sequences_per_pass!r}")
    return sequences_per_pass


class FamilyModel(nn.Module):
    """Base of every family: one core, a token table, positions (a learned table, or RoPE in the
    core) and a head."""

    family = "base"
    OPTIONS: dict[str, tuple[Any, tuple[Validator, str]]] = {}
    SPEC: FamilySpec  # the family's declaration (metrics, infilling context, default arm)
    span_logits = sample = decode_order_nll = None  # capability methods a family may provide (CAPABILITIES)
    GROUP_PREFIXES: dict[str, tuple[str, ...]] = {}
    n_extra_tokens = 0  # rows of the token table beyond the vocabulary (e.g. the MDM mask)
    MODULATION_GROUP = "target_cond"  # which group the core's adaLN projections belong to
    # which conditioning rows (adaLN inputs) a forward pass projects (`COND_ROW_SHARE`): "token" (one
    # per token), "sequence" (one per sequence) or "position" (one per position of the context, a
    # table projected once per pass and gathered); `flops_per_token` charges the projections per row
    COND_ROWS = "token"

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
            init_weights(self, self.shape.n_layer, self.options["init"])
            if isinstance(getattr(self, "start", None), nn.Parameter):
                init_start(self.start, self.options["init"])

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

    def flops_per_token(self, sequences_per_pass: int = 1) -> float:
        """Training FLOPs per token as executed (forward + backward = 3 x forward, Kaplan et al.
        2020's count): 6 x the weights of every matmul (the core, a tied or untied head, and the
        family's own projections) + 6·L·n_ctx·d for attention scores and mixing (the causal half of
        the dense products). Embedding lookups, gathers, adds, norms and biases are free.

        Conditioning projections (the adaLN `modulation` Linears, the time MLP) are charged per row
        the code projects (`COND_ROWS`, docs/DESIGN.md §4.5): "token", one per token; "sequence",
        one per sequence (MDM's noise level: 1 / seq_len of a row per token); "position", AO-GPT's
        target positions: the table of all seq_len positions is projected once per forward pass
        and gathered, so a pass of `sequences_per_pass` (b) sequences of seq_len tokens pays
        seq_len / (b·seq_len) = 1 / b of a row per token. The default b = 1 is the most a pass can
        cost (every token its own row); a run passes its own (`RunSpec.micro_batch`).
        """
        _positive_pass(sequences_per_pass)
        main = cond = 0
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                is_cond = "modulation" in name or name.startswith("time_")
                cond += m.weight.numel() if is_cond else 0
                main += 0 if is_cond else m.weight.numel()
        if self.head is None:
            main += self.shape.d_model * self.vocab_size  # tied head still multiplies
        attention = self.shape.n_layer * self.seq_len * self.shape.d_model
        return 6.0 * (main + attention) + 6.0 * cond * COND_ROW_SHARE[self.COND_ROWS](self.seq_len, sequences_per_pass)

    def loss(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The family's training objective, mean nats per token."""
        raise NotImplementedError
