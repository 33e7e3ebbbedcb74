"""Samplers: KV-cache equivalence, parallel-decoding attention, schedules, exact categorical draws."""
from __future__ import annotations

from functools import partial

import math

import pytest
import torch
from scipy import stats

from models import kernels
from models import sampling as sm
from models.core import KVCache
from tests.models.conftest import make_model

V, L = 13, 16


_model = partial(make_model, vocab_size=V, seq_len=L)


def test_ar_kv_cache_logits_equal_full_recomputation():
    model = _model("ar")
    out = sm.generate_ar(model, 3, L, generator=torch.Generator().manual_seed(1), record=True)
    cached = torch.stack(out.step_logits, 1)
    with torch.no_grad():
        full = model(out.tokens)
    assert (cached - full).abs().max() <= 1e-5


@pytest.mark.parametrize("family", ["aogpt", "sigma_gpt"])
@pytest.mark.parametrize("schedule,steps", [("linear", 5), ("cosine", 4), ("bernoulli", 6), ("linear", L)])
def test_aogpt_kv_cache_equals_recomputation_in_parallel_steps(family, schedule, steps):
    model = _model(family)
    out = sm.generate_aogpt(model, 3, L, steps=steps, schedule=schedule,
                            generator=torch.Generator().manual_seed(2), record=True)
    assert sum(out.counts) == L
    j, recorded = 0, iter(out.step_logits)
    for k in out.counts:
        if k == 0:
            continue
        with torch.no_grad():
            full = sm.aogpt_step_logits(model, out.tokens, out.order, j, k, cache=None)
        assert (next(recorded) - full).abs().max() <= 1e-5
        j += k


def test_kv_cache_buffers_grow_past_their_first_capacity():
    """150 slots outgrow the first buffer (64) twice; logits still equal the full forward."""
    n = 150
    assert n > 2 * KVCache.FIRST_CAPACITY
    ar, ao = _model("ar", seq_len=n), _model("aogpt", seq_len=n)
    out = sm.generate_ar(ar, 2, n, generator=torch.Generator().manual_seed(1), record=True)
    with torch.no_grad():
        assert (torch.stack(out.step_logits, 1) - ar(out.tokens)).abs().max() <= 1e-5
    out = sm.generate_aogpt(ao, 2, n, steps=n, generator=torch.Generator().manual_seed(3), record=True)
    with torch.no_grad():
        assert (torch.cat(out.step_logits, 1) - ao(out.tokens, out.order)).abs().max() <= 1e-5


def test_aogpt_one_token_per_step_matches_the_family_forward():
    model = _model("aogpt")
    out = sm.generate_aogpt(model, 2, L, steps=L, generator=torch.Generator().manual_seed(3), record=True)
    with torch.no_grad():
        full = model(out.tokens, out.order)
    assert (torch.cat(out.step_logits, 1) - full).abs().max() <= 1e-5


def test_each_parallel_query_sees_the_context_and_itself_only():
    """Query q of a step decoding σ_j..σ_{j+k-1} equals slot j of the order σ_<j, σ_{j+q}, ..."""
    model = _model("aogpt")
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, V, (2, L), generator=g)
    order = torch.rand(2, L, generator=g).argsort(1)
    j, k = 5, 4
    with torch.no_grad():
        step = sm.aogpt_step_logits(model, tokens, order, j, k)
        for q in range(k):
            moved = torch.cat([order[:, :j], order[:, j + q:j + q + 1], order[:, j:j + q], order[:, j + q + 1:]], 1)
            assert (step[:, q] - model(tokens, moved)[:, j]).abs().max() <= 1e-5


def test_deterministic_schedules_decode_every_position():
    assert sm.step_counts("linear", L, L) == [1] * L
    assert sm.step_counts("linear", L, 4) == [4] * 4
    for schedule in ("linear", "cosine"):
        for steps in (1, 3, 7, L, 2 * L):
            counts = sm.step_counts(schedule, L, steps)
            assert len(counts) == steps and sum(counts) == L
            done = [c for c in counts if c]
            assert counts[:len(done)] == done  # >= 1 token per step until every position is decoded
    cosine = sm.step_counts("cosine", 64, 8)
    assert cosine[0] < cosine[-1]  # cosine reveals few tokens first, many last


def test_bernoulli_step_counts_follow_the_binomial():
    """Each token is revealed at step i w.p. 1/T, so every step's count is Binomial(L, 1/T)."""
    g = torch.Generator().manual_seed(5)
    length, steps, n = 24, 6, 4000
    draws = torch.tensor([sm.step_counts("bernoulli", length, steps, g) for _ in range(n)])
    assert (draws.sum(1) == length).all()
    for i in (0, 3):
        pmf = stats.binom.pmf(range(length + 1), length, 1 / steps)
        observed = torch.bincount(draws[:, i], minlength=length + 1).numpy()
        keep = pmf * n >= 5  # pool the sparse tail into one bin
        obs = list(observed[keep]) + [observed[~keep].sum()]
        exp = list(pmf[keep] * n) + [pmf[~keep].sum() * n]
        assert stats.chisquare(obs, exp).pvalue > 0.001


def test_fp64_draws_match_softmax_and_top_p():
    g = torch.Generator().manual_seed(6)
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -3.0])
    n = 20000
    draws = sm.sample_logits(logits.expand(n, 5), 0.7, 1.0, g)
    p = torch.softmax(logits.double() / 0.7, 0).numpy()
    assert stats.chisquare(torch.bincount(draws, minlength=5).numpy(), p * n).pvalue > 0.001
    nucleus = sm.sample_logits(logits.expand(n, 5), 1.0, 0.8, g)
    assert set(nucleus.tolist()) == {0, 1}  # p = .64, .24, ...: the smallest prefix reaching .8
    assert sm.sample_logits(logits[None], 0.0)[0] == 0


def test_inverse_cdf_draws_follow_unnormalised_probabilities_and_skip_zeros():
    g = torch.Generator().manual_seed(7)
    weights = torch.tensor([0.0, 3.0, 0.0, 1.0, 6.0, 0.0], dtype=torch.float64)  # zeros at both ends
    n = 30000
    draws = sm.draw_categorical(weights.expand(n, 6), g)
    counts = torch.bincount(draws, minlength=6)
    assert counts[[0, 2, 5]].sum() == 0
    live = weights > 0
    expected = (weights[live] / weights.sum() * n).numpy()
    assert stats.chisquare(counts[live].numpy(), expected).pvalue > 0.001
    assert sm.draw_categorical(weights.view(1, 2, 3), g).shape == (1, 2)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="^logits: "):
            sm.sample_logits(torch.tensor([[0.0, bad, 1.0]]), generator=g)
    with pytest.raises(ValueError, match="^logits: "):
        sm.draw_categorical(torch.zeros(2, 3, dtype=torch.float64), g)
    logits = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    sm.sample_logits(logits, 0.5, generator=g)
    assert logits.tolist() == [[0.5, -1.0, 2.0]]  # fp64 logits are not modified in place


@pytest.mark.parametrize("tie_head", [True, False])
def test_decoding_reads_the_head_column_major_and_leaves_the_weights_alone(tie_head):
    model = _model("ar", tie_head=tie_head)
    before = {name: (p.data_ptr(), p.detach().clone()) for name, p in model.named_parameters()}
    h = torch.randn(2, 3, model.shape.d_model)
    with torch.no_grad():
        logits = model.logits_from_hidden(h)
    with pytest.raises(RuntimeError, match="inside"):
        with model.decoding(), torch.no_grad():
            head = model._decode_head[0]
            assert head.stride() == (1, V) and model.wte.weight.is_contiguous()  # lookups stay row-major
            assert (model.logits_from_hidden(h) - logits).abs().max() <= 1e-6
            raise RuntimeError("inside")
    for name, p in model.named_parameters():
        ptr, value = before[name]
        assert p.data_ptr() == ptr and p.is_contiguous() and torch.equal(p, value), name
    assert model._decode_head is None and model.core._decoder is None


@pytest.mark.parametrize("sampler", ["ancestral", "analytic", "euler"])
def test_mdm_samplers_fill_every_position(sampler):
    model = _model("mdm", loss="sedd" if sampler != "ancestral" else "mdlm")
    out = sm.generate_mdm(model, 3, L, 8, sampler, generator=torch.Generator().manual_seed(7))
    assert out.tokens.shape == (3, L) and (out.tokens < V).all() and sum(out.counts) == 3 * L


def test_mdm_cache_skips_the_network_without_changing_samples():
    model = _model("mdm")
    run = lambda cache: sm.generate_mdm(model, 4, L, 64, generator=torch.Generator().manual_seed(8), cache=cache)  # noqa: E731
    cached, plain = run(True), run(False)
    assert torch.equal(cached.tokens, plain.tokens)
    assert plain.n_rows == 4 * 64 and cached.n_rows < 4 * L  # network only for rows that reveal


def test_bad_sampler_arguments_are_value_errors():
    model = _model("aogpt")
    with pytest.raises(ValueError, match="schedule"):
        sm.generate_aogpt(model, 1, L, schedule="zigzag")
    with pytest.raises(ValueError, match="length"):
        sm.generate_aogpt(model, 1, L + 1)
    with pytest.raises(ValueError, match="steps"):
        sm.step_counts("linear", L, 0)
    assert math.isclose(sum(sm.step_counts("cosine", 100, 10)), 100)


@pytest.mark.skipif(not kernels.available(), reason="no C compiler: decoding runs eagerly")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("options", [{}, {"norm": "rmsnorm", "qk_norm": True, "tie_head": False}, {"pos": "rope"},
                                     {"pos": "rope", "norm": "rmsnorm", "qk_norm": True}],
                         ids=["gpt2", "rmsnorm-qknorm", "rope", "rope-rmsnorm-qknorm"])
def test_fused_decoding_steps_equal_the_eager_core(options, threads, monkeypatch):
    """Every cached step goes through decode.c (counted), and its logits equal recomputation
    by the eager core, in parallel steps (masks) and one-token steps, with 1 and 2 threads."""
    from models.kernels.decoder import Decoder

    calls = []
    original = Decoder.__call__
    monkeypatch.setattr(Decoder, "__call__", lambda self, *a: calls.append(1) or original(self, *a))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for family, steps in (("aogpt", 6), ("aogpt", L), ("ar", None)):
            model, calls[:] = _model(family, **options), []
            gen = torch.Generator().manual_seed(5)
            if family == "ar":
                out = sm.generate_ar(model, 3, L, generator=gen, record=True)
                with torch.no_grad():
                    assert (torch.stack(out.step_logits, 1) - model(out.tokens)).abs().max() <= 1e-5
            else:
                out = sm.generate_aogpt(model, 3, L, steps=steps, generator=gen, record=True)
                j = 0
                for k, logits in zip([k for k in out.counts if k], out.step_logits):
                    with torch.no_grad():
                        full = sm.aogpt_step_logits(model, out.tokens, out.order, j, k, cache=None)
                    assert (logits - full).abs().max() <= 1e-5
                    j += k
            assert len(calls) == out.n_forward
    finally:
        torch.set_num_threads(before)


def test_decoding_with_per_block_inputs_stays_eager_and_exact():
    """`layer_shared` adds a target embedding before every block: the kernel does not cover it."""
    model = _model("aogpt", target_pe="layer_shared")
    out = sm.generate_aogpt(model, 2, L, steps=L, generator=torch.Generator().manual_seed(6), record=True)
    with torch.no_grad():
        assert (torch.cat(out.step_logits, 1) - model(out.tokens, out.order)).abs().max() <= 1e-5


@pytest.mark.skipif(not kernels.available(), reason="no C compiler: decoding runs eagerly")
def test_the_decoding_kernel_refuses_a_mask_or_positions_it_cannot_read():
    model = _model("aogpt")
    cache, x = KVCache(model.shape.n_layer), torch.randn(2, 3, model.shape.d_model)
    with torch.no_grad(), model.decoding():
        decoder, tables = model.core._decoder, model.modulation_tables()[0]
        targets = torch.zeros(2, 3, dtype=torch.long)
        with pytest.raises(ValueError, match="^attn_mask"):
            decoder(x, cache, tables, targets, torch.ones(3, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="^cond_index"):
            decoder(x, cache, tables, targets + L, None)
