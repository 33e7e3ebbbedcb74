"""jobs.data.tokenizers: GPT-2 BPE and bytes encodings built offline (also reachable from jobs.data)."""
from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import tiktoken

from jobs.data import corpus as data
from jobs.data import tokenizers

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



# Ids from the previous hand-written GPT-2 rank parser (before tiktoken's loader built them).
PREVIOUS_GPT2_IDS = {
    "hello world": [31373, 995],
    "To be, or not to be: that is the question.": [2514, 307, 11, 393, 407, 284, 307, 25, 326, 318,
                                                   262, 1808, 13],
    "  indented\n\ttabs and 1,234.56 numbers": [220, 773, 4714, 198, 197, 8658, 82, 290, 352, 11,
                                                24409, 13, 3980, 3146],
    "naïve café — «ça» 🌍": [2616, 38776, 40304, 851, 21110, 50041, 17730, 12520, 234, 235],
    "It's <|endoftext|> here": [1026, 338, 1279, 91, 437, 1659, 5239, 91, 29, 994],
}


def test_gpt2_from_tiktokens_loader_equals_the_previous_ranks():
    enc = tokenizers.get_encoding("gpt2")
    assert {text: enc.encode_ordinary(text) for text in PREVIOUS_GPT2_IDS} == PREVIOUS_GPT2_IDS
    # the hash covers every rank: equal to the one pinned before means identical ranks
    assert tokenizers.tokenizer_hash("gpt2")[:16] == GPT2_TOKENIZER_SHA256


def test_any_tiktoken_encoding_with_its_file_in_the_cache(data_kit, monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(data_kit / "tiktoken_cache"))
    r50k, p50k = tokenizers.get_encoding("r50k_base"), tokenizers.get_encoding("p50k_base")
    for text, ids in PREVIOUS_GPT2_IDS.items():
        assert r50k.encode_ordinary(text) == ids  # r50k_base is GPT-2's ranks
    assert (p50k.n_vocab, p50k.eot_token) == (50281, 50256)
    assert p50k.encode_ordinary("a" + " " * 10 + "b")[1] > 50256  # a p50k whitespace-run token
    assert tokenizers.tokenizer_hash("r50k_base") == tokenizers.tokenizer_hash("gpt2")  # same ranks
    assert tokenizers.tokenizer_hash("p50k_base") != tokenizers.tokenizer_hash("gpt2")


def test_a_tiktoken_encoding_without_its_file_offline_names_the_fix(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"tokenizer 'cl100k_base': .*TIKTOKEN_CACHE_DIR"):
        tokenizers.get_encoding("cl100k_base")


def _gpt2_as_hf_tokenizer_json(data_kit, folder):
    """GPT-2 as a Hugging Face byte-level BPE tokenizer.json, built with `tokenizers`."""
    hf = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers

    bpe = models.BPE.from_file(str(data_kit / "gpt2_bpe/encoder.json"), str(data_kit / "gpt2_bpe/vocab.bpe"))
    tok = hf.Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_hf_tokenizer_json_offline_equals_gpt2(data_kit, tmp_path, no_network):
    folder = _gpt2_as_hf_tokenizer_json(data_kit, tmp_path / "gpt2-hf")
    name = f"hf:{folder}"
    hf, gpt2 = tokenizers.get_encoding(name), tokenizers.get_encoding("gpt2")
    assert (hf.n_vocab, tokenizers.eot_token(hf)) == (50257, 50256)
    text = (data_kit / "text/wikitext-2-raw/wiki.test.raw").read_text("utf-8")[:200_000]
    assert hf.encode_ordinary_batch([text, "hello world"]) == gpt2.encode_ordinary_batch([text, "hello world"])
    assert all(hf.decode_single_token_bytes(i) == gpt2.decode_single_token_bytes(i) for i in range(50256))
    assert hf.decode(hf.encode_ordinary("naïve café")) == "naïve café"
    assert tokenizers.tokenizer_hash(name) == tokenizers.tokenizer_hash(f"hf:{folder / 'tokenizer.json'}")
    assert len(tokenizers.tokenizer_hash(name)) == 64


def test_hf_tokenizer_sets_the_vocabulary_of_the_token_cache(tmp_path, cache_dir):
    hf = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = hf.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    texts = [f"Line {i}: " + "now is the winter of our discontent " * (i % 5 + 1) for i in range(400)]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "</s>"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    name = f"hf:{tmp_path / 'tokenizer.json'}"
    enc = tokenizers.get_encoding(name)
    assert enc.n_vocab == tok.get_vocab_size() and enc.eot_token == 1  # "</s>" ends a document
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    tokens = data.token_array(str(corpus), name, "train")
    assert tokens.dtype == np.uint16 and int(tokens.max()) < enc.n_vocab and len(tokens) > 4000
    assert data.token_cache(str(corpus), name)["tokenizer_hash"] == tokenizers.tokenizer_hash(name)


def test_unknown_and_unloadable_tokenizers_name_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"tokenizer 'nope' is unknown; .*cl100k_base.*hf:PATH"):
        tokenizers.get_encoding("nope")
    with pytest.raises(ValueError, match=r"tokenizer 'hf:.*missing.json': could not load"):
        tokenizers.get_encoding(f"hf:{tmp_path / 'missing.json'}")
