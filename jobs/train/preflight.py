"""Preflight: every check a run's inputs must pass before anything is written.

`check_run(run_dir, spec)` is what `jobs.train` runs first, and `scaling.plan.launch_checks` runs the
same checks over every run of a study before the launcher writes the study:

- each field by its one rule and the rules between fields (`jobs.train.spec_rules.validate`);
- the model's own rules (family, size, options, context), without building the model, and that
  the family provides every capability its evaluation suite uses (`jobs.data.suites.Suite.capabilities`);
- memory: the micro-batch each rank trains with is planned from the memory model of its training
  state and activations and this machine's memory (`plan_micro_batch`); a run that cannot fit
  even at micro-batch 1 is refused;
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

from cli import InputError
from cli.environment import hf_offline, require_prepared, world_size
from jobs.data import corpus as data
from jobs.train.spec_rules import check_run_dir, validate
from jobs.run.files import SPEC_FILE, checkpoint_steps
from jobs.run.device import device_bytes, pick_device
from jobs.run.spec import RunSpec
from jobs.data.suites import SUITES, EvalSuite
from cli.paths import not_nested, user_path
from jobs.train.spec_rules import check_fields
from jobs.run.files import NESTING_MARKERS, RUNS_DIR
from models import FAMILIES
from models.families.base import capabilities, resolve_options
from models.ladder import core_params, get_shape

# The memory model of one rank (`memory_bytes`), uncalibrated (a GPU's max_memory_allocated is
# another issue's): training state + one micro-batch's activations and logits, planned against
# USABLE_FRACTION of the device's memory (docs/DESIGN.md §8).
# State bytes per parameter, fp32 throughout (bf16 is autocast over fp32 weights on every engine):
# weights 4, gradients 4, AdamW's two moments 8; DeepSpeed's ZeRO 1/2 also keep an fp32 master
# partition (4) beside the module's weights. ZeRO partitions over the ranks (Rajbhandari et al.
# 2020): stage 1 the optimizer state (master + moments), stage 2 also the gradients, stage 3 also
# the weights. EMA weights (4, fp32) live whole on rank 0.
WEIGHT_BYTES = GRAD_BYTES = MASTER_BYTES = 4
MOMENT_BYTES = 8
EMA_BYTES_PER_PARAM = 4
# Activation bytes per layer per token, fp32, no recomputation: 2 x (34 d + 5 h T) after
# Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models", eq. 2
# (16-bit there; x 2 for fp32, so an upper bound under bf16 autocast, and the 5 h T attention-score
# term is an upper bound where SDPA's fused kernels never hold the T x T scores).
ACT_BYTES_PER_D, ACT_BYTES_PER_HT = 2 * 34, 2 * 5
# The head's logits per token and vocabulary entry: fp32 logits 4, cross-entropy's saved
# log-softmax 4 and the logits' gradient 4.
LOGIT_BYTES_PER_VOCAB = 3 * 4
# Planned share of the device's memory: the other 10 % for the CUDA context (~0.5 GiB), the
# allocator's fragmentation and DeepSpeed's communication buckets (5e8-element defaults). A margin,
# not a measurement.
USABLE_FRACTION = 0.9
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


def state_bytes(spec: RunSpec, n_params: int, world_size: int = 1) -> int:
    """Training state of the largest rank (rank 0, which also keeps the EMA): see WEIGHT_BYTES."""
    stage = spec.zero_stage if spec.engine == "deepspeed" else 0
    split = max(1, world_size)
    whole = WEIGHT_BYTES * (stage < 3) + GRAD_BYTES * (stage < 2) + (MOMENT_BYTES if stage == 0 else 0)
    parted = (WEIGHT_BYTES * (stage >= 3) + GRAD_BYTES * (stage >= 2)
              + (MASTER_BYTES + MOMENT_BYTES if stage > 0 else 0))
    ema = EMA_BYTES_PER_PARAM if spec.ema > 0 else 0
    return n_params * (whole + ema) + n_params * parted // split


def activation_bytes(spec: RunSpec, micro: int) -> int:
    """Activations and logits of one forward + backward of `micro` sequences (ACT_BYTES_PER_*,
    LOGIT_BYTES_PER_VOCAB)."""
    shape = get_shape(spec.size)
    tokens = micro * spec.seq_len
    per_layer = tokens * (ACT_BYTES_PER_D * shape.d_model + ACT_BYTES_PER_HT * shape.n_head * spec.seq_len)
    return shape.n_layer * per_layer + tokens * LOGIT_BYTES_PER_VOCAB * data.get_encoding(spec.tokenizer).n_vocab


def memory_bytes(spec: RunSpec, n_params: int, world_size: int = 1, micro: int | None = None) -> int:
    """Training memory of one rank: its state (`state_bytes`) plus the activations of a micro-batch
    of `micro` sequences (default: the explicit micro-batch, else the rank's whole share)."""
    micro = micro or spec.micro_batch_size or max(1, spec.batch_size // max(1, world_size))
    return state_bytes(spec, n_params, world_size) + activation_bytes(spec, micro)


def machine_bytes() -> tuple[int, str]:
    """Memory one rank may use here: its GPU's when there is one, else physical RAM."""
    device = pick_device()
    return device_bytes(device), "GPU memory" if device.type == "cuda" else "RAM"


def plan_micro_batch(spec: RunSpec, world_size: int, device_bytes: int) -> tuple[int, int, int]:
    """(micro-batch, accumulation steps, bytes per rank) of one rank among `world_size` with
    `device_bytes` of memory: an explicit `spec.micro_batch_size` always wins; otherwise the largest
    divisor of the rank's share (batch_size / world_size) whose `memory_bytes` fits USABLE_FRACTION
    of the device (the whole share when it fits: one forward per step, as before the plan), else 1
    (`check_memory` refuses what does not fit at 1). InputError naming the field when the batch
    does not split over the ranks or an explicit micro-batch does not divide a rank's share."""
    world_size = max(1, world_size)
    if spec.batch_size % world_size:
        raise InputError(f"batch_size: {spec.batch_size} does not split over {world_size} ranks; use a batch "
                         f"size that is a multiple of {world_size}, or another number of GPUs")
    share = spec.batch_size // world_size
    n_params = model_params(spec)
    usable = int(device_bytes * USABLE_FRACTION)
    if spec.micro_batch_size:
        micro = spec.micro_batch_size
        if share % micro:
            raise InputError(f"micro_batch_size: {micro} does not divide each rank's {share} sequences "
                             f"(batch_size {spec.batch_size} / {world_size} ranks); give a divisor of {share}, "
                             "or 0 to let it be chosen")
        return micro, share // micro, memory_bytes(spec, n_params, world_size, micro)
    micro = next((m for m in range(share, 0, -1) if not share % m
                  and memory_bytes(spec, n_params, world_size, m) <= usable), 1)
    return micro, share // micro, memory_bytes(spec, n_params, world_size, micro)


def memory_formula() -> str:
    """The memory model in one line, for the dry-run and messages."""
    return (f"per rank: fp32 state {WEIGHT_BYTES}+{GRAD_BYTES}+{MOMENT_BYTES} B/param (+{MASTER_BYTES} master "
            f"under ZeRO, partitioned by stage; EMA +{EMA_BYTES_PER_PARAM} on rank 0) + micro x seq x "
            f"(layers x ({ACT_BYTES_PER_D} d + {ACT_BYTES_PER_HT} h seq) + {LOGIT_BYTES_PER_VOCAB} vocab) B "
            f"(Korthikanti et al. 2022, fp32, no recomputation), planned to {USABLE_FRACTION:.0%} of the "
            "device's memory (uncalibrated)")


def check_memory(spec: RunSpec, world_size: int = 1, have: int | None = None, what: str = "") -> None:
    """Refuse a run that does not fit the device even at micro-batch 1 (or at its explicit
    micro_batch_size); `have` (bytes) defaults to this machine's (`machine_bytes`)."""
    if have is None:
        have, what = machine_bytes()
    micro, _, need = plan_micro_batch(spec, world_size, have)
    if need <= have * USABLE_FRACTION:
        return
    if spec.micro_batch_size:
        raise InputError(f"micro_batch_size: {micro} sequences of {spec.seq_len} tokens need about "
                         f"{need / 2**30:.1f} GiB per rank to train {spec.size}, more than {USABLE_FRACTION:.0%} "
                         f"of {have / 2**30:.1f} GiB of {what}; use a smaller --micro-batch-size, or 0 to let it "
                         "be chosen")
    raise InputError(f"size: {spec.size} needs about {need / 2**30:.1f} GiB per rank to train even at micro-batch "
                     f"1 x seq_len {spec.seq_len} on {world_size} rank(s), more than {USABLE_FRACTION:.0%} of "
                     f"{have / 2**30:.1f} GiB of {what}; use a smaller --size or --seq-len, more GPUs, ZeRO "
                     "stage 3, or a cluster backend")


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
        check_memory(max(specs, key=lambda s: memory_bytes(s, model_params(s), micro=s.micro_batch_size or 1)))
    if not data:
        return
    longest: dict[tuple[str, str, str], int] = {}
    for spec in specs:
        key = (spec.corpus, spec.tokenizer, spec.text_field)
        longest[key] = max(longest.get(key, 0), spec.seq_len)
    for (corpus, tokenizer, text_field), seq_len in longest.items():
        check_data(corpus, tokenizer, seq_len, text_field)
