"""jobs.data.datasets: zero-shot evaluation sets from the offline data kit."""
from __future__ import annotations

import pytest
import torch

from jobs.data import corpus as data
from jobs.data import datasets

SEQ_LEN = 256


@pytest.fixture(scope="module")
def gpt2():
    return data.get_encoding("gpt2")


@pytest.mark.parametrize("name, split, min_chunks", [
    ("wikitext2", "test", 1000), ("ptb", "test", 390), ("lambada", "test", 1600),
    ("lm1b", "test", 690), ("shakespeare", "validation", 500)])
def test_eval_sets_chunk_whole_stream(data_kit, gpt2, name, split, min_chunks):
    evalset = datasets.load_eval_set(name, gpt2, SEQ_LEN, data_dir=data_kit)
    _, documents = datasets.eval_documents(name, data_kit)
    stream = data.encode_joined(documents, gpt2)
    n_chunks = len(stream) // SEQ_LEN
    assert evalset.split == split and evalset.chunks.dtype == torch.long
    assert evalset.chunks.shape == (n_chunks, SEQ_LEN) and n_chunks >= min_chunks
    assert evalset.chunks.flatten().tolist() == stream[:n_chunks * SEQ_LEN].tolist()
    assert evalset.n_tokens == n_chunks * SEQ_LEN
    assert evalset.dropped_tokens == len(stream) - evalset.n_tokens < SEQ_LEN
    assert f"{evalset.dropped_tokens} trailing tokens dropped" in evalset.chunking
    kept_text = gpt2.decode_bytes([t for t in evalset.chunks.flatten().tolist() if t != gpt2.eot_token])
    assert evalset.n_bytes == len(kept_text)
    print(f"{name}: {tuple(evalset.chunks.shape)} tokens={evalset.n_tokens} bytes={evalset.n_bytes}")


def test_n_bytes_is_utf8_size_of_the_text(data_kit, gpt2):
    evalset = datasets.load_eval_set("ptb", gpt2, 64, data_dir=data_kit)
    text = (data_kit / "text/ptb/ptb.test.txt").read_text("utf-8")
    expected_bytes = len("\n".join(line.strip() for line in text.splitlines() if line.strip()) + "\n")
    assert evalset.n_bytes < expected_bytes and evalset.dropped_tokens > 0
    whole = datasets.load_eval_set("ptb", gpt2, 1, data_dir=data_kit)
    assert whole.n_bytes == expected_bytes and whole.dropped_tokens == 0


def test_max_chunks_and_bytes_tokenizer(data_kit):
    enc = data.get_encoding("bytes")
    evalset = datasets.load_eval_set("wikitext2", enc, 128, data_dir=data_kit, max_chunks=10)
    assert evalset.chunks.shape == (10, 128)
    n_eot = int((evalset.chunks == 256).sum())
    assert evalset.n_bytes == 10 * 128 - n_eot  # one token per byte, end-of-text counts 0


def test_aoscale_data_env_is_used(data_kit, gpt2, monkeypatch):
    monkeypatch.setenv("AOSCALE_DATA", str(data_kit))
    assert datasets.load_eval_set("lm1b", gpt2, SEQ_LEN, max_chunks=3).chunks.shape == (3, SEQ_LEN)


def test_wikitext_articles_are_detokenised(data_kit):
    _, articles = datasets.eval_documents("wikitext2", data_kit)
    assert len(articles) == 62  # article-level WikiText-2 test (as lm-eval-harness wikitext)
    assert articles[0].startswith("= Robert Boulter =\n\nRobert Boulter is an English film, "
                                  "television and theatre actor.")
    assert " @-@ " not in "".join(articles) and " , " not in "".join(articles)


def test_wikitext_detokenize_rules():
    line = '" Hello , world " ( 1 @,@ 000 @-@ odd ) isn \'t it ; he \'s 5 @.@ 5 % . = = Career = ='
    assert datasets.wikitext_detokenize(line) == \
        '"Hello, world" (1,000-odd) isn\'t it; he\'s 5.5%. == Career =='


def test_lambada_last_word_targets(data_kit, gpt2):
    items = datasets.load_lambada(gpt2, data_kit)
    assert len(items) == 5153
    context, target = items[0]
    assert gpt2.decode(target) == " signs"
    assert gpt2.decode(context).endswith("I don't care about")
    leading = sorted({gpt2.decode(target)[0] for _, target in items})
    assert leading == ["\n", " "]


def test_unknown_eval_set_lists_choices(gpt2):
    with pytest.raises(ValueError, match=r"eval set name 'wiki103'.*wikitext2.*lambada"):
        datasets.load_eval_set("wiki103", gpt2, SEQ_LEN)


def test_missing_files_say_where_and_how(tmp_path, gpt2, monkeypatch):
    with pytest.raises(ValueError, match=r"eval set 'ptb'.*ptb\.test\.txt.*AOSCALE_DATA"):
        datasets.load_eval_set("ptb", gpt2, SEQ_LEN, data_dir=tmp_path)
    monkeypatch.delenv("AOSCALE_DATA", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"eval set 'lm1b'.*Hugging Face.*AOSCALE_DATA"):
        datasets.load_eval_set("lm1b", gpt2, SEQ_LEN)
    with pytest.raises(ValueError, match=r"eval set 'lambada'.*AOSCALE_DATA"):
        datasets.load_lambada(gpt2)
