"""Per-family training FLOPs per token against closed-form counts (adaLN, time MLP, heads)."""
from __future__ import annotations

import pytest

from models import build_model
from models.families.mdm import TIME_FREQ_DIM
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
def test_aogpt_adaln_adds_its_modulation_per_token(c):
    model = build_model("aogpt", "0.3M", vocab_size=VOCAB, seq_len=SEQ, cond_dim=c)
    assert model.flops_per_token() == _core("0.3M") + 6.0 * _adaln("0.3M", c)
    assert model.flops_per_token() > build_model("ar", "0.3M", vocab_size=VOCAB, seq_len=SEQ).flops_per_token()


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
