"""Study settings: every setting declared once with its section and its rule, loaded in one place.

A study's settings come in layers, later winning: a preset, a TOML file (`--spec`), the
command-line flags, and under them all the base for the study's sizes (`presets.base_for`).
`load_settings` checks every key of every layer by the rule its declaration names (cli.rules),
before anything merges or anything is written, so a bad value is named as the user wrote it
(`run.beta1`, `arms[1].family`, `sizes: 0.1M given twice`), and no key is dropped silently.
It returns a frozen `StudySettings` whose sections (data, budget, network, resources,
tracking; a sweep or plans section fits the same way) are what `scaling.study.study_spec` expands.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass, fields
from typing import Any

import models
from cli import InputError, float_arg, int_arg, rules
from cli.options import set_value
from jobs.train import ds_config
from jobs.train.spec_rules import FIELD_RULES, check_field
from jobs.run.spec import FIELD_DOCS, HASHED_FIELDS
from jobs.train.cli import ALIASES, field_flag, flag_type
from jobs.data.suites import DEFAULT_SUITE, EvalSuite
from jobs.run.tracking import check_tracking
from models.ladder import get_shape

from .arms import DEFAULT_ARMS, Arm, default_arm, network_options
from .presets import PRESETS, base_for, preset_settings
from . import sweep
from jobs.run.recipes import Budget

DEFAULT_GPU_MEMORY_GIB = 80.0  # an A100/H100 80 GB: the planning assumption of a cluster backend
MAX_GPU_MEMORY_GIB = 1e4  # far above any accelerator's memory; a typo in MiB is refused
TOKENS_PER_PARAM_LIMIT = 1e6  # Chinchilla is 20; far above any sane budget, far below float overflow
# RunSpec fields a study decides itself; the remaining hashed fields may be set under [run].
STRUCTURAL = {"family", "size", "steps", "lr", "warmup_steps", "model_options", "tokenizer", "corpus",
              "text_field", "seq_len", "batch_size", "ema", "seed"}
RUN_OVERRIDES = tuple(name for name in HASHED_FIELDS if name not in STRUCTURAL)
RESOURCES = ("engine", "zero_stage", ds_config.FIELD, "eval_every", "checkpoint_every", "checkpoint_minutes",
             "keep_checkpoints", "log_every")
ARM_KEYS = ("family", "options", "ema", "factors", "label", "network")
TABLES = ("run", "resources", "tracking")  # merged field by field across layers


def _preset(field: str, value: Any) -> str:
    return rules.one_of(field, rules.text(field, value), PRESETS)


def _families(field: str, value: Any) -> tuple[str, ...]:
    families = rules.text_list(field, value)
    for family in families:
        rules.one_of(field, family, models.FAMILIES)
    return families


def _sizes(field: str, value: Any) -> tuple[str, ...]:
    sizes = rules.text_list(field, value)
    for size in sizes:
        _plain(get_shape, size)
    return sizes


def _plain(function: Callable, *args: Any) -> Any:
    """`function(*args)`, its ValueError (already naming the field) as an InputError."""
    try:
        return function(*args)
    except InputError:
        raise
    except (ValueError, TypeError) as error:
        raise InputError(str(error).splitlines()[0]) from None


def _network(field: str, value: Any) -> Any:
    if not isinstance(value, (str, dict)):
        raise rules.fail(field, value, "must be a network name (gpt2, official, gpt2,pos=rope) or a table")
    _plain(network_options, value)
    return value


def _arm(field: str, value: Any) -> Arm:
    """One `[[arms]]` table (or a preset's Arm), every key checked."""
    if isinstance(value, Arm):
        return value
    rules.known_keys(field, value, ARM_KEYS)
    if "family" not in value:
        raise InputError(f"{field}: family missing; each [[arms]] table needs family = \"ar\" (or another family)")
    family = rules.one_of(f"{field}.family", value["family"], models.FAMILIES)
    options = rules.table(f"{field}.options", value.get("options", {}))
    factors = rules.table(f"{field}.factors", value.get("factors", {}))
    ema = value.get("ema")
    label = value.get("label", "")
    if label:
        rules.text(f"{field}.label", label)
    if value.get("network") is not None:
        _network(f"{field}.network", value["network"])
    return Arm(family, options, None if ema is None else FIELD_RULES["ema"](f"{field}.ema", ema), factors, label,
               value.get("network"))


def _arms(field: str, value: Any) -> tuple[Arm, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise rules.fail(field, value, "must be a non-empty list of [[arms]] tables")
    return tuple(_arm(f"{field}[{i}]", item) for i, item in enumerate(value))


def _prefix(field: str) -> str:
    """How a table's fields are named: `run.beta1` in a file; a flag's own name (`engine`) for the
    tables the launcher builds from flags (field "")."""
    return f"{field}." if field else ""


def _run(field: str, value: Any) -> dict[str, Any]:
    rules.known_keys(field or "run", value, RUN_OVERRIDES)
    return {key: check_field(key, item, _prefix(field)) for key, item in value.items()}


def _resources(field: str, value: Any) -> dict[str, Any]:
    rules.known_keys(field or "resources", value, RESOURCES)
    return {key: item if key == ds_config.FIELD else check_field(key, item, _prefix(field))
            for key, item in value.items()}


def _tracking(field: str, value: Any) -> dict[str, Any]:
    check_tracking(rules.table(field or "tracking", value), field or "tracking")
    return value


def _positive_tokens_per_param(field: str, value: Any) -> float | list[float]:
    """One ratio, or a list of them (the data axis: scaling.study.sweep), each positive and bounded."""
    if isinstance(value, (str, list, tuple)):
        ratios = _plain(sweep.parse_numbers, field, value)
        return [_positive_tokens_per_param(field, ratio) for ratio in ratios] if len(ratios) > 1 else \
            _positive_tokens_per_param(field, ratios[0])
    return rules.at_most(field, rules.positive_number(field, value), TOKENS_PER_PARAM_LIMIT,
                         "Chinchilla-optimal is 20; use --tokens for a fixed budget")


def _numbers(field: str, value: Any) -> list[float]:
    """Positive numbers: a list, a number or a comma-separated string (budgets, branches)."""
    return _plain(sweep.parse_numbers, field, value)


def _sweep(field: str, value: Any) -> Any:
    """A `[sweep]` table or `--sweep [family:]name=v,...` strings, parsed to check them (the
    per-family tables are checked against the study's families when it expands)."""
    families = set(value) & set(models.FAMILIES) if isinstance(value, dict) else set(models.FAMILIES)
    _plain(sweep.parse_sweep, value, families)
    return value


def _cache_dir(field: str, value: Any) -> str:
    """A folder for the token cache (made when missing), not a file; kept as given, `~` expanded."""
    text = rules.text(field, value)
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{field}: {text} is a file; pass a folder for the token cache")
    return str(path)


def numbers_arg(text: str) -> list[float]:
    """argparse type: a comma-separated list of finite numbers (`float_arg` for each)."""
    items = [v for v in text.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers")
    return [float_arg(v.strip()) for v in items]


@dataclass(frozen=True)
class Setting:
    """One study setting, declared once: its key (TOML key, `--set` key and flag), its section, its
    rule, and its flag's help and type. A setting without help is a table or a list of tables
    (arms, run, resources, tracking): a file, a preset or `--set key.field=value` sets it."""

    key: str
    section: str
    rule: Callable[[str, Any], Any]
    help: str = ""
    type: Callable[[str], Any] = str
    flag: str = ""  # the flag when it is not --key-with-dashes (the name every command uses)
    aliases: tuple[str, ...] = ()
    repeat: bool = False  # repeatable: the values, in order, as a list
    metavar: str | None = None

    @property
    def flag_name(self) -> str:
        """`--key-with-dashes`, or the declared flag."""
        return self.flag or field_flag(self.key)


def run_field(key: str, section: str, note: str = "", **flag: Any) -> Setting:
    """A study-wide setting that is a RunSpec field: its rule, help, type and flag name are the
    field's (jobs.run.spec, jobs.train.spec_rules), the same as in `python -m jobs.train`."""
    return Setting(key, section, FIELD_RULES[key], FIELD_DOCS[key] + note, flag_type(key), aliases=ALIASES.get(key, ()),
                   **flag)


_RULE = "; default: the rung's rule"
SETTINGS: tuple[Setting, ...] = (
    Setting("name", "study", rules.name, "study name (default: the preset's name, plus a hash when flags change it)"),
    Setting("preset", "study", _preset, f"a named study (default quickstart): {', '.join(PRESETS)}; listed below"),
    Setting("families", "study", _families, "comma-separated families, e.g. ar,aogpt,sigma_gpt,mdm"),
    Setting("arms", "study", _arms),
    Setting("sizes", "study", _sizes, "comma-separated sizes, e.g. 0.1M,0.3M,1M or 125M,350M,760M"),
    Setting("seeds", "study", rules.positive_int, "seeds per cell (0..N-1)", type=int_arg),
    Setting("judge", "study", rules.text, "AR run directory that scores generated samples (default: a "
            "dedicated judge run when the suite generates)", flag="--judge-run"),
    run_field("tokenizer", "data"), run_field("corpus", "data"), run_field("text_field", "data"),
    run_field("eval_suite", "data"),
    Setting("cache_dir", "data", _cache_dir, "token cache folder: `aoscale prepare` tokenises the corpora into it "
            "and the runs read it (default: the folder the study recorded, else $AOSCALE_CACHE, else ~/.cache/aoscale "
            "with --backend local and aoscale-cache beside the study dir with slurm or ray); never in a run id"),
    run_field("seq_len", "budget"),
    Setting("tokens", "budget", rules.positive_int, "training tokens per run (default tokens-per-param x params)",
            type=int_arg),
    Setting("tokens_per_param", "budget", _positive_tokens_per_param, "default 20 (Chinchilla); a list "
            "(4,8,16,32) runs each value at every size", type=numbers_arg),
    Setting("max_tokens", "budget", rules.positive_int, "cap on tokens per run", type=int_arg),
    Setting("max_steps", "budget", rules.positive_int, "cap every run's steps (changes run ids; smoke tests)",
            type=int_arg),
    run_field("batch_size", "budget", _RULE), run_field("lr", "budget"), run_field("warmup_steps", "budget"),
    Setting("warmup_tokens", "budget", rules.positive_int, "warm-up in tokens, when warmup-steps is not given "
            "(default: GPT-3's, jobs.run.recipes)", type=int_arg),
    Setting("network", "network", _network, "the network every family trains on: gpt2 (LayerNorm, tied head) or "
            "official (AO-GPT's RMSNorm + QK-norm + untied head), both with learned positions, optionally with "
            "overrides: gpt2,pos=rope (rotary positions); default: the preset's"),
    run_field("ema", "network", ", applied to every family; default: the preset's"),
    Setting("run", "run", _run), Setting("resources", "resources", _resources),
    Setting("tracking", "tracking", _tracking),
    # plans along compute and sweeps (scaling.study.sweep): each reads its own rule there
    Setting("sweep", "plans", _sweep, "sweep a run setting (lr, warmup, batch_size, beta1, beta2, weight_decay, "
            "min_lr_ratio); repeatable", repeat=True, metavar="[FAMILY:]NAME=V,V,..."),
    Setting("budgets", "plans", _numbers, "training-FLOP budgets (1e12,3e12,1e13): isoFLOP profiles of >= 5 "
            "sizes each", type=numbers_arg),
    Setting("grid_points", "plans", rules.positive_int, "sizes per isoFLOP profile (default "
            f"{sweep.DEFAULT_GRID_POINTS})", type=int_arg),
    Setting("grid_step", "plans", rules.positive_number, "ratio of core parameters between a profile's sizes "
            f"(default {sweep.DEFAULT_GRID_STEP:g})", type=float_arg),
    Setting("optimum_seeds", "plans", rules.positive_int, "seeds of the sizes around each profile's minimum "
            "(default: --seeds)", type=int_arg),
    Setting("optimum_span", "plans", rules.positive_int, "how many central sizes of a profile get "
            "optimum-seeds (default 1)", type=int_arg),
    Setting("branches", "plans", _numbers, "WSD cooldown branches at these fractions of each run's steps "
            "(0.25,0.5; needs --set run.schedule=wsd)", type=numbers_arg),
    Setting("branch_decay", "plans", rules.positive_number, "a branch decays over this share of the tokens "
            f"its trunk had seen (default {sweep.DEFAULT_BRANCH_DECAY:g})", type=float_arg),
    Setting("carry_lr", "plans", lambda f, v: _plain(sweep.parse_carry, v)),
    # planning: what the dry-run assumes of the hardware; no run id, no study name depends on it
    Setting("gpu_memory", "planning", lambda f, v: rules.at_most(f, rules.positive_number(f, v), MAX_GPU_MEMORY_GIB,
                                                                 "a planning assumption in GiB per GPU"),
            f"GiB of memory per GPU the plan assumes (default {DEFAULT_GPU_MEMORY_GIB:g}; local: this machine's): "
            "the dry-run's micro-batch x accumulation and its refusal of a run that cannot fit; on the node the "
            "detected memory decides", type=float_arg, metavar="GIB"),
)
FLAG_SETTINGS = tuple(s for s in SETTINGS if s.help)  # the launcher's flags, in this order


def add_flags(parser: argparse._ActionsContainer) -> None:
    """One launcher flag per setting that has help; unset flags stay None (presets and files show through)."""
    for setting in FLAG_SETTINGS:
        parser.add_argument(setting.flag_name, *setting.aliases, dest=setting.key, type=setting.type,
                            action="append" if setting.repeat else "store", metavar=setting.metavar,
                            help=setting.help.replace("%", "%%"))


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` items as a layer: `key` a setting, or `table.field` for a table (run,
    resources, tracking); the value read by `cli.options.set_value`, as `python -m jobs.train --set` reads it."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"set: {item!r} must look like key=value (e.g. --set run.beta2=0.99)")
        table, dot, field = key.partition(".")
        if dot and table not in TABLES:
            raise InputError(f"set: {key} is not a setting; a dotted key sets a field of {', '.join(TABLES)}")
        value = set_value(text.strip())
        if (field in out.get(table, {})) if dot else (key in out):
            raise InputError(f"set: {key} is given twice by --set; give it once")
        if dot:
            out.setdefault(table, {})[field] = value
        else:
            out[key] = value
    return out


assert {s.key for s in SETTINGS if s.section == "plans"} == set(sweep.AXIS_KEYS), \
    "scaling.study.sweep's keys and SETTINGS disagree"
BY_KEY = {setting.key: setting for setting in SETTINGS}
SETTING_KEYS = tuple(BY_KEY)
BUDGET_KEYS = tuple(f.name for f in fields(Budget))
assert set(BUDGET_KEYS) == {s.key for s in SETTINGS if s.section == "budget"}, "Budget and SETTINGS disagree"
# Settings that change results: giving one renames a preset's study `<preset>-<hash>`.
RESULT_KEYS = tuple(s.key for s in SETTINGS if s.key not in ("name", "resources", "tracking", "judge", "cache_dir")
                    and s.section != "planning")


@dataclass(frozen=True)
class DataSettings:
    """What every run reads and how it is scored."""

    tokenizer: str
    corpus: str
    text_field: str = "text"
    eval_suite: EvalSuite = DEFAULT_SUITE


@dataclass(frozen=True)
class NetworkSettings:
    """The network every family trains on and the study's EMA rate (arms override explicitly)."""

    network: Any = "gpt2"  # a name (`gpt2,pos=rope`) or a table of NETWORK_KEYS
    ema: float = 0.0

    @property
    def options(self) -> dict[str, Any]:
        return network_options(self.network)


@dataclass(frozen=True)
class StudySettings:
    """A study's settings, every value checked; `values` is the merged, canonical form."""

    name: str
    preset: str | None
    renamed: bool  # flags or a file changed a preset's results: the name gets the study's hash
    sizes: tuple[str, ...]
    seeds: int
    arms: tuple[Arm, ...]  # the preset's or file's, filtered by `families`, plus default arms
    judge: str
    data: DataSettings
    budget: Budget
    network: NetworkSettings
    run: tuple[tuple[str, Any], ...]  # RunSpec overrides (weight decay, betas, ...)
    resources: tuple[tuple[str, Any], ...]  # engine, ZeRO stage, cadence: never in the run id
    tracking: tuple[tuple[str, Any], ...]
    values: tuple[tuple[str, Any], ...]

    @property
    def planned_runs(self) -> int:
        """Compared runs of the plan, counted before any is built: (sizes x seeds, or budgets x a
        profile's runs, its central sizes at `optimum_seeds`: sweep.profile_runs) x data ratios x
        arms x the study-wide sweep's combinations (an upper bound where a sweep is per family or at
        one budget)."""
        values = dict(self.values)
        runs = len(self.sizes) * self.seeds
        if values.get("budgets") is not None:
            runs = len(values["budgets"]) * sweep.profile_runs(values.get("grid_points", sweep.DEFAULT_GRID_POINTS),
                                                                self.seeds, values.get("optimum_seeds"),
                                                                values.get("optimum_span"))
        ratios = values.get("tokens_per_param")
        runs *= len(ratios) if isinstance(ratios, list) else 1
        combos = 1
        for axis in ({} if values.get("sweep") is None else
                     dict(sweep.parse_sweep(values["sweep"], {a.family for a in self.arms}).common)).values():
            combos *= len(axis)
        return runs * len(self.arms) * combos

    def canonical(self) -> dict[str, Any]:
        """study.json's `settings`: the merged values, arms as dicts."""
        out = {k: v for k, v in self.values if k not in ("arms", "name", "preset", "families")}
        out.update(arms=[arm.to_dict() for arm in self.arms], preset=self.preset,
                   resources=dict(self.resources), sizes=list(self.sizes))
        if self.tracking:
            out["tracking"] = dict(self.tracking)
        return out


def check_layer(layer: dict[str, Any], where: str) -> dict[str, Any]:
    """One layer's every key by its rule (unset flags, None, are skipped); unknown keys refused."""
    out = {}
    for key, value in layer.items():
        if value is None:
            continue
        if key not in BY_KEY:
            raise InputError(f"{where}: unknown key {key!r}; valid: {', '.join(SETTING_KEYS)}")
        out[key] = BY_KEY[key].rule("" if where == "flags" and key in TABLES else key, value)
    return out


def load_settings(flags: dict[str, Any], toml: dict[str, Any] | None = None,
                  sets: dict[str, Any] | None = None) -> StudySettings:
    """The study's settings from its layers: base < preset < TOML < flags and `--set` items
    (`parse_sets`), each checked first; a setting given both as a flag and by `--set` is refused."""
    file, flagged, set_layer = check_layer(toml or {}, "spec"), check_layer(flags, "flags"), check_layer(sets or {}, "set")
    for key in sorted(set(flagged) & set(set_layer) - set(TABLES)):
        raise InputError(f"set: {key} is given twice ({BY_KEY[key].flag_name} and --set {key}=...); give it once")
    for table in sorted(set(flagged) & set(set_layer) & set(TABLES)):
        for field in sorted(set(flagged[table]) & set(set_layer[table])):
            raise InputError(f"set: {table}.{field} is given twice (--{field.replace('_', '-')} and --set "
                             f"{table}.{field}=...); give it once")
    given = _merge([flagged, set_layer])
    user = {**file, **given}
    preset = _choose_preset(user)
    values = _merge([check_layer(preset_settings(preset), "preset") if preset else {}, file, given])
    values["sizes"] = values.get("sizes") or tuple(base_for([])["sizes"])
    values = _merge([base_for(list(values["sizes"])), values])
    values["resources"] = _plain(ds_config.with_overlay, values.get("resources", {}))
    if values.get("tracking"):
        values["tracking"] = check_tracking(values["tracking"])
    scalar = sweep.budget_settings(values)  # a list of tokens_per_param: each point sets its own
    budget = Budget(**{k: scalar[k] for k in BUDGET_KEYS if k in scalar})
    arms = tuple(_study_arms(values))
    _check_typed_sweep(given.get("sweep", file.get("sweep")), {arm.family for arm in arms}, "sweep" in flagged)
    return StudySettings(
        name=str(user.get("name") or preset or "study"), preset=preset,
        renamed=not user.get("name") and any(k in user for k in RESULT_KEYS if k != "preset"),
        sizes=tuple(values["sizes"]), seeds=values.get("seeds", 1), arms=arms,
        judge=values.get("judge", "auto"),
        data=DataSettings(values["tokenizer"], values["corpus"], values.get("text_field", "text"),
                          EvalSuite.parse(values.get("eval_suite", DEFAULT_SUITE))),
        budget=budget, network=NetworkSettings(values.get("network", "gpt2"), float(values.get("ema", 0.0))),
        run=tuple(values.get("run", {}).items()), resources=tuple(values["resources"].items()),
        tracking=tuple(values.get("tracking", {}).items()), values=tuple(sorted(values.items())))


def _check_typed_sweep(value: Any, families: set[str], flag: bool) -> None:
    """A sweep the user wrote (flags, else the study file) names only families the study trains: a
    table for another would touch nothing. (A preset's table for a family its study was narrowed
    away from, by --families, is dropped: scaling.study.sweep.parse_sweep.)"""
    for family in sorted(sweep.named_families(value) - families):
        written = next((f"--sweep {item}" for item in value if str(item).strip().startswith(f"{family}:")), "")\
            if flag else f"[sweep.{family}]"
        raise InputError(f"sweep: {written} sweeps {family}, which this study does not train (families: "
                         f"{', '.join(sorted(families))}); drop it or add {family} to --families")


def _choose_preset(user: dict[str, Any]) -> str | None:
    """The named preset; with no sizes, families or arms given at all, the quickstart."""
    if user.get("preset"):
        return user["preset"]
    if any(user.get(key) for key in ("sizes", "families", "arms")):
        return None
    return "quickstart"


def _merge(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """Later layers win key by key; the TABLES merge field by field."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                continue
            out[key] = {**out.get(key, {}), **value} if key in TABLES else value
    return out


def _study_arms(values: dict[str, Any]) -> list[Arm]:
    """The preset's or file's arms, filtered by `families`; a family without an arm gets its default."""
    arms = list(values.get("arms", ()))
    families = values.get("families")
    if families is None:
        return arms or list(DEFAULT_ARMS.values())
    kept = [arm for arm in arms if arm.family in families]
    return kept + [default_arm(f) for f in families if all(a.family != f for a in arms)]
