"""Generation speed: AR (KV cache), AO-GPT (KV cache, k = n/T per step) and MDM (ancestral with
caching), full multi-step generation in one harness, side by side (round-robin per T).

    python bench/bench_generation.py                      # CPU defaults: 3M rung, batch 8, n 256
    python bench/bench_generation.py --device cuda --batch 32 --length 1024 --steps 64,128,256,512,1024

Protocol: untrained weights of the same shape for every family (speed does not depend on
training), `--warmup` untimed runs then `--repeats` timed runs per cell, synchronised on GPU,
median wall time reported. Prints MDM/AO-GPT and AO-GPT/AR ratios measured in this one run, and
on CPU the memory roofline of decoding (bytes a step must read / measured read bandwidth) with
the MDM/AO-GPT ratio it would allow.
On CPU, AR and AO-GPT decode through the fused decoding kernel (models/kernels/decode.c;
`decode_kernel` in the header says so; AOSCALE_KERNELS=0 times the eager core instead).
Targets (issue 4): MDM/AO-GPT >= 40x at n = T = 256, batch 8, 3M rung on CPU; AO-GPT per-token
decode <= 1.2x AR's (the T = n column: one token per step for both).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.run.allocator import keep_freed_memory  # noqa: E402
from models import build_model, kernels  # noqa: E402
from models import sampling as sm  # noqa: E402


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_medians(fns: dict, device: str, warmup: int, repeats: int) -> dict[str, float]:
    """Median wall seconds of each `fn()`, timed round-robin (one run of each per round, after
    `warmup` untimed runs of each) so slow drifts of a shared machine hit every family alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def build(family: str, args) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(family, args.size, vocab_size=args.vocab, seq_len=args.length)
    return model.to(args.device).eval()


def runners(args) -> dict[str, callable]:
    """name -> function(steps) generating one batch of `length` tokens."""
    ar, ao, mdm = build("ar", args), build("aogpt", args), build("mdm", args)

    def gen(fn):
        return lambda steps: fn(steps, torch.Generator(args.device).manual_seed(0))

    return {
        "ar": gen(lambda steps, g: sm.generate_ar(ar, args.batch, args.length, generator=g)),
        "aogpt": gen(lambda steps, g: sm.generate_aogpt(ao, args.batch, args.length, steps, generator=g)),
        "mdm": gen(lambda steps, g: sm.generate_mdm(mdm, args.batch, args.length, steps, "ancestral",
                                                    generator=g, cache=True)),
    }


def decode_bytes(model, batch: int, length: int) -> tuple[int, int]:
    """(weight bytes, KV-cache bytes) one-token-per-step decoding reads over `length` steps:
    every parameter matrix each step, and step j reads keys and values of j slots in each layer.
    Embedding tables count only through the tied head (a row gather reads a few rows)."""
    shape, item = model.shape, next(model.parameters()).element_size()
    weights = sum(p.numel() for name, p in model.core.named_parameters() if "modulation" not in name)
    weights += model.vocab_size * shape.d_model  # the head
    kv_slots = length * (length + 1) // 2
    return weights * item * length, 2 * shape.n_layer * batch * shape.d_model * kv_slots * item


def read_bandwidth(nbytes: int, repeats: int = 20) -> float:
    """Bytes per second one `sum` streams through a float32 buffer of `nbytes` (median)."""
    buffer = torch.ones(max(nbytes // 4, 1))
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        buffer.sum()
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times[2:])


def print_roofline(model, args, rows: list[dict]) -> None:
    """How far decoding is from its memory bound, and the MDM/AO-GPT ratio that bound allows."""
    weight_b, kv_b = decode_bytes(model, args.batch, args.length)
    per_step = (weight_b + kv_b) / args.length
    bandwidth = read_bandwidth(int(per_step))
    floor_s = (weight_b + kv_b) / bandwidth
    print(f"# memory roofline of one-token-per-step decoding: a step reads {weight_b / args.length / 1e6:.1f} MB "
          f"of weights + {kv_b / args.length / 1e6:.1f} MB of KV cache on average; at {bandwidth / 1e9:.1f} GB/s "
          f"(`sum` over that many bytes) {args.length} steps take >= {floor_s:.3f} s")
    for row in rows:
        if row["steps"] == args.length:
            print(f"# T = {row['steps']}: AO-GPT decodes at {floor_s / row['aogpt_s']:.0%} of that bound, AR at "
                  f"{floor_s / row['ar_s']:.0%}; the bound allows MDM/AO-GPT <= {row['mdm_s'] / floor_s:.0f}x")


def environment(args) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
           "device": args.device, "decode_kernel": args.device == "cpu" and kernels.available()}
    if args.device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="3M")
    p.add_argument("--vocab", type=int, default=257, help="vocabulary (257 = the bytes tokenizer)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--steps", default="64,128,256")
    p.add_argument("--device", default="cpu")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (0 = torch's default; 1 avoids spin-wait collapse on a shared CPU)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as jobs.evaluate and jobs.generate do
    steps_list = [int(s) for s in args.steps.split(",")]
    run = runners(args)
    print(f"# {json.dumps(environment(args))}")
    print(f"# size {args.size}, vocab {args.vocab}, batch {args.batch}, n {args.length}, "
          f"warmup {args.warmup}, repeats {args.repeats}, median seconds per batch")
    results = []
    print(f"{'T':>6} {'ar_s':>9} {'aogpt_s':>9} {'mdm_s':>9} {'mdm/aogpt':>10} {'aogpt/ar':>9}")
    for steps in steps_list:
        fns = {name: (lambda fn=run[name]: fn(steps)) for name in ("aogpt", "mdm")}
        fns["ar"] = lambda: run["ar"](args.length)  # AR makes one step per token whatever T is
        medians = time_medians(fns, args.device, args.warmup, args.repeats)
        ar_s, ao_s, mdm_s = medians["ar"], medians["aogpt"], medians["mdm"]
        row = {"steps": steps, "ar_s": ar_s, "aogpt_s": ao_s, "mdm_s": mdm_s,
               "mdm_over_aogpt": mdm_s / ao_s, "aogpt_over_ar": ao_s / ar_s}
        results.append(row)
        print(f"{steps:>6} {ar_s:>9.3f} {ao_s:>9.3f} {mdm_s:>9.3f} {row['mdm_over_aogpt']:>10.1f} "
              f"{row['aogpt_over_ar']:>9.2f}")
    if args.device == "cpu":
        print_roofline(build("aogpt", args), args, results)
    if args.json:
        Path(args.json).write_text(json.dumps({"env": environment(args), "args": vars(args), "rows": results},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
