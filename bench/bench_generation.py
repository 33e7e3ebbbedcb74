"""Generation speed: AR (KV cache), AO-GPT (KV cache, k = n/T per step) and MDM (ancestral with
caching), full multi-step generation in one harness, side by side (round-robin per T).

    python bench/bench_generation.py                      # CPU defaults: 3M rung, batch 8, n 256
    python bench/bench_generation.py --device cuda --batch 32 --length 1024 --steps 64,128,256,512,1024

Protocol: untrained weights of the same shape for every family (speed does not depend on
training), `--warmup` untimed runs then `--repeats` timed runs per cell, synchronised on GPU,
median wall time reported. Prints MDM/AO-GPT and AO-GPT/AR ratios measured in this one run.
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

from models import build_model  # noqa: E402
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


def environment(args) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
           "device": args.device}
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
    if args.json:
        Path(args.json).write_text(json.dumps({"env": environment(args), "args": vars(args), "rows": results},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
