"""The family registry: the one place that lists the families, each declared in its own module.

A family module holds its model class (options, loss, span scoring, sampler, ...) and its
`FamilySpec` (metrics, infilling context, default arm); see `base`. Adding a family is one new
module plus one line below. The order of `FAMILIES` is the canonical family order (studies,
tables).
"""
from __future__ import annotations

from .aogpt import AOGPT
from .ar import AR
from .base import FamilyModel, FamilySpec, capabilities
from .mdm import MDM
from .sigma_gpt import SigmaGPT

FAMILIES: dict[str, type[FamilyModel]] = {cls.family: cls for cls in (
    AR,
    AOGPT,
    SigmaGPT,
    MDM,
)}

# The family whose runs judge generated samples (gen_ppl): an exact left-to-right likelihood.
JUDGE_FAMILY = AR.family

__all__ = ["FAMILIES", "JUDGE_FAMILY", "FamilyModel", "FamilySpec", "capabilities"]
