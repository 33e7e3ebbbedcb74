"""Dependence structure, options and bad input of the four families."""
import pytest
import torch

from models import FAMILIES, build_model
from tests.models.conftest import make_tokens

V, L = 11, 8


def _tokens(seed=0, batch=2):
    return make_tokens(batch, seed, vocab_size=V, seq_len=L)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_ar_slot_depends_only_on_earlier_tokens():
    model = build_model("ar", "0.1M", vocab_size=V, seq_len=L).eval()
    x = _tokens()
    for t in range(L):
        y = x.clone()
        y[:, t:] = (y[:, t:] + 1) % V
        with torch.no_grad():
            a, b = model(x), model(y)
        assert torch.equal(a[:, : t + 1], b[:, : t + 1])  # slot t predicts x_t from x_<t
        if t + 1 < L:
            assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


@pytest.mark.parametrize("pos", ["learned", "rope"])
@pytest.mark.parametrize("target_pe", ["adaln", "input", "layer_shared", "layer_distinct"])
def test_aogpt_slot_depends_on_context_set_and_target_only(target_pe, pos):
    model = build_model("aogpt", "0.1M", vocab_size=V, seq_len=L, target_pe=target_pe, pos=pos).eval()
    x = _tokens(1)
    order = torch.stack([torch.randperm(L, generator=torch.Generator().manual_seed(s)) for s in (2, 3)])
    j = 4
    later = order[:, j:]  # positions σ_{>=j}: their tokens must not reach slots <= j
    y = x.clone().scatter_(1, later, (x.gather(1, later) + 1) % V)
    # an order sharing σ_{<=j} but permuting the rest
    tail = order[:, j + 1 :].flip(1)
    order2 = torch.cat([order[:, : j + 1], tail], 1)
    with torch.no_grad():
        base = model(x, order)
        assert torch.equal(base[:, : j + 1], model(y, order)[:, : j + 1])
        assert torch.equal(base[:, : j + 1], model(x, order2)[:, : j + 1])
        # a different target at slot j with the same context set changes slot j only from j on
        swapped = order.clone()
        swapped[:, [j, j + 1]] = swapped[:, [j + 1, j]]
        other = model(x, swapped)
    assert torch.equal(base[:, :j], other[:, :j])
    assert not torch.allclose(base[:, j], other[:, j])


def test_mdm_attends_both_ways():
    model = build_model("mdm", "0.1M", vocab_size=V, seq_len=L).eval()
    x = _tokens(4)
    x_t = x.clone()
    x_t[:, 1:-1] = model.mask_id
    first, last = x_t.clone(), x_t.clone()
    first[:, 0] = (first[:, 0] + 1) % V
    last[:, -1] = (last[:, -1] + 1) % V
    with torch.no_grad():
        base = model(x_t)
        assert not torch.allclose(base[:, -2], model(first)[:, -2])  # left token reaches the right
        assert not torch.allclose(base[:, 1], model(last)[:, 1])  # and the right reaches the left


def test_mdm_subs_scores_masked_positions_only():
    model = build_model("mdm", "0.1M", vocab_size=V, seq_len=L)
    x = _tokens(5)
    mask = torch.zeros_like(x, dtype=torch.bool)
    mask[:, ::2] = True
    nll = model.masked_nll(x, mask)
    assert torch.all(nll[~mask] == 0) and torch.all(nll[mask] > 0)
    with torch.no_grad():
        assert model(x).shape[-1] == V  # the mask token is never predicted


@pytest.mark.parametrize("family,options", [
    ("ar", {}), ("aogpt", {}), ("aogpt", {"target_pe": "input", "norm": "rmsnorm", "qk_norm": True}),
    ("aogpt", {"tie_head": False, "order": "blockwise:3"}), ("sigma_gpt", {}),
    ("mdm", {"loss": "mdlm"}), ("mdm", {"loss": "kdce"}), ("mdm", {"loss": "sedd"}),
])
def test_loss_is_finite_scalar_and_reproducible(family, options):
    model = build_model(family, "0.1M", vocab_size=V, seq_len=L, **options)
    x = _tokens(6, batch=4)
    a = model.loss(x, torch.Generator().manual_seed(7))
    b = model.loss(x, torch.Generator().manual_seed(7))
    assert a.dim() == 0 and torch.isfinite(a) and a.item() == b.item()
    a.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_param_groups_add_up_and_name_the_conditioning():
    n_layer, d, c = 3, 96, 128  # the 0.3M shape; AO-GPT's conditioning width
    core = n_layer * (12 * d * d + 13 * d) + 2 * d  # per block qkv, proj, fc, proj + biases, 2 norms; final norm
    embedding = {"ar": (V + L + 2) * d, "aogpt": (V + L + 2) * d, "sigma_gpt": (V + L + 2) * d,
                 "mdm": (V + 1 + L + 1) * d}  # tokens (+ mask), positions + start slot (+ its vector)
    adaln = L * c + n_layer * (6 * d * c + 6 * d) + 2 * d * c + 2 * d  # target table, Linear(c, 6d) per block, final
    target_cond = {"ar": 0, "aogpt": adaln, "sigma_gpt": L * d, "mdm": 0}
    for family in FAMILIES:
        counts = build_model(family, "0.3M", vocab_size=V, seq_len=L).count_params()
        assert (counts["core"], counts["embedding"], counts["target_cond"]) == (core, embedding[family],
                                                                               target_cond[family]), family
        groups = counts["embedding"] + counts["core"] + counts["target_cond"] + counts["time_cond"] + counts["head"]
        assert groups == counts["total"] == sum(p.numel() for p in build_model(family, "0.3M", vocab_size=V,
                                                                                seq_len=L).parameters())
    ao = build_model("aogpt", "0.3M", vocab_size=V, seq_len=L, tie_head=False).count_params()
    ar = build_model("ar", "0.3M", vocab_size=V, seq_len=L).count_params()
    assert ao["core"] == ar["core"] and ao["target_cond"] > 0 and ao["head"] == 96 * V + V
    sedd = build_model("mdm", "0.3M", vocab_size=V, seq_len=L, loss="sedd").count_params()
    assert sedd["time_cond"] > 0 and sedd["target_cond"] == 0


def test_sigma_gpt_defaults_are_sigma_gpts_recipe():
    model = build_model("sigma_gpt", "0.1M", vocab_size=V, seq_len=L)
    assert model.options["target_pe"] == "input" and model.options["order"] == "uniform"
    assert model.options["norm"] == "layernorm" and model.options["tie_head"] is True


@pytest.mark.parametrize("call,field", [
    (lambda: build_model("gpt", "0.1M", vocab_size=V, seq_len=L), "family"),
    (lambda: build_model("ar", "12X", vocab_size=V, seq_len=L), "size"),
    (lambda: build_model("aogpt", "0.1M", vocab_size=V, seq_len=L, order="zigzag"), "order"),
    (lambda: build_model("aogpt", "0.1M", vocab_size=V, seq_len=L, order="mix:1.5"), "order"),
    (lambda: build_model("aogpt", "0.1M", vocab_size=V, seq_len=L, target_pe="rope"), "target_pe"),
    (lambda: build_model("ar", "0.1M", vocab_size=V, seq_len=L, order="l2r"), "order"),
    (lambda: build_model("mdm", "0.1M", vocab_size=V, seq_len=L, loss="ce"), "loss"),
    (lambda: build_model("ar", "0.1M", vocab_size=V, seq_len=L, norm="batchnorm"), "norm"),
])
def test_bad_options_name_the_field_and_choices(call, field):
    with pytest.raises(ValueError, match=rf"^{field}: .*valid|^{field}: .*expected"):
        call()


def test_bad_tokens_are_rejected():
    model = build_model("ar", "0.1M", vocab_size=V, seq_len=L)
    with pytest.raises(ValueError, match="^seq_len"):
        model.loss(torch.zeros(1, L + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="^tokens"):
        model.loss(torch.full((1, L), V))
