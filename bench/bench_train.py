"""Trainer throughput, measured side by side in one run.

1. MFU of the `torch` engine (jobs.train.loop.train) vs a plain torch loop (same model, batches and
   AdamW) at the 10M rung on CPU fp32. MFU = model FLOP/s (`model.flops_per_token()` x
   tokens/s) over this machine's matmul peak, measured in this run at the same dtype/threads.
2. Step time of DeepSpeed ZeRO-2 with 2 ranks (torchrun, gloo, 1 thread each) vs the torch
   engine (one process, 2 threads) at the same global batch.

    python bench/bench_train.py [--size 10M --seq-len 256 --batch-size 16 --steps 6 --rounds 2]
    python bench/bench_train.py --skip-deepspeed
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.run.allocator import keep_freed_memory  # noqa: E402
from jobs.train.checkpoint import model_from_spec  # noqa: E402
from jobs.train.engines import make_optimizer  # noqa: E402
from jobs.run.files import read_metrics  # noqa: E402
from jobs.run.spec import RunSpec  # noqa: E402
from jobs.run.tracking import PEAK_MATMUL_N, time_matmuls  # noqa: E402
from jobs.run.rng import seed_everything  # noqa: E402
from jobs.train.loop import lr_at, train  # noqa: E402

WARMUP_STEPS = 2  # steps left out of every timing (allocator and thread-pool warm-up)


def make_spec(args: argparse.Namespace, **changes) -> RunSpec:
    return RunSpec(family="ar", size=args.size, steps=args.steps, lr=1e-3, warmup_steps=1,
                   seq_len=args.seq_len, batch_size=args.batch_size, log_every=1,
                   eval_every=args.steps, eval_batches=1, **changes)


def plain_loop_tokens_per_s(spec: RunSpec) -> float:
    """A bare nanoGPT-style loop: loss, backward, clip, AdamW step; no files, no hooks."""
    from jobs.data.corpus import Batches, token_array

    seed_everything(spec.seed)
    model = model_from_spec(spec)
    optimizer = make_optimizer(model, spec)
    batches = Batches(token_array(spec.corpus, spec.tokenizer, "train"), spec.batch_size,
                      spec.seq_len, spec.seed)
    times = []
    for step in range(spec.steps):
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, spec)
        model.loss(batches.get(step)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return spec.batch_size * spec.seq_len / statistics.median(times[WARMUP_STEPS:])


def trainer_tokens_per_s(run_dir: Path) -> float:
    rows = read_metrics(run_dir, "train")[WARMUP_STEPS:]
    return statistics.median(r["tokens_per_s"] for r in rows)


def engine_tokens_per_s(spec: RunSpec) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        assert train(Path(tmp) / "run", spec) == "done"
        return trainer_tokens_per_s(Path(tmp) / "run")


def bench_mfu(args: argparse.Namespace) -> None:
    spec = make_spec(args)
    flops_per_token = model_from_spec(spec).flops_per_token()
    keep_freed_memory()  # process-wide, set by the trainer's first run anyway: the plain loop gets it from the start
    peaks, plain, engine = [], [], []
    for _ in range(args.rounds):  # interleaved, so background load hits all three alike
        peaks.append(time_matmuls(torch.device("cpu"), torch.float32, PEAK_MATMUL_N["cpu"]))
        plain.append(flops_per_token * plain_loop_tokens_per_s(spec) / peaks[-1])
        engine.append(flops_per_token * engine_tokens_per_s(spec) / peaks[-1])
    plain_mfu, engine_mfu = statistics.median(plain), statistics.median(engine)
    print(f"== MFU, {args.size} ar, CPU fp32, {torch.get_num_threads()} threads, "
          f"batch {args.batch_size} x seq {args.seq_len}, {args.rounds} rounds (median)")
    print(f"measured matmul peak: {statistics.median(peaks) / 1e9:.1f} GFLOP/s "
          f"(rounds: {', '.join(f'{p / 1e9:.1f}' for p in peaks)}); "
          f"model: {flops_per_token / 1e6:.1f} MFLOP/token")
    print(f"plain torch loop : MFU {100 * plain_mfu:5.1f} %")
    print(f"jobs.train torch : MFU {100 * engine_mfu:5.1f} %")
    print(f"trainer / plain  : {engine_mfu / plain_mfu:.3f}")


def run_cli(spec: RunSpec, ranks: int, threads: int) -> float:
    """Train in a fresh process (torchrun when ranks > 1); median tokens/s after warm-up."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, run_dir = Path(tmp) / "spec.json", Path(tmp) / "run"
        spec_path.write_text(spec.to_json())
        launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
                     "--nproc_per_node", str(ranks)] if ranks > 1 else [sys.executable])
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
        subprocess.run([*launcher, "-m", "jobs.train", "--run-dir", str(run_dir), "--spec",
                        str(spec_path)], env=env, cwd=REPO, check=True, capture_output=True)
        return trainer_tokens_per_s(run_dir)


def bench_deepspeed(args: argparse.Namespace) -> None:
    cores = os.cpu_count() or 2
    size = args.ds_size
    torch_spec = make_spec(args, engine="torch").replace(size=size)
    ds_spec = torch_spec.replace(engine="deepspeed", zero_stage=2)
    torch_rate, ds_rate = [], []
    for _ in range(args.rounds):
        torch_rate.append(run_cli(torch_spec, 1, cores))
        ds_rate.append(run_cli(ds_spec, 2, max(1, cores // 2)))
    tokens = args.batch_size * args.seq_len
    torch_step_s, ds_step_s = tokens / statistics.median(torch_rate), tokens / statistics.median(ds_rate)
    print(f"== DeepSpeed ZeRO-2 x2 ranks vs torch engine, {size} ar, global batch "
          f"{args.batch_size} x seq {args.seq_len}, CPU fp32, {cores} cores")
    print(f"torch engine (1 proc, {cores} threads): {torch_step_s:7.3f} s/step")
    print(f"deepspeed zero-2 (2 ranks, gloo)   : {ds_step_s:7.3f} s/step")
    print(f"deepspeed / torch step time         : {ds_step_s / torch_step_s:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="10M")
    parser.add_argument("--ds-size", default="3M")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-deepspeed", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("AOSCALE_CACHE", str(Path(tempfile.gettempdir()) / "aoscale-bench-cache"))
    bench_mfu(args)
    if not args.skip_deepspeed:
        bench_deepspeed(args)


if __name__ == "__main__":
    main()
