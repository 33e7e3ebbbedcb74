"""Likelihood estimators: L2R for every family, infilling, any-order MC, ELBOs, ensembling."""
from __future__ import annotations

from functools import partial

import math

import pytest
import torch
import torch.nn.functional as F

from models import build_model
from models import likelihood as lk
from models.families.aogpt import infill_order
from tests.models.conftest import make_model, make_tokens

V, L = 11, 16


_model = partial(make_model, vocab_size=V, seq_len=L)


def _tokens(batch=4, seed=0):
    return make_tokens(batch, seed, vocab_size=V, seq_len=L)


def class_batch(batch: int, g: torch.Generator) -> torch.Tensor:
    """Each sequence repeats one random token w.p. 0.7 per position, else uniform noise."""
    c = torch.randint(0, V, (batch, 1), generator=g)
    keep = torch.rand(batch, L, generator=g) < 0.7
    return torch.where(keep, c, torch.randint(0, V, (batch, L), generator=g))


@pytest.fixture(scope="module")
def trained_mdm():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("mdm", "0.1M", vocab_size=V, seq_len=L, loss="kdce")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(120):
        loss = model.loss(class_batch(32, g), g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_l2r_is_each_familys_left_to_right_likelihood():
    tokens = _tokens()
    ar, ao = _model("ar"), _model("aogpt")
    with torch.no_grad():
        assert torch.allclose(lk.l2r_nll(ar, tokens), ar.nll(tokens), atol=1e-5)
        identity = torch.arange(L).expand(4, L)
        assert torch.allclose(lk.l2r_nll(ao, tokens), ao.nll(tokens, identity), atol=1e-5)


def test_mdm_l2r_predicts_each_token_with_the_rest_masked():
    mdm, tokens = _model("mdm"), _tokens(2)
    got = lk.l2r_nll(mdm, tokens)
    pos = torch.arange(L)
    with torch.no_grad():
        for k in (0, 5, L - 1):
            ref = mdm.masked_nll(tokens, (pos >= k).expand(2, L))[:, k]
            assert torch.allclose(got[:, k], ref, atol=1e-5)


def test_infilling_conditions_decoders_and_mdms_on_both_sides():
    tokens, a, b = _tokens(3), 6, 10
    ao, mdm, ar = _model("aogpt"), _model("mdm"), _model("ar")
    with torch.no_grad():
        order = infill_order(L, a, b, 3)
        nll, _ = lk.span_scores(ao, tokens, a, b)
        assert torch.allclose(nll, ao.nll(tokens, order)[:, L - (b - a):], atol=1e-5)
        nll, _ = lk.span_scores(mdm, tokens, a, b)
        pos = torch.arange(L)
        ref = mdm.masked_nll(tokens, ((pos >= a + 1) & (pos < b)).expand(3, L))[:, a + 1]
        assert torch.allclose(nll[:, 1], ref, atol=1e-5)
        changed = tokens.clone()
        changed[:, b:] = (changed[:, b:] + 1) % V  # AR sees the prefix only: the suffix is irrelevant
        assert torch.allclose(lk.span_scores(ar, tokens, a, b)[0], lk.span_scores(ar, changed, a, b)[0])
        assert not torch.allclose(lk.span_scores(ao, tokens, a, b)[0], lk.span_scores(ao, changed, a, b)[0])


def test_exact_match_is_a_greedy_decode_of_the_span():
    ar, tokens = _model("ar"), _tokens(1)
    with torch.no_grad():
        greedy = tokens[:, :4].clone()
        for _ in range(4):
            greedy = torch.cat([greedy, ar(torch.cat([greedy, tokens[:, :1]], 1))[:, -1:].argmax(-1)], 1)
    _, hits = lk.span_scores(ar, greedy, 4, 8)
    assert hits.all()


def test_ensemble_with_one_order_equals_the_any_order_nll():
    ao, tokens = _model("aogpt"), _tokens()
    order = torch.rand(4, L, generator=torch.Generator().manual_seed(1)).argsort(1)
    logp, slots = lk.ensemble_logprobs(ao, tokens, 1, None, torch.Generator().manual_seed(2), base_orders=order)
    with torch.no_grad():
        plain = ao.nll(tokens, order)
    assert torch.allclose(lk.ensemble_losses(logp, 1), plain.gather(1, slots).double(), atol=1e-5)
    assert math.isclose(lk.ensemble_losses(logp, 1).mean().item(), plain.mean().item(), rel_tol=1e-5)


def test_ensemble_orders_shuffle_only_the_prefix_and_average_probabilities():
    orders = torch.arange(L).expand(6, L).clone()
    slots = torch.tensor([0, 1, 5, 9, 15, 15])
    shuffled = lk.shuffle_prefixes(orders, slots, torch.Generator().manual_seed(3))
    for row, i in zip(shuffled, slots.tolist()):
        assert sorted(row[:i].tolist()) == list(range(i)) and row[i:].tolist() == list(range(i, L))
    logp = torch.log(torch.tensor([[0.5, 0.1, 0.3]]))
    assert torch.allclose(lk.ensemble_losses(logp, 3), torch.tensor([-math.log(0.3)], dtype=torch.float64))
    ao, tokens = _model("aogpt"), _tokens(2)
    with torch.no_grad():
        order = torch.rand(2, L, generator=torch.Generator().manual_seed(4)).argsort(1)
        got = lk._slot_logprobs(ao, tokens, order, torch.tensor([3, 11]))
        ref = -ao.nll(tokens, order)[[0, 1], [3, 11]]
    assert torch.allclose(got, ref, atol=1e-5)


def test_ensemble_sweep_shares_draws_and_more_orders_help_a_trained_decoder():
    ao, tokens = _model("aogpt"), _tokens()
    logp, _ = lk.ensemble_logprobs(ao, tokens, 4, 5, torch.Generator().manual_seed(5))
    assert logp.shape == (4, 5, 4)
    m1, m4 = lk.ensemble_losses(logp, 1), lk.ensemble_losses(logp, 4)
    assert (m4 <= -logp.double().mean(-1) + 1e-9).all()  # Jensen: -log mean p <= mean -log p
    assert m1.shape == m4.shape == (4, 5)


def test_monte_carlo_standard_error_shrinks_as_one_over_sqrt_k():
    ao, tokens = _model("aogpt"), _tokens(8)
    small = lk.mc_estimate(lk.anyorder_draws(ao, tokens, 4, torch.Generator().manual_seed(6)))
    large = lk.mc_estimate(lk.anyorder_draws(ao, tokens, 64, torch.Generator().manual_seed(7)))
    assert 2.5 < small.se / large.se < 6.5  # sqrt(64 / 4) = 4
    assert abs(small.value - large.value) < 4 * math.hypot(small.se, large.se)
    assert lk.mc_estimate(torch.ones(3, 1)).se is None


def test_mdlm_and_kdce_elbos_agree_on_a_trained_mdm(trained_mdm):
    tokens = class_batch(16, torch.Generator().manual_seed(8))
    mdlm = lk.mc_estimate(lk.mdm_elbo_draws(trained_mdm, tokens, 32, "mdlm", torch.Generator().manual_seed(9)))
    kdce = lk.mc_estimate(lk.mdm_elbo_draws(trained_mdm, tokens, 32, "kdce", torch.Generator().manual_seed(10)))
    assert kdce.value < math.log(V) - 0.3  # it learned the chain
    assert abs(mdlm.value - kdce.value) < 3 * math.hypot(mdlm.se, kdce.se)


def test_bad_estimator_inputs_are_value_errors():
    ao, mdm, ar, tokens = _model("aogpt"), _model("mdm"), _model("ar"), _tokens()
    with pytest.raises(ValueError, match="k_mc"):
        lk.anyorder_draws(ao, tokens, 0)
    with pytest.raises(ValueError, match="m"):
        lk.ensemble_logprobs(ao, tokens, 0)
    with pytest.raises(ValueError, match="family"):
        lk.ensemble_logprobs(ar, tokens, 2)
    with pytest.raises(ValueError, match="family"):
        lk.mdm_elbo_draws(ao, tokens, 2)
    with pytest.raises(ValueError, match="estimator"):
        lk.mdm_elbo_draws(mdm, tokens, 2, "sedd")
    with pytest.raises(ValueError, match="seq_len"):
        lk.l2r_nll(ar, torch.zeros(1, L + 1, dtype=torch.long))
    assert F.softmax(torch.zeros(2), 0).sum() == 1
