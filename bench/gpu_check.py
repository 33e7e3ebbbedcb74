"""A prepared check of the GPU path, one table: training MFU, evaluation throughput, generation.

    python bench/gpu_check.py                  # one GPU, at most ~8 minutes: 125M, bf16, n = T = 1024
    python bench/gpu_check.py --tiny           # CPU, under a minute: the same code on a 0.1M model

Rows (each measured after warm-up steps, synchronised, median of the timed steps):
  train   MFU of AR and AO-GPT(adaLN) steps through the torch engine, eager and with the core
          compiled (`RunSpec.compile`), and of AR under DeepSpeed ZeRO-2 in one process. MFU =
          flops_per_token x tokens/s over the peak runs log MFU against (jobs.run.tracking.peak_flops:
          the GPU's datasheet dense peak, or the measured matmul peak on CPU). Target at 125M: >= 40 %.
  eval    tokens scored per second: AR nll_l2r, AO-GPT nll_anyorder (one permutation per row),
          MDM nll_elbo (one kdce draw per row), with the run's placement (jobs.run.device).
  gen     seconds for one batch of full generation at n = T: AR and AO-GPT with a KV cache (one
          token per step), MDM with its fastest sampler (ancestral with caching), and the
          MDM/AO-GPT ratio. Target on a GPU: >= 40.
Models are untrained (speed does not depend on the weights); tokens are random.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.run.device import placement  # noqa: E402
from jobs.train.engines import make_engine  # noqa: E402
from jobs.run.spec import RunSpec  # noqa: E402
from jobs.run.tracking import peak_flops  # noqa: E402
from models import build_model  # noqa: E402
from models import likelihood as lk  # noqa: E402
from models import sampling as sm  # noqa: E402

MFU_TARGET = 0.40  # issue 17: MFU >= 40 % at 125M on one GPU
MDM_OVER_AOGPT_TARGET = 40.0  # issue 17 / issue 4: MDM/AO-GPT >= 40x at n = T


@dataclass(frozen=True)
class Scale:
    """The shapes one check runs at."""

    size: str
    vocab: int
    seq_len: int
    batch: int  # training sequences per step
    gen_batch: int
    warmup: int  # untimed training steps (compilation happens here)
    steps: int  # timed training steps


FULL = Scale("125M", 50257, 1024, 16, 32, warmup=3, steps=10)
TINY = Scale("0.1M", 257, 32, 4, 4, warmup=2, steps=3)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def _spec(scale: Scale, family: str, **fields) -> RunSpec:
    return RunSpec(family=family, size=scale.size, steps=scale.warmup + scale.steps, lr=1e-4, warmup_steps=0,
                   seq_len=scale.seq_len, batch_size=scale.batch, **fields)


def train_mfu(scale: Scale, family: str, compile_setting: str, engine: str = "torch",
              backend: str = "inductor") -> tuple[float, bool]:
    """(MFU, whether the compiled core stayed compiled) of training steps through an engine."""
    torch.manual_seed(0)
    spec = _spec(scale, family, compile=compile_setting, engine=engine)
    model = build_model(family, scale.size, vocab_size=scale.vocab, seq_len=scale.seq_len)
    flops_per_token = model.flops_per_token()
    if compile_setting == "on" and backend != "inductor":  # the engine compiles; --tiny swaps the backend
        spec = spec.replace(compile="off")
        model.core.compile_stack(lambda fn: torch.compile(fn, backend=backend))
    run = make_engine(model, spec)
    gen = torch.Generator(run.device).manual_seed(0)
    tokens = torch.randint(0, scale.vocab, (scale.batch, scale.seq_len), generator=gen, device=run.device)

    def step():
        run.backward(run.loss(tokens, gen))
        run.step()

    times = [_timed(step, run.device) for _ in range(scale.warmup + scale.steps)][scale.warmup:]
    dtype = torch.bfloat16 if run.bf16 else torch.float32
    peak, _ = peak_flops(run.device, dtype)
    run.close()
    compiled = model.core._compiled is not None and model.core._compiled.active
    return flops_per_token * scale.batch * scale.seq_len / statistics.median(times) / peak, compiled


def eval_tokens_per_s(scale: Scale, family: str, compile_setting: str, backend: str) -> float:
    """Tokens scored per second by the family's evaluation estimator, one batch, placed as a run."""
    place = placement(_spec(scale, family, compile=compile_setting))
    torch.manual_seed(0)
    model = build_model(family, scale.size, vocab_size=scale.vocab, seq_len=scale.seq_len).to(place.device).eval()
    if place.compile:
        model.core.compile_stack(lambda fn: torch.compile(fn, backend=backend))
    gen = place.generator(0)
    tokens = torch.randint(0, scale.vocab, (place.eval_batch, scale.seq_len), generator=gen, device=place.device)
    score = {"ar": lambda: lk.l2r_nll(model, tokens),
             "aogpt": lambda: lk.anyorder_draws(model, tokens, 1, gen),
             "mdm": lambda: lk.mdm_elbo_draws(model, tokens, 1, "kdce", gen)}[family]
    with torch.no_grad(), place.autocast():
        times = [_timed(score, place.device) for _ in range(4)][1:]
    return tokens.numel() / statistics.median(times)


def generation_s(scale: Scale, device: torch.device, bf16: bool) -> dict[str, float]:
    """Seconds per batch of full generation at n = T (the median of 2 after a warm-up)."""
    n, batch = scale.seq_len, scale.gen_batch
    models = {}
    for family in ("ar", "aogpt", "mdm"):
        torch.manual_seed(0)
        models[family] = build_model(family, scale.size, vocab_size=scale.vocab, seq_len=n).to(device).eval()
    g = lambda: torch.Generator(device).manual_seed(0)  # noqa: E731
    runs = {"ar": lambda: sm.generate_ar(models["ar"], batch, n, generator=g()),
            "aogpt": lambda: sm.generate_aogpt(models["aogpt"], batch, n, n, generator=g()),
            "mdm": lambda: sm.generate_mdm(models["mdm"], batch, n, n, "ancestral", generator=g(), cache=True)}
    out = {}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for name, fn in runs.items():
            out[name] = statistics.median([_timed(fn, device) for _ in range(3)][1:])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a 0.1M model on small shapes (CPU, under a minute)")
    p.add_argument("--compile-backend", help="torch.compile backend (default inductor; --tiny: aot_eager, "
                                             "which traces the same graphs without a C++ build)")
    p.add_argument("--skip-deepspeed", action="store_true")
    args = p.parse_args(argv)
    scale = TINY if args.tiny else FULL
    backend = args.compile_backend or ("aot_eager" if args.tiny else "inductor")
    os.environ.setdefault("AOSCALE_CACHE", str(Path(tempfile.gettempdir()) / "aoscale-bench-cache"))
    place = placement(_spec(scale, "ar"))
    device_name = torch.cuda.get_device_name(place.device) if place.device.type == "cuda" else "cpu"
    print(f"# gpu_check: {device_name}, torch {torch.__version__}, {place.precision}; size {scale.size}, "
          f"vocab {scale.vocab}, seq_len {scale.seq_len}, train batch {scale.batch}, gen n = T = {scale.seq_len} "
          f"batch {scale.gen_batch}; compile backend {backend}")
    rows: list[tuple[str, str, str, str]] = []
    for family in ("ar", "aogpt"):
        for setting in ("off", "on"):
            mfu, kept = train_mfu(scale, family, setting, backend=backend)
            label = "eager" if setting == "off" else ("compiled" if kept else "compile failed: eager")
            rows.append(("train", f"{family} torch {label}", f"{100 * mfu:.1f} %", f">= {MFU_TARGET:.0%}"))
    if not args.skip_deepspeed:
        mfu, kept = train_mfu(scale, "ar", "auto", engine="deepspeed", backend=backend)
        rows.append(("train", f"ar deepspeed zero-2 ({'compiled' if kept else 'eager'})", f"{100 * mfu:.1f} %",
                     f">= {MFU_TARGET:.0%}"))
    for family, metric in (("ar", "nll_l2r"), ("aogpt", "nll_anyorder"), ("mdm", "nll_elbo")):
        rate = eval_tokens_per_s(scale, family, "auto", backend)
        rows.append(("eval", f"{family} {metric}", f"{rate:,.0f} tok/s", ""))
    gen = generation_s(scale, place.device, place.bf16)
    for name in ("ar", "aogpt", "mdm"):
        rows.append(("gen", f"{name}{' (ancestral, cached)' if name == 'mdm' else ''}", f"{gen[name]:.3f} s", ""))
    rows.append(("gen", "mdm / aogpt", f"{gen['mdm'] / gen['aogpt']:.1f} x", f">= {MDM_OVER_AOGPT_TARGET:.0f} x"))
    rows.append(("gen", "aogpt / ar", f"{gen['aogpt'] / gen['ar']:.2f} x", ""))
    print(f"{'check':6s} {'setting':36s} {'value':>16s} {'target':>8s}")
    for row in rows:
        print(f"{row[0]:6s} {row[1]:36s} {row[2]:>16s} {row[3]:>8s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
