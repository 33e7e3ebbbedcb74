"""Registry completeness: every registered family provides every capability each evaluation suite
uses, and a family that lacks one is refused before anything trains."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from cli import InputError
from jobs.eval import evaluate as ev
from jobs.train.preflight import check_spec
from jobs.run.spec import RunSpec
from jobs.data.suites import SUITES
from models import build_model
from models import likelihood as lk
from models import sampling as sm
from models.families import FAMILIES, FamilySpec, capabilities
from models.families.ar import AR
from models.families.base import METRIC_GROUPS
from models.ladder import Shape

V, L = 11, 8
GROUP_METRICS = {"l2r": {"nll_l2r", "bpb_l2r"}, "perm_mc": {"nll_anyorder"}, "ctx_ensemble": {"nll_ensemble"},
                 "elbo": {"nll_elbo_mdlm", "nll_elbo_kdce", "nll_anyorder"}}


class NoSampler(AR):
    """A family as a user would add it, without a sampler."""

    family = "no_sampler"
    SPEC = FamilySpec(metrics=("l2r",), infill_context="prefix_only")
    sample = None


def test_evaluation_computes_every_metric_group_a_family_may_declare():
    assert set(ev.METRIC_ROWS) == set(METRIC_GROUPS) == set(GROUP_METRICS)


@pytest.mark.parametrize("suite", list(SUITES))
def test_every_family_provides_every_capability_of_every_suite(suite):
    missing = [f"{family} lacks `{c}`" for family, cls in FAMILIES.items()
               for c in SUITES[suite].capabilities if c not in capabilities(cls)]
    assert not missing, f"suite {suite!r}: " + "; ".join(missing)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_runs_what_the_paper_suite_asks_of_it(family):
    """The richest suite end to end on a tiny model: the declared metric groups' rows, span
    scores (LAMBADA, infilling) and a sample."""
    torch.manual_seed(0)
    model = build_model(family, Shape(1, 16, 2), vocab_size=V, seq_len=L).eval()
    chunks = torch.randint(0, V, (4, L), generator=torch.Generator().manual_seed(0))
    ds = ev.Dataset("toy", "validation", chunks, n_bytes=4 * L, chunking="toy")
    settings = ev.make_settings("paper", k_mc=2, m_max=2, n_targets=2, ensemble_chunks=2)
    for group in model.SPEC.metrics:
        rows = ev.METRIC_ROWS[group](model, ds, {}, settings)
        assert {row["metric"] for row in rows} == GROUP_METRICS[group], (family, group)
    suite = settings.suite
    nll, hits = lk.span_scores(model, chunks, 3, 3 + min(suite.infill_span, L - 4))
    assert nll.shape == hits.shape == (4, min(suite.infill_span, L - 4)) and bool((nll > 0).all())
    out = model.sample(sm.Request(suite.gen_samples, L, 4), torch.Generator().manual_seed(0))
    assert out.tokens.shape == (suite.gen_samples, L) and out.method


def test_a_suite_the_family_cannot_serve_is_refused_before_training(monkeypatch):
    monkeypatch.setitem(FAMILIES, NoSampler.family, NoSampler)
    spec = RunSpec(family=NoSampler.family, size="0.1M", steps=2, lr=1e-3, warmup_steps=0, eval_suite="paper")
    servable = ", ".join(name for name, suite in SUITES.items() if "sample" not in suite.capabilities)
    with pytest.raises(InputError, match=r"^eval_suite: suite 'paper' needs `sample`, which family 'no_sampler' "
                                         rf"does not provide; choose a suite it supports \({servable}\)"):
        check_spec(spec)
    check_spec(replace(spec, eval_suite="quick"))  # one that does not generate is fine
