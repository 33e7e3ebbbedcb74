"""jobs.tokenizers: GPT-2 BPE and bytes encodings built offline (also reachable from jobs.data)."""
from __future__ import annotations

import socket

import numpy as np
import pytest
import tiktoken

from jobs import data, tokenizers

# tokenizer_hash("gpt2") pinned: it names cache files and enters manifests, so it must not drift.
GPT2_TOKENIZER_SHA256 = "fa87227ac6ed8d3b"


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_gpt2_builds_offline_without_any_tiktoken_cache(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    tokenizers.get_encoding.cache_clear()
    tokenizers._tokenizer_spec.cache_clear()
    enc = tokenizers.get_encoding("gpt2")
    assert enc.encode("hello world") == [31373, 995]
    assert enc.n_vocab == 50257
    assert tokenizers.eot_token(enc) == enc.eot_token == 50256
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").iterdir())


def test_gpt2_equals_tiktoken_from_data_kit_cache(data_kit, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(data_kit / "tiktoken_cache"))
    reference = tiktoken.get_encoding("gpt2")
    ours = tokenizers.get_encoding("gpt2")
    text = (data_kit / "text/wikitext-2-raw/wiki.test.raw").read_text("utf-8")
    ids = ours.encode_ordinary(text)
    assert len(ids) > 250_000
    assert ids == reference.encode_ordinary(text)
    assert all(ours.decode_single_token_bytes(i) == reference.decode_single_token_bytes(i)
               for i in range(reference.n_vocab))


def test_tokenizer_hash_is_pinned_and_distinct():
    assert tokenizers.tokenizer_hash("gpt2")[:16] == GPT2_TOKENIZER_SHA256
    assert tokenizers.tokenizer_hash("bytes") != tokenizers.tokenizer_hash("gpt2")
    assert len(tokenizers.tokenizer_hash("bytes")) == 64


def test_bytes_tokenizer_round_trips_utf8():
    enc = tokenizers.get_encoding("bytes")
    text = "Hamlet: To be, or not — «ça» 🌍\n\t<|endoftext|> end"
    ids = enc.encode_ordinary(text)
    assert ids == list(text.encode("utf-8"))
    assert enc.decode(ids) == text
    assert enc.n_vocab == 257 and tokenizers.eot_token(enc) == 256
    assert enc.encode("<|endoftext|>", allowed_special="all") == [256]
    assert tokenizers.token_dtype(enc.n_vocab) == np.uint16


def test_unknown_tokenizer_lists_choices():
    with pytest.raises(ValueError, match=r"tokenizer 'sentencepiece'.*bytes.*gpt2"):
        tokenizers.get_encoding("sentencepiece")


def test_jobs_data_reexports_the_tokenizer_api():
    assert data.get_encoding is tokenizers.get_encoding and data.eot_token is tokenizers.eot_token

