"""jobs.run.device: the one device rule of training, evaluation and generation, and the compile
setting's fallback."""
import warnings

import pytest
import torch

from jobs.run.device import CPU_EVAL_BATCH, CUDA_EVAL_BATCH, pick_device, placement
from jobs.train.spec_rules import validate
from jobs.run.spec import RunSpec
from models import build_model

SPEC = RunSpec(family="ar", size="0.1M", steps=1, lr=1e-3, warmup_steps=0)


def test_the_device_is_this_ranks_gpu_where_cuda_exists_else_the_cpu(monkeypatch):
    assert pick_device(cuda=False) == torch.device("cpu")
    assert pick_device(cuda=True, local_rank=3) == torch.device("cuda", 3)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert pick_device(cuda=True) == torch.device("cuda", 2)
    assert pick_device() == (torch.device("cuda", 2) if torch.cuda.is_available() else torch.device("cpu"))


@pytest.mark.parametrize("cuda, fields, expected", [
    (False, {}, ("cpu", False, CPU_EVAL_BATCH, False)),
    (False, {"precision": "bf16", "compile": "on"}, ("cpu", True, CPU_EVAL_BATCH, True)),
    (True, {}, ("cuda:0", True, CUDA_EVAL_BATCH, True)),
    (True, {"precision": "fp32", "compile": "off"}, ("cuda:0", False, CUDA_EVAL_BATCH, False)),
])
def test_evaluation_runs_where_and_how_the_run_trained(cuda, fields, expected):
    place = placement(SPEC.replace(**fields), cuda=cuda, local_rank=0)
    assert (str(place.device), place.bf16, place.eval_batch, place.compile) == expected
    assert place.columns()["precision"] == ("bf16" if expected[1] else "fp32")
    if not cuda:
        assert place.columns()["device"] == "cpu"


def test_an_unknown_compile_setting_names_the_field():
    with pytest.raises(ValueError, match="^compile: 'yes' is not one of auto, on, off"):
        validate(SPEC.replace(compile="yes"))
    assert SPEC.replace(compile="on").run_id == SPEC.run_id  # a resource setting: same run


def _loss_and_grads(model, tokens):
    loss = model.loss(tokens, torch.Generator().manual_seed(1))
    return loss, torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)


@pytest.mark.slow
@pytest.mark.parametrize("family, options", [("aogpt", {}), ("mdm", {}), ("aogpt", {"pos": "rope"})],
                         ids=["aogpt", "mdm", "aogpt-rope"])  # adaLN by position; by time; the default network
def test_a_compiled_core_gives_the_eager_losses_and_gradients(family, options):
    """Dynamo traces the stack (the `aot_eager` backend: no C++ build, so the test stays fast)."""
    model = build_model(family, "0.1M", vocab_size=11, seq_len=16, **options)
    tokens = torch.randint(0, 11, (16, 16), generator=torch.Generator().manual_seed(0))
    eager_loss, eager = _loss_and_grads(model, tokens)
    model.core.compile_stack(lambda fn: torch.compile(fn, backend="aot_eager"))
    loss, grads = _loss_and_grads(model, tokens)
    assert model.core._compiled.active
    assert torch.allclose(loss, eager_loss, rtol=1e-6, atol=0)
    for a, b in zip(grads, eager, strict=True):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, rtol=1e-4, atol=1e-6))


def test_a_failing_compiler_warns_once_and_the_eager_core_runs():
    def broken(fn):
        def call(*args):
            raise RuntimeError("no C++ compiler found")
        return call

    model = build_model("aogpt", "0.1M", vocab_size=11, seq_len=16)
    tokens = torch.randint(0, 11, (4, 16), generator=torch.Generator().manual_seed(0))
    eager_loss = model.loss(tokens, torch.Generator().manual_seed(1))
    model.core.compile_stack(broken)
    assert model.core.compiled  # until a compiled call fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = [model.loss(tokens, torch.Generator().manual_seed(1)) for _ in range(2)]
    assert [str(w.message) for w in caught if "torch.compile failed" in str(w.message)] != []
    assert sum("torch.compile failed" in str(w.message) for w in caught) == 1
    assert not model.core._compiled.active and all(torch.equal(loss, eager_loss) for loss in losses)
    assert not model.core.compiled  # what the records read (jobs.run.numerics): the eager core ran


def test_cpu_compile_auto_follows_the_measured_break_even_rule():
    """A measured row whose compiled step saves 10 ms of a 1,024-token step against 100 s of
    extra cold compilation breaks even at 10,000 steps (half that with twice the tokens)."""
    from jobs.run.cpu_compile import break_even_steps, compile_pays

    table = ({"family": "ar", "size": "0.1M", "batch_tokens": 1024, "off_fixed_s": 10.0, "off_step_s": 0.05,
              "cold_fixed_s": 110.0, "cold_step_s": 0.04, "warm_fixed_s": 30.0, "warm_step_s": 0.04},)
    spec = SPEC.replace(batch_size=32, seq_len=32)
    assert break_even_steps("0.1M", "ar", 1024, table) == pytest.approx(10_000)
    assert break_even_steps("0.1M", "ar", 2048, table) == pytest.approx(5_000)
    assert not compile_pays(spec.replace(steps=9_000), table) and compile_pays(spec.replace(steps=11_000), table)
    assert break_even_steps("0.3M", "ar", 1024, table) == float("inf")  # not measured: eager
    slower = ({**table[0], "cold_step_s": 0.06, "warm_step_s": 0.06},)
    assert not compile_pays(spec.replace(steps=10**9), slower)


def test_cpu_compile_auto_keeps_the_measured_presets_eager_and_evaluation_eager(monkeypatch):
    from jobs.run import cpu_compile
    from jobs.run import device

    quickstart = SPEC.replace(family="aogpt", steps=600, batch_size=32, seq_len=32)
    assert not device.use_compile(quickstart, torch.device("cpu"))  # the measured 0.1M AO-GPT row: never
    monkeypatch.setattr(device, "compile_pays", lambda spec: True)
    assert device.use_compile(quickstart, torch.device("cpu"))
    assert not placement(quickstart, cuda=False).compile  # CPU evaluation: eager under auto
    assert not device.use_compile(quickstart.replace(compile="off"), torch.device("cpu"))
    assert cpu_compile.break_even_steps("0.1M", "aogpt", 1024) == float("inf")
