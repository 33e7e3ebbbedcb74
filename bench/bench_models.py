"""Step time (forward + backward + AdamW step) of every family at one shape, as ratios to `ar`.

Each family is timed in a pair with a fresh `ar` at the same shape, alternating blocks of steps
of each, so slow drifts of the machine hit both alike; within a block the model runs in steady
state (one step at a time of many models evicts each one's working set and distorts the ratios).
The figure is the ratio of the pair's median wall times: run it on an otherwise idle machine.
Targets: aogpt(adaln) <= 1.10x ar, mdm <= 1.05x, each printed for every `--network` (repeatable;
default: the studies' default network, rotary positions, and the same with learned positions).

    python bench/bench_models.py [--size 3M] [--seq-len 256] [--batch 8] [--rounds 4] [--block 4]
                                 [--variants 'aogpt(adaln),mdm(mdlm)'] [--network gpt2,pos=rope]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from jobs.run.allocator import keep_freed_memory
from models import build_model, kernels
from networks import add_network_argument, checked_networks
from scaling.study.arms import network_options

VARIANTS = {
    "ar": ("ar", {}),
    "aogpt(adaln)": ("aogpt", {"target_pe": "adaln"}),
    "aogpt(input)": ("aogpt", {"target_pe": "input"}),
    "aogpt(layer_shared)": ("aogpt", {"target_pe": "layer_shared"}),
    "aogpt(layer_distinct)": ("aogpt", {"target_pe": "layer_distinct"}),
    "sigma_gpt": ("sigma_gpt", {}),
    "mdm(mdlm)": ("mdm", {"loss": "mdlm"}),
    "mdm(kdce)": ("mdm", {"loss": "kdce"}),
    "mdm(sedd)": ("mdm", {"loss": "sedd"}),
}
TARGETS = {"aogpt": 1.10, "mdm": 1.05}  # step time over ar's, per family (variants of it alike)


def make_step(family, options, args, network: str):
    model = build_model(family, args.size, vocab_size=args.vocab, seq_len=args.seq_len, **network_options(network),
                        **options)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=True)  # as the trainer
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=gen)

    def step() -> float:
        start = time.perf_counter()
        model.loss(tokens, gen).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return step


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="3M")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=257)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--block", type=int, default=4, help="consecutive steps per model per round")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of: {', '.join(VARIANTS)}")
    add_network_argument(parser)
    args = parser.parse_args(argv)
    networks = checked_networks(parser, args)
    chosen = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    keep_freed_memory()  # as the trainer does on CPU
    torch.manual_seed(0)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}; size {args.size}, seq_len {args.seq_len}, batch {args.batch}, "
          f"vocab {args.vocab}; adaLN kernels {'fused' if kernels.available() else 'eager'}; "
          f"median wall time over {args.rounds} rounds of {args.block}-step blocks, each family paired with ar")
    width = max(len(n) for n in networks)
    print(f"{'network':<{width}} {'family':24s} {'step_s':>10s} {'ar_s':>9s} {'ratio_to_ar':>11s}  target")
    for network in networks:
        for name in chosen:
            family, options = VARIANTS[name]
            variant, ar = median_pair(make_step(family, options, args, network), make_step("ar", {}, args, network),
                                      args)
            target = TARGETS.get(family)
            verdict = "" if target is None else f"  <= {target}: {'met' if variant / ar <= target else 'missed'}"
            print(f"{network:<{width}} {name:24s} {variant:10.4f} {ar:9.4f} {variant / ar:11.3f}{verdict}")
    if "aogpt(adaln)" in chosen:
        print(f"# aogpt(adaln): its adaLN projection tables (Linear(c, 6d) per block on all {args.seq_len} "
              f"positions, forward and backward) add {adaln_flop_share(args):.1%} to ar's matmul FLOPs per step")


def adaln_flop_share(args) -> float:
    """Training FLOPs of adaLN's per-position projections over ar's training FLOPs per step.

    The tables are 6 · seq_len · (weights of the modulation Linears) per step; ar's step is
    flops_per_token · batch · seq_len. At B·T tokens and P = T positions this is ~64 / (B · d)
    for c = 128, less attention and head FLOPs: 3.9 % at the 3M rung (d 192, batch 8), 2.1 % at
    the 125M rung's shape with batch 4."""
    ao = build_model("aogpt", args.size, vocab_size=args.vocab, seq_len=args.seq_len, target_pe="adaln")
    ar = build_model("ar", args.size, vocab_size=args.vocab, seq_len=args.seq_len)
    tables = sum(m.weight.numel() for name, m in ao.named_modules() if name.endswith("modulation"))
    return 6 * args.seq_len * tables / (ar.flops_per_token() * args.batch * args.seq_len)


def median_pair(step, reference, args) -> tuple[float, float]:
    """Median step time of `step` and `reference`, alternating blocks of `--block` steps.

    The first step of each block is dropped: it pays for the other model's freed memory being
    faulted back in, which is a property of the alternation, not of the model.
    """
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(args.rounds):
        for i, fn in ((1, reference), (0, step)):
            times[i].extend([fn() for _ in range(args.block)][1:])
    return statistics.median(times[0]), statistics.median(times[1])


if __name__ == "__main__":
    main()
