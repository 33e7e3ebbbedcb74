"""The family registry: the one place that maps a family name to its module."""
from __future__ import annotations

from .aogpt import AOGPT, SigmaGPT
from .ar import AR
from .base import FamilyModel
from .mdm import MDM

FAMILIES: dict[str, type[FamilyModel]] = {
    "ar": AR,
    "aogpt": AOGPT,
    "sigma_gpt": SigmaGPT,
    "mdm": MDM,
}
