"""The family registry: every family declares itself in its own module, and each declared
capability does what its contract says on a tiny model."""
from __future__ import annotations

from functools import partial

import math

import pytest
import torch

from models import build_model
from models import likelihood as lk
from models import sampling as sm
from models.families import FAMILIES, JUDGE_FAMILY, capabilities
from models.families.ar import AR
from models.families.base import CAPABILITIES, INFILL_CONTEXTS, METRIC_GROUPS, FamilySpec, resolve_options
from models.ladder import Shape
from tests.models.conftest import make_model, make_tokens

V, L, SHAPE = 13, 8, Shape(1, 16, 2)


_model = partial(make_model, size=SHAPE, vocab_size=V, seq_len=L)


def _tokens(batch: int = 3) -> torch.Tensor:
    return make_tokens(batch, 1, vocab_size=V, seq_len=L)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_declares_itself_in_its_own_module(family):
    cls = FAMILIES[family]
    assert cls.family == family and isinstance(cls.SPEC, FamilySpec)
    assert "SPEC" in vars(cls), f"{family}: declares no FamilySpec of its own (it would inherit its parent's)"
    assert set(cls.SPEC.metrics) <= set(METRIC_GROUPS) and cls.SPEC.infill_context in INFILL_CONTEXTS
    resolve_options(family, cls.OPTIONS, dict(cls.SPEC.default_arm))  # the default arm is valid


@pytest.mark.parametrize("family", list(FAMILIES))
def test_span_logits_is_the_estimators_span_and_scores_only_the_span(family):
    model, tokens = _model(family), _tokens()
    assert "span_logits" in capabilities(type(model))
    with torch.no_grad():
        logits = model.span_logits(tokens, 2, 5)
        assert logits.shape == (3, 3, V)
        assert torch.equal(lk.span_logits(model, tokens, 2, 5), logits)
        changed = tokens.clone()
        changed[:, 4] = (changed[:, 4] + 1) % V  # the span's last token is never its own context
        assert torch.allclose(model.span_logits(changed, 2, 5), logits, atol=1e-6)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_sample_names_its_method_and_runs_the_declared_steps(family):
    model = _model(family)
    request = sm.Request(n_samples=2, length=6, steps=3)
    out = model.sample(request, torch.Generator().manual_seed(0))
    assert out.tokens.shape == (2, 6) and out.tokens.max() < V and out.method
    assert out.steps == (6 if model.SPEC.steps_are_length else 3)
    again = model.sample(request, torch.Generator().manual_seed(0))
    assert torch.equal(out.tokens, again.tokens) and again.method == out.method


def test_the_method_labels_of_the_families_samplers():
    request = sm.Request(2, 6, 3, schedule="cosine")
    labels = {family: _model(family).sample(request).method for family in FAMILIES}
    assert labels == {"ar": "ar_kv", "aogpt": "aogpt_kv_cosine", "sigma_gpt": "aogpt_kv_cosine", "mdm": "ancestral"}
    sedd = build_model("mdm", SHAPE, vocab_size=V, seq_len=L, loss="sedd")
    assert sedd.sample(request).method == "analytic"
    assert sedd.sample(sm.Request(2, 6, 3, sampler="euler")).method == "euler"


@pytest.mark.parametrize("family", [f for f, cls in FAMILIES.items() if cls.decode_order_nll is not None])
def test_decode_order_nll_scores_k_parallel_samples(family):
    model = _model(family)
    for k in (1, 3):
        nll, steps = model.decode_order_nll(4, L, k, sm.Sampling(), torch.Generator().manual_seed(k))
        assert nll.shape == (4,) and bool((nll > 0).all()) and steps == math.ceil(L / k)


def test_a_declaration_with_an_unknown_metric_or_context_fails_at_once():
    with pytest.raises(ValueError, match="metrics: .*'nll_magic'"):
        FamilySpec(metrics=("l2r", "nll_magic"), infill_context="prefix_only")
    with pytest.raises(ValueError, match="infill_context"):
        FamilySpec(metrics=("l2r",), infill_context="suffix_only")


def test_a_family_without_a_capability_says_so(monkeypatch):
    """A new family is one class and one registry entry; what it does not provide is named."""

    class Plain(AR):
        family = "plain"
        SPEC = FamilySpec(metrics=("l2r",), infill_context="prefix_only")
        sample = None

    monkeypatch.setitem(FAMILIES, "plain", Plain)
    model = build_model("plain", SHAPE, vocab_size=V, seq_len=L)
    assert capabilities(Plain) == ("span_logits",) and set(capabilities(AR)) < set(CAPABILITIES)
    assert lk.l2r_nll(model, _tokens()).shape == (3, L)
    with pytest.raises(ValueError, match="'perm_mc' metric, not 'plain'"):
        lk.anyorder_draws(model, _tokens(), 2)


def test_the_judge_family_scores_left_to_right_exactly():
    cls = FAMILIES[JUDGE_FAMILY]
    assert cls.SPEC.metrics[0] == "l2r" and cls.SPEC.infill_context == "prefix_only"
