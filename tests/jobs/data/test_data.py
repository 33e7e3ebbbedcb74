"""jobs.data: corpora, cached token arrays and pure batch sampling."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from jobs.data import corpus as data
from jobs.data import tokencache

def test_shakespeare_split_is_by_play_and_large(cache_dir):
    train = data.load_documents("shakespeare", "train")
    validation = data.load_documents("shakespeare", "validation")
    assert (len(train), len(validation)) == (35, 3)
    assert not set(train) & set(validation)
    assert validation[0].startswith("FRANCISCO at his post.")  # Hamlet, first play in stem order
    joined = "".join(train + validation)
    assert "BERNARDO:\nWho's there?" in joined
    assert not any(mark in joined for mark in ("**", "# ", "\\[", "_Exit", "*Exit"))
    n_train = len(data.token_array("shakespeare", "gpt2", "train"))
    n_val = len(data.token_array("shakespeare", "gpt2", "validation"))
    print(f"shakespeare gpt2 tokens: train {n_train}, validation {n_val}")
    assert n_train > 1_000_000 and n_val > 100_000


def test_markdown_play_to_text_rules():
    markdown = ("# Play\n\n## ACT I\n\n### SCENE I. A room.\n\n_Enter ONE_\n\n**ONE**  \n"
                "Line one,  \nline two\\--done.\n\n__\\[Aside]_  \n*Exit.*\n")
    assert data.markdown_play_to_text(markdown) == (
        "Enter ONE\n\nONE:\nLine one,\nline two--done.\n\n[Aside]\nExit.\n")


def test_local_txt_paragraphs_are_documents_and_the_held_out_rule_splits_them(tmp_path, cache_dir):
    paragraphs = [f"paragraph {i}\nsecond line {i}" for i in range(100)]
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(paragraphs))
    train, validation = (data.load_documents(str(path), split) for split in data.SPLITS)
    p = tokencache.held_out_p(100)
    assert p == 0.5  # 1,000 documents wanted, at most half the corpus
    assert sorted(train + validation) == sorted(paragraphs)
    assert validation == [d for d in paragraphs if tokencache.is_held_out(d, p)]
    assert 30 < len(validation) < 70


def test_local_jsonl_folder_with_a_validation_file_uses_it(tmp_path, cache_dir):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for split in ("train", "validation", "test"):
        rows = [json.dumps({"text": f"{split} doc {i}"}) for i in range(20)]
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    assert data.load_documents(str(folder), "validation") == [f"validation doc {i}" for i in range(20)]
    assert data.load_documents(str(folder), "train") == [f"train doc {i}" for i in range(20)]
    assert data.token_cache(str(folder), "bytes")["validation"] == {"source": "validation split"}


@pytest.mark.parametrize("corpus", ["missing/corpus.txt", "./nope", "~/no/such/dir", ""])
def test_missing_local_corpus_names_the_field(corpus):
    with pytest.raises(ValueError, match=r"corpus .*(no such file|empty).*shakespeare"):
        data.load_documents(corpus, "train")


def test_hf_corpus_offline_fails_with_clear_error(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"corpus 'no-such-org/no-such-corpus': could not load it as a Hugging Face"):
        data.load_documents("no-such-org/no-such-corpus", "train")


def test_bad_split_names_the_field():
    with pytest.raises(ValueError, match=r"split 'test'.*train.*validation"):
        data.load_documents("shakespeare", "test")


def _jsonl_corpus(tmp_path, n_docs: int = 40):
    path = tmp_path / "corpus.jsonl"
    rows = [json.dumps({"text": f"Document number {i}: " + "word " * (i % 7)}) for i in range(n_docs)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_token_array_joins_documents_with_eot(tmp_path, cache_dir):
    path = _jsonl_corpus(tmp_path, n_docs=600)
    enc = data.get_encoding("gpt2")
    tokens = data.token_array(str(path), "gpt2", "train")
    expected = []
    for index, document in enumerate(data.load_documents(str(path), "train")):
        expected += ([] if index == 0 else [enc.eot_token]) + enc.encode_ordinary(document)
    assert tokens.dtype == np.uint16
    assert tokens.tolist() == expected
    assert data.token_path(str(path), "gpt2", "train").parent.parent == cache_dir / "tokens"


def test_token_array_is_written_once(tmp_path, cache_dir, monkeypatch):
    path = _jsonl_corpus(tmp_path)
    first = data.token_array(str(path), "bytes", "validation")
    stat = data.token_path(str(path), "bytes", "validation").stat()

    def refuse(*args):
        raise AssertionError("corpus re-read although cached")

    monkeypatch.setattr(data, "corpus_sources", refuse)
    second = data.token_array(str(path), "bytes", "validation")
    again = data.token_path(str(path), "bytes", "validation").stat()
    assert (again.st_ino, again.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert np.array_equal(first, second)


def test_cache_key_follows_file_contents_and_text_field(tmp_path, cache_dir):
    path = _jsonl_corpus(tmp_path)
    before = data.token_path(str(path), "gpt2", "train")
    assert data.token_path(str(path), "gpt2", "train", text_field="body") != before
    path.write_text(path.read_text() + json.dumps({"text": "one more"}) + "\n")
    after = data.token_path(str(path), "gpt2", "train")
    assert after != before and data.token_path(str(path), "gpt2", "validation") != after


def test_corpus_hash_is_sha256_of_tokens(tmp_path, cache_dir):
    path = _jsonl_corpus(tmp_path)
    for split in data.SPLITS:
        tokens = data.token_array(str(path), "gpt2", split)
        assert data.corpus_hash(str(path), "gpt2", split) == hashlib.sha256(tokens.tobytes()).hexdigest()


def _tokenise_in_child(corpus: str, cache: str, queue) -> None:
    import os

    os.environ["AOSCALE_CACHE"] = cache
    queue.put(data.token_array(corpus, "gpt2", "train").tolist())


def test_concurrent_writers_agree_and_leave_no_temp_files(tmp_path, cache_dir):
    path = _jsonl_corpus(tmp_path, n_docs=400)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_tokenise_in_child, args=(str(path), str(cache_dir), queue))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    expected = data.token_array(str(path), "gpt2", "train").tolist()
    assert results[0] == results[1] == results[2] == expected
    folder = data.cache_folder(str(path), "gpt2")
    assert [p.name for p in (cache_dir / "tokens").iterdir()] == [folder.name]
    assert sorted(p.name for p in folder.iterdir()) == [
        "build.lock", "manifest.json", "train.bin", "validation.bin"]


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out" / "file.bin"

    def crash(handle):
        handle.write(b"half")
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        data.atomic_write(target, crash)
    assert list(target.parent.iterdir()) == []


@pytest.fixture(scope="module")
def tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 50257, size=10_000).astype(np.uint16)


def test_batches_are_pure_in_seed_and_step(tokens):
    batches = data.Batches(tokens, batch_size=8, seq_len=32, seed=7)
    first = batches.get(5)
    assert first.dtype == torch.long and first.shape == (8, 32)
    assert torch.equal(first, batches.get(5))
    assert torch.equal(first, data.Batches(tokens, 8, 32, seed=7).get(5))
    assert not torch.equal(first, batches.get(6))
    assert not torch.equal(first, data.Batches(tokens, 8, 32, seed=8).get(5))


def test_micro_batches_partition_the_global_batch(tokens):
    batches = data.Batches(tokens, batch_size=8, seq_len=16, seed=1)
    parts = [batches.get(3, micro, 4) for micro in range(4)]
    assert torch.equal(torch.cat(parts), batches.get(3))
    for row, start in zip(batches.get(3), batches.starts(3)):
        assert row.tolist() == tokens[start:start + 16].tolist()
    with pytest.raises(ValueError, match="n_micro"):
        batches.get(3, 0, 3)


def test_batch_starts_cover_the_corpus_uniformly(tokens):
    batches = data.Batches(tokens, batch_size=64, seq_len=100, seed=0)
    starts = np.concatenate([batches.starts(step) for step in range(100)])
    n_starts = len(tokens) - 100 + 1
    assert starts.min() >= 0 and starts.max() <= n_starts - 1
    # mean of U{0..n-1} is (n-1)/2 with sd n/sqrt(12); 6,400 draws: 5 standard errors
    assert abs(starts.mean() - (n_starts - 1) / 2) < 5 * n_starts / np.sqrt(12 * len(starts))


def test_short_corpus_is_rejected():
    with pytest.raises(ValueError, match="seq_len"):
        data.Batches(np.arange(32, dtype=np.uint16), batch_size=2, seq_len=32, seed=0)


def test_val_batches_are_fixed_consecutive_windows(tokens):
    batches = list(data.val_batches(tokens, batch_size=4, seq_len=50, n_batches=3))
    assert len(batches) == 3 and all(batch.shape == (4, 50) for batch in batches)
    assert torch.cat(batches).flatten().tolist() == tokens[:600].tolist()
    every = list(data.val_batches(tokens, batch_size=64, seq_len=50))
    assert sum(len(batch) for batch in every) == len(tokens) // 50


def test_file_hashes_are_remembered_until_the_file_changes(tmp_path, cache_dir):
    path = _jsonl_corpus(tmp_path)
    old = time.time() - 60  # older than RECENT_S: its hash may be remembered
    os.utime(path, (old, old))
    first = data.corpus_identity(str(path))
    (memo,) = (Path(cache_dir) / "file-sha256").iterdir()
    assert bytes.fromhex(memo.read_text()) == hashlib.sha256(path.read_bytes()).digest()
    memo.write_text("00" * 32)  # a remembered hash is used as is: the file is not read again
    assert data.corpus_identity(str(path)) != first
    text = path.read_text()
    path.write_text(text.replace("word", "wort"))  # same size, new content and mtime: re-read
    os.utime(path, (old + 1, old + 1))
    assert data.file_sha256(path) == hashlib.sha256(path.read_bytes()).digest()
    assert data.corpus_identity(str(path)) != first
    path.write_text(text)  # the original bytes again, modified just now: never remembered
    assert data.corpus_identity(str(path)) == first
    assert len(list((Path(cache_dir) / "file-sha256").iterdir())) == 2
