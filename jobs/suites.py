"""Evaluation suites: what a study's evaluation measures and how many samples it spends.

Plain values, no torch: a study names its suite (`eval_suite`) and the planner reads what it
implies (e.g. whether it generates, and so needs a judge run) without loading models.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Suite:
    """What a suite measures and how many samples it spends."""

    val_chunks: int  # validation windows of the run's own corpus
    k_mc: int  # MC draws per sequence (permutations, ELBO noise draws)
    m_max: int  # ensemble sweep M = 1, 2, 4, ..., m_max
    n_targets: int  # scored target slots per sequence for ensembling
    ensemble_chunks: int  # sequences ensembling is run on
    zero_shot: tuple[str, ...]  # eval sets (jobs.datasets) used when a data folder is set
    zero_shot_chunks: int | None  # chunks per eval set (None = all)
    lambada: bool = False
    infill_span: int = 0  # middle-span length in tokens; 0 = no infilling benchmark
    generate: bool = False
    gen_samples: int = 16  # samples drawn per step count when `generate`

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The family capabilities (models.families.base.CAPABILITIES) this suite uses: span scoring
        always (nll_l2r; LAMBADA and infilling where run), a sampler where it generates. A family's
        declared metric groups (its `FamilySpec.metrics`) are computed whatever the suite."""
        return ("span_logits",) + (("sample",) if self.generate else ())


SUITES: dict[str, Suite] = {
    "quick": Suite(val_chunks=8, k_mc=4, m_max=4, n_targets=8, ensemble_chunks=4,
                   zero_shot=("wikitext2",), zero_shot_chunks=4),
    # CPU studies (quickstart, laptop): 1,024 windows resolve 0.3 nats against the unigram baseline
    # and 32 x 32 ensemble targets resolve gains of ~0.01 nats (docs/results/quickstart-tuning.md)
    "cpu": Suite(val_chunks=1024, k_mc=4, m_max=4, n_targets=32, ensemble_chunks=32,
                 zero_shot=("wikitext2",), zero_shot_chunks=4),
    # CPU infilling and generation (scaling/review_presets.py `infill-cpu`): the cpu suite plus
    # 8-token middle spans and 16 samples per step count, judged by the study's AR judge run
    "cpu-gen": Suite(val_chunks=1024, k_mc=4, m_max=4, n_targets=32, ensemble_chunks=32,
                     zero_shot=("wikitext2",), zero_shot_chunks=4, infill_span=8, generate=True),
    "paper": Suite(val_chunks=256, k_mc=16, m_max=8, n_targets=32, ensemble_chunks=32,
                   zero_shot=("wikitext2", "ptb", "lm1b", "lambada"), zero_shot_chunks=None,
                   lambada=True, infill_span=16, generate=True),
}
