"""The review's results book: run each CPU review preset and write its section from the study's own
report (fits.json and tables/*.csv), so every number in `docs/results/review/` is the code's output.

    python -m reference.review_book                                  # every preset, hours on 2 cores
    python -m reference.review_book --presets factorial-cpu          # one section
    python -m reference.review_book --presets ema-cpu --max-steps 2 --seeds 1 --sizes 2/48/2 --out /tmp/book
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
import tomllib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the sections read models.ladder, with or without an installed aoscale
from analysis import MIN_BOOTSTRAP  # noqa: E402 - after the path above
from cli import InputError, one_line, outputs, rules, schema  # noqa: E402 - after the path above
from cli.paths import refuse_special, user_path  # noqa: E402
from jobs.run import numerics  # noqa: E402

DEFAULT_OUT = Path("docs/results/review")
CONDITIONS = ("m", "steps", "tokens_per_step", "temperature", "top_p")  # the report's (analysis.records.cells)
RUN_FILE = "book_run.json"  # beside the study: its launch's command, wall time, exit and load averages
FITS_FILE = "fits.json"  # in the study's report: what a section quotes beside its tables
COMMON_CAVEATS = (
    "Shakespeare bytes, not OpenWebText BPE: a 257-token vocabulary and 32-byte contexts, so context "
    "lengths, vocabulary effects and every absolute loss differ from the paper's.",
    "Models of 55k-234k core parameters trained for 600-2,000 steps: effects may change sign or size "
    "with capacity and budget (the review's scale point); compare sizes, do not extrapolate.",
    "Intervals are t-intervals over seeds (n per cell as shown): they cover seed-to-seed variation of "
    "this recipe, not other recipes or data; the evaluation's own sampling error (4,096 windows spread over "
    "the whole validation split, the `cpu` suites') is smaller.",
)

SPLITS_CAVEAT = ("Each arm's lr is chosen per cell on the validation slice and every number shown is the chosen "
                 "runs' test slice (the `frontier` suite: 512 windows each); a choice at an end of the sweep is "
                 "warned in the report (widen the sweep).")


@dataclass(frozen=True)
class Section:
    """A book section: the review's question, the preset that answers it, what to tabulate."""

    title: str
    question: str
    metrics: tuple[str, ...]
    caveats: tuple[str, ...]
    ema_effect: bool = False  # add the EMA - raw table (tables/ema_effect.csv)
    scale: str = ""  # replaces the common caveat on model sizes and steps (COMMON_CAVEATS[1]) where it differs


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
         "Each arm is scored on its own weights (EMA is an arm difference: analysis.compare.fairness), so the EMA "
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
         "Each arm is scored on its own weights (EMA is an arm difference: analysis.compare.fairness): rate 0 on raw, "
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
        ("Step counts are matched: MDLM and the decoders run T = 32 / 16 / 8 steps for a 32-byte sample (the "
         "decoders then place 1 / 2 / 4 tokens per step, linear schedule); AR always runs 32. Annealed is "
         "temperature 0.7 with top-p 0.95, the review's setting; plain is 1.0 / 1.0.",
         "gen_self_nll scores samples under the model that drew them, so it measures the parallel step's joint-"
         "vs-marginal error, not quality; quality is the judge's gen_ppl beside the samples' entropy (annealing "
         "lowers both).",
         "Times are one CPU thread at 32-byte contexts: the paper's 25x is a GPU figure at 1,024 tokens.")),
    # issue 36's de-confounding designs (scaling/study/review_presets.py): each arm at its own lr, and EMA past
    # the step where the warm-up stops making 0.999 and 0.9999 one computation
    "pe-lr-cpu": Section(
        "Target-position injection, each arm at its own lr (Figures 6-7)",
        "pe-cpu's four injections on learned positions at 0.1M, each at the lr (1e-3 / 3e-3 / 1e-2) its validation "
        "loss chooses, reported on the test slice.",
        ("nll_anyorder", "nll_l2r"), (SPLITS_CAVEAT,)),
    "factorial-lr-cpu": Section(
        "De-confounding AO-GPT‡ vs σ-GPT, each arm at its own lr",
        "factorial-cpu's 2×2×2 plus σ-GPT at 0.1M, each arm at the lr (1e-3 / 3e-3 / 1e-2 / 3e-2) its validation "
        "loss chooses, reported on the test slice (3e-2 was added in place after 15 arm-metric cells chose "
        "1e-2, the top of the first sweep).",
        ("nll_anyorder", "nll_l2r"), (SPLITS_CAVEAT,), ema_effect=True),
    "ema-long-cpu": Section(
        "EMA 0.999 vs 0.9999 past the warm-up (Figure 8)",
        "EMA 0.999 vs 0.9999 at 15,000 steps on 2/48/2, where min(rate, (1+n)/(10+n)) no longer gives them one "
        "decay; every run also scores its raw weights.",
        ("nll_anyorder", "nll_l2r"),
        ("Past n = 8,991 updates 0.9999's decay keeps rising, to 0.99940 at 15,000: an average over ~1,670 steps "
         "against 0.999's ~1,000, not the paper's 10,000.",), ema_effect=True,
        scale="A model of 57k core parameters trained for 15,000 steps: the effect may change sign or size with "
              "capacity and budget (the review's scale point); do not extrapolate."),
}


NOT_RECORDED = "not recorded (made before runs recorded it)"  # studies trained before issue 39
VERDICT_WORDS = ("supports", "contradicts", "open")


@dataclass(frozen=True)
class Contrast:
    """arm − base on one metric at one size, from the points table: Welch's interval from the two
    arms' seed means, t-intervals and n (unpaired: points.csv holds no per-seed values)."""

    metric: str
    size: str
    arm: str  # family/variant
    base: str


@dataclass(frozen=True)
class Verdict:
    """A section's answer to the paper's claim: the word, the claim, why, the contrasts it rests on
    and the confounds it does not remove. `contradicts` needs an interval that excludes 0 after each
    arm's lr is tuned; a study run at one shared lr gives at most `open` on an arm contrast."""

    word: str
    claim: str
    why: str
    contrasts: tuple[Contrast, ...]
    confounds: tuple[str, ...]


VERDICTS_FILE = Path(__file__).with_name("verdicts.toml")  # the verdicts' text and contrasts, as data


def load_verdicts(path: Path = VERDICTS_FILE) -> dict[str, Verdict]:
    """Each section's verdict from `verdicts.toml`; a confound naming a key of its [confounds]
    table stands for that sentence (several verdicts share them)."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    shared = doc["confounds"]
    return {preset: Verdict(v["word"], v["claim"], v["why"], tuple(Contrast(**c) for c in v["contrasts"]),
                            tuple(shared.get(c, c) for c in v["confounds"])) for preset, v in doc["verdicts"].items()}


VERDICTS: dict[str, Verdict] = load_verdicts()
def welch(points: pl.DataFrame, c: Contrast) -> tuple[float, float, float, float] | None:
    """arm − base: (difference, lo, hi, Welch dof) from each arm's mean, t-interval and n (its se is the
    interval's half-width over t(n − 1)); analysis.fit.stats.welch; None where a cell is missing or has n < 2."""
    from scipy import stats as sps  # noqa: PLC0415 - only when writing

    from analysis.fit.stats import Q_HI, SeedSummary  # noqa: PLC0415
    from analysis.fit.stats import welch as welch_summaries  # noqa: PLC0415

    summaries = []
    for label in (c.arm, c.base):
        family, variant = label.split("/", 1)
        row = points.filter((pl.col("metric") == c.metric) & (pl.col("size") == c.size) & (pl.col("family") == family)
                            & (pl.col("variant") == variant))
        if row.height != 1 or not row["n"][0] or row["n"][0] < 2:
            return None
        r = row.row(0, named=True)
        se = (r["hi"] - r["lo"]) / 2 / float(sps.t.ppf(Q_HI, r["n"] - 1))
        summaries.append((SeedSummary(r["mean"], float("nan"), se, r["lo"], r["hi"], r["n"]), r["n"]))
    (a, na), (b, nb) = summaries
    d = welch_summaries(a, b)
    va, vb = a.se ** 2, b.se ** 2
    dof = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1)) if va + vb > 0 else na + nb - 2
    return d.mean, d.lo, d.hi, dof


def paired(points: pl.DataFrame, plateau: pl.DataFrame | None, c: Contrast) -> tuple[float, float, float, int] | None:
    """arm − base paired by seed: (mean, lo, hi, n) of the per-seed differences on the split and dataset
    the points table reports, from the report's per-run values (tables/plateau.csv: nll_l2r and
    nll_anyorder); None where they are absent, fewer than 2 seeds match, or a seed has several runs
    (a sweep's candidates: which one was chosen is not in that table)."""
    from analysis.fit.stats import summarise  # noqa: PLC0415 - only when writing

    if plateau is None or plateau.is_empty():
        return None
    per_arm = []
    for label in (c.arm, c.base):
        family, variant = label.split("/", 1)
        arm = (pl.col("family") == family) & (pl.col("variant") == variant) & (pl.col("size") == c.size)
        where = points.filter(arm & (pl.col("metric") == c.metric)).select("dataset", "split").unique()
        if where.height != 1:
            return None
        dataset, split = where.row(0)
        rows = plateau.filter(arm & (pl.col("metric") == c.metric) & (pl.col("dataset") == dataset)
                              & (pl.col("split") == split))
        if rows.is_empty() or rows["seed"].n_unique() != rows.height:
            return None
        per_arm.append(rows.select("seed", pl.col("value").alias(label)))
    both = per_arm[0].join(per_arm[1], on="seed", how="inner")
    if both.height < 2:
        return None
    d = summarise((both[c.arm] - both[c.base]).to_numpy())
    return d.mean, d.lo, d.hi, d.n


def verdict_md(preset: str, points: pl.DataFrame, plateau: pl.DataFrame | None = None) -> str:
    """The section's verdict line, its contrasts (paired by seed where the report's per-run values allow,
    else Welch from the arms' seed intervals, said to be unpaired) and the confounds it does not remove."""
    v = VERDICTS[preset]
    shown, word, why = [], v.word, v.why
    for c in v.contrasts:
        what = f"{c.arm} − {c.base}, {c.metric} at {c.size}"
        p = paired(points, plateau, c)
        d = welch(points, c) if p is None else None
        if word != "open" and (p is None or p[1] <= 0 <= p[2]):  # a word past open needs a paired interval off 0
            word, why = "open", "The declared verdict needs a paired interval that excludes 0, and this study's does not"
        if p is not None:
            shown.append(f"{what}: {p[0]:+.3f} [{p[1]:+.3f}, {p[2]:+.3f}] (paired by seed, n = {p[3]})")
        elif d is not None:
            shown.append(f"{what}: {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] (Welch, {d[3]:.1f} dof; unpaired: the "
                         "tables hold no per-seed values to pair)")
    return (f"**Verdict: {word}.** Claim: {v.claim}. {why}.\n\n"
            f"**Contrast.** {'; '.join(shown) or 'none yet'}.\n\n"
            f"**Confounds it does not remove.** {'; '.join(v.confounds)}.\n\n")


def contrast_table(preset: str, report_dir: Path) -> pl.DataFrame:
    """The verdict's contrasts as rows (arm − base, mean, lo, hi, n, pairing), from the report's tables:
    shipped beside a section so its quoted contrast can be found (tests/test_results_numbers.py)."""
    points = pl.read_csv(report_dir / "tables" / "points.csv")
    plateau_csv = report_dir / "tables" / "plateau.csv"
    plateau = pl.read_csv(plateau_csv) if plateau_csv.exists() else None
    rows = []
    for c in VERDICTS[preset].contrasts:
        p = paired(points, plateau, c)
        d = welch(points, c) if p is None else None
        if p is not None or d is not None:
            mean, lo, hi, n = p if p is not None else (*d[:3], None)
            rows.append({"preset": preset, "metric": c.metric, "size": c.size, "arm": c.arm, "base": c.base,
                         "mean": mean, "lo": lo, "hi": hi, "n": n, "pairing": "seed" if p is not None else "welch"})
    return pl.DataFrame(rows)


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
    lines = ["| metric | dataset | condition | family | variant | " + " | ".join(sizes) + " |",
             "|---" * (5 + len(sizes)) + "|"]
    rows = rows.with_columns([pl.lit(None, pl.Int64).alias(c) for c in CONDITIONS if c not in rows.columns])
    keys = ["metric", "dataset", *CONDITIONS, "family", "variant"]
    for key, group in rows.sort(keys, nulls_last=True).group_by(keys, maintain_order=True):
        cells = {r["size"]: _interval(r) for r in group.iter_rows(named=True)}
        shown = dict(zip(keys, key))
        label = [str(shown["metric"]), str(shown["dataset"]), _condition(shown), str(shown["family"]),
                 str(shown["variant"])]
        lines.append("| " + " | ".join(label + [cells.get(s, "") for s in sizes]) + " |")
    return "\n".join(lines) + "\n"


def _condition(row: dict) -> str:
    """What a row was measured under: 'M=4', 'steps=32', '4 tokens/step (8 steps)', each with its
    sampling ('annealed T=0.7 p=0.95' or 'plain'), or ''."""
    if row.get("tokens_per_step") is not None:
        k = row["tokens_per_step"]
        shown = [f"{k} token{'' if k == 1 else 's'}/step ({row['steps']} steps)"]
    else:
        shown = [f"M={row['m']}" if row.get("m") is not None else "",
                 f"steps={row['steps']}" if row.get("steps") is not None else ""]
    if row.get("temperature") is not None:
        plain = row["temperature"] == 1.0 and row.get("top_p") == 1.0
        shown.append("plain" if plain else f"annealed T={row['temperature']:g} p={row['top_p']:g}")
    return " ".join(s for s in shown if s)


def _size_key(size: str) -> float:
    from models.ladder import core_params, get_shape  # noqa: PLC0415 - torch-free, but only when writing

    return core_params(get_shape(size))


def _signed(value: float | None) -> str:
    """+0.1234, or — where the table has no value (one seed per cell: no interval)."""
    return "—" if value is None or value != value else f"{value:+.4f}"


def _csv_md(path: Path, intro: str, header: list[str], cells, keep=None) -> str:
    """A Markdown table of a report CSV: `intro`, then one row of `cells(row)` per row ('' if absent)."""
    if not path.exists():
        return ""
    frame = pl.read_csv(path)
    frame = frame.filter(keep) if keep is not None else frame
    lines = [f"\n{intro}", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in cells(r)) + " |" for r in frame.iter_rows(named=True)]
    return "\n".join(lines) + "\n"


def _estimate(r: dict, value: str = "mean") -> str:
    return f"{_signed(r[value])} [{_signed(r['lo'])}, {_signed(r['hi'])}]"


def factorial_md(path: Path) -> str:
    """The factorial's effects (estimate [95 % CI], n, dof) per size and metric."""
    return _csv_md(path, "**Factorial effects** (mean at the second level − mean at the first; nats/byte):\n",
                   ["size", "metric", "effect", "contrast", "estimate [95 % CI]", "n", "dof"],
                   lambda r: [r["size"], r["metric"], r["effect"], r["contrast"], _estimate(r, "estimate"), r["n"],
                              r["dof"]], pl.col("metric").is_in(["nll_anyorder", "nll_l2r"]))


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


def _sampling(r: dict) -> str:
    return _condition({"temperature": r["temperature"], "top_p": r["top_p"]})


def parallel_md(path: Path) -> str:
    """gen_self_nll(k) − gen_self_nll(1), paired within each run (the report's parallel_decoding table)."""
    return _csv_md(path, "**Joint-vs-marginal error of parallel decoding**: gen_self_nll(k) − gen_self_nll(k = 1), "
                   "the model's own joint NLL of samples decoded k tokens per step, paired within each run "
                   "(nats/byte; positive: the factorised step costs likelihood):\n",
                   ["family", "variant", "size", "sampling", "k (steps)", "Δ [95 % CI] (n seeds)"],
                   lambda r: [r["family"], r["variant"], r["size"], _sampling(r),
                              f"{r['tokens_per_step']} ({r['steps']})", f"{_estimate(r)} (n={r['n']})"])


def repeats_md(path: Path) -> str:
    """gen_time_s' spread over each run's repeats (the report's generation_repeats table)."""
    return _csv_md(path, "**Generation time over repeats** (each run generated every setting several times; the "
                   "median over runs of the repeats' standard deviation):\n",
                   ["family", "variant", "size", "sampler", "steps", "sampling", "repeats", "std over repeats (s)"],
                   lambda r: [r["family"], r["variant"], r["size"], r["estimator"], r["steps"], _sampling(r),
                              r["repeats"], f"{r['repeat_sd']:.4f}"])


def numerics_text(study_dir: Path) -> str | None:
    """The study's numerics paths as `scaling.status` names them (id, label, runs; jobs/run/numerics.py),
    or None where no run recorded one."""
    counts = numerics.path_counts(sorted((study_dir / "runs").glob("*")))
    return "; ".join(f"{key} ({label}; {n} run{'s' if n != 1 else ''})" for key, (label, n) in counts.items()) or None


def section_md(preset: str, run: dict, report_dir: Path) -> str:
    """One book section from a finished study's report."""
    section = SECTIONS[preset]
    fits = read_fits(report_dir)
    points = pl.read_csv(report_dir / "tables" / "points.csv")
    plateau = fits.get("plateau_runs", [])
    wall = (f"**Wall time.** {run['wall_s'] / 60:.1f} min (exit {run['rc']}); load average "
            f"{run['load_before'][0]:.2f} before, {run['load_after'][0]:.2f} after; numerics path: "
            f"{run.get('numerics') or numerics_text(report_dir.parent) or NOT_RECORDED}.\n\n")
    answer = ("**Answer** (the study's tables; mean over seeds [95 % t-interval] (n seeds); nats/byte unless "
              "the metric says otherwise):\n\n")
    scored = ", ".join(f"{r['family']}/{r['variant']} {r['weights']}" for r in fits.get("arm_weights", []))
    weights = f"**Weights scored** ({fits.get('weights', '?')}): {scored or 'not recorded'}.\n\n"
    stuck = (f"\n**Runs on the unigram plateau** ({len(plateau)}; their comparisons are not answers): "
             f"{', '.join(plateau) or 'none'}.\n")
    common = [section.scale or c if i == 1 else c for i, c in enumerate(COMMON_CAVEATS)]
    plateau_csv = report_dir / "tables" / "plateau.csv"
    plateau_runs = pl.read_csv(plateau_csv) if plateau_csv.exists() else None
    out = [f"## {section.title}\n\n", f"**Question.** {section.question}\n\n", verdict_md(preset, points, plateau_runs),
           f"**Command.** `{run['command']}`\n\n", wall, weights, answer, points_table(points, section.metrics),
           factorial_md(report_dir / "tables" / "factorial.csv"),
           ensemble_md(fits) if "nll_ensemble" in section.metrics else "",
           ema_md(report_dir / "tables" / "ema_effect.csv") if section.ema_effect else "",
           parallel_md(report_dir / "tables" / "parallel_decoding.csv"),
           repeats_md(report_dir / "tables" / "generation_repeats.csv"), stuck,
           "\n**What this cannot say.**\n\n", *[f"- {c}\n" for c in (*section.caveats, *common)]]
    return "".join(out)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; unknown presets exit 2 naming the valid ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", default=",".join(SECTIONS), help="comma-separated CPU review presets")
    p.add_argument("--studies-root", default="studies/review", help="where the studies are trained")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the book's sections are written: a new folder "
                   "or a book written from the same --studies-root")
    p.add_argument("--force", action="store_true", help="write into a book written from another --studies-root")
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


def read_run(path: Path) -> dict:
    """A study's book_run.json, checked by cli.schema.BOOK_RUN (InputError naming the file and the key otherwise)."""
    refuse_special("--sections-only", path)
    if not path.is_file():
        raise InputError(f"--sections-only: {path} not found; run that study first (without --sections-only) or "
                         "pass --studies-root where it was trained")
    return schema.load_json(path, schema.BOOK_RUN)


def read_runs(studies_root: Path, presets: list[str]) -> dict[str, dict]:
    """Every preset's book_run.json under `studies_root`, each checked by read_run, and its
    report's fits.json where there is one (read_fits): a damaged one is refused before the book is written."""
    runs = {preset: read_run(studies_root / preset / RUN_FILE) for preset in presets}
    for preset in presets:
        if (studies_root / preset / "report" / FITS_FILE).exists():
            read_fits(studies_root / preset / "report")
    return runs


def read_fits(report_dir: Path) -> dict:
    """A report's fits.json, checked by cli.schema.FITS (InputError naming the file and the key otherwise)."""
    return schema.load_json(report_dir / FITS_FILE, schema.FITS, default={})


def check_flags(args: argparse.Namespace) -> None:
    """The flags passed on to each study, checked before the book writes anything: --bootstrap at
    least MIN_BOOTSTRAP, --max-steps and --seeds whole numbers >= 1, --sizes not empty, --out a
    folder path that is not the current folder."""
    rules.at_least("--bootstrap", _whole("--bootstrap", args.bootstrap), MIN_BOOTSTRAP)
    for flag in ("--max-steps", "--seeds"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            rules.positive_int(flag, _whole(flag, value))
    if args.sizes is not None and not args.sizes.strip(","):
        raise InputError("--sizes: empty; give sizes such as 2/48/2,0.1M")
    user_path("--out", args.out)
    if Path(args.out).resolve() == Path.cwd().resolve():
        raise InputError(f"--out: {args.out!r} is the current folder; give a folder of its own (e.g. {DEFAULT_OUT})")


def _whole(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{flag}: {text!r} is not a whole number; give one such as 2") from None


def check_book_out(out: Path, studies_root: Path, force: bool) -> None:
    """Refuse an --out the book does not own (cli.outputs): a study, a run, a report, another
    studies root's book (unless --force), a folder of other files, a special file."""
    user_path("--out", out)
    legacy = ("README.md", *(f"{preset}.md" for preset in SECTIONS))
    outputs.check_output("--out", out, "book", [studies_root], force=force, legacy=legacy, default=DEFAULT_OUT)


def write_section(out: Path, preset: str, run: dict, report: Path) -> int:
    """`<out>/<preset>.md` from the study's report: 0, or 1 with one line when its report is damaged."""
    try:
        text = section_md(preset, run, report)
    except InputError as error:
        print(one_line(str(error)), file=sys.stderr)
        return 1
    (out / f"{preset}.md").write_text(text)
    contrast_table(preset, report).write_csv(out / f"{preset}.contrasts.csv")
    print(f"{preset}: {run['wall_s'] / 60:.1f} min -> {out / (preset + '.md')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run each preset's study and write its section; 1 when any study failed, 2 on bad input."""
    args = parse(argv)
    extra = ["--bootstrap", args.bootstrap]
    for flag in ("max_steps", "seeds", "sizes"):
        if getattr(args, flag):
            extra += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    out, failed = Path(args.out), 0
    try:  # bad input: refused before anything is written
        check_flags(args)
        runs = read_runs(Path(args.studies_root), args.presets.split(",")) if args.sections_only else {}
        check_book_out(out, Path(args.studies_root), args.force)
    except InputError as error:
        print(one_line(str(error)), file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (out / outputs.MARKER).write_text(outputs.marker_text("book", [args.studies_root], out))
    for preset in args.presets.split(","):
        study_dir = Path(args.studies_root) / preset
        if args.sections_only:
            run = runs[preset]
        else:
            run = run_study(preset, study_dir, extra)
            if study_dir.is_dir():
                (study_dir / RUN_FILE).write_text(json.dumps({k: v for k, v in run.items() if k != "tail"}, indent=1) + "\n")
        report = study_dir / "report"
        # a rebuilt report stands for its study (--sections-only); its launch's exit is still shown
        if (run["rc"] != 0 and not args.sections_only) or not (report / FITS_FILE).exists():
            print(f"{preset}: study failed (exit {run['rc']}); no section written\n{run.get('tail', '')}", file=sys.stderr)
            failed = 1
            continue
        failed |= write_section(out, preset, run, report)
    write_verdicts(out)
    return failed


def write_verdicts(out: Path) -> None:
    """`<out>/verdicts.csv`: every section's verdict contrasts in the book (its `<preset>.contrasts.csv`
    files, in SECTIONS order), the table the book's index quotes."""
    frames = [pl.read_csv(out / f"{preset}.contrasts.csv") for preset in SECTIONS
              if (out / f"{preset}.contrasts.csv").is_file()]
    frames = [f for f in frames if f.height]
    if frames:
        pl.concat(frames, how="diagonal_relaxed").write_csv(out / "verdicts.csv")


if __name__ == "__main__":
    sys.exit(main())
