"""The run spec: one frozen record of everything that defines a training run.

`run_id` hashes only the fields that change results (`HASHED_FIELDS`: every field not declared
`hashed=False`); resources (engine, ZeRO stage, checkpoint cadence), bookkeeping (study, variant
label, role, judge) and tracking names are carried beside them but never enter the hash, so
moving a run to another backend keeps its identity. `model_options` holds every model option
resolved, defaults included (the study resolves them), so changing a default changes the run ids
it affects.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENGINES = ("torch", "deepspeed")
ZERO_STAGES = (1, 2, 3)
PRECISIONS = ("auto", "fp32", "bf16")
SCHEDULES = ("cosine", "wsd")  # wsd: warm-up, stable at the peak, linear decay (Hu et al. 2024, MiniCPM)
COMPILE_SETTINGS = ("auto", "on", "off")  # torch.compile of the core: auto = on GPU, on CPU by jobs.run.cpu_compile


def spec_field(default: Any = dataclasses.MISSING, doc: str = "", *, hashed: bool = True) -> Any:
    """A RunSpec field with its one-line `doc`: the help of its flag `--field-name` in every command
    that takes it (`python -m jobs.train`, and `scaling.launch` for a study-wide setting). A field
    declared `hashed=False` (a resource or bookkeeping) never enters the run id."""
    return field(default=default, metadata={"hashed": hashed, "doc": doc})


@dataclass(frozen=True)
class RunSpec:
    """A single training run; plain values only, so the JSON form is canonical.

    Each field declares its default and its doc here, once; its rule (type and range) is
    `jobs.train.spec_rules.FIELD_RULES[name]`, and `jobs.train.cli.flag_type` types its flag by the
    annotation."""

    family: str = spec_field(doc="model family (models.FAMILIES)")
    size: str = spec_field(doc="model size: a ladder name (0.1M, 125M) or a shape layers/width/heads")
    steps: int = spec_field(doc="optimizer steps")
    lr: float = spec_field(doc="peak learning rate (default: the rung's rule, jobs.run.recipes)")
    warmup_steps: int = spec_field(doc="linear warm-up steps (default: the rung's rule, jobs.run.recipes)")
    model_options: tuple[tuple[str, Any], ...] = spec_field((), "model options, every one resolved (models' schemas)")
    tokenizer: str = spec_field("bytes", "bytes, gpt2, a tiktoken encoding (r50k_base, cl100k_base, ...) or hf:PATH")
    corpus: str = spec_field("shakespeare", "shakespeare, a local dataset (save_to_disk folder; file, folder or glob "
                             "of parquet/arrow/jsonl/txt) or a Hugging Face dataset name[:config]")
    seq_len: int = spec_field(128, "tokens per training sequence")
    batch_size: int = spec_field(16, "sequences per optimizer step, all ranks and micro-steps together")
    micro_batch_size: int = spec_field(0, "sequences per forward pass on one rank (0 = chosen to fit the device's "
                                       "memory, jobs.train.preflight.plan_micro_batch); not in the run id")
    min_lr_ratio: float = spec_field(0.1, "the schedule's floor as a fraction of peak (GPT-3 decays to 10 %)")
    schedule: str = spec_field("cosine", "after warm-up: cosine to the floor, or wsd (warm-up, stable, linear "
                               "decay; jobs.train.loop.lr_at)")
    decay_fraction: float = spec_field(0.2, "wsd: the final share of steps that decays linearly to the floor")
    branch_from: str = spec_field("", "a WSD cooldown branch: its trunk's run id (the branch starts from its state)")
    branch_step: int = spec_field(0, "a WSD branch: the trunk's step it starts from, then decays to the floor")
    weight_decay: float = spec_field(0.1, "AdamW weight decay")
    beta1: float = spec_field(0.9, "AdamW beta1")
    beta2: float = spec_field(0.95, "AdamW beta2")
    grad_clip: float = spec_field(1.0, "gradient-norm clip")
    ema: float = spec_field(0.0, "EMA rate of the weights that are evaluated (0 = off)")
    seed: int = spec_field(0, "random seed (weights, data order, masks)")
    precision: str = spec_field("auto", "auto (bf16 autocast on GPU, fp32 on CPU), fp32 or bf16")
    eval_batches: int = spec_field(8, "validation batches at each evaluation during training")
    text_field: str = spec_field("text", "the corpus column holding the documents")
    # Not hashed (hashed=False): resources, cadence, bookkeeping.
    engine: str = spec_field("torch", "torch or deepspeed", hashed=False)
    zero_stage: int = spec_field(2, "DeepSpeed ZeRO stage (1, 2 or 3)", hashed=False)
    compile: str = spec_field("auto", "torch.compile the core: auto (on GPU; on CPU for training where "
                              "jobs.run.cpu_compile measured that it pays) | on | off", hashed=False)
    deepspeed_config: str = spec_field("", "the user's DeepSpeed overlay as canonical JSON (jobs.train.ds_config)",
                                       hashed=False)
    eval_every: int = spec_field(0, "steps between evaluations (0 = only at the end)", hashed=False)
    checkpoint_every: int = spec_field(0, "steps between checkpoints (0 = only at the end)", hashed=False)
    checkpoint_minutes: float = spec_field(30.0, "minutes of wall time between checkpoints, besides checkpoint_every "
                                           "(0 = off): a killed job loses at most this much", hashed=False)
    keep_checkpoints: int = spec_field(2, "checkpoints kept", hashed=False)
    log_every: int = spec_field(10, "steps between log lines", hashed=False)
    eval_suite: str = spec_field("quick", "the final evaluation's suite: quick, paper, or SUITE:SET,SET "
                                 "(jobs.data.suites; named zero-shot sets are required)", hashed=False)
    study: str = spec_field("", "the study the run belongs to", hashed=False)
    variant: str = spec_field("", "the study's label of the run's arm", hashed=False)
    tracking: tuple[tuple[str, Any], ...] = spec_field((), "wandb names and the plan's tags", hashed=False)
    role: str = spec_field("compared", "compared | judge (scores others' samples; in no fit or gap)", hashed=False)
    judge: str = spec_field("", "the run that scores this run's samples: a sibling run id or a run directory",
                            hashed=False)
    snapshot_steps: str = spec_field("", "a WSD trunk: steps (\"100,200\") whose state its branches start from",
                                     hashed=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_options", _freeze(self.model_options))
        object.__setattr__(self, "tracking", _freeze(self.tracking))

    @property
    def options(self) -> dict[str, Any]:
        """Model options as a plain dict (keyword arguments of `models.build_model`)."""
        return dict(self.model_options)

    @property
    def micro_batch(self) -> int:
        """The explicit micro-batch, else the whole batch: what the validation batch holds
        (jobs.train.loop.validation_loss, computed in pieces of the planned micro-batch). The
        micro-batch a rank trains with is `jobs.train.preflight.plan_micro_batch`'s."""
        return self.micro_batch_size or self.batch_size

    @property
    def tokens(self) -> int:
        """Training tokens over the whole run."""
        return self.steps * self.batch_size * self.seq_len

    @property
    def run_id(self) -> str:
        """sha256 of the canonical JSON of the result-changing fields, first 12 hex digits."""
        return self._hash(HISTORIC_VALUES)

    def _hash(self, frozen: dict[str, Any]) -> str:
        hashed = {name: _plain(getattr(self, name)) for name in HASHED_FIELDS
                  if LATE_DEFAULTS.get(name, _NO_DEFAULT) != getattr(self, name)}
        hashed.update(frozen)
        hashed["model_options"] = {key: value for key, value in hashed["model_options"].items()
                                   if LATE_OPTION_DEFAULTS.get(key, _NO_DEFAULT) != value}
        return hashlib.sha256(canonical_json(hashed).encode()).hexdigest()[:12]

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (`model_options` and `tracking` as objects) plus the run id."""
        out = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["run_id"] = self.run_id
        return out

    def to_json(self) -> str:
        """Canonical JSON text of `to_dict()`."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of `to_dict`; unknown keys are errors, a stale `run_id` is an error."""
        data = dict(data)
        expected_id = data.pop("run_id", None)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"spec: unknown field(s) {unknown}; valid fields: {sorted(names)}")
        spec = cls(**data)
        if expected_id is not None and expected_id not in (spec.run_id, spec._hash({})):
            raise ValueError(f"spec: run_id {expected_id} does not match its fields ({spec.run_id})")
        return spec

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        """Read a spec.json."""
        return cls.from_dict(json.loads(Path(path).read_text()))


ROLES = ("compared", "judge")
# Hashed fields added after run ids were first handed out: at these defaults they stay out of the
# hash, so every run id from before they existed is unchanged.
LATE_DEFAULTS: dict[str, Any] = {"text_field": "text", "schedule": "cosine", "decay_fraction": 0.2,
                                 "branch_from": "", "branch_step": 0}
# Model options added after run ids were first handed out, at their defaults (models' option
# schemas): left out of the hash the same way. pos: the position encoding (learned | rope); init:
# the weight initialisation (gpt2 | official); mask_prob: MDM's masking probability (t | mdlm).
LATE_OPTION_DEFAULTS: dict[str, Any] = {"pos": "learned", "init": "gpt2", "mask_prob": "t"}
# Fields hashed once that no longer change results, hashed at their historic value whatever they
# hold, so every run id handed out before stays and the id no longer depends on them.
# micro_batch_size: accumulating micro-batches is the same optimizer step (the loss is the mean over
# the step's chunks either way), and the micro-batch that fits depends on the device
# (jobs.train.preflight.plan_micro_batch); every spec before this rule hashed its default 0. A
# spec.json written before it with another value keeps loading (`from_dict` accepts its old id).
HISTORIC_VALUES: dict[str, Any] = {"micro_batch_size": 0}
_NO_DEFAULT = object()
HASHED_FIELDS = tuple(f.name for f in dataclasses.fields(RunSpec) if f.metadata.get("hashed", True))
FIELD_DOCS: dict[str, str] = {f.name: f.metadata["doc"] for f in dataclasses.fields(RunSpec)}
TABLE_FIELDS = ("model_options", "tracking")  # set key by key, never whole on a command line


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, floats in repr form: the same object gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _freeze(pairs: Any) -> tuple[tuple[str, Any], ...]:
    items = pairs.items() if isinstance(pairs, dict) else pairs
    return tuple(sorted((str(k), v) for k, v in items))


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return {k: v for k, v in value}
    return value
