"""Evaluation suites: what a study's evaluation measures and how many samples it spends.

Plain values, no torch: a study names its suite (`eval_suite`) and the planner reads what it
implies (e.g. whether it generates, and so needs a judge run) without loading models.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace

from cli import rules


@dataclass(frozen=True)
class Suite:
    """What a suite measures and how many samples it spends."""

    val_chunks: int  # validation windows of the run's own corpus, spread over its whole split (all if it holds fewer)
    k_mc: int  # MC draws per sequence (permutations, ELBO noise draws)
    m_max: int  # ensemble sweep M = 1, 2, 4, ..., m_max
    n_targets: int  # scored target slots per sequence for ensembling
    ensemble_chunks: int  # windows ensembling is run on: a uniform subsample of the scored ones (>= 256 or all)
    zero_shot: tuple[str, ...]  # eval sets (jobs.data.datasets) used when a data folder is set
    zero_shot_chunks: int | None  # chunks per eval set (None = all)
    lambada: bool = False
    infill_span: int = 0  # middle-span length in tokens; 0 = no infilling benchmark
    generate: bool = False
    gen_samples: int = 16  # samples drawn per step count when `generate`
    gen_steps: tuple[int, ...] = (64,)  # step counts T (decoders run min(T, length); AR always length)
    gen_sampling: tuple[tuple[float, float], ...] = ((1.0, 1.0),)  # (temperature, top_p) settings
    gen_repeats: int = 1  # independent generations per (steps, sampling): gen_time_s' spread
    test_split: bool = False  # also score a test split held out of validation's windows (jobs.data.heldout)

    @property
    def fingerprint(self) -> str:
        """12 hex digits of what the suite measures: its fields that differ from their defaults (and
        those without one), so adding a field whose default keeps the old behaviour changes no suite's
        fingerprint. Records carry it (`suite_hash`): records of an edited suite are not its result."""
        changed = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}
        return hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The family capabilities (models.families.base.CAPABILITIES) this suite uses: span scoring
        always (nll_l2r; LAMBADA and infilling where run), a sampler where it generates. A family's
        declared metric groups (its `FamilySpec.metrics`) are computed whatever the suite."""
        return ("span_logits",) + (("sample",) if self.generate else ())


SUITES: dict[str, Suite] = {
    "quick": Suite(val_chunks=8, k_mc=4, m_max=4, n_targets=8, ensemble_chunks=8,
                   zero_shot=("wikitext2",), zero_shot_chunks=4),
    # CPU studies (quickstart, laptop): 4,096 windows spread over the whole validation split (at 32
    # bytes each, 131 kB of the 440 kB Shakespeare split: 30 %), the ensemble on 256 of them x 16
    # targets, 2 MC draws per window (the se over windows counts the draws). CPU seconds per run
    # (one thread; bench/bench_eval.py at 0.1M, per-metric timings x 16 at 0.3M): AR 2 / 2, AO-GPT
    # 9 / 19, MDLM 35 / 82 (its exact L2R is one forward per token), ~150 s over the quickstart's 12
    # runs on 2 cores, ~110 s more than 1,024 windows. The whole split (13,752 windows) costs 3.4x
    # that, past the quickstart's 10 minutes.
    "cpu": Suite(val_chunks=4096, k_mc=2, m_max=4, n_targets=16, ensemble_chunks=256,
                 zero_shot=("wikitext2",), zero_shot_chunks=4),
    # CPU infilling and generation (scaling/review_presets.py `infill-cpu`): the cpu suite plus
    # 8-token middle spans and 16 samples per step count, judged by the study's AR judge run
    "cpu-gen": Suite(val_chunks=4096, k_mc=2, m_max=4, n_targets=16, ensemble_chunks=256,
                     zero_shot=("wikitext2",), zero_shot_chunks=4, infill_span=8, generate=True),
    # speed at comparable quality (scaling/review_presets.py `infill-cpu`): cpu-gen's infilling, and
    # generation of the 32-byte context at matched step counts T = 32 / 16 / 8 (AO-GPT: 1 / 2 / 4
    # tokens per step), plain and annealed (temperature 0.7, top-p 0.95: the review's setting),
    # 3 repeats of 16 samples each; cpu-gen stays as it was, so its studies' records stay its own
    "cpu-speed": Suite(val_chunks=4096, k_mc=2, m_max=4, n_targets=16, ensemble_chunks=256,
                       zero_shot=("wikitext2",), zero_shot_chunks=4, infill_span=8, generate=True,
                       gen_steps=(32, 16, 8), gen_sampling=((1.0, 1.0), (0.7, 0.95)), gen_repeats=3),
    # isoFLOP studies with swept settings (the frontier preset): selection reads validation, the
    # report reads test; 512 windows of each, fewer MC draws and a short ensemble sweep (M <= 2, on
    # the 256 windows every suite's ensemble takes at least), since a frontier study evaluates ~150 small runs
    "frontier": Suite(val_chunks=512, k_mc=2, m_max=2, n_targets=16, ensemble_chunks=256,
                      zero_shot=("wikitext2",), zero_shot_chunks=4, test_split=True),
    "paper": Suite(val_chunks=256, k_mc=16, m_max=8, n_targets=32, ensemble_chunks=256,
                   zero_shot=("wikitext2", "ptb", "lm1b", "lambada"), zero_shot_chunks=None,
                   lambada=True, infill_span=16, generate=True),
}


def parse_eval_suite(value: str) -> tuple[str, tuple[str, ...] | None]:
    """`SUITE` or `SUITE:SET,SET` -> (suite, the named zero-shot sets or None)."""
    suite, colon, names = value.partition(":")
    return suite, tuple(n.strip() for n in names.split(",") if n.strip()) if colon else None


def resolve(value: str) -> Suite:
    """The suite `SUITE[:SET,SET]` evaluates with: the named sets replace the suite's zero-shot sets."""
    name, named = parse_eval_suite(value)
    return replace(SUITES[name], zero_shot=named) if named else SUITES[name]


def check_suite(field: str, value: object) -> str:
    """`SUITE` or `SUITE:SET,SET` with a known suite and, after a colon, at least one set name
    (cli.InputError naming `field` otherwise; whether each set can be had is jobs.data.datasets')."""
    suite, colon, names = rules.text(field, value).partition(":")
    rules.one_of(field, suite, SUITES)
    if colon and not [n for n in names.split(",") if n.strip()]:
        raise rules.fail(field, value, "names no zero-shot set after the colon",
                         f"write {suite} alone or {suite}:SET,SET")
    return value
