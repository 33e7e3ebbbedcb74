"""When `torch.compile` pays on the CPU: the measured table and the rule `compile = auto` applies.

The rule: a CPU run compiles its core when, by the measurement of its rung and family below,
its steps would pay back compilation's extra fixed time (a cold inductor cache: the first run of
a family and size; later seeds find the cache warm and pay less, so the rule errs towards eager):

    steps * (eager step s - compiled step s) * (its tokens per step / the measured ones) > cold extra s

A rung or family that was not measured, or whose compiled step was no faster, stays eager.
Measured end to end by `python bench/bench_compile.py` (fresh `jobs.train` processes, one thread,
the quickstart's network, batch 32 x 32 bytes, lr and warm-up; wall = fixed + steps x step).

  size  family  eager fixed_s step_ms  cold fixed_s  warm fixed_s  compiled step_ms  break-even (cold)
  0.1M  ar               5.5     24.2          46.9          11.4       17.8-20.4  8,130 steps
  0.1M  aogpt            4.5     20.7          48.4          15.3       26.6-28.3  never
  0.1M  mdm              6.1     21.9          51.8          12.0       21.0-18.0  19,613 steps
  0.3M  ar               5.1     40.1          57.2          13.0       46.4-37.8  never
  0.3M  aogpt            6.5     62.1          54.7          17.0       58.2-59.5  14,906 steps
  0.3M  mdm              5.1     40.5          56.6          12.1       46.5-52.6  never
  (bench/bench_compile.py --sizes 0.1M,0.3M --families ar,aogpt,mdm --steps 40 --json rows.json, alone on
   the 2-core development machine, load average 1.2-1.6, at commit 01f2050. Compiled steps are no
   faster, or faster by 2-5 ms, and a cold compile adds 41-52 s: compile would pay only past ~8,000
   steps at these rungs, far beyond the quickstart's 600 and the laptop preset's longest run, 2,636
   steps at 0.3M. So `auto` keeps every CPU preset eager. The previous table, one 30-step row under
   load ~10, said the same for 0.1M AO-GPT.)

To refresh: run the bench alone (`--json rows.json`) and copy its rows over `cpu_compile.json`
(MEASURED, beside this module).
"""
from __future__ import annotations

import json
from pathlib import Path

# bench/bench_compile.py --sizes 0.1M,0.3M --families ar,aogpt,mdm --steps 40 --json rows.json (the table above)
MEASURED: tuple[dict, ...] = tuple(json.loads(Path(__file__).with_name("cpu_compile.json").read_text()))


def _row(size: str, family: str, table=MEASURED) -> dict | None:
    return next((row for row in table if row["size"] == size and row["family"] == family), None)


def break_even_steps(size: str, family: str, batch_tokens: int, table=MEASURED) -> float:
    """Steps after which compiling pays back its cold extra time (inf: never, or not measured)."""
    row = _row(size, family, table)
    if row is None:
        return float("inf")
    compiled_step_s = (row["cold_step_s"] + row["warm_step_s"]) / 2
    saving_s = (row["off_step_s"] - compiled_step_s) * batch_tokens / row["batch_tokens"]
    if saving_s <= 0:
        return float("inf")
    return (row["cold_fixed_s"] - row["off_fixed_s"]) / saving_s


def compile_pays(spec, table=MEASURED) -> bool:
    """Whether a CPU run of `spec` trains faster end to end with its core compiled (the rule above)."""
    return spec.steps > break_even_steps(spec.size, spec.family, spec.batch_size * spec.seq_len, table)
