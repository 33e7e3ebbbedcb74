"""Evaluation suites: what a study's evaluation measures and how many samples it spends.

Plain values, no torch: a study names its suite (`eval_suite`) and the planner reads what it
implies (e.g. whether it generates, and so needs a judge run) without loading models.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace

from cli import rules
from jobs.run.spec import RunSpec


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
    # CPU infilling and generation (scaling/study/review_presets.py `infill-cpu`): the cpu suite plus
    # 8-token middle spans and 16 samples per step count, judged by the study's AR judge run
    "cpu-gen": Suite(val_chunks=4096, k_mc=2, m_max=4, n_targets=16, ensemble_chunks=256,
                     zero_shot=("wikitext2",), zero_shot_chunks=4, infill_span=8, generate=True),
    # speed at comparable quality (scaling/study/review_presets.py `infill-cpu`): cpu-gen's infilling, and
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


@dataclass(frozen=True)
class EvalSuite:
    """A run's evaluation suite as a study names it: a suite of SUITES and, when the text names
    them (`SUITE:SET,SET`), the zero-shot sets that replace the suite's own (and are required).

    Parsed once where the text comes in (`parse`: a flag, a study file, a spec.json); everything
    downstream reads the fields. `str()` gives the canonical text, the form spec.json keeps."""

    name: str
    sets: tuple[str, ...] = ()  # the named zero-shot sets; () = the suite's own

    @classmethod
    def parse(cls, text: object, field: str = "eval_suite") -> EvalSuite:
        """`SUITE` or `SUITE:SET,SET` with a known suite and, after a colon, at least one set name;
        cli.InputError naming `field` (one line, with the fix) otherwise. Whether each named set
        can be had is jobs.data.datasets.check_eval_suite's."""
        if isinstance(text, cls):
            return text
        name, colon, names = rules.text(field, text).partition(":")
        if name not in SUITES:  # the whole text shown, sets and all
            known = ", ".join(SUITES)
            raise rules.fail(field, text, f"names suite {name!r}, which is not one of {known}" if colon
                             else f"is not one of {known}")
        sets = tuple(n.strip() for n in names.split(",") if n.strip())
        if colon and not sets:
            raise rules.fail(field, text, "names no zero-shot set after the colon",
                             f"write {name} alone or {name}:SET,SET")
        return cls(name, sets)

    def __str__(self) -> str:
        return f"{self.name}:{','.join(self.sets)}" if self.sets else self.name

    @property
    def base(self) -> Suite:
        """The named suite as SUITES defines it (what it needs: generation, capabilities)."""
        return SUITES[self.name]

    @property
    def suite(self) -> Suite:
        """What this evaluates with: the named sets replace the suite's zero-shot sets."""
        return replace(self.base, zero_shot=self.sets) if self.sets else self.base


# A run's default suite. Declared on its RunSpec field (jobs.run comes before jobs.data, so the
# field cannot read this module); every other default reads this constant.
DEFAULT_SUITE = EvalSuite.parse(RunSpec.eval_suite)


def check_suite(field: str, value: object) -> str:
    """The rule of an `eval_suite` setting or spec field (EvalSuite.parse): its canonical text."""
    return str(EvalSuite.parse(value, field))
