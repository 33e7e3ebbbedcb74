"""Generation speed: AR (KV cache), AO-GPT (KV cache, k = n/T per step) and MDM (ancestral with
caching), full multi-step generation in one harness, side by side (round-robin per T).

    python bench/bench_generation.py                      # CPU defaults: 3M rung, batch 8, n 256
    python bench/bench_generation.py --device cuda --batch 32 --length 1024 --steps 64,128,256,512,1024
    python bench/bench_generation.py --length 128 --steps 128 --network gpt2,pos=rope --network gpt2

Protocol: untrained weights of the same shape for every family (speed does not depend on
training), `--warmup` untimed runs then `--repeats` timed runs per cell, synchronised on GPU,
median wall time reported. `--network` (repeatable; a study's network string, e.g.
`gpt2,pos=rope`) picks the networks: by default the studies' default network (the quickstart's,
rotary positions) and the same with learned positions, timed in the same rounds. Prints, per
network, MDM/AO-GPT and AO-GPT/AR ratios measured in this one run against their targets, each
family's time on every network over the first's (rope/learned by default), and
on CPU the memory roofline of decoding (bytes a step must read / measured read bandwidth) with
the MDM/AO-GPT ratio it would allow.
On CPU, AR and AO-GPT decode through the fused decoding kernel (models/kernels/decode.c;
`decode_kernel` in the header says so; AOSCALE_KERNELS=0 times the eager core instead).
Targets (issue 4): MDM/AO-GPT >= 40x at n = T = 256, batch 8, 3M rung on CPU; AO-GPT per-token
decode <= 1.2x AR's (the T = n column: one token per step for both). Issue 26: at n = T = 128
rotary decoding takes <= 1.15x as long as learned, for AR and for AO-GPT.
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
from networks import add_network_argument, checked_networks, differ_in_pos_only  # noqa: E402
from scaling.study.arms import network_options  # noqa: E402

FAMILIES = ("ar", "aogpt", "mdm")
TARGET_MDM_OVER_AOGPT = 40.0  # at T = n = 256 (issue 4)
TARGET_AOGPT_OVER_AR = 1.2  # at T = n: one token per step for both (issue 4)
TARGET_ROPE_OVER_LEARNED = 1.15  # AR and AO-GPT at T = n (issue 26)


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


def build(family: str, args, network: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(family, args.size, vocab_size=args.vocab, seq_len=args.length, **network_options(network))
    return model.to(args.device).eval()


def runners(args, network: str) -> dict[str, callable]:
    """family -> function(steps) generating one batch of `length` tokens on `network` (the
    families of `--families`)."""
    generators = {
        "ar": lambda model, steps, g: sm.generate_ar(model, args.batch, args.length, generator=g),
        "aogpt": lambda model, steps, g: sm.generate_aogpt(model, args.batch, args.length, steps, generator=g),
        "mdm": lambda model, steps, g: sm.generate_mdm(model, args.batch, args.length, steps, "ancestral",
                                                       generator=g, cache=True),
    }

    def runner(family):
        model, generate = build(family, args, network), generators[family]
        return lambda steps: generate(model, steps, torch.Generator(args.device).manual_seed(0))

    return {family: runner(family) for family in args.families}


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


def print_roofline(model, args, rows: list[dict], network: str) -> None:
    """How far decoding is from its memory bound on `network`, and the MDM/AO-GPT ratio that bound allows."""
    weight_b, kv_b = decode_bytes(model, args.batch, args.length)
    per_step = (weight_b + kv_b) / args.length
    bandwidth = read_bandwidth(int(per_step))
    floor_s = (weight_b + kv_b) / bandwidth
    print(f"# {network}: memory roofline of one-token-per-step decoding: a step reads "
          f"{weight_b / args.length / 1e6:.1f} MB "
          f"of weights + {kv_b / args.length / 1e6:.1f} MB of KV cache on average; at {bandwidth / 1e9:.1f} GB/s "
          f"(`sum` over that many bytes) {args.length} steps take >= {floor_s:.3f} s")
    for row in rows:
        if row["steps"] == args.length:
            print(f"# {network}, T = {row['steps']}: AO-GPT decodes at {floor_s / row['aogpt_s']:.0%} of that bound, "
                  f"AR at "
                  f"{floor_s / row['ar_s']:.0%}; the bound allows MDM/AO-GPT <= {row['mdm_s'] / floor_s:.0f}x")


def environment(args) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
           "device": args.device, "decode_kernel": args.device == "cpu" and kernels.available()}
    if args.device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
    return env


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="3M")
    p.add_argument("--vocab", type=int, default=257, help="vocabulary (257 = the bytes tokenizer)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--steps", default="64,128,256")
    add_network_argument(p)
    p.add_argument("--families", default=",".join(FAMILIES), help=f"a subset of {','.join(FAMILIES)}")
    p.add_argument("--device", default="cpu")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (0 = torch's default; 1 avoids spin-wait collapse on a shared CPU)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    args.network = checked_networks(p, args)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    if not args.families or set(args.families) - set(FAMILIES):
        p.error(f"--families: expected a comma-separated subset of {','.join(FAMILIES)}, got {args.families}")
    return args


def time_row(run: dict, args, steps: int) -> list[dict]:
    """One T: every family on every network, round-robin; a row per network (ratios where both
    of their families ran)."""
    fns = {}
    for network, fams in run.items():
        for family, fn in fams.items():  # AR makes one step per token whatever T is
            fns[network, family] = lambda fn=fn, n=(args.length if family == "ar" else steps): fn(n)
    medians = time_medians(fns, args.device, args.warmup, args.repeats)
    rows = []
    for network, fams in run.items():
        row = {"network": network, "steps": steps, **{f"{family}_s": medians[network, family] for family in fams}}
        for top, bottom in (("mdm", "aogpt"), ("aogpt", "ar")):
            if top in fams and bottom in fams:
                row[f"{top}_over_{bottom}"] = row[f"{top}_s"] / row[f"{bottom}_s"]
        rows.append(row)
    return rows


def _verdict(value: float, target: float, at_least: bool) -> str:
    return "met" if (value >= target if at_least else value <= target) else "missed"


def print_targets(args, rows: list[dict]) -> None:
    """The targets, per network, at the T = n column (where they are defined), and each family's
    time on every network over the first network's (the rope/learned target where they differ
    in `pos` only)."""
    at_n = {row["network"]: row for row in rows if row["steps"] == args.length}
    if not at_n:
        print(f"# targets are defined at T = n = {args.length}: add it to --steps")
        return
    for network, row in at_n.items():
        parts = []
        if "mdm_over_aogpt" in row:
            where = "" if args.length == 256 else f"; defined at n = 256, this is n = {args.length}"
            parts.append(f"MDM/AO-GPT {row['mdm_over_aogpt']:.1f}x (target >= {TARGET_MDM_OVER_AOGPT:.0f}x: "
                         f"{_verdict(row['mdm_over_aogpt'], TARGET_MDM_OVER_AOGPT, True)}{where})")
        if "aogpt_over_ar" in row:
            parts.append(f"AO-GPT/AR {row['aogpt_over_ar']:.2f} (target <= {TARGET_AOGPT_OVER_AR}: "
                         f"{_verdict(row['aogpt_over_ar'], TARGET_AOGPT_OVER_AR, False)})")
        if parts:
            print(f"# {network}: " + "; ".join(parts))
    first, *others = at_n
    for network in others:
        rope_vs_learned = differ_in_pos_only(first, network)
        for family in ("ar", "aogpt"):
            if f"{family}_s" not in at_n[first]:
                continue
            ratio = at_n[network][f"{family}_s"] / at_n[first][f"{family}_s"]
            line = f"# {family} at T = n: {network} / {first} = {ratio:.3f}"
            if rope_vs_learned:
                rope = ratio if network_options(network)["pos"] == "rope" else 1 / ratio
                line += (f"; rope/learned {rope:.3f} (target <= {TARGET_ROPE_OVER_LEARNED}: "
                         f"{_verdict(rope, TARGET_ROPE_OVER_LEARNED, False)})")
            print(line)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as jobs.eval.evaluate and jobs.eval.generate do
    steps_list = [int(s) for s in args.steps.split(",")]
    run = {network: runners(args, network) for network in args.network}
    print(f"# {json.dumps(environment(args))}")
    print(f"# size {args.size}, vocab {args.vocab}, batch {args.batch}, n {args.length}, "
          f"warmup {args.warmup}, repeats {args.repeats}, median seconds per batch")
    results = []
    width = max(len(n) for n in args.network)
    columns = [f"{family}_s" for family in FAMILIES] + ["mdm_over_aogpt", "aogpt_over_ar"]
    print(f"{'network':<{width}} {'T':>6} " + " ".join(f"{c.replace('_over_', '/'):>10}" for c in columns))
    for steps in steps_list:
        for row in time_row(run, args, steps):
            results.append(row)
            cells = [f"{row[c]:>10.3f}" if c in row else f"{'-':>10}" for c in columns]
            print(f"{row['network']:<{width}} {steps:>6} " + " ".join(cells))
    print_targets(args, results)
    if args.device == "cpu" and {"ar", "aogpt", "mdm"} <= set(args.families):
        for network in args.network:
            rows = [r for r in results if r["network"] == network]
            print_roofline(build("aogpt", args, network), args, rows, network)
    if args.json:
        Path(args.json).write_text(json.dumps({"env": environment(args), "args": vars(args), "rows": results},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
