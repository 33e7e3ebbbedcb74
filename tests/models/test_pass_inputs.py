"""Blocks and attention read a pass's shared inputs from one named tuple (`models.core.PassInputs`)."""
from __future__ import annotations

import inspect

import torch

from models.core import Attention, Block, CoreConfig, PassInputs, Transformer


def test_block_and_attention_take_a_handful_of_named_arguments():
    assert list(inspect.signature(Block.forward).parameters) == ["self", "x", "inputs", "mod", "layer"]
    assert list(inspect.signature(Attention.forward).parameters) == ["self", "x", "inputs", "layer"]
    assert PassInputs._fields == ("attn_mask", "is_causal", "rotary", "cache")


def test_the_blocks_by_hand_give_the_cores_pass_bit_for_bit():
    torch.manual_seed(0)
    core = Transformer(CoreConfig(n_layer=2, d_model=32, n_head=4, pos="rope")).eval()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        expected = core(x, is_causal=True)
        inputs = PassInputs(is_causal=True, rotary=core.rotary(x, None, None))
        h = x
        for i, block in enumerate(core.blocks):
            h = block(h, inputs, layer=i)
        assert torch.equal(core.norm(h), expected)
