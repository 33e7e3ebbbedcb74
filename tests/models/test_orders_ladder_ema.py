"""Orders, the size ladder and EMA."""

import pytest
import torch
from scipy import stats

from models import LADDER, build_model, get_shape, parse_sizes, sample_orders
from models.ema import EMA, ema_decay
from models.ladder import core_params, train_flops_per_token

GEN = lambda s=0: torch.Generator().manual_seed(s)  # noqa: E731


@pytest.mark.parametrize("order", ["l2r", "r2l", "uniform", "mix:0.1", "fixed:3", "blockwise:3"])
def test_every_order_row_is_a_permutation(order):
    orders = sample_orders(order, 64, 10, GEN())
    assert orders.shape == (64, 10)
    assert torch.equal(orders.sort(1).values, torch.arange(10).expand(64, 10))


def test_fixed_l2r_r2l():
    assert torch.equal(sample_orders("l2r", 2, 5)[0], torch.arange(5))
    assert torch.equal(sample_orders("r2l", 2, 5)[0], torch.arange(4, -1, -1))
    fixed = sample_orders("fixed:7", 3, 9, GEN(1))
    assert torch.equal(fixed[0], fixed[2]) and torch.equal(fixed, sample_orders("fixed:7", 3, 9, GEN(2)))
    assert not torch.equal(fixed[0], torch.arange(9))


def test_mix_probability_is_the_l2r_fraction():
    n, p = 4000, 0.1
    orders = sample_orders("mix:0.1", n, 12, GEN(5))
    l2r = (orders == torch.arange(12)).all(1).sum().item()
    # uniform permutations are L2R with probability 1/12! (negligible): a binomial test on p
    assert stats.binomtest(l2r, n, p).pvalue > 1e-3


def test_blockwise_is_l2r_inside_blocks():
    orders = sample_orders("blockwise:4", 16, 10, GEN(2))  # blocks [0-3] [4-7] [8-9]
    for row in orders.tolist():
        starts = [i for i, p in enumerate(row) if p % 4 == 0]
        for s in starts:
            block_len = min(4, 10 - row[s])
            assert row[s : s + block_len] == list(range(row[s], row[s] + block_len)), row
    assert len({tuple(r) for r in orders.tolist()}) > 1


def test_uniform_orders_are_uniform_over_first_position():
    first = sample_orders("uniform", 6000, 6, GEN(3))[:, 0]
    counts = torch.bincount(first, minlength=6).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3


def test_ladder_names_and_custom_shapes():
    assert parse_sizes("125M, 350M,760M") == ["125M", "350M", "760M"]
    assert get_shape("6/384/6").d_model == 384
    for bad in ("12X", "6/385/6", ""):
        with pytest.raises(ValueError, match="^size"):
            parse_sizes(bad) if bad else parse_sizes("12X")
    for name, shape in LADDER.items():
        if name.endswith("M") and float(name[:-1]) < 100:  # CPU rungs are named by 12·L·d²
            assert 0.7 < 12 * shape.n_layer * shape.d_model**2 / (float(name[:-1]) * 1e6) < 1.45


@pytest.mark.parametrize("size,published", [("125M", 125e6), ("350M", 350e6), ("760M", 760e6)])
def test_gpt3_rungs_match_published_sizes(size, published):
    with torch.device("meta"):
        counts = build_model("ar", size, vocab_size=50257, seq_len=2048).count_params()
    assert abs(counts["total"] / published - 1) < 0.03
    assert counts["core"] == core_params(get_shape(size))


def test_flops_per_token_matches_the_analytic_formula_for_ar():
    model = build_model("ar", "0.3M", vocab_size=257, seq_len=64)
    assert model.flops_per_token() == train_flops_per_token(get_shape("0.3M"), 64, 257)


def test_ema_warmup_and_average():
    assert ema_decay(0.9999, 0) == pytest.approx(0.1) and ema_decay(0.99, 10**6) == 0.99
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(-1.0)
    ema = EMA(model, 0.9)
    expected = -1.0
    for n in range(30):
        with torch.no_grad():
            model.weight.fill_(float(n))
        ema.update()
        d = min(0.9, (1 + n) / (10 + n))
        expected = d * expected + (1 - d) * n
    assert ema.shadow["weight"].item() == pytest.approx(expected, rel=1e-6)
    target = torch.nn.Linear(1, 1, bias=False)
    ema.apply_to(target)
    assert target.weight.item() == pytest.approx(expected, rel=1e-6)
    restored = EMA(model, 0.9)
    restored.load_state_dict(ema.state_dict())
    assert restored.n_updates == 30 and torch.equal(restored.shadow["weight"], ema.shadow["weight"])
    off = EMA(model, 0.0)
    off.update()
    assert not off.enabled and off.shadow == {}
