"""`mdm`: encoder-only masked diffusion (MDLM / RADD / SEDD, absorbing state).

Bidirectional attention over x_t, where masked positions hold the mask token (id = vocab_size).
SUBS parameterisation: the head never scores the mask token and unmasked positions are copied
through, so only masked positions carry loss. Objectives (all mean nats per token of x_0):
  mdlm  t ~ U(eps, 1), each token masked w.p. t, weight 1/t                 (MDLM, log-linear;
        `mask_prob = "mdlm"` masks w.p. (1 - eps)·t as MDLM's code does, same weight)
  kdce  k ~ U{1..L} masked uniformly at random, weight L/k                   (RADD's any-order form)
  sedd  score entropy for the absorbing process, log-linear noise, σ(t) via adaLN (SEDD)
`time_cond` feeds the noise level (t, k/L or σ̄(t)) through a sinusoid -> MLP -> adaLN; it is on
by default only for `sedd`. Span scoring masks x_{i..b-1} to predict x_i; sampling reverses the
absorbing process (models.sampling.generate_mdm: ancestral, or SEDD's analytic/Euler samplers).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import sampling as sm
from ..likelihood import masked_prefix_logits, sedd_entropy
from .base import COMMON_OPTIONS, FamilyModel, FamilySpec, choice, positive_int

LOSSES = ("mdlm", "kdce", "sedd")
MASK_PROBS = ("t", "mdlm")
NOISE_EPS = 1e-3  # log-linear schedule floor, as in SEDD/MDLM
TIME_FREQ_DIM = 256  # sinusoidal width of the noise-level embedding (SEDD/DiT)


def _unit_interval(v) -> bool:
    return isinstance(v, (int, float)) and 0 <= v < 1


class MDM(FamilyModel):
    family = "mdm"
    OPTIONS = {
        **COMMON_OPTIONS,
        "loss": ("mdlm", choice(*LOSSES)),
        "time_cond": (None, (lambda v: v is None or isinstance(v, bool), "true or false")),
        "cond_dim": (128, positive_int()),
        "eps": (NOISE_EPS, (_unit_interval, "a number in [0, 1)")),
        # True: one shared uniform shifted by i/B (aoscale's); "stratified": MDLM's `_sample_t`, an
        # independent uniform inside each bin [i/B, (i+1)/B); False: independent uniforms
        "antithetic": (True, (lambda v: isinstance(v, bool) or v == "stratified", 'true, false or "stratified"')),
        # t: mask w.p. t (aoscale's); mdlm: w.p. (1 - eps)·t, MDLM's log-linear move chance 1 - e^(-σ(t))
        "mask_prob": ("t", choice(*MASK_PROBS)),
    }
    GROUP_PREFIXES = {"time_cond": ("time_mlp",)}
    MODULATION_GROUP = "time_cond"
    COND_ROWS = "sequence"  # one noise level per sequence drives the time MLP and adaLN
    n_extra_tokens = 1
    SPEC = FamilySpec(metrics=("l2r", "elbo"), infill_context="prefix_suffix", default_arm={"loss": "mdlm"})

    def __init__(self, shape, vocab_size, seq_len, options):
        if options["time_cond"] is None:
            options = {**options, "time_cond": options["loss"] == "sedd"}
        cond_dim = options["cond_dim"] if options["time_cond"] else 0
        super().__init__(shape, vocab_size, seq_len, options, cond_dim=cond_dim)
        self.mask_id = vocab_size
        self.time_mlp = nn.Sequential(nn.Linear(TIME_FREQ_DIM, cond_dim), nn.SiLU(),
                                      nn.Linear(cond_dim, cond_dim)) if cond_dim else None
        self._init()

    # ---- network -------------------------------------------------------------------------
    def forward(self, x_t: torch.Tensor, level: torch.Tensor | None = None,
                at: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, L, V] over real tokens for a partly masked x_t [B, L]; level [B] noise level.
        With `at` [B] (one position per row) the head runs there only: logits [B, V]."""
        positions = torch.arange(1, x_t.shape[1] + 1, device=x_t.device)
        x = self.with_position(self.wte(x_t), positions)  # RoPE: the core rotates by 0, 1, ...
        cond = None
        if self.time_mlp is not None:
            cond = self.time_mlp(_sinusoid(level, TIME_FREQ_DIM)).unsqueeze(1)  # [B, 1, c]
        h = self.core(x, cond=cond)
        if at is not None:
            h = h[torch.arange(len(at), device=h.device), at]
        return self.logits_from_hidden(h)

    def masked_nll(self, tokens: torch.Tensor, mask: torch.Tensor, level=None) -> torch.Tensor:
        """-log p(x_i | x_unmasked) at masked positions, 0 elsewhere: [B, L] (SUBS copy-through)."""
        self.check_tokens(tokens)
        x_t = torch.where(mask, torch.full_like(tokens, self.mask_id), tokens)
        logits = self(x_t, level)
        nll = F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none").view_as(tokens)
        return nll * mask

    # ---- objectives ----------------------------------------------------------------------
    def sample_t(self, batch: int, generator, device) -> torch.Tensor:
        """Times [batch] in [0, 1), each marginally U(0, 1). `antithetic` True (the default): one
        shared uniform u shifted by i/B, (u + i/B) mod 1, so the B times are evenly spaced and
        determined by u (a systematic sample; not MDLM's). "stratified" (MDLM's `_sample_t`): an
        independent uniform inside each bin, (u_i + i)/B. False: B independent uniforms."""
        mode = self.options["antithetic"]
        u = torch.rand(1 if mode is True else batch, generator=generator, device=device)
        if mode is False:
            return u
        bins = torch.arange(batch, device=device) / batch
        return (u + bins) % 1.0 if mode is True else u / batch + bins

    def mask_chance(self, t: torch.Tensor) -> torch.Tensor:
        """P(a token is masked at time t) of the `mdlm` objective: t, or MDLM's (1 - eps)·t."""
        return t if self.options["mask_prob"] == "t" else (1 - self.options["eps"]) * t

    def loss(self, tokens, generator=None):
        return LOSS_FNS[self.options["loss"]](self, tokens, generator)

    # ---- capabilities --------------------------------------------------------------------
    def span_logits(self, tokens: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Logits [B, b-a, V]: span position i predicted with x_{i..b-1} masked, the rows of every
        position and sequence batched into bounded forwards (models.likelihood.masked_prefix_logits)."""
        return masked_prefix_logits(self, tokens, a, b)

    def default_sampler(self) -> str:
        """SEDD's analytic sampler for a `sedd` model, MDLM's ancestral one otherwise."""
        return "analytic" if self.options["loss"] == "sedd" else "ancestral"

    def sample(self, request: sm.Request, generator=None) -> sm.Generation:
        """Reverse diffusion in `steps` steps with the request's sampler (None: the default);
        `method` is the sampler's name."""
        sampler = request.sampler or self.default_sampler()
        out = sm.generate_mdm(self, request.n_samples, request.length, request.steps, sampler, request.sampling,
                              generator)
        out.method = sampler
        return out


def _mdlm_loss(model: MDM, tokens, generator):
    B, L = tokens.shape
    eps = model.options["eps"]
    t = eps + (1 - eps) * model.sample_t(B, generator, tokens.device)  # [B]
    mask = torch.rand(B, L, generator=generator, device=tokens.device) < model.mask_chance(t)[:, None]
    nll = model.masked_nll(tokens, mask, t)
    return (nll.sum(1) / t).mean() / L


def _kdce_loss(model: MDM, tokens, generator):
    B, L = tokens.shape
    k = torch.randint(1, L + 1, (B,), generator=generator, device=tokens.device)
    rank = torch.rand(B, L, generator=generator, device=tokens.device).argsort(1).argsort(1)
    mask = rank < k[:, None]  # exactly k masked positions, uniformly placed
    nll = model.masked_nll(tokens, mask, k / L)
    return (nll.sum(1) / k).mean()  # (L/k)·Σ_masked per sequence, divided by L tokens


def _sedd_loss(model: MDM, tokens, generator):
    """Score entropy (SEDD eq. 9) for the absorbing graph with log-linear noise, t as SEDD draws it
    (`(1 - eps) u + eps`, no Jacobian: the official loss), mean nats per token."""
    B, L = tokens.shape
    eps = model.options["eps"]
    t = model.sample_t(B, generator, tokens.device) * (1 - eps) + eps
    return sedd_entropy(model, tokens, t, generator).mean() / L


LOSS_FNS = {"mdlm": _mdlm_loss, "kdce": _kdce_loss, "sedd": _sedd_loss}


def _sinusoid(level: torch.Tensor, dim: int) -> torch.Tensor:
    """DiT-style sinusoidal embedding of a scalar noise level per sequence: [B] -> [B, dim]."""
    level = torch.as_tensor(level, dtype=torch.float32).reshape(-1)
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=level.device) / half)
    angles = 1000.0 * level[:, None] * freqs[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
