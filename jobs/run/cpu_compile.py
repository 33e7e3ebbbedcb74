"""When `torch.compile` pays on the CPU: the measured table and the rule `compile = auto` applies.

The rule: a CPU run compiles its core when, by the measurement of its rung and family below,
its steps would pay back compilation's extra fixed time (a cold inductor cache: the first run of
a family and size; later seeds find the cache warm and pay less, so the rule errs towards eager):

    steps * (eager step s - compiled step s) * (its tokens per step / the measured ones) > cold extra s

A rung or family that was not measured, or whose compiled step was no faster, stays eager.
Measured end to end by `python bench/bench_compile.py` (fresh `jobs.train` processes, one thread,
the quickstart's network, batch 32 x 32 bytes, lr and warm-up; wall = fixed + steps x step).

  size  family  eager fixed_s step_ms  cold fixed_s  warm fixed_s  compiled step_ms  break-even (cold)
  0.1M  aogpt          15.6     83.6         236.5          51.9       108.4-127.6  never
  (30 steps, on a shared 2-core machine at load average ~10; issue 26 measured inductor 1.37x
   faster per step for AO-GPT at 0.1M on a quieter one and no faster at 0.3M: even at 1.37x,
   0.1M AO-GPT saves ~15 ms a step, so a cold compile's ~1-4 minutes take thousands of steps to
   pay back, beyond the 600 of the quickstart and the ~800 of the laptop preset at 0.1M)

To refresh: run the bench alone (`--json rows.json`) and replace MEASURED with its rows.
"""
from __future__ import annotations

MEASURED: tuple[dict, ...] = (  # bench/bench_compile.py --sizes 0.1M --families aogpt --steps 30
    {"family": "aogpt", "size": "0.1M", "steps": 30, "batch_tokens": 1024, "off_fixed_s": 15.6,
     "off_step_s": 0.0836, "cold_fixed_s": 236.5, "cold_step_s": 0.1084, "warm_fixed_s": 51.9,
     "warm_step_s": 0.1276},
)


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
