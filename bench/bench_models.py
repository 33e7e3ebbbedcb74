"""Step time (forward + backward + AdamW step) of every family at one shape, as ratios to `ar`.

Families are timed round-robin (one step of each per round) so machine noise hits all alike;
the figure per family is the median over rounds. Targets: aogpt(adaln) <= 1.10x ar, mdm <= 1.05x.

    python bench/bench_models.py [--size 3M] [--seq-len 256] [--batch 8] [--rounds 15]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from models import build_model

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


def make_step(family, options, args):
    model = build_model(family, args.size, vocab_size=args.vocab, seq_len=args.seq_len, **options)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=gen)

    def step() -> float:
        start = time.process_time()  # CPU seconds of this process: robust to other load
        model.loss(tokens, gen).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.process_time() - start

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="3M")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=257)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    steps = {name: make_step(fam, opts, args) for name, (fam, opts) in VARIANTS.items()}
    times = {name: [] for name in steps}
    for r in range(args.warmup + args.rounds):
        for name, step in steps.items():
            elapsed = step()
            if r >= args.warmup:
                times[name].append(elapsed)
    base = statistics.median(times["ar"])
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}; size {args.size}, seq_len {args.seq_len}, batch {args.batch}, "
          f"vocab {args.vocab}; median CPU time of {args.rounds} interleaved rounds")
    print(f"{'family':24s} {'step_cpu_s':>10s} {'ratio_to_ar':>11s}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:24s} {median:10.4f} {median / base:11.3f}")


if __name__ == "__main__":
    main()
