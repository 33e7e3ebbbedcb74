"""Run rules: how many tokens, how big a batch and which learning rate each rung trains with.

Size rules (shapes, analytic parameter counts, FLOPs) live in `models.ladder`; this module turns
a shape plus a budget into the numbers of one `RunSpec`. Nothing here imports torch, so planning
a study of thousands of runs stays fast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from models.ladder import core_params, get_shape

CHINCHILLA_TOKENS_PER_PARAM = 20.0  # Hoffmann et al. 2022: compute-optimal D ≈ 20 N
GPT3_WARMUP_TOKENS = 375_000_000  # Brown et al. 2020, App. B: linear warm-up over 375M tokens
WARMUP_MAX_FRACTION = 0.1  # short runs would otherwise spend most of their budget warming up
HALF_MILLION_TOKENS = 2**19  # GPT-3 Table 2.1's "0.5M" batch, in tokens (524,288)

# GPT-3 Table 2.1 (Brown et al. 2020): batch size in tokens and peak learning rate per rung.
GPT3_RULES: dict[str, tuple[int, float]] = {
    "125M": (HALF_MILLION_TOKENS, 6e-4),
    "350M": (HALF_MILLION_TOKENS, 3e-4),
    "760M": (HALF_MILLION_TOKENS, 2.5e-4),
    "1.3B": (2 * HALF_MILLION_TOKENS, 2e-4),
    "2.7B": (2 * HALF_MILLION_TOKENS, 1.6e-4),
    "6.7B": (4 * HALF_MILLION_TOKENS, 1.2e-4),
    "13B": (4 * HALF_MILLION_TOKENS, 1e-4),
}

# CPU rungs (width < 768): 16 sequences of 128 tokens per step, nanoGPT's shakespeare-char
# scale (batch 64 x 256 on a GPU) cut down so one step of a 1M model takes ~0.1 s on one core.
CPU_BATCH_TOKENS = 16 * 128
# Peak LR of GPT-3 125M (6e-4 at width 768) scaled as 1/width (muP's hidden-layer rule) ...
LR_REFERENCE = (6e-4, 768)
# ... and capped where tiny models start to diverge with AdamW (nanoGPT's char model: 1e-3 at 384).
LR_CAP = 3e-3
# Custom shapes of at least this many core parameters use the 0.5M-token GPU batch.
GPU_BATCH_MIN_PARAMS = 50_000_000


@dataclass(frozen=True)
class Rule:
    """The run rule of one rung: tokens per optimizer step and peak learning rate."""

    batch_tokens: int
    lr: float
    source: str


@dataclass(frozen=True)
class Budget:
    """The numbers a study gives every run before the rung's rule is applied."""

    seq_len: int
    tokens: int | None = None  # fixed tokens per run; None = tokens_per_param x params
    tokens_per_param: float = CHINCHILLA_TOKENS_PER_PARAM
    max_tokens: int | None = None  # cap on tokens per run (the quickstart keeps runs short)
    max_steps: int | None = None  # cap on optimizer steps (smoke tests)
    batch_size: int | None = None  # sequences per step; overrides the rule
    lr: float | None = None  # overrides the rule
    warmup_steps: int | None = None  # overrides the warm-up rule
    warmup_tokens: int = GPT3_WARMUP_TOKENS


@dataclass(frozen=True)
class Schedule:
    """What one run trains for: the fields of a `RunSpec` that the budget decides."""

    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    params: int  # non-embedding core parameters of the shape (the fits' convention)
    tokens: int  # steps x batch_size x seq_len


def rule_for(size: str) -> Rule:
    """The rung's rule: GPT-3's table for its rungs, the width rule for CPU and custom shapes."""
    if size in GPT3_RULES:
        batch_tokens, lr = GPT3_RULES[size]
        return Rule(batch_tokens, lr, "GPT-3 Table 2.1")
    shape = get_shape(size)
    ref_lr, ref_width = LR_REFERENCE
    lr = min(LR_CAP, ref_lr * ref_width / shape.d_model)
    big = core_params(shape) >= GPU_BATCH_MIN_PARAMS
    return Rule(HALF_MILLION_TOKENS if big else CPU_BATCH_TOKENS, lr, "width rule")


def target_tokens(params: int, budget: Budget) -> int:
    """Tokens for one run: the fixed budget or tokens_per_param x params, then the cap."""
    tokens = budget.tokens if budget.tokens is not None else budget.tokens_per_param * params
    if budget.max_tokens is not None:
        tokens = min(tokens, budget.max_tokens)
    return max(1, int(round(tokens)))


def warmup_for(steps: int, batch_tokens: int, budget: Budget) -> int:
    """GPT-3's 375M warm-up tokens in steps, at most 10 % of the run, at least one step."""
    if budget.warmup_steps is not None:
        return min(budget.warmup_steps, steps)
    rule_steps = math.ceil(budget.warmup_tokens / batch_tokens)
    return max(1, min(rule_steps, int(WARMUP_MAX_FRACTION * steps)))


def schedule(size: str, budget: Budget) -> Schedule:
    """Apply the rung's rule and the study's budget: steps, batch, LR and warm-up of one run."""
    rule = rule_for(size)
    params = core_params(get_shape(size))
    batch_size = budget.batch_size or max(1, rule.batch_tokens // budget.seq_len)
    step_tokens = batch_size * budget.seq_len
    steps = max(1, math.ceil(target_tokens(params, budget) / step_tokens))
    if budget.max_steps is not None:
        steps = min(steps, budget.max_steps)
    lr = budget.lr if budget.lr is not None else rule.lr
    warmup = warmup_for(steps, step_tokens, budget)
    return Schedule(steps, batch_size, lr, warmup, params, steps * step_tokens)
