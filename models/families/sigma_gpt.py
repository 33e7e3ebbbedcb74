"""`sigma_gpt`: σ-GPT, the any-order decoder (aogpt.py) with σ-GPT's defaults.

Target positions enter once, added to the input (`input`), orders are uniform, LayerNorm and a
tied head (EMA off is a run rule). Everything else (span scoring, sampling, metrics) is AO-GPT's.
"""
from __future__ import annotations

from .aogpt import AOGPT
from .base import FamilySpec


class SigmaGPT(AOGPT):
    family = "sigma_gpt"
    OPTIONS = {
        **AOGPT.OPTIONS,
        "order": ("uniform", AOGPT.OPTIONS["order"][1]),
        "target_pe": ("input", AOGPT.OPTIONS["target_pe"][1]),
    }
    SPEC = FamilySpec(metrics=AOGPT.SPEC.metrics, infill_context=AOGPT.SPEC.infill_context,
                      default_arm={"target_pe": "input", "order": "uniform"})
