"""The review's results book: run each CPU review preset and write its section from the study's own
report (fits.json and tables/*.csv), so every number in `docs/results/review/` is the code's output.

    python bench/review_book.py                                  # every preset, hours on 2 cores
    python bench/review_book.py --presets factorial-cpu          # one section
    python bench/review_book.py --presets ema-cpu --max-steps 2 --seeds 1 --sizes 2/48/2 --out /tmp/book
                                                                 # a smoke run (numbers mean nothing)

Each section gives the command, the measured wall time and load average, the answer as tables of
mean [95 % interval] n over seeds (and the factorial's effects, the ensemble gains), the runs left
on the unigram plateau, and what a CPU-scale, byte-level study cannot say. Sections are written
only from a finished study; a study whose launch fails gets no section.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the sections read models.ladder, with or without an installed aoscale
RUN_FILE = "book_run.json"  # beside the study: its launch's command, wall time, exit and load averages
COMMON_CAVEATS = (
    "Shakespeare bytes, not OpenWebText BPE: a 257-token vocabulary and 32-byte contexts, so context "
    "lengths, vocabulary effects and every absolute loss differ from the paper's.",
    "Models of 55k-234k core parameters trained for 600-2,000 steps: effects may change sign or size "
    "with capacity and budget (the review's scale point); compare sizes, do not extrapolate.",
    "Intervals are t-intervals over seeds (n per cell as shown): they cover seed-to-seed variation of "
    "this recipe, not other recipes or data; the evaluation's own sampling error (4,096 windows spread over "
    "the whole validation split, the `cpu` suites') is smaller.",
)


@dataclass(frozen=True)
class Section:
    """A book section: the review's question, the preset that answers it, what to tabulate."""

    title: str
    question: str
    metrics: tuple[str, ...]
    caveats: tuple[str, ...]
    ema_effect: bool = False  # add the EMA - raw table (tables/ema_effect.csv)


SECTIONS: dict[str, Section] = {
    "l2r-mix-cpu": Section(
        "L2R mixing (Finding 3.2 vs Figure 11)",
        "Any-order and L2R loss at 0 / 10 / 30 / 50 / 90 % L2R data: monotone, or a sweet spot, and at which size?",
        ("nll_anyorder", "nll_l2r"),
        ("Rotary positions: their relative target-to-context rotation may make L2R data less special than "
         "with the paper's learned positions.",)),
    "dec-enc-cpu": Section(
        "Decoder vs encoder (Finding 6, scoped)",
        "AO-GPT vs MDLM on L2R and any-order evaluation; does context-order ensembling close the any-order gap, "
        "and how does the gain move with M and size?",
        ("nll_l2r", "nll_anyorder", "nll_ensemble"),
        ("M reaches 4 (the cpu suite), not the paper's larger ensembles.",
         "MDLM's any-order figure is its ELBO (an upper bound); AO-GPT's is a permutation Monte-Carlo estimate "
         "with k = 4 draws.")),
    "factorial-cpu": Section(
        "De-confounding AO-GPT‡ vs σ-GPT (2×2×2 factorial)",
        "adaLN × EMA × 10 % L2R: main effects and interactions with intervals, plus σ-GPT on the same network "
        "and budget.",
        ("nll_anyorder", "nll_l2r"),
        ("Rotary positions: every variant's queries carry the target position in each layer, so the adaLN-vs-input "
         "contrast is measured on top of that (pe-cpu measures it on learned positions).",
         "At 1,000 steps the EMA warm-up min(0.9999, (1+n)/(10+n)) caps the decay at 0.991: the EMA factor is "
         "'warm-up EMA vs raw weights', not the paper's 0.9999 average.",
         "The factorial's intervals pool the within-cell variance over cells (no seed pairing).",
         "Each arm is scored on its own weights (EMA is an arm difference: analysis.fairness), so the EMA "
         "factor compares the EMA arms' EMA weights with the rate-0 arms' raw weights, which for equal seeds "
         "are the EMA arms' own raw weights; the EMA − raw table below pairs the same by seed within runs."),
        ema_effect=True),
    "pe-cpu": Section(
        "Target-position injection (Figures 6-7)",
        "Vanilla PE (input), the same PE in every layer, a different PE in every layer, adaLN.",
        ("nll_anyorder", "nll_l2r"),
        ("Learned positions (the paper's), so the injection is the only route of the target position; these "
         "runs sit nearer the unigram plateau than rotary ones: check the plateau list.",)),
    "ema-cpu": Section(
        "EMA rates (Figure 8)",
        "EMA 0 / 0.99 / 0.999 / 0.9999, with the 'no EMA' convention stated.",
        ("nll_anyorder", "nll_l2r"),
        ("'No EMA' is rate 0: the EMA object is off and the raw weights are scored; every EMA run also scores "
         "its raw weights (the `weights` column), so raw vs EMA is paired within runs.",
         "Below 8,991 steps the warm-up min(rate, (1+n)/(10+n)) caps 0.999 and 0.9999 at the same decay: their "
         "arms are the same computation and must agree; only 0 vs 0.99 vs the capped average differ at 1,500 steps.",
         "Each arm is scored on its own weights (EMA is an arm difference: analysis.fairness): rate 0 on raw, "
         "the others on their EMA weights; the EMA − raw table pairs both weights of each run by seed."),
        ema_effect=True),
    "mdm-loss-cpu": Section(
        "Encoder objectives",
        "SEDD, RADD (k-DCE) and MDLM losses on one network: training loss and evaluated bound.",
        ("nll_l2r", "nll_anyorder", "nll_elbo_mdlm", "nll_elbo_kdce", "nll_elbo_sedd"),
        ("SEDD carries its time conditioning (adaLN on σ̄), the other two do not, as in their codes.",)),
    "infill-cpu": Section(
        "Infilling and speed at comparable quality",
        "Infilling on held-out text for AO-GPT, σ-GPT, AR and MDLM; full multi-step generation time and quality "
        "(judge perplexity, entropy) and the joint-vs-marginal error of parallel decoding (gen_self_nll per "
        "tokens-per-step).",
        ("infill_nll", "infill_em", "gen_time_s", "gen_ppl", "gen_entropy", "gen_self_nll"),
        ("Generation uses the suite's default sampling (no annealing): the top-p 0.95 / temperature 0.7 rows "
         "need `python -m jobs.generate --top-p 0.95 --temperature 0.7` on each run (not in this book).",
         "Times are one CPU thread at 32-byte contexts: the paper's 25x is a GPU figure at 1,024 tokens.")),
}


def launch_command(preset: str, study_dir: Path, extra: list[str]) -> list[str]:
    """The scaling.launch command of one preset's study."""
    return [sys.executable, "-m", "scaling.launch", "--preset", preset, "--study-dir", str(study_dir),
            "--no-progress", *extra]


def run_study(preset: str, study_dir: Path, extra: list[str]) -> dict:
    """Launch the study; its command, wall seconds, exit status and load averages."""
    command = launch_command(preset, study_dir, extra)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    load_before, start = os.getloadavg(), time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    shown = ["python", *command[1:]]
    return {"command": shlex.join(shown), "wall_s": wall_s, "rc": proc.returncode, "load_before": load_before,
            "load_after": os.getloadavg(), "tail": proc.stdout[-2000:] + proc.stderr[-2000:]}


def _interval(row: dict, digits: int = 3) -> str:
    lo, hi = row.get("lo"), row.get("hi")
    shown = f"{row['mean']:.{digits}f}"
    if lo is not None and hi is not None and lo == lo:
        shown += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{shown} (n={row['n']})"


def points_table(points: pl.DataFrame, metrics: tuple[str, ...]) -> str:
    """Markdown: one row per (metric, m, variant), one column per size; mean [95 % CI] (n)."""
    rows = points.filter(pl.col("metric").is_in(list(metrics)))
    if rows.is_empty():
        return "_no records for these metrics_\n"
    sizes = sorted(rows["size"].unique().to_list(), key=_size_key)
    lines = ["| metric | dataset | m / steps | family | variant | " + " | ".join(sizes) + " |",
             "|---" * (5 + len(sizes)) + "|"]
    keys = ["metric", "dataset", "m", "family", "variant"]
    for key, group in rows.sort(keys, nulls_last=True).group_by(keys, maintain_order=True):
        cells = {r["size"]: _interval(r) for r in group.iter_rows(named=True)}
        label = ["" if v is None else str(v) for v in key]
        lines.append("| " + " | ".join(label + [cells.get(s, "") for s in sizes]) + " |")
    return "\n".join(lines) + "\n"


def _size_key(size: str) -> float:
    from models.ladder import core_params, get_shape  # noqa: PLC0415 - torch-free, but only when writing

    return core_params(get_shape(size))


def _signed(value: float | None) -> str:
    """+0.1234, or — where the table has no value (one seed per cell: no interval)."""
    return "—" if value is None or value != value else f"{value:+.4f}"


def factorial_md(path: Path) -> str:
    """The factorial's effects (estimate [95 % CI], n, dof) per size and metric."""
    if not path.exists():
        return ""
    frame = pl.read_csv(path).filter(pl.col("metric").is_in(["nll_anyorder", "nll_l2r"]))
    lines = ["\n**Factorial effects** (mean at the second level − mean at the first; nats/byte):\n",
             "| size | metric | effect | contrast | estimate [95 % CI] | n | dof |", "|---|---|---|---|---|---|---|"]
    for r in frame.iter_rows(named=True):
        lines.append(f"| {r['size']} | {r['metric']} | {r['effect']} | {r['contrast']} | "
                     f"{_signed(r['estimate'])} [{_signed(r['lo'])}, {_signed(r['hi'])}] | {r['n']} | {r['dof']} |")
    return "\n".join(lines) + "\n"


def ema_md(path: Path) -> str:
    """EMA − raw weights per arm and size, paired by seed (the report's ema_effect table)."""
    if not path.exists():
        return "\n_no run scored both EMA and raw weights_\n"
    frame = pl.read_csv(path)
    frame = frame if "m" in frame.columns else frame.with_columns(m=pl.lit(None, pl.Int64))
    return ("\n**EMA − raw weights** (paired by seed within each run; negative: EMA helps):\n\n"
            + points_table(frame, ("nll_anyorder", "nll_l2r")))


def ensemble_md(fits: dict) -> str:
    """Ensemble gains NLL(M=1) − NLL(M=max) per family and size, from fits.json."""
    lines = []
    for study in fits.get("ensemble", []):
        for g in study["gains"]:
            lo, hi = g.get("lo"), g.get("hi")
            ci = f" [{lo:+.4f}, {hi:+.4f}]" if lo is not None and hi is not None else ""
            lines.append(f"| {study['family']} | {study['variant']} | {g['size']} | {g['m_min']} → {g['m_max']} | "
                         f"{g.get('mean', float('nan')):+.4f}{ci} | {g.get('n', '')} |")
    if not lines:
        return ""
    return ("\n**Ensemble gain** NLL(M=min) − NLL(M=max) (nats/byte):\n\n| family | variant | size | M | gain "
            "[95 % CI] | n |\n|---|---|---|---|---|---|\n" + "\n".join(lines) + "\n")


def section_md(preset: str, run: dict, report_dir: Path) -> str:
    """One book section from a finished study's report."""
    section = SECTIONS[preset]
    fits = json.loads((report_dir / "fits.json").read_text())
    points = pl.read_csv(report_dir / "tables" / "points.csv")
    plateau = fits.get("plateau_runs", [])
    wall = (f"**Wall time.** {run['wall_s'] / 60:.1f} min (exit {run['rc']}); load average "
            f"{run['load_before'][0]:.2f} before, {run['load_after'][0]:.2f} after.\n\n")
    answer = ("**Answer** (the study's tables; mean over seeds [95 % t-interval] (n seeds); nats/byte unless "
              "the metric says otherwise):\n\n")
    scored = ", ".join(f"{r['family']}/{r['variant']} {r['weights']}" for r in fits.get("arm_weights", []))
    weights = f"**Weights scored** ({fits.get('weights', '?')}): {scored or 'not recorded'}.\n\n"
    stuck = (f"\n**Runs on the unigram plateau** ({len(plateau)}; their comparisons are not answers): "
             f"{', '.join(plateau) or 'none'}.\n")
    out = [f"## {section.title}\n\n", f"**Question.** {section.question}\n\n",
           f"**Command.** `{run['command']}`\n\n", wall, weights, answer, points_table(points, section.metrics),
           factorial_md(report_dir / "tables" / "factorial.csv"),
           ensemble_md(fits) if "nll_ensemble" in section.metrics else "",
           ema_md(report_dir / "tables" / "ema_effect.csv") if section.ema_effect else "", stuck,
           "\n**What this cannot say.**\n\n", *[f"- {c}\n" for c in (*section.caveats, *COMMON_CAVEATS)]]
    return "".join(out)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; unknown presets exit 2 naming the valid ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", default=",".join(SECTIONS), help="comma-separated CPU review presets")
    p.add_argument("--studies-root", default="studies/review", help="where the studies are trained")
    p.add_argument("--out", default="docs/results/review", help="where the book's sections are written")
    p.add_argument("--max-steps", help="smoke runs only: cap every run's steps (changes run ids)")
    p.add_argument("--seeds", help="override the presets' seeds (smoke runs)")
    p.add_argument("--sizes", help="override the presets' sizes (smoke runs)")
    p.add_argument("--bootstrap", default="1000", help="bootstrap resamples of the fits")
    p.add_argument("--sections-only", action="store_true",
                   help=f"train nothing: rewrite each section from its study's report and {RUN_FILE}")
    args = p.parse_args(argv)
    unknown = [n for n in args.presets.split(",") if n not in SECTIONS]
    if unknown:
        p.exit(2, f"--presets: unknown preset {unknown[0]!r}; valid: {', '.join(SECTIONS)}\n")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run each preset's study and write its section; 1 when any study failed."""
    args = parse(argv)
    extra = ["--bootstrap", args.bootstrap]
    for flag in ("max_steps", "seeds", "sizes"):
        if getattr(args, flag):
            extra += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    out, failed = Path(args.out), 0
    out.mkdir(parents=True, exist_ok=True)
    for preset in args.presets.split(","):
        study_dir = Path(args.studies_root) / preset
        if args.sections_only:
            if not (study_dir / RUN_FILE).is_file():
                print(f"{preset}: {study_dir / RUN_FILE} not found; run the study first", file=sys.stderr)
                failed = 1
                continue
            run = json.loads((study_dir / RUN_FILE).read_text())
        else:
            run = run_study(preset, study_dir, extra)
            if study_dir.is_dir():
                (study_dir / RUN_FILE).write_text(json.dumps({k: v for k, v in run.items() if k != "tail"}, indent=1) + "\n")
        report = study_dir / "report"
        # a rebuilt report stands for its study (--sections-only); its launch's exit is still shown
        if (run["rc"] != 0 and not args.sections_only) or not (report / "fits.json").exists():
            print(f"{preset}: study failed (exit {run['rc']}); no section written\n{run.get('tail', '')}", file=sys.stderr)
            failed = 1
            continue
        (out / f"{preset}.md").write_text(section_md(preset, run, report))
        print(f"{preset}: {run['wall_s'] / 60:.1f} min -> {out / (preset + '.md')}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
