"""jobs.data.prepare and `python -m scaling.prepare` on the data kit's WebText snippets: N processes
give the cache one process gives, byte for byte; a prepared corpus is not tokenised again; a job
under AOSCALE_REQUIRE_PREPARED=1 refuses a missing cache in one line naming the prepare command
(exit 2, nothing written) and trains from a prepared one; SIGTERM stops tokenising cleanly."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.data import corpus as data
from jobs.data import tokencache
from jobs.data.prepare import EXIT_STOPPED, Corpus, prepare

pytest.importorskip("datasets")
REPO = Path(__file__).resolve().parents[3]
SNIPPET_TOKENS = 63  # the kit's README: every WebText record is exactly 63 GPT-2 tokens
TRAIN_DOCS, VALIDATION_DOCS = 4723, 4724  # lines of webtext.test.jsonl and webtext.valid.jsonl


def webtext_corpus(data_kit: Path, folder: Path) -> Path:
    """The kit's WebText snippets as a local corpus: test file -> train, valid file -> validation."""
    folder.mkdir(parents=True)
    shutil.copy(data_kit / "text/webtext-snippets/webtext.test.jsonl", folder / "train.jsonl")
    shutil.copy(data_kit / "text/webtext-snippets/webtext.valid.jsonl", folder / "validation.jsonl")
    return folder


def token_files(cache: Path, item: Corpus) -> dict[str, bytes]:
    """Every file of the corpus's token cache folder in `cache` (but the builder's lock), by name."""
    folder = cache / "tokens" / data.cache_folder(item.corpus, item.tokenizer, item.text_field).name
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != "build.lock"}


@pytest.fixture(scope="module")
def webtext(data_kit, tmp_path_factory) -> Corpus:
    return Corpus(str(webtext_corpus(data_kit, tmp_path_factory.mktemp("kit") / "webtext")), "gpt2")


@pytest.fixture(scope="module")
def one_process_cache(webtext, tmp_path_factory) -> dict[str, bytes]:
    """The WebText cache built by one process."""
    cache = tmp_path_factory.mktemp("one")
    saved = os.environ.get("AOSCALE_CACHE")
    try:
        os.environ["AOSCALE_CACHE"] = str(cache)
        prepare([webtext], workers=1)
        return token_files(cache, webtext)
    finally:
        os.environ.pop("AOSCALE_CACHE") if saved is None else os.environ.__setitem__("AOSCALE_CACHE", saved)


def test_two_processes_give_the_one_process_cache_byte_for_byte(webtext, one_process_cache, tmp_path,
                                                                  monkeypatch, capsys):
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "two"))
    plan = data.corpus_sources(webtext.corpus, webtext.text_field)
    assert len(plan.jobs()) >= tokencache.MIN_JOBS_FOR_POOL  # so two workers really run as a pool
    (manifest,) = prepare([webtext], workers=2)
    assert token_files(tmp_path / "two", webtext) == one_process_cache
    assert set(one_process_cache) == {"manifest.json", "train.bin", "validation.bin"}
    splits = manifest["splits"]  # documents joined by end-of-text: 63 tokens each plus n - 1 separators
    assert (splits["train"]["documents"], splits["validation"]["documents"]) == (TRAIN_DOCS, VALIDATION_DOCS)
    assert splits["train"]["tokens"] == TRAIN_DOCS * SNIPPET_TOKENS + TRAIN_DOCS - 1
    assert splits["validation"]["tokens"] == VALIDATION_DOCS * SNIPPET_TOKENS + VALIDATION_DOCS - 1
    err = capsys.readouterr().err
    assert "tokens/s" in err and "2 worker(s)" in err


def test_a_prepared_corpus_is_not_tokenised_again(webtext, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "cache"))
    prepare([webtext], workers=2)
    train = data.token_path(webtext.corpus, webtext.tokenizer, "train")
    before = (train.stat().st_ino, train.stat().st_mtime_ns)
    capsys.readouterr()
    prepare([webtext, webtext], workers=2)  # the same corpus twice is one cache
    assert (train.stat().st_ino, train.stat().st_mtime_ns) == before
    (line,) = capsys.readouterr().err.splitlines()
    total = (TRAIN_DOCS + VALIDATION_DOCS) * (SNIPPET_TOKENS + 1) - 2
    assert "already prepared" in line and f"({total:,} tokens)" in line


TRAIN = ["--family", "ar", "--size", "0.1M", "--tokenizer", "gpt2", "--seq-len", "32", "--batch-size", "4",
         "--steps", "2", "--eval-batches", "1"]


@pytest.mark.slow
def test_a_job_that_may_not_tokenise_refuses_a_missing_cache_and_trains_from_a_prepared_one(
        webtext, tmp_path, monkeypatch, capsys):
    from jobs.train.loop import main as train_main

    cache = tmp_path / "cache"
    monkeypatch.setenv("AOSCALE_CACHE", str(cache))
    monkeypatch.setenv("AOSCALE_REQUIRE_PREPARED", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run_dir = tmp_path / "run"
    assert train_main(["--run-dir", str(run_dir), "--corpus", webtext.corpus, *TRAIN]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: corpus: {webtext.corpus} (tokenizer gpt2, text field text) is not prepared in "
                           f"{cache}")
    assert "aoscale prepare STUDY_DIR" in line and "AOSCALE_REQUIRE_PREPARED=1" in line
    assert not run_dir.exists() and not (cache / "tokens").exists()  # nothing written
    prepare([webtext], workers=2)
    assert train_main(["--run-dir", str(run_dir), "--corpus", webtext.corpus, *TRAIN]) == 0


@pytest.mark.slow
def test_sigterm_stops_tokenising_with_no_half_written_cache_and_a_rerun_finishes_it(
        webtext, one_process_cache, tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("AOSCALE_CACHE", None)
    command = [sys.executable, "-m", "scaling.prepare", "--corpus", webtext.corpus, "--tokenizer", "gpt2",
               "--sizes", "0.1M", "--families", "ar", "--cache-dir", str(cache), "--workers", "1",
               "--study-dir", str(tmp_path / "study")]
    folder = cache / "tokens" / data.cache_folder(webtext.corpus, webtext.tokenizer).name
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((folder / "shards").glob("*.json")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == EXIT_STOPPED, err
    assert "prepare: stopped by SIGTERM" in err
    assert not (folder / "manifest.json").exists()  # never marked complete ...
    assert not list(folder.glob("*.bin")) and not list(folder.glob(".*.tmp"))  # ... nor a half split file
    done = [p.stem for p in (folder / "shards").glob("*.json")]
    assert 1 <= len(done) < 10  # stopped between the first and the last of the 10 shards
    rerun = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert token_files(cache, webtext) == one_process_cache
