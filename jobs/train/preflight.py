"""Preflight: every check a run's inputs must pass before anything is written.

`check_run(run_dir, spec)` is what `jobs.train` runs first, and `scaling.plan.launch_checks` runs the
same checks over every run of a study before the launcher writes the study:

- each field by its one rule and the rules between fields (`jobs.train.spec_rules.validate`);
- the model's own rules (family, size, options, context), without building the model, and that
  the family provides every capability its evaluation suite uses (`jobs.data.suites.Suite.capabilities`);
- memory of the model's training state and activations against this machine;
- the data (through jobs.data's loaders): the corpus exists, decodes as UTF-8 (the file and byte
  offset are named), `.jsonl` records hold their text field, and each split holds at least one
  window of `seq_len + 1` tokens; Hugging Face names are resolved once, with a timeout;
- the run directory can be written.

Each failure is a `cli.InputError` naming the field or file and the fix. Nothing here writes:
token counts come from tokenising a small local corpus in memory, else from the token cache.
"""
from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cli import InputError
from cli.environment import hf_offline, require_prepared, world_size
from jobs.data import corpus as data
from jobs.train.spec_rules import check_run_dir, validate
from jobs.run.files import SPEC_FILE, checkpoint_steps
from jobs.run.spec import RunSpec
from jobs.data.suites import SUITES, EvalSuite
from cli.paths import not_nested, user_path
from jobs.train.spec_rules import check_fields
from jobs.run.files import NESTING_MARKERS, RUNS_DIR
from models import FAMILIES
from models.families.base import capabilities, resolve_options
from models.ladder import core_params, get_shape

# Bytes per parameter in training: fp32 weights 4 + gradients 4 + AdamW moments 8 (+ EMA 4).
STATE_BYTES_PER_PARAM = 16
EMA_BYTES_PER_PARAM = 4
# Activation bytes per layer per token, fp32, no recomputation: 2 x (34 d + 5 h T) after
# Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models", eq. 2.
ACT_BYTES_PER_D, ACT_BYTES_PER_HT = 2 * 34, 2 * 5
IN_MEMORY_BYTES = 16 << 20  # local corpora up to this size are tokenised in memory (seconds); larger: the cache
HUB_TIMEOUT_S = 20.0  # one resolution of a Hugging Face name; offline names fail at once
HUB_HOST = "huggingface.co"


def check_types(fields: dict[str, Any]) -> None:
    """Each RunSpec field present in `fields` by its rule (jobs.train.spec_rules.FIELD_RULES): integers
    (not bools) for counts, finite numbers in range for rates, known names, seeds in [0, 2**63)."""
    check_fields(fields)


def check_spec(spec: RunSpec) -> None:
    """Every field's rule, the rules between fields and the model's rules of one spec (no data,
    no memory)."""
    validate(spec)
    model_params(spec)
    check_capabilities(spec)


def check_capabilities(spec: RunSpec) -> None:
    """InputError naming `eval_suite` when the run's family lacks a capability its suite uses (e.g.
    a sampler for a suite that generates): refused before training, not failed after it."""
    try:
        suite = EvalSuite.parse(spec.eval_suite)
    except InputError:
        return  # an unknown suite is its field rule's error
    if spec.family not in FAMILIES:
        return  # an unknown family is model_params' error
    missing = [c for c in suite.base.capabilities if c not in capabilities(FAMILIES[spec.family])]
    if missing:
        able = [name for name, s in SUITES.items() if set(s.capabilities) <= set(capabilities(FAMILIES[spec.family]))]
        raise InputError(f"eval_suite: suite {suite.name!r} needs `{missing[0]}`, which family {spec.family!r} does "
                         f"not provide; choose a suite it supports ({', '.join(able) or 'none'}) or implement "
                         f"`{missing[0]}` in the family's module")


def model_params(spec: RunSpec) -> int:
    """The model's own rules (family, size, options, context) and its parameter count, without
    building it: the core (models.ladder.core_params) plus token, position and head tables."""
    if spec.family not in FAMILIES:
        raise InputError(f"family: unknown family {spec.family!r}; valid: {', '.join(FAMILIES)}")
    try:
        shape = get_shape(spec.size)
        resolve_options(spec.family, FAMILIES[spec.family].OPTIONS, spec.options)
        vocab = data.get_encoding(spec.tokenizer).n_vocab
    except (ValueError, TypeError, KeyError) as error:
        raise InputError(str(error).splitlines()[0]) from None
    tables = (2 * vocab + spec.seq_len + 1) * shape.d_model  # tokens, positions, an untied head
    return core_params(shape) + tables


def memory_bytes(spec: RunSpec, n_params: int, world_size: int = 1) -> int:
    """Training memory of one rank: optimizer state (partitioned over ranks under ZeRO) and the
    activations of one micro-batch (see ACT_BYTES_PER_*)."""
    shape = get_shape(spec.size)
    per_param = STATE_BYTES_PER_PARAM + (EMA_BYTES_PER_PARAM if spec.ema > 0 else 0)
    states = n_params * per_param // (world_size if spec.engine == "deepspeed" else 1)
    tokens = spec.micro_batch * spec.seq_len
    per_layer = tokens * (ACT_BYTES_PER_D * shape.d_model + ACT_BYTES_PER_HT * shape.n_head * spec.seq_len)
    return states + shape.n_layer * per_layer


def machine_bytes() -> tuple[int, str]:
    """Memory one run may use here: the first GPU's when there is one, else physical RAM."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory, "GPU memory"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "RAM"


def check_memory(spec: RunSpec, world_size: int = 1) -> None:
    """Refuse a run whose training state alone would not fit this machine."""
    need = memory_bytes(spec, model_params(spec), world_size)
    have, what = machine_bytes()
    if need > have:
        raise InputError(f"size: {spec.size} with batch {spec.micro_batch} x seq_len {spec.seq_len} needs about "
                         f"{need / 2**30:.0f} GiB to train, more than this machine's {have / 2**30:.0f} GiB "
                         f"of {what}; use a smaller --size, --batch-size or --seq-len, or a cluster backend")


# ---------------------------------------------------------------------------------------------
# Data


def _local_corpus_error(corpus: str, error: Exception) -> InputError:
    """A readable message for a local corpus that does not load (names the file and offset)."""
    if isinstance(error, UnicodeDecodeError):
        where = _undecodable_file(Path(corpus).expanduser())
        return InputError(f"corpus: {where} is not UTF-8 text (byte offset {error.start}: {error.reason}); "
                          "convert the file to UTF-8")
    if isinstance(error, json.JSONDecodeError):
        return InputError(f"corpus: {corpus} holds a .jsonl line that is not JSON ({error.msg} at line "
                          f"{error.lineno}); one JSON object per line")
    if isinstance(error, (KeyError, TypeError)):
        return InputError(f"corpus: {corpus} holds a .jsonl record without a \"text\" field; every line must be "
                          "an object with a \"text\" string")
    if isinstance(error, OSError):
        return InputError(f"corpus: {corpus} cannot be read ({error.strerror or error}); check its permissions")
    message = str(error).splitlines()[0]
    return InputError(message if message.startswith("corpus") else f"corpus: {message}")


def _undecodable_file(path: Path) -> Path:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in data.LOCAL_SUFFIXES)
    for file in files:
        try:
            file.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return file
    return path


def _hub_reachable() -> bool:
    """Whether the Hub's host name resolves (a quick, quiet test before `datasets` retries)."""
    try:
        socket.getaddrinfo(HUB_HOST, 443)
    except OSError:
        return False
    return True


def _resolve_hub(corpus: str) -> None:
    """Resolve a Hugging Face dataset name once (metadata only), within HUB_TIMEOUT_S."""
    try:
        import datasets  # noqa: PLC0415 - optional (the hf extra) and slow to import
    except ImportError:
        raise InputError(f"corpus: {corpus!r} is not shakespeare or a local path, and loading it from the Hugging "
                         "Face Hub needs the hf extra (pip install aoscale[hf])") from None
    name, _, config = corpus.partition(":")
    offline = hf_offline()
    if not offline and not _hub_reachable():
        raise InputError(f"corpus: {corpus!r} is not shakespeare or a local path, and the Hugging Face Hub "
                         f"({HUB_HOST}) cannot be reached; check the network, or use a local .txt/.jsonl path")
    outcome: list[BaseException | None] = []

    def resolve() -> None:
        try:
            with data.scratch_cache() as folder:  # metadata only: nothing kept, nothing in $HF_HOME
                datasets.load_dataset_builder(name, config or None, cache_dir=folder)
            outcome.append(None)
        except Exception as error:  # offline, unknown name, gated: all mean "cannot load"
            outcome.append(error)

    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(HUB_TIMEOUT_S)
    if not outcome or outcome[0] is not None:
        why = f"{type(outcome[0]).__name__}" if outcome else f"no answer within {HUB_TIMEOUT_S:.0f} s"
        raise InputError(f"corpus: {corpus!r} could not be resolved on the Hugging Face Hub ({why}); check the "
                         "name and the network, or use shakespeare or a local .txt/.jsonl path")


def _cached_tokens(corpus: str, tokenizer: str, split: str, text_field: str) -> int | None:
    cached = data.token_path(corpus, tokenizer, split, text_field)
    if not cached.exists():
        return None
    itemsize = np.dtype(data.token_dtype(data.get_encoding(tokenizer).n_vocab)).itemsize
    return cached.stat().st_size // itemsize


def _local_bytes(corpus: str) -> int:
    path = Path(corpus).expanduser()
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in data.LOCAL_FORMATS]
    return sum(f.stat().st_size for f in files) if path.exists() else 0


def split_tokens(corpus: str, tokenizer: str, split: str, text_field: str = data.DEFAULT_TEXT_FIELD) -> int | None:
    """Tokens in one split, or None when they are not counted here: the built-in corpus (its
    smallest split, 3 plays, holds ~4e5 bytes), a Hub or large local corpus not yet cached (their
    size is checked when they are tokenised). A small local corpus is loaded through jobs.data
    and tokenised in memory, so its files are checked before anything is looked up or written."""
    if corpus == "shakespeare":
        return None
    if not data._is_local(corpus) or _local_bytes(corpus) > IN_MEMORY_BYTES:
        return _cached_tokens(corpus, tokenizer, split, text_field)
    try:
        documents = data.stream_documents(corpus, split, text_field)
    except (ValueError, KeyError, TypeError, OSError) as error:
        raise _local_corpus_error(corpus, error) from None
    return len(data.encode_joined(documents, data.get_encoding(tokenizer)))


def check_data(corpus: str, tokenizer: str, seq_len: int, text_field: str = data.DEFAULT_TEXT_FIELD) -> None:
    """The corpus loads and each split holds at least one window of `seq_len + 1` tokens.

    A prepared corpus (its token cache complete: `aoscale prepare`) is checked from the cache's
    manifest alone, without reading the corpus or asking the Hub. Under AOSCALE_REQUIRE_PREPARED=1
    (Slurm and Ray jobs) an unprepared corpus is refused here, before anything is written."""
    if not isinstance(corpus, str) or not corpus.strip():
        raise InputError("corpus: empty; give shakespeare, a local .txt/.jsonl path or a Hugging Face dataset name")
    try:
        manifest = data.prepared_manifest(corpus, tokenizer, text_field)
    except ValueError as error:  # the tokenizer's own rule (named in its message)
        raise InputError(str(error).splitlines()[0]) from None
    if manifest is None and require_prepared():
        raise data.not_prepared(corpus, tokenizer, text_field)
    if manifest is None:
        _check_source(corpus, tokenizer, text_field)
    for split in data.SPLITS:
        n_tokens = manifest["splits"][split]["tokens"] if manifest else split_tokens(corpus, tokenizer, split, text_field)
        if n_tokens is not None and n_tokens < seq_len + 1:
            raise InputError(f"corpus: the {split} split of {corpus} holds {n_tokens} tokens, fewer than one window "
                             f"of seq_len + 1 = {seq_len + 1}; use a larger corpus or a shorter --seq-len")


def _check_source(corpus: str, tokenizer: str, text_field: str) -> None:
    """An unprepared corpus: a Hub name resolves, a local corpus's every row holds its text."""
    if (corpus != "shakespeare" and not data._is_local(corpus)
            and not data.token_path(corpus, tokenizer, "train", text_field).exists()):
        _resolve_hub(corpus)
    data.check_local_rows(corpus, text_field)  # every row, before any run directory exists


def check_writable(path: Path, field: str) -> None:
    """`path` is (or can be created as) a folder this process may write."""
    if path.exists() and not path.is_dir():
        raise InputError(f"{field}: {path} is a file; pass a folder")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{field}: {existing} is not writable; pass a folder you can write to")


def check_run_path(run_dir: str | Path, field: str = "--run-dir") -> Path:
    """A run directory as the user gave it: non-empty, reachable (cli.paths.user_path), not
    inside another run, and inside a study only as `<study>/runs/<run>`."""
    path = user_path(field, run_dir)
    not_nested(field, path, NESTING_MARKERS, allowed=(RUNS_DIR,))
    return path


def check_eval_dir(run_dir: Path) -> None:
    """A run directory that evaluation or generation can read and write records into."""
    check_run_path(run_dir)
    try:
        _check_eval_files(Path(run_dir))
    except OSError as error:
        raise InputError(f"--run-dir: {error.filename or run_dir}: {error.strerror or error}; check its "
                         "permissions") from None


def _check_eval_files(run_dir: Path) -> None:
    if not (run_dir / SPEC_FILE).is_file():
        raise InputError(f"--run-dir: {run_dir} has no spec.json; pass a run directory made by jobs.train")
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise InputError(f"--run-dir: {run_dir} is not writable (records are written there); fix its permissions")
    if not checkpoint_steps(run_dir):
        raise InputError(f"--run-dir: {run_dir} holds no checkpoint; train the run first (python -m jobs.train "
                         f"--run-dir {run_dir})")


def check_run(run_dir: Path, spec: RunSpec, *, memory: bool = True) -> None:
    """Everything `jobs.train` checks before it writes: spec, model, memory, data, run dir."""
    check_spec(spec)
    check_run_path(run_dir, "run_dir")
    check_writable(run_dir, "run_dir")
    try:
        check_run_dir(run_dir, spec)
    except ValueError as error:
        raise InputError(str(error)) from None
    if memory:
        check_memory(spec, world_size())
    check_data(spec.corpus, spec.tokenizer, spec.seq_len, spec.text_field)


def check_specs(specs: Iterable[RunSpec], *, memory: bool, data: bool = True) -> None:
    """Preflight of many runs (a study): each spec, the largest run's memory, each corpus once."""
    specs = list(specs)
    for spec in specs:
        check_spec(spec)
    if memory and specs:
        check_memory(max(specs, key=lambda s: memory_bytes(s, model_params(s))))
    if not data:
        return
    longest: dict[tuple[str, str, str], int] = {}
    for spec in specs:
        key = (spec.corpus, spec.tokenizer, spec.text_field)
        longest[key] = max(longest.get(key, 0), spec.seq_len)
    for (corpus, tokenizer, text_field), seq_len in longest.items():
        check_data(corpus, tokenizer, seq_len, text_field)
