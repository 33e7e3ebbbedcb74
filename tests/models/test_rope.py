"""Rotary positions (`pos = "rope"`): the rotation, its relative-position property, where each
family's queries and keys are turned, and KV-cached decoding with it."""
from functools import partial

import math

import pytest
import torch

from models import build_model
from models import sampling as sm
from models.core import CoreConfig, Rotary, Transformer, rope_angles, rotate
from tests.models.conftest import make_model, make_tokens

V, L = 13, 16


_model = partial(make_model, vocab_size=V, seq_len=L, pos="rope")
_tokens = partial(make_tokens, vocab_size=V, seq_len=L)


def test_rotation_keeps_norms_is_identity_at_zero_and_turns_pairs_by_position_times_frequency():
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([0, 1, 2, 7, 1000])
    cos, sin = rope_angles(positions, 8)
    y = rotate(x, cos, sin)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert torch.equal(y[:, :, 0], x[:, :, 0])
    # pair i = (feature i, feature i + 4) turns by position x 10000^(-2i/8)
    i, t = 1, 3
    angle = 7 * 10000 ** (-2 * i / 8)
    c, s = math.cos(angle), math.sin(angle)
    a, b = x[..., t, i], x[..., t, i + 4]
    assert torch.allclose(y[..., t, i], a * c - b * s, atol=1e-5)
    assert torch.allclose(y[..., t, i + 4], b * c + a * s, atol=1e-5)


def test_attention_scores_depend_on_position_differences_only():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 2, 6, 8, generator=g), torch.randn(2, 2, 6, 8, generator=g)
    qp, kp = torch.tensor([[3, 5, 1, 0, 2, 4]] * 2), torch.tensor([[0, 1, 2, 3, 4, 5]] * 2)

    def scores(shift):
        r = Rotary.at(qp + shift, kp + shift, 8)
        return rotate(q, *r.q) @ rotate(k, *r.k).transpose(-1, -2)

    assert torch.allclose(scores(0), scores(37), atol=1e-4)
    assert not torch.allclose(scores(0), (q @ k.transpose(-1, -2)), atol=1e-2)


def test_a_rope_core_is_invariant_to_shifting_every_position_and_sees_relative_changes():
    torch.manual_seed(0)
    core = Transformer(CoreConfig(2, 32, 4, pos="rope")).eval()
    x = torch.randn(2, L, 32, generator=torch.Generator().manual_seed(2))
    own = torch.arange(L)
    with torch.no_grad():
        base = core(x, is_causal=True)
        assert torch.allclose(base, core(x, is_causal=True, positions=(own + 11, own + 11)), atol=1e-5)
        queries_later = core(x, is_causal=True, positions=(own + 3, own))  # a different distance
    assert not torch.allclose(base, queries_later, atol=1e-3)


@pytest.mark.parametrize("family", ["ar", "aogpt", "sigma_gpt", "mdm"])
def test_rope_models_have_no_position_table_and_start_at_log_v(family):
    model = _model(family)
    learned = build_model(family, "0.1M", vocab_size=V, seq_len=L)
    assert model.wpe is None and all(not name.startswith("wpe") for name, _ in model.named_parameters())
    assert learned.count_params()["embedding"] - model.count_params()["embedding"] == (L + 1) * model.shape.d_model
    with torch.no_grad():
        tokens = _tokens(16)
        if family == "mdm":  # every position masked: the loss of each is the first-step NLL
            nll = model.masked_nll(tokens, torch.ones_like(tokens, dtype=torch.bool)).mean()
        else:
            nll = model.loss(tokens, torch.Generator().manual_seed(0))
    assert abs(nll.item() - math.log(V)) < 0.15


def test_ar_rope_slot_depends_only_on_earlier_tokens():
    model = _model("ar")
    x = _tokens()
    for t in (0, 5, L - 2):
        y = x.clone()
        y[:, t:] = (y[:, t:] + 1) % V
        with torch.no_grad():
            a, b = model(x), model(y)
        assert torch.equal(a[:, : t + 1], b[:, : t + 1])
        assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


def test_aogpt_rope_queries_turn_by_the_target_position():
    """With the target table zeroed (`input` injection), the target reaches slot j only through
    its query's rotation: swapping σj and σj+1 still changes slot j (it would not if queries
    turned by their own token's position) and nothing before it."""
    model = _model("aogpt", target_pe="input")
    with torch.no_grad():
        model.tpe[0].weight.zero_()
    x = _tokens(2, 1)
    order = torch.stack([torch.randperm(L, generator=torch.Generator().manual_seed(s)) for s in (2, 3)])
    j = 5
    swapped = order.clone()
    swapped[:, [j, j + 1]] = swapped[:, [j + 1, j]]
    with torch.no_grad():
        base, other = model(x, order), model(x, swapped)
    assert torch.equal(base[:, :j], other[:, :j])
    assert not torch.allclose(base[:, j], other[:, j], atol=1e-4)


def test_ar_rope_kv_cache_logits_equal_full_recomputation():
    model = _model("ar")
    out = sm.generate_ar(model, 3, L, generator=torch.Generator().manual_seed(1), record=True)
    with torch.no_grad():
        full = model(out.tokens.clone())
    assert (torch.stack(out.step_logits, 1) - full).abs().max() <= 1e-5


@pytest.mark.parametrize("family", ["aogpt", "sigma_gpt"])
def test_aogpt_rope_cached_decoding_equals_the_family_forward(family):
    """One token per step along a random order and along the identity order: the cached logits
    are the full forward's; parallel steps equal recomputation without a cache."""
    model = _model(family)
    identity = torch.arange(L).expand(2, L)
    for order in (None, identity):
        out = sm.generate_aogpt(model, 2, L, steps=L, order=order, generator=torch.Generator().manual_seed(3),
                                record=True)
        with torch.no_grad():
            full = model(out.tokens.clone(), out.order)
        assert (torch.cat(out.step_logits, 1) - full).abs().max() <= 1e-5
    out = sm.generate_aogpt(model, 2, L, steps=5, generator=torch.Generator().manual_seed(4), record=True)
    j = 0
    for k, cached in zip(out.counts, out.step_logits):
        with torch.no_grad():
            full = sm.aogpt_step_logits(model, out.tokens, out.order, j, k, cache=None)
        assert (cached - full).abs().max() <= 1e-5
        j += k
