"""Zero-shot evaluation sets: held-out text, tokenised and cut into fixed-length chunks.

Files are read from an explicit `data_dir`, else from `$AOSCALE_DATA` (a folder laid out like the
offline data kit, e.g. `../shared/data`), else from Hugging Face `datasets` when it is installed and
online. Documents are joined by end-of-text, the stream is cut into non-overlapping `seq_len`
chunks and the remainder is dropped (its size is recorded in `EvalSet.chunking`).
"""
from __future__ import annotations

import functools
import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tiktoken
import torch

from cli.environment import hf_offline
from jobs.data import corpus as data
from jobs.data.suites import EvalSuite


@dataclass(frozen=True, eq=False)
class EvalSet:
    """One evaluation set cut into chunks.

    `n_tokens` counts the tokens in `chunks`; `n_bytes` is the UTF-8 size of the text those tokens
    cover (end-of-text separators count 0 bytes), the denominator of bits per byte.
    """

    name: str
    split: str
    chunks: torch.Tensor  # LongTensor [N, seq_len]
    n_tokens: int
    n_bytes: int
    chunking: str
    dropped_tokens: int = 0


# ---------------------------------------------------------------------------------------------
# Text rules

_WIKI_AT = re.compile(r" @([-,.])@ ")  # "1 @,@ 000" -> "1,000", "well @-@ known" -> "well-known"
_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}]|'(?:s|t|re|ve|m|ll|d)\b)")  # "word ," -> "word,"
_SPACE_AFTER = re.compile(r"([(\[{]) ")  # "( word" -> "(word"
_QUOTED = re.compile(r'" ([^"]*?) "')  # '" quoted "' -> '"quoted"'
_HEADING_GAP = re.compile(r"(?<==) (?==)")  # "= = Career = =" -> "== Career =="
_WIKI_TITLE = re.compile(r"^ = [^=].* = $")  # " = Robert Boulter = " starts an article


def wikitext_detokenize(line: str) -> str:
    """A simple WikiText detokeniser for one line (after its leading space is removed).

    Undoes `@-@`, `@,@`, `@.@`; removes the space before closing punctuation, `%` and English
    clitics (`'s`, `'t` as in "don 't", `'re`, `'ve`, `'m`, `'ll`, `'d`) and after opening
    brackets; tightens `" quoted "` to `"quoted"`; joins heading runs `= = x = =` into `== x ==`.
    """
    line = _WIKI_AT.sub(r"\1", line)
    line = _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", line))
    return _HEADING_GAP.sub("", _QUOTED.sub(r'"\1"', line))


def wikitext_articles(lines: list[str]) -> list[str]:
    """WikiText lines -> detokenised articles; a top-level ` = Title = ` line starts an article."""
    articles: list[list[str]] = []
    for line in lines:
        if _WIKI_TITLE.match(line) or not articles:
            articles.append([])
        articles[-1].append(wikitext_detokenize(line.strip()))
    texts = ("\n".join(article).strip() for article in articles)
    return [text + "\n" for text in texts if text]


def _stripped_lines(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip()]


def ptb_documents(lines: list[str]) -> list[str]:
    """PTB (Mikolov): one document, one sentence per line, text kept as shipped (`<unk>`, `N`)."""
    return ["\n".join(_stripped_lines(lines)) + "\n"]


def lm1b_documents(lines: list[str]) -> list[str]:
    """LM1B heldout: each (independently shuffled) sentence is its own document, text as shipped."""
    return _stripped_lines(lines)


# ---------------------------------------------------------------------------------------------
# Sources


def _lines(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines()


def _jsonl_texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text("utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class EvalSource:
    """Where an evaluation set's records come from and how they become documents."""

    path: str  # inside a data-kit-shaped folder
    split: str
    read: Callable[[Path], list[str]]  # file -> records (lines or texts)
    to_documents: Callable[[list[str]], list[str]]
    hf: tuple[str, str | None, str, str]  # (dataset, config, split, field) for the online fallback
    description: str = field(default="")


EVAL_SOURCES: dict[str, EvalSource] = {
    "wikitext2": EvalSource("text/wikitext-2-raw/wiki.test.raw", "test", _lines, wikitext_articles,
                            ("Salesforce/wikitext", "wikitext-2-raw-v1", "test", "text"),
                            "WikiText-2 raw test, one document per article, detokenised"),
    "lambada": EvalSource("text/lambada/lambada_test.jsonl", "test", _jsonl_texts, list,
                          ("EleutherAI/lambada_openai", "default", "test", "text"),
                          "LAMBADA (OpenAI version) test, one document per passage"),
    "ptb": EvalSource("text/ptb/ptb.test.txt", "test", _lines, ptb_documents,
                      ("ptb_text_only", None, "test", "sentence"),
                      "PTB (Mikolov) test as one document, one sentence per line"),
    "lm1b": EvalSource("text/lm1b/news.en.heldout-00000-of-00050", "test", _lines, lm1b_documents,
                       ("lm1b", None, "test", "text"),
                       "LM1B heldout shard 0 (the test set), one document per sentence"),
}
EVAL_SET_NAMES = (*EVAL_SOURCES, "shakespeare")


def _data_dirs(data_dir: str | Path | None) -> list[Path]:
    if data_dir is not None:
        return [Path(data_dir)]
    return [Path(os.environ["AOSCALE_DATA"])] if os.environ.get("AOSCALE_DATA") else []


HUB_HOST = ("huggingface.co", 443)
HUB_PROBE_S = 3.0  # a reachable Hub answers a TCP connect well within this


@functools.cache
def _hub_unreachable() -> str | None:
    """Why the Hub cannot be reached (None when it can): one quick connect per process, so an
    offline machine learns it at once instead of after `datasets`' ~30 s of retries."""
    if hf_offline():
        return "HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set"
    try:
        socket.create_connection(HUB_HOST, timeout=HUB_PROBE_S).close()
    except OSError as error:
        return f"{HUB_HOST[0]} unreachable ({type(error).__name__})"
    return None


def _from_huggingface(source: EvalSource) -> list[str]:
    """Records from the Hub; raises with the reason when `datasets` is missing or offline."""
    why = _hub_unreachable()
    if why:
        raise RuntimeError(why)
    import datasets  # noqa: PLC0415 - optional (hf extra); an ImportError here is reported like any other failure

    name, config, split, column = source.hf
    rows = datasets.load_dataset(name, config, split=split, cache_dir=str(data.datasets_cache()))[column]
    return [row.rstrip("\n") for row in rows]


def _records(name: str, data_dir: str | Path | None) -> list[str]:
    source = EVAL_SOURCES[name]
    looked = [directory / source.path for directory in _data_dirs(data_dir)]
    for path in looked:
        if path.is_file():
            return source.read(path)
    where = (", ".join(str(path) for path in looked)
             or "no data folder (data_dir and AOSCALE_DATA unset)")
    try:
        return _from_huggingface(source)
    except Exception as error:
        raise ValueError(f"eval set {name!r}: looked in {where}, and Hugging Face failed "
                         f"({type(error).__name__}: {str(error)[:160]}); set AOSCALE_DATA to a "
                         f"folder laid out like the offline data kit") from error


def eval_documents(name: str, data_dir: str | Path | None = None) -> tuple[str, list[str]]:
    """(split, documents) of an evaluation set, before tokenisation."""
    if name == "shakespeare":
        return "validation", data.load_documents("shakespeare", "validation")
    if name not in EVAL_SOURCES:
        raise ValueError(f"eval set name {name!r} is unknown; choose one of {list(EVAL_SET_NAMES)}")
    return EVAL_SOURCES[name].split, EVAL_SOURCES[name].to_documents(_records(name, data_dir))


# ---------------------------------------------------------------------------------------------
# Evaluation suites as a study names them

def check_eval_suite(suite: EvalSuite, data_dir: str | Path | None = None) -> None:
    """ValueError naming `eval_suite` unless every set the suite names by name can be had now
    (from the data folder or the Hub); the suite itself was checked when it was parsed."""
    for name in suite.sets:
        if name not in EVAL_SET_NAMES:
            raise ValueError(f"eval_suite: zero-shot set {name!r} is unknown; choose from "
                             f"{', '.join(EVAL_SET_NAMES)}")
        try:
            eval_documents(name, data_dir)
        except ValueError as error:
            raise ValueError(f"eval_suite: zero-shot set {name!r} cannot be had "
                             f"({str(error)[:200]})") from None


# ---------------------------------------------------------------------------------------------
# Chunks


@functools.lru_cache(maxsize=8)
def token_byte_lengths(enc: tiktoken.Encoding) -> np.ndarray:
    """UTF-8 byte length of every token id; special tokens count 0."""
    specials = {enc.encode_single_token(token) for token in enc.special_tokens_set}
    return np.array([0 if i in specials else _token_bytes(enc, i) for i in range(enc.n_vocab)],
                    dtype=np.int64)


def _token_bytes(enc, index: int) -> int:
    """UTF-8 length of one token; 0 for an id the vocabulary skips (cl100k_base has gaps)."""
    try:
        return len(enc.decode_single_token_bytes(index))
    except KeyError:
        return 0


def load_eval_set(name: str, enc: tiktoken.Encoding, seq_len: int, *,
                  data_dir: str | Path | None = None, max_chunks: int | None = None) -> EvalSet:
    """An evaluation set as non-overlapping `seq_len` chunks of its end-of-text-joined documents.

    Names: EVAL_SET_NAMES. `max_chunks` keeps the first chunks only. Unknown names and missing
    files raise `ValueError` saying what to change.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    split, documents = eval_documents(name, data_dir)
    tokens = data.encode_joined(documents, enc).astype(np.int64)
    n_chunks = len(tokens) // seq_len
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks == 0:
        raise ValueError(f"eval set {name!r}: {len(tokens)} tokens, fewer than seq_len={seq_len}")
    chunks = tokens[:n_chunks * seq_len].reshape(n_chunks, seq_len)
    dropped = len(tokens) - chunks.size
    chunking = (f"{len(documents)} documents joined by <|endoftext|> ({len(tokens)} tokens), cut "
                f"into {n_chunks} non-overlapping chunks of {seq_len}; {dropped} trailing tokens "
                f"dropped")
    return EvalSet(name=name, split=split, chunks=torch.from_numpy(chunks), n_tokens=int(chunks.size),
                   n_bytes=int(token_byte_lengths(enc)[chunks].sum()), chunking=chunking,
                   dropped_tokens=dropped)


# Split before the whitespace character that precedes the last word. For all but 7 of the 5,153
# passages that is a space and this equals lm-eval-harness's `rsplit(" ", 1)`; for those 7 the
# word follows a newline, and the target is "\nword" instead of a multi-line tail.
_LAST_WORD = re.compile(r"^(.*)(\s\S+)$", re.DOTALL)


def load_lambada(enc: tiktoken.Encoding,
                 data_dir: str | Path | None = None) -> list[tuple[list[int], list[int]]]:
    """LAMBADA last-word items: (context ids, target ids); target = last word with its leading space.

    Context and target are tokenised separately, so the target ids are exactly what a model must
    produce after the context for the passage to end in that word.
    """
    items = []
    for text in _records("lambada", data_dir):
        context, target = _LAST_WORD.match(text.rstrip()).groups()
        items.append((enc.encode_ordinary(context), enc.encode_ordinary(target)))
    return items
