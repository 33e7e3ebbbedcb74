"""adaLN modulation: the fused CPU kernels and the eager row operations against the plain
tensor expressions they replace, in value and gradient (whole models: test_kernel_seam.py)."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models import build_model, kernels, modulation
from models.modulation import ChunkProjection, modulation_rows, mul_add

P, D = 6, 24  # table rows, width


def _chunk_major(table: torch.Tensor, n: int) -> torch.Tensor:
    return table.unflatten(-1, (n, -1)).movedim(-2, 0).contiguous()  # [..., n·d] -> [n, ..., d]


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    """The backward kernels take a different path with one thread (no partial sums)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _inputs(seed, n_rows=40):
    gen = torch.Generator().manual_seed(seed)
    leaf = lambda *shape: torch.randn(*shape, generator=gen).requires_grad_()  # noqa: E731
    index = torch.randint(0, P, (n_rows,), generator=gen)  # rows repeat: table gradients accumulate
    return gen, leaf(n_rows, D), index, leaf(P, D), leaf(P, D), leaf(D), leaf(D)


def _reference_norm(x, index, scale, shift, weight, bias, center):
    normed = F.layer_norm(x, (D,), weight, bias, 1e-5) if center else F.rms_norm(x, (D,), weight, 1e-5)
    if not center and bias is not None:
        normed = normed + bias
    return normed * scale[index] + shift[index]


@pytest.mark.skipif(not kernels.available(), reason="no C compiler: the eager path is tested instead")
@pytest.mark.parametrize("center", [True, False], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("affine", ["weight+bias", "weight", "none"])
def test_modulated_norm_kernel_matches_the_plain_expression(center, affine, threads):
    gen, x, index, scale, shift, weight, bias = _inputs(0)
    weight = None if affine == "none" else weight
    bias = bias if affine == "weight+bias" else None
    ours = kernels.modulated_norm(x, index, scale, shift, weight, bias, 1e-5, center)
    plain = _reference_norm(x, index, scale, shift, weight, bias, center)
    assert torch.allclose(ours, plain, rtol=0, atol=2e-6)
    leaves = [t for t in (x, scale, shift, weight, bias) if t is not None]
    grad_out = torch.randn(ours.shape, generator=gen)
    for a, b in zip(torch.autograd.grad(ours, leaves, grad_out), torch.autograd.grad(plain, leaves, grad_out)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a - b).abs().max()


@pytest.mark.skipif(not kernels.available(), reason="no C compiler: the eager path is tested instead")
@pytest.mark.parametrize("center", [True, False], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("stream_used", [True, False], ids=["stream-used", "only-norm-used"])
def test_residual_norm_kernel_matches_the_plain_expression(center, stream_used, threads):
    gen, x, index, scale, shift, weight, bias = _inputs(1)
    y, gate = torch.randn(x.shape, generator=gen).requires_grad_(), torch.randn(P, D, generator=gen).requires_grad_()
    x1, h = kernels.residual_norm(x, y, index, gate, scale, shift, weight, bias, 1e-5, center)
    plain_x1 = x + gate[index] * y
    plain_h = _reference_norm(plain_x1, index, scale, shift, weight, bias, center)
    assert torch.allclose(x1, plain_x1, rtol=1e-6, atol=1e-6)  # the kernel may fuse multiply-add
    assert torch.allclose(h, plain_h, rtol=0, atol=1e-5)
    leaves = (x, y, gate, scale, shift, weight, bias)
    grad_h, grad_x1 = torch.randn(h.shape, generator=gen), torch.randn(h.shape, generator=gen)
    ours = (h * grad_h).sum() + ((x1 * grad_x1).sum() if stream_used else 0)
    plain = (plain_h * grad_h).sum() + ((plain_x1 * grad_x1).sum() if stream_used else 0)
    for a, b in zip(torch.autograd.grad(ours, leaves), torch.autograd.grad(plain, leaves)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a - b).abs().max()


def test_chunk_projection_equals_the_linear_split_into_chunks_with_one_added_to_scales():
    projection = ChunkProjection(5, 6, 4)
    c = torch.randn(2, 3, 5)
    tables = projection(c)
    expected = _chunk_major(nn.Linear.forward(projection, c), 6) + torch.tensor([0, 1, 0, 0, 1, 0.0]).view(6, 1, 1, 1)
    assert tables.shape == (6, 2, 3, 4) and tables.is_contiguous()
    assert torch.allclose(tables, expected, rtol=0, atol=1e-6)


def test_kernels_can_be_switched_off_and_then_the_models_still_train():
    code = ("import torch; from models import build_model, kernels; assert not kernels.available(); "
            "m = build_model('aogpt', '0.1M', vocab_size=11, seq_len=16); "
            "m.loss(torch.randint(0, 11, (2, 16))).backward(); print('ok')")
    env = {**os.environ, "AOSCALE_KERNELS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_a_missing_compiler_warns_once_and_falls_back_to_the_eager_path(tmp_path):
    code = ("import warnings, torch; from models import build_model, kernels\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    m = build_model('aogpt', '0.1M', vocab_size=11, seq_len=16)\n"
            "    for _ in range(2): m.loss(torch.randint(0, 11, (16, 16))).backward()\n"
            "print(kernels.available(), sum('kernels unavailable' in str(w.message) for w in caught))")
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "AOSCALE_KERNEL_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "1"]
    assert not any((tmp_path / "cache").glob("*.so"))


@pytest.mark.skipif(not kernels.available(), reason="no C compiler")
def test_the_build_is_cached_under_a_key_of_source_compiler_and_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("AOSCALE_KERNEL_CACHE", str(tmp_path))
    first = kernels.build()
    assert first.parent == tmp_path and first.name.startswith("aoscale-kernels-") and first.suffix == ".so"
    stamp = first.stat().st_mtime_ns
    assert kernels.build() == first and first.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary file left


@pytest.mark.parametrize("one_gather_max_bytes", [0, 1 << 24])  # chunk by chunk, or one gather
def test_gathered_modulation_matches_plain_indexing_in_value_and_gradient(one_gather_max_bytes, monkeypatch):
    monkeypatch.setattr(modulation, "ONE_GATHER_MAX_BYTES", one_gather_max_bytes)
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(5, 3 * 4, generator=gen, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 5, (2, 7), generator=gen)  # repeated rows accumulate gradients
    fast = modulation_rows(_chunk_major(table, 3), index)
    plain = modulation_rows(_chunk_major(table[index], 3), None)
    weights = [torch.randn(2, 7, 4, generator=gen, dtype=torch.float64) for _ in range(3)]
    for a, b in zip(fast, plain):
        assert torch.equal(a, b)
    (grad_fast,) = torch.autograd.grad(sum((w * a).sum() for w, a in zip(weights, fast)), table)
    (grad_plain,) = torch.autograd.grad(sum((w * b).sum() for w, b in zip(weights, plain)), table)
    assert torch.allclose(grad_fast, grad_plain, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: modulation_rows(_chunk_major(t, 3), index), (table,))


@pytest.mark.parametrize("shapes", [((2, 7, 4),) * 3, ((2, 7, 4), (2, 7, 4), (2, 1, 4)), ((1, 4), (2, 7, 4), (2, 7, 1))])
def test_mul_add_equals_addcmul_in_value_and_gradient(shapes):
    gen = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True) for s in shapes)
    out = mul_add(a, b, c)
    assert torch.equal(out, torch.addcmul(a, b, c))
    weight = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad((weight * out).sum(), (a, b, c))
    reference = torch.autograd.grad((weight * torch.addcmul(a, b, c)).sum(), (a, b, c))
    for x, y in zip(ours, reference):
        assert x.shape == y.shape and torch.allclose(x, y, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(mul_add, (a, b, c))


@pytest.mark.skipif(not kernels.available(), reason="no C compiler")
def test_positions_outside_the_tables_are_refused_before_the_kernels_read_them():
    model = build_model("aogpt", "0.1M", vocab_size=11, seq_len=16)
    x = torch.randn(16, 16, model.shape.d_model)  # 256 rows: the kernels' pass
    index = torch.zeros(16, 16, dtype=torch.long)
    with torch.no_grad():
        model.core(x, cond=model.tpe[0].weight, cond_index=index)
        index[3, 5] = 16
        with pytest.raises(ValueError, match="^cond_index"):
            model.core(x, cond=model.tpe[0].weight, cond_index=index)


@pytest.mark.skipif(not kernels.available(), reason="no C compiler")
def test_an_index_the_kernels_cannot_read_is_refused():
    _, x, index, scale, shift, weight, bias = _inputs(3)
    with pytest.raises(ValueError, match="^index"):
        kernels.modulated_norm(x, index.int(), scale, shift, weight, bias)
    with pytest.raises(ValueError, match="^index"):
        kernels.modulated_norm(x, index, scale.t().contiguous().t(), shift, weight, bias)
