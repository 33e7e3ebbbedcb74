"""models.orders and models.rope as units: order strings round-trip, every drawn order is a
permutation of the kind asked for, and RoPE turns pair i by position * 10000^(-2i/hd)."""
from __future__ import annotations

import math

import pytest
import torch

from models.orders import OrderSpec, parse_order, sample_orders
from models.rope import ROPE_BASE, rope_angles, rope_frequencies


@pytest.mark.parametrize("text", ["l2r", "r2l", "uniform", "mix:0.25", "fixed:7", "blockwise:3"])
def test_an_order_string_round_trips(text):
    assert str(parse_order(text)) == text


@pytest.mark.parametrize("text", ["l2r:1", "mix:1.5", "fixed:-1", "blockwise:0", "spiral", "mix:x"])
def test_a_bad_order_string_is_refused_with_the_valid_kinds(text):
    with pytest.raises(ValueError, match=r"^order: invalid order .*; valid: l2r, r2l, uniform, mix:P"):
        parse_order(text)


def test_fixed_and_directional_orders_are_exact():
    assert sample_orders("l2r", 2, 4).tolist() == [[0, 1, 2, 3]] * 2
    assert sample_orders("r2l", 1, 4).tolist() == [[3, 2, 1, 0]]
    fixed = sample_orders(OrderSpec("fixed", 7), 3, 6)
    assert (fixed == fixed[0]).all() and sorted(fixed[0].tolist()) == list(range(6))
    assert fixed[0].tolist() == torch.randperm(6, generator=torch.Generator().manual_seed(7)).tolist()
    assert sample_orders("mix:1.0", 2, 5).tolist() == [[0, 1, 2, 3, 4]] * 2


def test_blockwise_orders_visit_whole_blocks_left_to_right_with_a_short_last_block():
    orders = sample_orders("blockwise:3", 64, 7, generator=torch.Generator().manual_seed(0))
    for row in orders.tolist():
        assert sorted(row) == list(range(7))
        for start in (0, 3, 6):  # each block's positions stand together, left to right
            at = row.index(start)
            assert row[at:at + min(3, 7 - start)] == list(range(start, min(start + 3, 7)))
    assert len({tuple(r) for r in orders.tolist()}) == 6  # 3 blocks: all 3! block orders drawn


def test_rope_turns_pair_i_by_position_times_its_frequency():
    freqs = rope_frequencies(8)
    assert freqs.tolist() == pytest.approx([1.0, ROPE_BASE ** -0.25, ROPE_BASE ** -0.5, ROPE_BASE ** -0.75])
    cos, sin = rope_angles(torch.tensor([0, 3]), 8)
    assert cos.shape == (2, 8) and cos[0].tolist() == [1.0] * 8 and sin[0].tolist() == [0.0] * 8
    assert sin[1, 1].item() == pytest.approx(math.sin(3 * ROPE_BASE ** -0.25), rel=1e-6)
    assert torch.equal(cos[:, :4], cos[:, 4:]) and torch.equal(sin[:, :4], sin[:, 4:])  # the rotate-half layout
