"""The seam between the eager core and the fused CPU kernels (`models.kernels.cpu_backend.backend()`): with
the kernels on, off, and on a pass they do not cover, the same losses, gradients and logits."""
import pytest
import torch

from models import build_model, kernels
from models import sampling as sm
from models.kernels import cpu_backend
from models.kernels.decoder import Decoder

V, L = 11, 16
needs_kernels = pytest.mark.skipif(not kernels.available(), reason="no C compiler: only the eager path runs")


def _count(monkeypatch, cls, name) -> list:
    """Calls of cls.name, counted."""
    calls, original = [], getattr(cls, name)
    monkeypatch.setattr(cls, name, lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    return calls


def _loss_and_grads(model, tokens):
    loss = model.loss(tokens, torch.Generator().manual_seed(3))
    return loss, torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)


def _assert_close(a, b, rtol, atol):
    for x, y in zip(a, b, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            assert torch.allclose(x, y, rtol=rtol, atol=atol), (x - y).abs().max()


@needs_kernels
@pytest.mark.parametrize("family, options", [("aogpt", {}), ("aogpt", {"norm": "rmsnorm", "qk_norm": True}),
                                             ("aogpt", {"pos": "rope"}), ("mdm", {"loss": "sedd"})])
def test_training_passes_give_the_same_loss_and_gradients_with_the_kernels_on_and_off(family, options, monkeypatch):
    model = build_model(family, "0.1M", vocab_size=V, seq_len=L, **options)
    tokens = torch.randint(0, V, (16, L), generator=torch.Generator().manual_seed(2))
    assert tokens.numel() >= cpu_backend.FUSED_MIN_ROWS
    calls = _count(monkeypatch, cpu_backend.CPUKernels, "forward")
    fused_loss, fused = _loss_and_grads(model, tokens)
    assert calls  # the backend ran the pass
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)
    eager_loss, eager = _loss_and_grads(model, tokens)
    assert torch.allclose(fused_loss, eager_loss, rtol=1e-6, atol=0)
    _assert_close(fused, eager, rtol=1e-4, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("case", ["float64", "layer_shared", "few-rows", "autocast"])
def test_a_pass_the_kernels_do_not_cover_runs_eagerly_with_the_same_values(case, monkeypatch):
    """Options the backend declines (float64 weights, per-block adds, fewer rows than pay off,
    bf16 autocast) leave it unused, and the pass equals the kernels-off pass exactly."""
    options = {"target_pe": "layer_shared"} if case == "layer_shared" else {}
    model = build_model("aogpt", "0.1M", vocab_size=V, seq_len=L, **options)
    model = model.double() if case == "float64" else model
    rows = 2 if case == "few-rows" else 16
    tokens = torch.randint(0, V, (rows, L), generator=torch.Generator().manual_seed(2))
    calls = _count(monkeypatch, cpu_backend.CPUKernels, "forward")

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case == "autocast"):
            return _loss_and_grads(model, tokens)

    on_loss, on = run()
    assert not calls
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)
    off_loss, off = run()
    assert torch.equal(on_loss, off_loss)
    _assert_close(on, off, rtol=0, atol=0)


@needs_kernels
@pytest.mark.parametrize("family, options, covered", [
    ("ar", {}, True), ("aogpt", {}, True), ("aogpt", {"norm": "rmsnorm", "qk_norm": True, "tie_head": False}, True),
    ("aogpt", {"target_pe": "layer_distinct"}, False), ("ar", {"pos": "rope"}, True), ("aogpt", {"pos": "rope"}, True)])
def test_decoding_gives_the_same_logits_with_the_kernels_on_and_off(family, options, covered, monkeypatch):
    model = build_model(family, "0.1M", vocab_size=V, seq_len=L, **options).eval()
    calls = _count(monkeypatch, Decoder, "__call__")

    def generate():
        gen = torch.Generator().manual_seed(5)
        if family == "ar":
            return sm.generate_ar(model, 3, L, generator=gen, record=True)
        return sm.generate_aogpt(model, 3, L, steps=6, generator=gen, record=True)

    on = generate()
    assert len(calls) == (on.n_forward if covered else 0)
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)
    off = generate()
    assert torch.equal(on.tokens, off.tokens)
    for a, b in zip(on.step_logits, off.step_logits, strict=True):
        assert (a - b).abs().max() <= 1e-5


def test_without_a_backend_the_core_runs_its_modules(monkeypatch):
    """The eager core alone (what a GPU or a machine without a compiler runs) trains and decodes."""
    monkeypatch.setattr(cpu_backend, "backend", lambda: None)
    model = build_model("aogpt", "0.1M", vocab_size=V, seq_len=L)
    model.loss(torch.randint(0, V, (16, L))).backward()
    assert all(p.grad is not None for p in model.parameters())
    with model.decoding():
        assert model.core._decoder is None
    out = sm.generate_aogpt(model.eval(), 2, L, steps=4, generator=torch.Generator().manual_seed(1))
    assert out.tokens.shape == (2, L)
