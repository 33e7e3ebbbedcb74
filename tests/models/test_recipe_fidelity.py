"""Recipe fidelity (docs/recipe-fidelity.md): the four conventions where aoscale and the official
AO-GPT / MDLM code differ, each pinned: initialisation, MDLM's masking probability, antithetic
time sampling and the generator's tokens-per-step rounding."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import models
from jobs.run.spec import RunSpec
from models.sampling import step_counts
from scaling.study.arms import NETWORKS

STD = 0.02
TRUNC_STD = STD * math.sqrt(1 - 2 * 3 * stats.norm.pdf(3) / (stats.norm.cdf(3) - stats.norm.cdf(-3)))


def _aogpt(init: str, seed: int = 0):
    torch.manual_seed(seed)
    return models.build_model("aogpt", "2/192/2", vocab_size=256, seq_len=32, **{**NETWORKS["official"], "init": init})


def _weights(model):
    """(name, tensor, std) of every >= 2-d weight with the std it is drawn with."""
    n_layer = model.shape.n_layer
    return [(n, p.detach(), STD / math.sqrt(2 * n_layer) if n.endswith("proj.weight") else STD)
            for n, p in model.named_parameters() if p.dim() >= 2]


def test_official_network_means_the_official_initialisation():
    assert NETWORKS["official"]["init"] == "official" and NETWORKS["gpt2"]["init"] == "gpt2"


def test_official_init_truncates_every_weight_at_three_sigma():
    z = np.concatenate([(p / std).flatten().numpy() for _, p, std in _weights(_aogpt("official"))])
    assert np.abs(z).max() <= 3.0 + 1e-6
    assert z.std() * STD == pytest.approx(TRUNC_STD, rel=0.01)  # a truncated normal's std, not 0.02
    z_gpt2 = np.concatenate([(p / std).flatten().numpy() for _, p, std in _weights(_aogpt("gpt2"))])
    assert (np.abs(z_gpt2) > 3).sum() > 100  # ~0.27 % of ~10^5 untruncated draws lie beyond 3σ
    assert z_gpt2.std() == pytest.approx(1.0, rel=0.01)


def test_start_token_is_zero_under_gpt2_and_a_truncated_normal_under_official():
    assert torch.count_nonzero(_aogpt("gpt2").start) == 0
    start = _aogpt("official").start.detach()
    assert start.abs().max() <= 3 * STD + 1e-7
    assert torch.count_nonzero(start) == start.numel()
    assert stats.kstest(start.numpy() / STD, stats.truncnorm(-3, 3).cdf).pvalue > 0.01
    ar = models.build_model("ar", "2/192/2", vocab_size=256, seq_len=32, init="official")
    assert torch.count_nonzero(ar.start) == ar.start.numel()


def test_init_option_keeps_gpt2_run_ids_and_changes_official_ones():
    options = {"norm": "layernorm", "qk_norm": False, "tie_head": True, "cond_dim": 128, "target_pe": "adaln",
               "order": "mix:0.1", "pos": "learned"}
    old = RunSpec("aogpt", "0.1M", steps=600, lr=3e-3, warmup_steps=60, model_options=options, seq_len=32, batch_size=32)
    assert old.replace(model_options={**options, "init": "gpt2"}).run_id == old.run_id == "c2a3c1083a35"
    assert old.replace(model_options={**options, "init": "official"}).run_id != old.run_id
    mdm = old.replace(family="mdm", model_options={"loss": "mdlm"})
    assert mdm.replace(model_options={"loss": "mdlm", "mask_prob": "t"}).run_id == mdm.run_id
    assert mdm.replace(model_options={"loss": "mdlm", "mask_prob": "mdlm"}).run_id != mdm.run_id


# ---- MDLM masking probability ------------------------------------------------------------------
def _mdm(**options):
    torch.manual_seed(0)
    return models.build_model("mdm", "1/32/2", vocab_size=16, seq_len=24, eps=0.4, **options)


@pytest.mark.parametrize("mask_prob", ["t", "mdlm"])
def test_mdlm_loss_masks_with_its_declared_probability(mask_prob):
    """The loss equals its definition replayed on the same generator: t = eps + (1-eps)·u,
    mask w.p. t ("t") or (1-eps)·t ("mdlm", MDLM's move chance), weight 1/t."""
    model, eps = _mdm(mask_prob=mask_prob), 0.4
    tokens = torch.randint(0, 16, (64, 24), generator=torch.Generator().manual_seed(1))
    loss = model.loss(tokens, torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(2)
    t = eps + (1 - eps) * model.sample_t(64, g, "cpu")
    chance = t if mask_prob == "t" else (1 - eps) * t
    mask = torch.rand(64, 24, generator=g) < chance[:, None]
    expected = (model.masked_nll(tokens, mask, t).sum(1) / t).mean() / 24
    assert torch.equal(loss, expected)
    frac = mask.float().mean(1)  # the masked share follows the declared chance
    assert float((frac - chance).mean()) == pytest.approx(0.0, abs=0.03)


def test_mask_prob_mdlm_masks_fewer_tokens_by_one_minus_eps():
    t = torch.linspace(0.4, 1, 7)
    assert torch.equal(_mdm(mask_prob="mdlm").mask_chance(t), 0.6 * t)
    assert torch.equal(_mdm().mask_chance(t), t)


# ---- antithetic time sampling ------------------------------------------------------------------
def _times(antithetic, batch: int = 8, draws: int = 4000) -> np.ndarray:
    model, g = _mdm(antithetic=antithetic), torch.Generator().manual_seed(3)
    return torch.stack([model.sample_t(batch, g, "cpu") for _ in range(draws)]).numpy()  # [draws, B]


def test_stratified_times_are_independent_uniforms_one_per_bin():
    t, B = _times("stratified"), 8
    bins = np.arange(B) / B
    assert ((t >= bins) & (t < bins + 1 / B)).all()
    offsets = (t - bins) * B  # position inside each bin
    for i in range(B):
        assert stats.kstest(offsets[:, i], "uniform").pvalue > 0.001
    corr = np.corrcoef(offsets.T)[np.triu_indices(B, 1)]
    assert np.abs(corr).max() < 0.07  # independent bins: |r| ~ 1/sqrt(4000) = 0.016


def test_shifted_times_share_one_uniform_and_stratified_times_spread_the_batch_mean_least():
    B = 8
    shift, strat, iid = _times(True), _times("stratified"), _times(False)
    gaps = np.diff(np.sort(shift, 1), axis=1)
    assert np.allclose(gaps, 1 / B, atol=1e-6)  # evenly spaced: one shared uniform
    assert not np.allclose(np.diff(np.sort(strat, 1), axis=1), 1 / B, atol=1e-3)
    for t in (shift, strat, iid):  # every scheme's pooled times are U(0, 1)
        assert stats.kstest(t[:500].flatten(), "uniform").pvalue > 0.001
    # batch-mean variance: iid 1/(12B), shift 1/(12B^2), stratified 1/(12B^3)
    v = {name: t.mean(1).var() * 12 for name, t in (("iid", iid), ("shift", shift), ("strat", strat))}
    assert v["iid"] * B == pytest.approx(1, rel=0.1)
    assert v["shift"] * B**2 == pytest.approx(1, rel=0.1)
    assert v["strat"] * B**3 == pytest.approx(1, rel=0.1)


# ---- the generator's tokens-per-step rounding ---------------------------------------------------
def _official_loop(kind: str, length: int, steps: int) -> list[int]:
    """The official generator's cumulative count, restated: n_i = max(int(L(1 - m_i)), n_{i-1} + 1)."""
    t = torch.linspace(1, 0, steps + 1)
    m = t if kind == "linear" else torch.cos((1 - t) * math.pi * 0.5)
    done, counts = 0, []
    for i in range(1, steps + 1):
        nxt = max(int(length * (1 - m[i])), done + 1)
        counts.append(nxt - done)
        done = nxt
    return counts


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_trunc_schedules_are_the_official_rule_and_plain_ones_round(kind):
    for length in (16, 32, 100, 1024):
        for steps in (1, 2, 3, 7, 10, 16):
            got = step_counts(f"{kind}-trunc", length, steps)
            assert got == _official_loop(kind, length, steps) and sum(got) == length
            rounded = step_counts(kind, length, steps)
            assert sum(rounded) == length
    assert step_counts("linear-trunc", 1024, 3) == [341, 341, 342]  # int() truncates: 341.33 -> 341
    assert step_counts("linear", 1024, 3) == [341, 342, 341]  # round(): 682.67 masked -> 683
