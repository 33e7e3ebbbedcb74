"""Samplers: AR and AO-GPT with a KV cache (AO-GPT decodes k positions per step in parallel),
and MDM ancestral / SEDD analytic / Euler samplers.

Categorical draws invert the fp64 cumulative sum of the probabilities with one uniform per row
(exact like `torch.multinomial` in fp64, and cheaper): Gumbel-argmax in fp32 (SEDD/MDLM/RADD)
lowers the effective temperature (Zheng et al. 2024, arXiv 2409.02908).

AO-GPT parallel step (official AO-GPT code, docs/DESIGN.md §6.3): with j tokens decoded along order σ and
slots 0..c-1 in the cache, the forward holds
  catch-up slots m = c..j-1  input x_{σ(m-1)} at its position, target σ_m, causal, real;
  k query slots              input x_{σ(j-1)} (the start slot when j = 0), targets σ_j..σ_{j+k-1};
                             each sees the cache, the catch-up slots and itself only.
The first query is the real slot j, so `commit(j - c + 1)` keeps the catch-up slots and it.
`decode_mask` gives the same pattern for a full recomputation (c = 0), which the tests compare.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from collections.abc import Callable

import torch

from .core import KVCache
from .likelihood import mdm_level

# linear/cosine round the masked count; linear-trunc/cosine-trunc are the official AO-GPT
# generator's rule (float32, int() truncation of the generated count); docs/recipe-fidelity.md
SCHEDULES = ("linear", "cosine", "linear-trunc", "cosine-trunc", "bernoulli")
MDM_SAMPLERS = ("ancestral", "analytic", "euler")


# ---- categorical draws -------------------------------------------------------------------------
def sample_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw ids from logits [..., V] in fp64 with temperature and nucleus (top-p) truncation.

    temperature 0 is greedy (argmax). The draw uses unnormalised weights exp((l - max l) / τ)
    (normalising is one more pass over [..., V]: 1 ms per step at V = 50257, batch 8).
    """
    if temperature == 0:
        return logits.argmax(-1)
    scaled = logits.to(torch.float64, copy=True)
    scaled.sub_(scaled.amax(-1, keepdim=True))
    if temperature != 1.0:
        scaled.div_(temperature)
    weights = scaled.exp_()  # fp64, the largest is 1
    if top_p < 1.0:
        weights = _nucleus(weights / weights.sum(-1, keepdim=True), top_p)
    return draw_categorical(weights, generator)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every probability outside the smallest most-likely prefix reaching `top_p`."""
    sorted_p, index = probs.sort(dim=-1, descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < top_p
    return torch.zeros_like(probs).scatter(-1, index, sorted_p * keep)


def draw_categorical(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One id per row of non-negative fp64 weights [..., V] (any positive total) by inverting
    the cumulative sum.

    Exact like `torch.multinomial` in fp64 (id i is drawn iff cdf_{i-1} <= u < cdf_i for one
    uniform u in [0, total), so zero-weight ids never are), and it needs one uniform per row
    where `torch.multinomial` draws V exponentials. NaN or infinite weights are a ValueError.
    """
    flat = weights.reshape(-1, weights.shape[-1])
    cdf = flat.cumsum(-1)
    total = cdf[:, -1:]
    if not bool(((total > 0) & total.isfinite()).all()):  # NaN fails both comparisons
        raise ValueError("logits: a row has NaN, infinite or all-zero probabilities; check the model's outputs")
    u = torch.rand(flat.shape[0], 1, dtype=cdf.dtype, device=cdf.device, generator=generator).mul_(total)
    u = torch.minimum(u, total.nextafter(torch.zeros_like(total)))  # u < total after rounding too
    return torch.searchsorted(cdf, u, right=True).view(weights.shape[:-1])


@dataclass(frozen=True)
class Sampling:
    """Temperature and nucleus settings shared by every sampler."""

    temperature: float = 1.0
    top_p: float = 1.0

    def draw(self, logits: torch.Tensor, generator=None) -> torch.Tensor:
        return sample_logits(logits, self.temperature, self.top_p, generator)


@dataclass(frozen=True)
class Request:
    """One generation asked of a family's `sample`: n samples of `length` tokens in `steps` steps,
    with the decoders' `schedule`, the MDMs' `sampler` (None: the family's default) and the
    temperature/nucleus settings."""

    n_samples: int
    length: int
    steps: int
    schedule: str = "linear"
    sampler: str | None = None
    sampling: Sampling = field(default_factory=Sampling)


@dataclass
class Generation:
    """Samples [B, L], the order used (decoders), tokens decoded per step and network calls;
    `method` names the sampler (set by the family's `sample`: the records' `estimator`)."""

    tokens: torch.Tensor
    order: torch.Tensor | None = None
    counts: list[int] = field(default_factory=list)
    n_forward: int = 0  # batched network calls
    n_rows: int = 0  # sequences passed through the network, summed over calls
    steps: int = 0  # sampling steps actually run (a decoder's T is capped at the length)
    step_logits: list[torch.Tensor] = field(default_factory=list)  # filled when recording
    method: str = ""


# ---- step schedules ----------------------------------------------------------------------------
def _masked_linear(s: float) -> float:
    return 1.0 - s


def _masked_cosine(s: float) -> float:
    return math.cos(math.pi / 2 * s)  # MaskGIT / AO-GPT cosine schedule


MASKED_FRACTION: dict[str, Callable[[float], float]] = {"linear": _masked_linear, "cosine": _masked_cosine}


def _deterministic_counts(kind: str, length: int, steps: int) -> list[int]:
    """Tokens per step from the masked fraction at i/steps (at least one per step until done)."""
    frac = MASKED_FRACTION[kind]
    masked = [round(length * frac(i / steps)) for i in range(steps + 1)]
    counts, left = [], length
    for i in range(steps):
        k = min(left, max(1, masked[i] - masked[i + 1]))
        counts.append(k)
        left -= k
    counts[-1] += left
    return counts


def official_counts(kind: str, length: int, steps: int) -> list[int]:
    """The official AO-GPT generator's tokens per step (scxue/AO-GPT-MDM `generate`): with
    m = schedule(linspace(1, 0, steps + 1)) in float32 (linear: m = t; cosine: cos((1 - t)·π/2)),
    n_i = max(int(L·(1 - m_i)), n_{i-1} + 1) tokens are generated after step i, truncated toward
    zero; aoscale's `linear`/`cosine` round the masked count instead. Capped at L; the last step
    takes what is left."""
    t = torch.linspace(1, 0, steps + 1, dtype=torch.float32)
    masked = t if kind == "linear" else torch.cos((1 - t) * math.pi * 0.5)
    counts, done = [], 0
    for i in range(1, steps + 1):
        k = min(length - done, max(int(length * (1 - masked[i])) - done, 1))
        counts.append(k)
        done += k
    counts[-1] += length - done
    return counts


def bernoulli_counts(length: int, steps: int, generator=None) -> list[int]:
    """Paper Lemma 5.1 with α_t = 1 - t on t_i = 1 - i/steps: k_i ~ Binomial(#masked, p_i),
    p_i = (α_{t_{i+1}} - α_{t_i}) / (1 - α_{t_i}) = 1 / (steps - i); the last step reveals the rest."""
    counts, left = [], length
    device = "cpu" if generator is None else generator.device  # a generator draws on its own device
    for i in range(steps):
        p = torch.tensor(1.0 / (steps - i), dtype=torch.float64, device=device)
        k = int(torch.binomial(torch.tensor(float(left), dtype=torch.float64, device=device), p, generator=generator))
        counts.append(k)
        left -= k
    return counts


def step_counts(schedule: str, length: int, steps: int, generator=None) -> list[int]:
    """Tokens decoded at each of `steps` steps (they sum to `length`; Bernoulli steps may be 0)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: unknown schedule {schedule!r}; valid: {list(SCHEDULES)}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: must be a positive integer, got {steps!r}")
    if schedule == "bernoulli":
        return bernoulli_counts(length, steps, generator)
    if schedule.endswith("-trunc"):
        return official_counts(schedule.removesuffix("-trunc"), length, steps)
    return _deterministic_counts(schedule, length, steps)


# ---- AR ----------------------------------------------------------------------------------------
def causal_mask(n_new: int, n_cached: int, device=None) -> torch.Tensor | None:
    """Boolean [n_new, n_cached + n_new]: new row r sees the cache and new rows <= r."""
    if n_new == 1:
        return None  # one new slot sees everything: SDPA's unmasked path
    cols = torch.arange(n_cached + n_new, device=device)
    return cols[None] <= n_cached + torch.arange(n_new, device=device)[:, None]


@torch.inference_mode()
def generate_ar(model, batch: int, length: int, sampling: Sampling = Sampling(), generator=None,
                record: bool = False) -> Generation:
    """Left-to-right sampling with a KV cache: one new slot per step."""
    _check_length(model, length)
    cache = KVCache(model.shape.n_layer)
    x = model.start_slot(batch)
    out = Generation(torch.empty(batch, length, dtype=torch.long, device=x.device), counts=[1] * length,
                     steps=length)
    with model.decoding():
        for i in range(length):
            h = model.core(x, attn_mask=causal_mask(x.shape[1], cache.length, x.device), cache=cache)
            cache.commit(x.shape[1])
            logits = model.logits_from_hidden(h[:, -1:])[:, 0]
            out.tokens[:, i] = sampling.draw(logits, generator)
            out.n_forward += 1
            if record:
                out.step_logits.append(logits)
            x = model.embed(out.tokens[:, i:i + 1], offset=i)
    return out


def _check_length(model, length: int) -> None:
    if not isinstance(length, int) or not 1 <= length <= model.seq_len:
        raise ValueError(f"length: must be in [1, {model.seq_len}] (the model's context), got {length!r}")


# ---- AO-GPT ------------------------------------------------------------------------------------
def decode_mask(n_cached: int, n_real: int, n_query: int, device=None) -> torch.Tensor:
    """Boolean [n_real + n_query, n_cached + n_real + n_query]: real slots are causal over the
    cache and each other; a query sees the cache, every real slot and itself only."""
    cols = torch.arange(n_cached + n_real, device=device)
    real = cols[None] <= n_cached + torch.arange(n_real, device=device)[:, None]
    real = torch.cat([real, real.new_zeros(n_real, n_query)], 1)
    context = torch.ones(n_query, n_cached + n_real, dtype=torch.bool, device=device)
    query = torch.cat([context, torch.eye(n_query, dtype=torch.bool, device=device)], 1)
    return torch.cat([real, query], 0)


def _slot_inputs(model, tokens, order, lo: int, hi: int) -> torch.Tensor:
    """Inputs of real slots lo..hi-1: slot 0 is the start slot, slot m holds x_{σ(m-1)}."""
    parts = [model.start_slot(tokens.shape[0])] if lo == 0 and hi > 0 else []
    first = max(lo, 1)
    if hi > first:
        prev = order[:, first - 1:hi - 1]
        parts.append(model.slot_inputs(tokens.gather(1, prev), prev))
    return torch.cat(parts, 1) if parts else None


def _query_inputs(model, tokens, order, j: int, k: int) -> torch.Tensor:
    """k copies of slot j's input (x_{σ(j-1)}, or the start slot when j = 0)."""
    return _slot_inputs(model, tokens, order, j, j + 1).expand(-1, k, -1)


def aogpt_step_logits(model, tokens, order, j: int, k: int, cache: KVCache | None = None,
                      tables: list[torch.Tensor] | None = None) -> torch.Tensor:
    """Logits [B, k] x V for targets σ_j..σ_{j+k-1} given decoded σ_<j.

    With a cache holding slots 0..c-1 the forward runs the catch-up slots c..j-1 and the queries,
    then commits the catch-up slots and the first query; without one, all real slots 0..j-1 are
    recomputed under the same mask (the reference the KV-cache path must equal).
    """
    c = 0 if cache is None else cache.length
    real = _slot_inputs(model, tokens, order, c, j)
    queries = _query_inputs(model, tokens, order, j, k)
    x = queries if real is None else torch.cat([real, queries], 1)
    targets = order[:, c:j + k]
    own = model.slot_sources(order, c, j + 1)  # real slots c..j-1, then slot j's (every query's)
    sources = torch.cat([own[:, :-1], own[:, -1:].expand(-1, k)], 1)
    mask = decode_mask(c, j - c, k, tokens.device) if j - c + k > 1 else None  # one query sees all
    h = model.hidden(x, targets, sources, attn_mask=mask, cache=cache, tables=tables)
    if cache is not None:
        cache.commit(j - c + 1)
    return model.logits_from_hidden(h[:, j - c:])


@torch.inference_mode()
def generate_aogpt(model, batch: int, length: int, steps: int | None = None, schedule: str = "linear",
                   sampling: Sampling = Sampling(), generator=None, order: torch.Tensor | None = None,
                   use_cache: bool = True, record: bool = False) -> Generation:
    """Any-order sampling along a uniform random (or given) order, k positions per step.

    `steps` defaults to `length` (one token per step); the schedule fixes k per step.
    """
    _check_length(model, length)
    dev = model.start.device
    if order is None:
        order = torch.rand(batch, length, generator=generator, device=dev).argsort(1)
    counts = step_counts(schedule, length, steps or length, generator)
    tokens = torch.zeros(batch, length, dtype=torch.long, device=dev)
    out = Generation(tokens, order, counts, steps=len(counts))
    cache = KVCache(model.shape.n_layer) if use_cache else None
    tables = model.modulation_tables()  # adaLN rows of every target position, once per decode
    starts = [0, *itertools.accumulate(counts)][:-1]  # tokens decoded before each step
    with model.decoding():
        for j, k in zip(starts, counts):
            if k == 0:
                continue
            logits = aogpt_step_logits(model, tokens, order, j, k, cache, tables)
            tokens.scatter_(1, order[:, j:j + k], sampling.draw(logits, generator))
            out.n_forward += 1
            if record:
                out.step_logits.append(logits)
    return out


# ---- MDM ---------------------------------------------------------------------------------------
class _Denoiser:
    """MDM logits for the current x_t. With `cache` (and no time conditioning, so the network sees
    x_t only) a row is recomputed only when a step needs its logits and it changed since its last
    forward; without, every row is recomputed at every call (plain MDLM ddpm)."""

    def __init__(self, model, x: torch.Tensor, cache: bool):
        self.model, self.x = model, x
        self.cache = cache and not model.options["time_cond"]
        self.logits: torch.Tensor | None = None
        self.stale = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        self.n_forward = self.n_rows = 0

    def __call__(self, frac: float, need: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, V] at masked fraction `frac`; rows outside `need` may be out of date."""
        todo = self.stale & need if self.cache else torch.ones_like(need)
        rows = todo.nonzero()[:, 0]
        if len(rows):
            level = mdm_level(self.model, torch.full((len(rows),), frac, device=self.x.device))
            fresh = self.model(self.x[rows], level)
            if self.logits is None:
                self.logits = fresh.new_empty(len(self.x), *fresh.shape[1:])
            self.logits[rows] = fresh
            self.n_forward += 1
            self.n_rows += len(rows)
        self.stale &= ~todo
        return self.logits

    def reveal(self, where: torch.Tensor, values: torch.Tensor) -> None:
        self.x[where] = values
        self.stale |= where.any(1)


def _alpha_linear(t: float) -> float:
    return 1.0 - t  # MDLM log-linear schedule: P(masked at t) = t


def _sigma_bar(model, t: float) -> float:
    return -math.log1p(-(1 - model.options["eps"]) * t)  # mdm.py: σ̄(t), P(masked) = (1-eps)t


def _score_mass(model, logits, t):
    """Σ_y s_y with SEDD's absorbing scores s_y = exp(logit_y) / (e^σ̄ - 1): [B, L] (fp64)."""
    return torch.logsumexp(logits.double(), -1).exp() / math.expm1(_sigma_bar(model, t))


def _analytic_reveal(model, logits, t, s):
    """SEDD analytic (Tweedie) step for the absorbing graph: p(y) = s_y (e^Δσ̄ - 1), p(mask) =
    (1 - α_s) / (1 - α_t) with α = e^-σ̄; reveal w.p. Σ_y p(y) / (Σ_y p(y) + p(mask))."""
    sb_t, sb_s = _sigma_bar(model, t), _sigma_bar(model, s)
    move = _score_mass(model, logits, t) * math.expm1(sb_t - sb_s)
    stay = (-math.expm1(-sb_s)) / (-math.expm1(-sb_t))
    return move / (move + stay)


def _euler_reveal(model, logits, t, s):
    """SEDD Euler step: reverse rate mask -> y is σ̄'(t) s_y, so p(y) = Δσ̄ s_y (clamped to 1)."""
    move = _score_mass(model, logits, t) * (_sigma_bar(model, t) - _sigma_bar(model, s))
    return move.clamp(max=1.0)


SEDD_REVEAL = {"analytic": _analytic_reveal, "euler": _euler_reveal}


def _time_grid(model, sampler: str, steps: int) -> list[float]:
    """t from 1 to 0 (ancestral) or to eps (SEDD samplers, followed by a denoising step)."""
    end = 0.0 if sampler == "ancestral" else model.options["eps"]
    return [1.0 - i * (1.0 - end) / steps for i in range(steps + 1)]


@torch.inference_mode()
def generate_mdm(model, batch: int, length: int, steps: int, sampler: str = "ancestral",
                 sampling: Sampling = Sampling(), generator=None, cache: bool = True) -> Generation:
    """Reverse the absorbing process from all-masked x_1 in `steps` steps.

    Each step reveals masked positions with the sampler's probability; a revealed token is drawn
    from the network's distribution over real tokens. The ancestral sampler (MDLM ddpm) decides
    reveals before calling the network, so rows revealing nothing cost nothing, and a row is
    recomputed only when it changed since its last forward (MDLM ddpm_cache). SEDD samplers end
    with one denoising pass for any position still masked at t = eps (SEDD's `denoise=True`).
    """
    _check_length(model, length)
    if sampler not in MDM_SAMPLERS:
        raise ValueError(f"sampler: unknown MDM sampler {sampler!r}; valid: {list(MDM_SAMPLERS)}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: must be a positive integer, got {steps!r}")
    x = torch.full((batch, length), model.mask_id, dtype=torch.long, device=model.wte.weight.device)
    den = _Denoiser(model, x, cache)
    grid = _time_grid(model, sampler, steps)
    step = _ancestral_step if sampler == "ancestral" else _sedd_step
    counts = [step(model, den, sampler, t, s, sampling, generator) for t, s in zip(grid[:-1], grid[1:])]
    masked = x == model.mask_id
    if masked.any():
        frac = (1 - model.options["eps"]) * grid[-1]
        counts.append(_reveal(den, masked, den(frac, masked.any(1)), sampling, generator))
    return Generation(x, counts=counts, n_forward=den.n_forward, n_rows=den.n_rows, steps=steps)


def _coin(shape, p, generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float64) < p


def _ancestral_step(model, den, sampler, t, s, sampling, generator) -> int:
    """MDLM ddpm: each masked token is revealed w.p. (α_s - α_t) / (1 - α_t), network-free."""
    masked = den.x == model.mask_id
    p = (_alpha_linear(s) - _alpha_linear(t)) / (1 - _alpha_linear(t))
    where = masked & _coin(masked.shape, p, generator, masked.device)
    need = where.any(1)
    logits = den(t, need) if need.any() or not den.cache else None
    return _reveal(den, where, logits, sampling, generator)


def _sedd_step(model, den, sampler, t, s, sampling, generator) -> int:
    masked = den.x == model.mask_id
    logits = den((1 - model.options["eps"]) * t, masked.any(1))
    p = SEDD_REVEAL[sampler](model, logits, t, s)
    where = masked & _coin(masked.shape, p, generator, masked.device)
    return _reveal(den, where, logits, sampling, generator)


def _reveal(den, where, logits, sampling, generator) -> int:
    n = int(where.sum())
    if n:
        den.reveal(where, sampling.draw(logits[where], generator))
    return n
