"""WSD cooldown branches against separate runs for the same (N, D) points, measured in one run.

Three ways to get a loss at D = {f * T for each branch fraction f} and at T, for one family and size:

- `branched`: one WSD trunk of T tokens with cooldown branches (`branches = [...]`,
  `branch_decay = 0.25`, so a branch from step s ends at 1.25 s and decays over its last 20 %);
- `wsd`: separate WSD runs from scratch at those token counts (decay over their last 20 %, the
  default `decay_fraction`), so each has the branch's own lr schedule, step for step;
- `cosine`: separate runs with the default cosine schedule at the same token counts.

Each way is one `python -m scaling.launch` study in its own folder, one run at a time
(`--max-parallel 1`, no report). The bench prints, per way, the tokens trained, the summed run
wall time (each run's status `updated_at` minus its start record: training plus evaluation,
without the launcher) and the launcher's wall, and per (N, D) point the validation nll of each
way with its standard error (the `cpu` suite's whole-split windows). Batches are a function of
(seed, step), so a branch and the matching separate WSD run train on the same data under the same
lr: their losses should agree to float noise, which the bench prints as `|branched - wsd|`.

    python bench/bench_wsd.py                       # AR 0.1M, T = 1200 steps, branches at 25 % and 50 %
    python bench/bench_wsd.py --family mdm --steps 800
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from analysis.records.read import load  # noqa: E402

BATCH, SEQ = 32, 32  # the quickstart's batch and sequence (examples/quickstart.toml)
BRANCH_DECAY = 0.25  # a branch from step s decays to 1.25 s: its last 20 %, as a separate WSD run's
DECAY_FRACTION = BRANCH_DECAY / (1 + BRANCH_DECAY)  # = 0.2, the RunSpec default
METRIC = "nll_l2r"


def spec_toml(args, schedule: str, tokens: int, branches: list[float] | None) -> str:
    """One study of one run: the quickstart's network, lr and warm-up, EMA off."""
    lines = [f'name = "wsd-bench-{schedule}"', f'families = ["{args.family}"]', f'sizes = ["{args.size}"]',
             "seeds = 1", 'tokenizer = "bytes"', 'corpus = "shakespeare"', f"seq_len = {SEQ}",
             f"batch_size = {BATCH}", f"tokens = {tokens}", f"lr = {args.lr}", f"warmup_steps = {args.warmup}",
             'network = "gpt2,pos=rope"', "ema = 0.0", 'eval_suite = "cpu"']
    if branches:
        lines += [f"branches = {branches}", f"branch_decay = {BRANCH_DECAY}"]
    lines += ["[run]", f'schedule = "{schedule}"']
    if schedule == "wsd":
        lines.append(f"decay_fraction = {DECAY_FRACTION}")
    return "\n".join(lines) + "\n"


def launch(args, folder: Path, schedule: str, tokens: int, branches=None) -> float:
    """Train one study in `folder`; returns the launcher's wall seconds."""
    spec = folder.with_suffix(".toml")
    spec.write_text(spec_toml(args, schedule, tokens, branches))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scaling.launch", "--spec", str(spec), "--study-dir", str(folder),
                    "--max-parallel", "1", "--no-report", "--no-progress"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_wall_s(run_dir: Path) -> float:
    """A run's own wall: its last status update minus its first start record."""
    status = json.loads((run_dir / "status.json").read_text())
    with open(run_dir / "metrics.ndjson") as f:
        start = next(json.loads(line)["time"] for line in f if '"kind": "start"' in line)
    return status["updated_at"] - start


def points(folders: list[Path]) -> dict[int, tuple[float, float]]:
    """Validation nll (value, se) per trained-token count over the studies in `folders`."""
    records = load(folders).records
    rows = records.filter((records["metric"] == METRIC) & (records["split"] == "validation"))
    return {int(r["tokens"]): (float(r["value"]), float(r["se"])) for r in rows.iter_rows(named=True)}


def way_cost(folders: list[Path]) -> tuple[int, float]:
    """(tokens trained, summed run wall seconds): a branch trains only from its branch step."""
    tokens, wall = 0, 0.0
    for folder in folders:
        for run_dir in sorted((folder / "runs").iterdir()):
            spec = json.loads((run_dir / "spec.json").read_text())  # flat: RunSpec.to_json
            tokens += (spec["steps"] - spec.get("branch_step", 0)) * spec["batch_size"] * spec["seq_len"]
            wall += run_wall_s(run_dir)
    return tokens, wall


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="ar")
    p.add_argument("--size", default="0.1M")
    p.add_argument("--steps", type=int, default=1200, help="the trunk's steps T (32 x 32 bytes each)")
    p.add_argument("--fractions", default="0.25,0.5", help="branch points, as fractions of T")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup-steps", "--warmup", dest="warmup", type=int, default=60)
    args = p.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",")]
    step_points = [round(f * args.steps) for f in fractions]
    ends = [s + round(BRANCH_DECAY * s) for s in step_points] + [args.steps]
    per_step = BATCH * SEQ
    with tempfile.TemporaryDirectory(prefix="bench-wsd-") as tmp:
        root = Path(tmp)
        ways = {"branched": [root / "branched"], "wsd": [root / f"wsd-{e}" for e in ends],
                "cosine": [root / f"cosine-{e}" for e in ends]}
        launcher_s = {"branched": launch(args, ways["branched"][0], "wsd", args.steps * per_step, fractions)}
        for way in ("wsd", "cosine"):
            launcher_s[way] = sum(launch(args, folder, way, end * per_step)
                                  for folder, end in zip(ways[way], ends))
        print(f"{args.family} {args.size}, T = {args.steps} steps of {per_step} tokens, branches at "
              f"{fractions} of T (decay {BRANCH_DECAY} x the steps so far), one run at a time")
        print(f"{'way':10} {'runs':>4} {'tokens':>10} {'run wall s':>10} {'launcher s':>10}")
        costs = {}
        for way, folders in ways.items():
            tokens, wall = way_cost(folders)
            costs[way] = (tokens, wall)
            runs = sum(len(list((f / "runs").iterdir())) for f in folders)
            print(f"{way:10} {runs:4d} {tokens:10d} {wall:10.1f} {launcher_s[way]:10.1f}")
        for way in ("wsd", "cosine"):
            print(f"branched / {way}: tokens {costs['branched'][0] / costs[way][0]:.3f}, "
                  f"run wall {costs['branched'][1] / costs[way][1]:.3f}, "
                  f"launcher wall {launcher_s['branched'] / launcher_s[way]:.3f}")
        loss = {way: points(folders) for way, folders in ways.items()}
        print(f"validation {METRIC} (nats/byte, +- se over the suite's windows) per point:")
        print(f"{'tokens':>10} {'branched':>16} {'wsd':>16} {'cosine':>16} {'|branched - wsd|':>17}")
        for end in ends:
            d = end * per_step
            cells = [loss[w].get(d, (float("nan"), float("nan"))) for w in ways]
            text = " ".join(f"{v:8.4f} +- {s:.4f}" for v, s in cells)
            print(f"{d:10d} {text} {abs(cells[0][0] - cells[1][0]):17.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
