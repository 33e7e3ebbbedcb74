"""Shared fixtures: the offline data kit beside the checkout, and a quiet, offline environment."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AOSCALE_SHARED", REPO.parent / "shared"))
DATA = SHARED / "data"

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def data_kit() -> Path:
    """The offline data kit (`../shared/data`); tests that need it skip cleanly without it."""
    if not DATA.is_dir():
        pytest.skip("offline data kit ../shared/data not present")
    return DATA


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private aoscale cache so tests never share tokenised corpora with the user's cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("AOSCALE_CACHE", str(path))
    return path
