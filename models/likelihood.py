"""Likelihood estimators for every family, as pure functions of (model, tokens, generator).

All values are nats per token. Definitions (docs/DESIGN.md §6):

- `span_logits(model, tokens, a, b)`: logits predicting each x_i, a <= i < b, from everything
  outside the span plus x_{a..i-1}: the family's own `span_logits` (declared in its module). AR
  sees the prefix only (x_{<i}); AO-GPT / σ-GPT use the order [0..a-1, b..L-1, a..b-1] (prefix,
  suffix, then the span left to right); an MDM sees the sequence with x_{i..b-1} masked. With
  (a, b) = (0, L) this is the L2R likelihood of every family (AR directly, the identity order for
  decoders, x_{>=k} masked for an MDM).
- `anyorder_draws`: K uniform permutations per sequence, exact NLL for each (families declaring
  the `perm_mc` metric: the decoders).
- `mdm_elbo_draws` (families declaring `elbo`): K noise draws per sequence of the `mdlm` (t ~ U) or `kdce` (k ~ U{1..L})
  ELBO estimator (both have the expectation of docs/DESIGN.md §6.1's sum over mask sizes, computed from the
  softmax of the logits), or, for a `sedd` model, SEDD's own score-entropy bound (`sedd`).
- `ensemble_logprobs` + `ensemble_losses`: context-order ensembling (official
  eval_ppl_AOGPT_ensemble.py): for target slot i, the base order plus M-1 shuffles of its prefix
  σ[:i]; loss_i = -log(mean_j p_j).
- `mc_estimate`: mean and Monte-Carlo standard error *given the evaluation sequences* (the
  within-sequence variance of the draws), so it shrinks as 1/sqrt(K).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

import torch
import torch.nn.functional as F


MAX_LOGIT_ELEMENTS = 1 << 25  # rows·L·V per forward (128 MiB of fp32 logits) before chunking
CUDA_MAX_LOGIT_ELEMENTS = 1 << 30  # on a GPU (4 GiB of fp32 logits): 20 rows of 1024 x 50257
ESTIMATORS = ("mdlm", "kdce")
# Floats per token and model width that one row of a no-grad forward holds at once: the residual
# stream, q/k/v and the attention output (4), the MLP's 4 x d hidden and its activation (8), with
# room for the norms (the bound of the ensemble's and the MDM's batched forwards)
ROW_ACTIVATIONS = 16


@dataclass(frozen=True)
class Estimate:
    """A mean over sequences and draws, with its Monte-Carlo standard error (None for 1 draw)."""

    value: float
    se: float | None
    n_sequences: int
    n_draws: int  # draws per sequence (K, or scored targets per sequence)


def mc_estimate(draws: torch.Tensor) -> Estimate:
    """Mean of draws [N, K] (sequence x draw) and its MC standard error given the N sequences.

    se = sqrt(sum_i s_i^2 / K) / N with s_i^2 the unbiased variance of sequence i's K draws.
    """
    n, k = draws.shape
    draws = draws.double()
    se = None if k < 2 else float((draws.var(dim=1) / k).sum().sqrt() / n)
    return Estimate(float(draws.mean()), se, n, k)


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")


def _require(model, metric: str, what: str) -> None:
    """ValueError unless the model's family declares the metric group (`FamilySpec.metrics`)."""
    if metric not in model.SPEC.metrics:
        raise ValueError(f"family: {what} is defined for families declaring the {metric!r} metric, "
                         f"not {model.family!r}")


def row_chunks(n_rows: int, row_elements: int, device: torch.device) -> list[slice]:
    """Slices of at most MAX_LOGIT_ELEMENTS // row_elements rows (CUDA_MAX_LOGIT_ELEMENTS on a
    GPU), at least one."""
    limit = CUDA_MAX_LOGIT_ELEMENTS if device.type == "cuda" else MAX_LOGIT_ELEMENTS
    step = max(1, limit // max(1, row_elements))
    return [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]


# ---- MDM noise levels -------------------------------------------------------------------------
def _level_fraction(frac: torch.Tensor, eps: float) -> torch.Tensor:
    return frac


def _level_sigma_bar(frac: torch.Tensor, eps: float) -> torch.Tensor:
    return -torch.log1p(-frac.clamp(max=1 - eps))  # P(masked) = 1 - exp(-σ̄)


# The level each MDM objective feeds its time conditioning, given the masked fraction (mdm.py).
LEVELS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "mdlm": _level_fraction, "kdce": _level_fraction, "sedd": _level_sigma_bar,
}


def mdm_level(model, frac: torch.Tensor) -> torch.Tensor | None:
    """Noise level [B] for a masked fraction [B] (None without time conditioning)."""
    if not model.options["time_cond"]:
        return None
    return LEVELS[model.options["loss"]](frac.float(), model.options["eps"])


def mask_tokens(model, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x_t: tokens with masked positions replaced by the mask id."""
    return torch.where(mask, torch.full_like(tokens, model.mask_id), tokens)


# ---- span / L2R -------------------------------------------------------------------------------
@torch.no_grad()
def span_logits(model, tokens: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """Logits [B, b-a, V] predicting x_a..x_{b-1} left to right (see the module docstring)."""
    model.check_tokens(tokens)
    if not 0 <= a < b <= tokens.shape[1]:
        raise ValueError(f"span: need 0 <= a < b <= {tokens.shape[1]}, got ({a}, {b})")
    if model.span_logits is None:
        raise ValueError(f"family: {model.family!r} declares no span scoring (`span_logits`)")
    return model.span_logits(tokens, a, b)


def span_scores(model, tokens: torch.Tensor, a: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(NLL [B, b-a] of the true span tokens, greedy hit [B, b-a]: argmax equals the truth).

    Teacher-forced argmax hits at every span position are exactly a greedy decode reproducing
    the span, so `hits.all(1)` is the exact-match indicator.
    """
    logits = span_logits(model, tokens, a, b).float()
    target = tokens[:, a:b]
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view_as(target)
    return nll, logits.argmax(-1) == target


def masked_prefix_logits(model, tokens: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """An MDM's span logits [B, b-a, V]: row (n, i) is sequence n with x_i..x_{b-1} masked, its
    noise level the masked fraction, and the head run at position i alone (the exact L2R
    likelihood with (a, b) = (0, L): one row per token). Rows of every position and sequence go
    through the network together, in forwards of at most MAX_LOGIT_ELEMENTS (CUDA_...: on a GPU)
    activations, L x d_model x ROW_ACTIVATIONS per row, each chunk's rows built when it runs."""
    B, L = tokens.shape
    S = b - a
    pos = torch.arange(L, device=tokens.device)
    out = []
    for sl in row_chunks(B * S, L * model.shape.d_model * ROW_ACTIVATIONS, tokens.device):
        row = torch.arange(sl.start, sl.stop, device=tokens.device)
        target = a + row % S
        mask = (pos[None] >= target[:, None]) & (pos[None] < b)
        x_t = mask_tokens(model, tokens[row // S], mask)
        out.append(model(x_t, mdm_level(model, mask.float().mean(1)), at=target))
    return torch.cat(out).view(B, S, -1)


def l2r_nll(model, tokens: torch.Tensor) -> torch.Tensor:
    """Per-token left-to-right NLL [B, L] for any family."""
    return span_scores(model, tokens, 0, tokens.shape[1])[0]


# ---- any-order NLL (decoders) -----------------------------------------------------------------
@torch.no_grad()
def anyorder_draws(model, tokens: torch.Tensor, k_mc: int, generator=None) -> torch.Tensor:
    """Per-token NLL [B, K] of each sequence under K uniform random orders."""
    _require(model, "perm_mc", "the any-order NLL over permutations")
    _check_positive("k_mc", k_mc)
    B, L = tokens.shape
    rows = tokens.repeat_interleave(k_mc, dim=0)
    orders = torch.rand(B * k_mc, L, generator=generator, device=tokens.device).argsort(1)
    out = [model.nll(rows[sl], orders[sl]).mean(1) for sl in row_chunks(len(rows), L * model.vocab_size, rows.device)]
    return torch.cat(out).view(B, k_mc)


# ---- MDM ELBO ---------------------------------------------------------------------------------
def _mdlm_draw(model, tokens, generator):
    """t ~ U(eps, 1), mask w.p. t, weight (1-eps)/t: ∫_eps^1 (1/t) E[Σ_masked nll] dt / L.

    The omitted [0, eps] part is at most eps times a full-context NLL (0.1 % for eps = 1e-3).
    """
    B, L = tokens.shape
    eps = model.options["eps"]
    t = eps + (1 - eps) * torch.rand(B, generator=generator, device=tokens.device)
    mask = torch.rand(B, L, generator=generator, device=tokens.device) < t[:, None]
    nll = model.masked_nll(tokens, mask, mdm_level(model, t))
    return (1 - eps) * nll.sum(1) / t / L


def _kdce_draw(model, tokens, generator):
    """k ~ U{1..L}, exactly k uniformly placed masks, weight L/k: Σ_masked nll / k."""
    B, L = tokens.shape
    k = torch.randint(1, L + 1, (B,), generator=generator, device=tokens.device)
    rank = torch.rand(B, L, generator=generator, device=tokens.device).argsort(1).argsort(1)
    mask = rank < k[:, None]
    nll = model.masked_nll(tokens, mask, mdm_level(model, k / L))
    return nll.sum(1) / k


def sedd_log_score(model, x_t: torch.Tensor, sigma_bar: torch.Tensor) -> torch.Tensor:
    """SEDD's absorbing log-scores [B, L, V]: logits - log(e^σ̄ - 1) - log(N - 1).

    Both shifts are the official `model/transformer.py`'s (`scale_by_sigma`): N is its output
    width, the vocabulary plus the absorbing state, so N - 1 = vocab_size. With the offset an
    untrained network (logits ~ 0) starts at a score-entropy loss of ~log V nats per token; without
    it, at e^σ̄-sized scores, the loss starts near V (42,209 nats at V = 50,257).
    """
    log_esm1 = torch.log(torch.expm1(sigma_bar))[:, None, None]  # log(e^σ̄ - 1)
    return model(x_t, sigma_bar) - log_esm1 - math.log(model.vocab_size)


def sedd_entropy(model, tokens: torch.Tensor, t: torch.Tensor, generator) -> torch.Tensor:
    """dσ̄/dt x the score entropy summed over masked positions, per sequence [B] (nats).

    Log-linear noise: σ̄(t) = -log(1 - (1-eps)t), so P(masked) = (1-eps)t. At a masked position
    the true ratio for the clean token is r = 1/(e^σ̄ - 1) and 0 for every other token; the score
    entropy is Σ_y s_y - r log s_x0 + r (log r - 1) (SEDD eq. 9 with the absorbing graph).
    """
    eps = model.options["eps"]
    sigma_bar = -torch.log1p(-(1 - eps) * t)  # [B]
    dsigma = (1 - eps) / (1 - (1 - eps) * t)  # dσ̄/dt
    mask = torch.rand(tokens.shape, generator=generator, device=tokens.device) < (-torch.expm1(-sigma_bar))[:, None]
    x_t = torch.where(mask, torch.full_like(tokens, model.mask_id), tokens)
    log_score = sedd_log_score(model, x_t, sigma_bar)  # [B, L, V]
    ratio = 1.0 / torch.expm1(sigma_bar)[:, None]  # [B, 1] true ratio at the clean token
    pos = log_score.exp().sum(-1)  # Σ_y s_y
    neg = ratio * log_score.gather(-1, tokens[..., None])[..., 0]
    const = ratio * (torch.log(ratio) - 1)
    return dsigma * ((pos - neg + const) * mask).sum(1)


def _sedd_draw(model, tokens, generator):
    """SEDD's own bound: t ~ U(eps, 1), (1-eps) x dσ̄/dt x score entropy over masked positions / L.

    Defined for `loss=sedd` models only (their logits are trained as scores). The omitted pieces
    are the [0, eps] part and the prior term at t = 1 (a token is still unmasked w.p. eps), each
    O(eps) per token."""
    B, L = tokens.shape
    eps = model.options["eps"]
    t = eps + (1 - eps) * torch.rand(B, generator=generator, device=tokens.device)
    return (1 - eps) * sedd_entropy(model, tokens, t, generator) / L


ELBO_DRAWS = {"mdlm": _mdlm_draw, "kdce": _kdce_draw, "sedd": _sedd_draw}


def elbo_estimators(model) -> tuple[str, ...]:
    """The bounds an MDM reports: mdlm and kdce (softmax of its logits) for every loss, plus SEDD's
    own score-entropy bound for a `sedd` model."""
    return ESTIMATORS + (("sedd",) if model.options["loss"] == "sedd" else ())


def default_elbo_estimator(model) -> str:
    """The bound an MDM reports as its nll_anyorder: its loss when that is mdlm or kdce, else the
    kdce bound of its softmax-normalised logits."""
    loss = model.options["loss"]
    return loss if loss in ESTIMATORS else "kdce"


@torch.no_grad()
def mdm_elbo_draws(model, tokens: torch.Tensor, k_mc: int, estimator: str = "kdce",
                   generator=None) -> torch.Tensor:
    """Per-token NLL upper bound [B, K]: K draws of the `mdlm` or `kdce` ELBO estimator."""
    _require(model, "elbo", "the ELBO")
    _check_positive("k_mc", k_mc)
    if estimator not in elbo_estimators(model):
        raise ValueError(f"estimator: MDM ELBO estimator {estimator!r} is not defined for this model; "
                         f"valid: {list(elbo_estimators(model))}")
    B, L = tokens.shape
    rows = tokens.repeat_interleave(k_mc, dim=0)
    draw = ELBO_DRAWS[estimator]
    out = [draw(model, rows[sl], generator) for sl in row_chunks(len(rows), L * model.vocab_size, rows.device)]
    return torch.cat(out).view(B, k_mc)


# ---- context-order ensembling -----------------------------------------------------------------
def shuffle_prefixes(orders: torch.Tensor, slots: torch.Tensor, generator=None) -> torch.Tensor:
    """Each row's order with its first slots[r] entries randomly permuted, the rest kept."""
    R, L = orders.shape
    pos = torch.arange(L, device=orders.device)
    keys = torch.rand(R, L, generator=generator, device=orders.device)
    keys = torch.where(pos[None] < slots[:, None], keys, 1.0 + pos[None].float())  # suffix keeps its place
    return orders.gather(1, keys.argsort(1))


def _slot_logprobs(model, tokens, orders, slots) -> torch.Tensor:
    """log p(x at slot slots[r] | earlier slots of orders[r]) for each row: [R]; causal, so
    the core runs only over slots 0..max(slots)."""
    R = tokens.shape[0]
    T = int(slots.max()) + 1
    ordered = tokens.gather(1, orders)
    x = torch.cat([model.start_slot(R), model.slot_inputs(ordered[:, :T - 1], orders[:, :T - 1])], 1)
    h = model.hidden(x, orders[:, :T], model.slot_sources(orders, 0, T), is_causal=True)
    rows = torch.arange(R, device=tokens.device)
    logp = F.log_softmax(model.logits_from_hidden(h[rows, slots][:, None])[:, 0].float(), -1)
    return logp.gather(1, ordered[rows, slots][:, None])[:, 0]


@torch.no_grad()
def ensemble_logprobs(model, tokens: torch.Tensor, m_max: int, n_targets: int | None = None,
                      generator=None, base_orders: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p [B, n, M], target slots [B, n]) for context-order ensembling.

    n_targets slots per sequence are drawn without replacement (all L when None); each gets its
    own uniform base order unless `base_orders` [B, L] is given (then shared by its targets).
    Order j = 0 is the base order, j >= 1 shuffle its prefix σ[:i]. Smaller M reuse the first
    orders, so a sweep over M shares its random numbers.
    """
    _require(model, "ctx_ensemble", "context-order ensembling")
    _check_positive("m", m_max)
    B, L = tokens.shape
    n = L if n_targets is None else n_targets
    _check_positive("n_targets", n)
    if n > L:
        raise ValueError(f"n_targets: {n} exceeds the sequence length {L}")
    dev = tokens.device
    slots = torch.rand(B, L, generator=generator, device=dev).argsort(1)[:, :n]  # [B, n]
    if base_orders is None:
        base = torch.rand(B * n, L, generator=generator, device=dev).argsort(1)
    else:
        base = base_orders.repeat_interleave(n, dim=0)
    base = base.repeat_interleave(m_max, dim=0)  # [B*n*M, L]
    row_slots = slots.reshape(-1).repeat_interleave(m_max)
    shuffled = shuffle_prefixes(base, row_slots, generator)
    first = torch.arange(len(base), device=dev) % m_max == 0
    orders = torch.where(first[:, None], base, shuffled)
    rows = tokens.repeat_interleave(n * m_max, dim=0)
    return _sorted_slot_logprobs(model, rows, orders, row_slots).view(B, n, m_max), slots


def _sorted_slot_logprobs(model, rows, orders, slots) -> torch.Tensor:
    """`_slot_logprobs` over chunks of rows sorted by slot, so short prefixes run short."""
    perm = slots.argsort()
    out = torch.empty(len(rows), device=rows.device)
    L = rows.shape[1]
    for sl in row_chunks(len(rows), L * model.shape.d_model * ROW_ACTIVATIONS, rows.device):
        idx = perm[sl]
        out[idx] = _slot_logprobs(model, rows[idx], orders[idx], slots[idx])
    return out


def ensemble_losses(logprobs: torch.Tensor, m: int) -> torch.Tensor:
    """-log(mean_{j<m} p_j) per target from log p [..., M]."""
    _check_positive("m", m)
    if m > logprobs.shape[-1]:
        raise ValueError(f"m: {m} exceeds the {logprobs.shape[-1]} orders computed")
    return math.log(m) - torch.logsumexp(logprobs[..., :m].double(), dim=-1)


# ---- sequences under an evaluator ---------------------------------------------------------------
@torch.no_grad()
def sample_ppl(evaluator, samples: torch.Tensor) -> torch.Tensor:
    """Per-sample perplexity exp(mean L2R NLL) of samples [B, L] under an evaluator: [B]."""
    return l2r_nll(evaluator, samples).double().mean(1).exp()
