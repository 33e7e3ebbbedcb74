"""Per-family training FLOPs per token against closed-form counts (adaLN, time MLP, heads) and
against the matmul FLOPs of one real forward + backward (torch.utils.flop_counter)."""
from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from models import build_model
from models.families.mdm import TIME_FREQ_DIM
from models.kernels import cpu_backend
from models.ladder import get_shape, train_flops_per_token

SEQ, VOCAB = 32, 257


def _core(size: str, vocab: int = VOCAB) -> float:
    """The AR count: 6·12·L·d² + 6·L·n_ctx·d + 6·d·V (Kaplan et al. 2020)."""
    return float(train_flops_per_token(get_shape(size), SEQ, vocab))


def _adaln(size: str, c: int) -> int:
    """Weights of the adaLN projections: c -> 6d per block and c -> 2d for the final norm."""
    shape = get_shape(size)
    return shape.n_layer * c * 6 * shape.d_model + c * 2 * shape.d_model


@pytest.mark.parametrize("size", ["0.1M", "0.3M", "2/48/2"])
def test_ar_is_the_ladder_count(size):
    assert build_model("ar", size, vocab_size=VOCAB, seq_len=SEQ).flops_per_token() == _core(size)


@pytest.mark.parametrize("c", [128, 16])
@pytest.mark.parametrize("passes", [1, 4, 64])
def test_aogpt_adaln_adds_its_modulation_once_per_position_and_pass(c, passes):
    # the table of SEQ positions is projected once per pass of `passes` sequences: 1 / passes row per token
    model = build_model("aogpt", "0.3M", vocab_size=VOCAB, seq_len=SEQ, cond_dim=c)
    assert model.flops_per_token(passes) == _core("0.3M") + 6.0 * _adaln("0.3M", c) / passes
    assert model.flops_per_token(passes) > build_model("ar", "0.3M", vocab_size=VOCAB, seq_len=SEQ).flops_per_token()


def test_aogpt_2_48_3_at_t32_is_charged_less_than_per_token_by_the_expected_amount():
    # issue 47: charged per token, AO-GPT 2/48/3 cost 940,320 FLOPs per token against AR's 424,224
    aogpt = build_model("aogpt", "2/48/3", vocab_size=VOCAB, seq_len=SEQ)
    ar = build_model("ar", "2/48/3", vocab_size=VOCAB, seq_len=SEQ)
    modulation = 2 * 128 * 6 * 48 + 128 * 2 * 48  # 86,016 adaLN weights
    assert (aogpt.flops_per_token(), ar.flops_per_token()) == (940_320, 424_224)
    # a study at T = 32 passes the CPU rule's 2,048-token batch: 64 sequences
    from scaling.study.sweep import family_fpt  # noqa: PLC0415 - the planner's count

    planned = family_fpt({"tokenizer": "bytes", "seq_len": SEQ})[0]
    assert planned("aogpt", dict(aogpt.options), "2/48/3") == aogpt.flops_per_token(64) == 432_288
    assert 940_320 - 432_288 == 6 * modulation * (1 - 1 / 64)  # 508,032 fewer: the 63 of 64 passes' rows
    assert planned("ar", {}, "2/48/3") == ar.flops_per_token(64) == 424_224  # AR's count has no pass in it


@pytest.mark.parametrize("passes", [0, -1, 1.5, True])
def test_a_pass_size_that_is_not_a_positive_integer_is_refused(passes):
    with pytest.raises(ValueError, match="sequences_per_pass: must be a positive integer"):
        build_model("ar", "0.1M", vocab_size=VOCAB, seq_len=SEQ).flops_per_token(passes)


@pytest.mark.parametrize("target_pe", ["input", "layer_shared", "layer_distinct"])
def test_additive_target_positions_cost_no_matmul(target_pe):
    model = build_model("aogpt", "0.1M", vocab_size=VOCAB, seq_len=SEQ, target_pe=target_pe)
    assert model.flops_per_token() == _core("0.1M")
    assert build_model("sigma_gpt", "0.1M", vocab_size=VOCAB, seq_len=SEQ).flops_per_token() == _core("0.1M")


def test_mdm_time_conditioning_is_charged_once_per_sequence():
    plain = build_model("mdm", "0.1M", vocab_size=VOCAB, seq_len=SEQ)
    assert plain.flops_per_token() == _core("0.1M")
    c = 64
    sedd = build_model("mdm", "0.1M", vocab_size=VOCAB, seq_len=SEQ, loss="sedd", cond_dim=c)
    time_mlp = TIME_FREQ_DIM * c + c * c
    assert sedd.flops_per_token() == pytest.approx(_core("0.1M") + 6.0 * (time_mlp + _adaln("0.1M", c)) / SEQ,
                                                   rel=1e-12)


def test_an_untied_head_counts_like_a_tied_one():
    tied = build_model("ar", "0.1M", vocab_size=VOCAB, seq_len=SEQ)
    untied = build_model("ar", "0.1M", vocab_size=VOCAB, seq_len=SEQ, tie_head=False)
    assert untied.flops_per_token() == tied.flops_per_token()


# ---- the count against what one forward + backward executes ----------------------------------------
def _measured(model, passes: int, math_attention: bool = False) -> dict[str, float]:
    """Matmul FLOPs per token of one training forward + backward of `passes` sequences of SEQ tokens
    on the eager core, by op (torch.utils.flop_counter); with `math_attention` the attention runs
    as plain products (SDPA's math path), which the counter sees."""
    tokens = torch.randint(0, VOCAB, (passes, SEQ), generator=torch.Generator().manual_seed(0))
    backends = [SDPBackend.MATH] if math_attention else [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(backends), FlopCounterMode(display=False) as counter:
        model.loss(tokens, torch.Generator().manual_seed(1)).backward()
    return {str(op): flops / (passes * SEQ) for op, flops in counter.get_flop_counts()["Global"].items()}


def _weights(counts: dict[str, float]) -> float:
    """The weight matmuls: every counted op but attention's own (SDPA kernels a counter may know)."""
    return sum(v for op, v in counts.items() if "scaled_dot_product" not in op)


FAMILIES = [("ar", {}), ("aogpt", {}), ("aogpt", {"order": "l2r", "cond_dim": 16}), ("aogpt", {"target_pe": "input"}),
            ("sigma_gpt", {}), ("mdm", {})]


@pytest.mark.parametrize("family, options", FAMILIES)
@pytest.mark.parametrize("passes", [1, 4])
def test_the_count_is_the_matmuls_one_forward_and_backward_execute(monkeypatch, family, options, passes):
    """Weight matmuls exactly (forward 2·rows·in·out, backward twice that), attention as the
    convention's 6·L·n_ctx·d (below), at 1 and 4 sequences per pass (AO-GPT's adaLN rows per pass)."""
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)  # the eager core: every product visible
    torch.manual_seed(0)
    model = build_model(family, "2/48/3", vocab_size=VOCAB, seq_len=SEQ, **options)
    shape = get_shape("2/48/3")
    attention = 6.0 * shape.n_layer * SEQ * shape.d_model
    assert _weights(_measured(model, passes)) + attention == model.flops_per_token(passes)


def test_attention_is_charged_as_the_causal_half_of_the_dense_products(monkeypatch):
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)
    model = build_model("ar", "2/48/3", vocab_size=VOCAB, seq_len=SEQ)
    dense = _measured(model, 2, math_attention=True)
    shape = get_shape("2/48/3")
    # QK^T and AV over all SEQ keys, forward and backward: 12·L·T·d per token, twice the count's 6·L·T·d
    assert sum(dense.values()) - _weights(_measured(model, 2)) == 12.0 * shape.n_layer * SEQ * shape.d_model


def test_mdm_time_mlp_first_layer_is_charged_an_input_gradient_it_does_not_compute(monkeypatch):
    """The convention charges every conditioning matmul 3x its forward; the time MLP's first layer
    reads a sinusoid that needs no gradient, so it executes 2x: the count is 2·F·c / T per token
    above the products (kept: MDM's planned runs and run ids do not change)."""
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)
    c = 64
    model = build_model("mdm", "2/48/3", vocab_size=VOCAB, seq_len=SEQ, loss="sedd", cond_dim=c)
    shape = get_shape("2/48/3")
    attention = 6.0 * shape.n_layer * SEQ * shape.d_model
    executed = _weights(_measured(model, 4)) + attention
    assert model.flops_per_token(4) - executed == pytest.approx(2.0 * TIME_FREQ_DIM * c / SEQ, rel=1e-12)
