"""jobs.data.tokencache through jobs.data on real `datasets` objects: save_to_disk folders and parquet
folders with only a train split, the held-out rule, parallel workers, resumption after SIGKILL."""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.data import corpus as data
from cli.faults import FAULT_ENV
from jobs.data import tokencache

datasets = pytest.importorskip("datasets")

WORDS = ("the", "king", "of", "a", "night", "sword", "and", "crown", "fair", "death", "my", "lord",
         "love", "is", "not", "what", "we", "were", "shall", "be")


def documents(n: int, seed: int = 0) -> list[str]:
    """`n` distinct documents of 5-60 words."""
    rng = random.Random(seed)
    return [f"Doc {i}. " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60)))
            for i in range(n)]


def save_to_disk_corpus(folder: Path, n: int) -> Path:
    """A train-only dataset with the text under `body`, saved with `save_to_disk`."""
    datasets.Dataset.from_dict({"id": list(range(n)), "body": documents(n)}).save_to_disk(str(folder))
    return folder


def parquet_corpus(folder: Path, n: int, parts: int = 3) -> Path:
    """A train-only dataset with the text under `body`, as a folder of parquet files."""
    folder.mkdir(parents=True)
    docs = documents(n)
    for part in range(parts):
        rows = docs[part::parts]
        datasets.Dataset.from_dict({"body": rows}).to_parquet(str(folder / f"part-{part}.parquet"))
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("make", [save_to_disk_corpus, parquet_corpus])
def test_held_out_slice_is_disjoint_and_the_same_in_two_fresh_caches(make, tmp_path, monkeypatch):
    corpus = str(make(tmp_path / "corpus", 3000))
    folders = []
    for name in ("cache-a", "cache-b"):
        monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / name))
        manifest = data.token_cache(corpus, "gpt2", "body", workers=2)
        folders.append(data.cache_folder(corpus, "gpt2", "body"))
    assert files(folders[0]) == files(folders[1])  # byte-identical caches, built independently
    train = data.load_documents(corpus, "train", "body")
    validation = data.load_documents(corpus, "validation", "body")
    assert not set(train) & set(validation)
    assert sorted(train + validation) == sorted(documents(3000))
    rule = manifest["validation"]
    assert rule["p"] == 1000 / 3000 and rule["min_docs"] == 1000 and rule["fraction"] == 0.0005
    assert manifest["splits"]["validation"]["documents"] == len(validation)
    assert abs(len(validation) - 1000) < 100  # binomial: sd ~26 documents
    enc = data.get_encoding("gpt2")
    expected = data.encode_joined(validation, enc)
    assert data.token_array(corpus, "gpt2", "validation", "body").tolist() == expected.tolist()


def test_held_out_share_follows_the_rule_at_scale():
    p = tokencache.held_out_p(8_000_000)  # OpenWebText's documents
    assert p == 0.0005
    assert tokencache.held_out_p(100_000) == 0.01  # 1,000 documents
    texts = documents(20_000, seed=1)
    held = sum(tokencache.is_held_out(t, 0.05) for t in texts)
    assert abs(held - 1000) < 4 * (20_000 * 0.05 * 0.95) ** 0.5


BUILD = """
import sys
from jobs.data import corpus as data
data.token_cache(sys.argv[1], "gpt2", "body", workers=2)
"""


def _build_killed(corpus: str, cache: Path) -> None:
    """Build the cache in a child that dies (SIGKILL) once its first shard is done
    (fault point `tokencache.shard_done`); then end the workers it left (its process group)."""
    env = {**os.environ, "AOSCALE_CACHE": str(cache), "PYTHONPATH": os.getcwd(), FAULT_ENV: "tokencache.shard_done"}
    child = subprocess.Popen([sys.executable, "-c", BUILD, corpus], env=env, start_new_session=True)
    assert child.wait(timeout=300) == -signal.SIGKILL
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)  # its pool's workers


@pytest.mark.slow
def test_sigkill_during_tokenisation_then_rerun_gives_the_same_cache(tmp_path, monkeypatch):
    corpus = str(save_to_disk_corpus(tmp_path / "corpus", 16 * tokencache.SHARD_DOCS))
    killed = tmp_path / "killed"
    _build_killed(corpus, killed)
    (shard_dir,) = killed.glob("tokens/*/shards")
    assert not (shard_dir.parent / "manifest.json").exists()
    done = {p.name for p in shard_dir.glob("*.json")}
    assert 1 <= len(done) < 16
    monkeypatch.setenv("AOSCALE_CACHE", str(killed))
    data.token_cache(corpus, "gpt2", "body", workers=2)
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "clean"))
    data.token_cache(corpus, "gpt2", "body", workers=1)
    a, b = data.cache_folder(corpus, "gpt2", "body"), shard_dir.parent
    assert files(a) == files(b) and not (b / "shards").exists()


def test_a_half_written_shard_is_never_read(tmp_path, monkeypatch, cache_dir):
    corpus = str(save_to_disk_corpus(tmp_path / "corpus", 3 * tokencache.SHARD_DOCS))
    folder = data.cache_folder(corpus, "bytes", "body")
    shards = folder / "shards"
    shards.mkdir(parents=True)
    (shards / "train-000001.train.bin").write_bytes(b"\x01\x00" * 5)  # a shard without its marker
    (shards / ".train-000002.train.bin.x.tmp").write_bytes(b"\x02\x00" * 5)  # a killed rename
    manifest = data.token_cache(corpus, "bytes", "body")
    enc = data.get_encoding("bytes")
    train = data.load_documents(corpus, "train", "body")
    assert data.token_array(corpus, "bytes", "train", "body").tolist() == \
        data.encode_joined(train, enc).tolist()
    assert manifest["splits"]["train"]["documents"] == len(train)
    assert sorted(p.name for p in folder.iterdir()) == [
        "build.lock", "manifest.json", "train.bin", "validation.bin"]


def test_a_missing_text_field_and_an_empty_dataset_are_named(tmp_path, cache_dir):
    corpus = str(save_to_disk_corpus(tmp_path / "corpus", 50))
    with pytest.raises(ValueError, match=r"^text_field 'text': not a column .*\(columns: id, body\)"):
        data.token_cache(corpus, "bytes")
    empty = tmp_path / "empty"
    datasets.Dataset.from_dict({"text": []}, features=datasets.Features(
        {"text": datasets.Value("string")})).save_to_disk(str(empty))
    with pytest.raises(ValueError, match=r"^corpus .*empty'?: has no documents"):
        data.token_cache(str(empty), "bytes")
    empty_rows = tmp_path / "empty_rows"
    datasets.Dataset.from_dict({"text": ["", ""]}).save_to_disk(str(empty_rows))
    with pytest.raises(ValueError, match=r"^corpus .*empty_rows'?: the train split has no documents"):
        data.token_cache(str(empty_rows), "bytes")
    null_row = tmp_path / "null_row"  # a null text is bad input, named with its row, not skipped
    datasets.Dataset.from_dict({"text": ["a document", None]}).save_to_disk(str(null_row))
    with pytest.raises(ValueError, match=r"^corpus: row 1: text field 'text' is null, not a string"):
        data.token_cache(str(null_row), "bytes")


def test_the_builder_reads_one_shard_of_documents_at_a_time(tmp_path, cache_dir):
    """The builder reads a shard's documents at a time: a source that refuses larger reads works."""

    class Narrow(tokencache.ListSource):
        def texts(self, start: int, stop: int) -> list[str | None]:
            assert stop - start <= tokencache.SHARD_DOCS
            return super().texts(start, stop)

    docs = tuple(documents(3 * tokencache.SHARD_DOCS + 5))
    plan = tokencache.Plan({"train": Narrow(docs)}, "bytes", tokencache.held_out_p(len(docs)))
    manifest = tokencache.build(tmp_path / "cache", plan, {"corpus": "narrow"}, workers=1)
    sizes = manifest["splits"]
    assert sizes["train"]["documents"] + sizes["validation"]["documents"] == len(docs)
    tokens = np.fromfile(tmp_path / "cache" / "train.bin", dtype=np.uint16)
    assert len(tokens) == sizes["train"]["tokens"]
    assert json.loads((tmp_path / "cache" / "manifest.json").read_text()) == manifest
