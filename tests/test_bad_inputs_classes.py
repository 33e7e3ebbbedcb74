"""Bad input by class: every field checked once (types, finiteness, ranges, enumerations, unknown
keys, duplicates) at every level (flags, `--set`, TOML top level, `[run]`, `[resources]`,
`[tracking]`, `[[arms]]`), names and paths, corpus rows, study.json documents and the plan-size
guard. Each case exits 2 with one line naming the field, and leaves the working folder, the
study, the token cache and the `datasets` cache (HF_HOME) exactly as they were. In-process through
each CLI's `main(argv)`; a few real processes prove there is no traceback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from analysis import fit_curves
from jobs.eval import evaluate
from jobs.eval import generate
from jobs.train import loop as train
from jobs.run.spec import RunSpec
from scaling import launch, status
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.test_bad_inputs import assert_refused, snapshot, write_records

from reference import review_book

REPO = Path(__file__).resolve().parents[1]
MAINS = {"train": train.main, "evaluate": evaluate.main, "generate": generate.main,
         "launch": launch.main, "status": status.main, "fit_curves": fit_curves.main, "book": review_book.main}
TRAIN = ["--family", "ar", "--size", "0.1M", "--steps", "2", "--seq-len", "32", "--batch-size", "2"]
LAUNCH = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--max-steps", "2", "--seq-len", "32",
          "--no-progress", "--no-report"]
LONG = "n" * 300  # longer than any file system's name limit (255 bytes)
BASE = 'sizes = "0.1M"\nseeds = 1\nmax_steps = 2\nseq_len = 32\n'
TOMLS = {  # file name -> text: each breaks one rule at one level of a study file
    "beta1": BASE + 'families = "ar"\n[run]\nbeta1 = 1.5\n', "beta2_inf": BASE + 'families = "ar"\n[run]\nbeta2 = inf\n',
    "clip_nan": BASE + 'families = "ar"\n[run]\ngrad_clip = nan\n',
    "wd_neg": BASE + 'families = "ar"\n[run]\nweight_decay = -1\n',
    "precision": BASE + 'families = "ar"\n[run]\nprecision = "fp4"\n',
    "run_seed": BASE + 'families = "ar"\n[run]\nseed = 3\n',
    "arm_family_int": BASE + "[[arms]]\nfamily = 7\n",
    "arm_factors_str": BASE + '[[arms]]\nfamily = "aogpt"\nfactors = "x"\n',
    "arm_unknown": BASE + '[[arms]]\nfamily = "aogpt"\ncolour = 1\n',
    "arm_options_int": BASE + '[[arms]]\nfamily = "aogpt"\noptions = 3\n',
    "arm_ema": BASE + '[[arms]]\nfamily = "aogpt"\nema = 1.5\n',
    "arm_no_family": BASE + '[[arms]]\nlabel = "x"\n',
    "arms_int": BASE + "arms = 3\n",
    "tracking_str": BASE + 'families = "ar"\ntracking = "wandb"\n',
    "tracking_mode": BASE + 'families = "ar"\n[tracking]\nmode = "sideways"\n',
    "tracking_unknown": BASE + 'families = "ar"\n[tracking]\ncolour = "red"\n',
    "log_every": BASE + 'families = "ar"\n[resources]\nlog_every = 0\n',
    "engine_int": BASE + 'families = "ar"\n[resources]\nengine = 3\n',
    "suite_int": BASE + 'families = "ar"\neval_suite = 5\n',
    "name_up": BASE + 'families = "ar"\nname = "../up"\n',
    "seeds_bool": BASE.replace("seeds = 1", "seeds = true") + 'families = "ar"\n',
    "seeds_float": BASE.replace("seeds = 1", "seeds = 2.0") + 'families = "ar"\n',
    "sizes_twice": BASE.replace('sizes = "0.1M"', 'sizes = ["0.1M", "0.1M"]') + 'families = "ar"\n',
    "network_int": BASE + 'families = "ar"\nnetwork = 5\n',
    "judge_int": BASE + 'families = "ar"\njudge = 3\n',
    "text_field_empty": BASE + 'families = "ar"\ntext_field = ""\n',
    "tpp_inf": BASE + 'families = "ar"\ntokens_per_param = inf\n',
}
JSONL = {  # corpus file -> its lines; every one but a single line is a valid record
    "int": ['{"text": 12345}'], "null": ['{"text": null}'], "object": ['{"text": {"a": 1}}'],
    "no_field": ['{"body": "x"}'], "list": ["[1, 2]"], "bad_line": ['{"text": "x"'], "bool": ['{"text": true}'],
}


def _corpora(root: Path) -> None:
    corpora = root / "corpora"
    corpora.mkdir()
    good = [json.dumps({"text": "to be or not to be " * 8})] * 40
    for name, bad in JSONL.items():
        (corpora / f"{name}.jsonl").write_text("\n".join(good[:20] + bad + good[20:]) + "\n")
    with open(corpora / "big.jsonl", "w") as handle:  # 18 MB: above the in-memory check's size
        handle.writelines(json.dumps({"text": "word " * 60}) + "\n" for _ in range(58_000))
        handle.write('{"text": 12345}\n')
    pl.DataFrame({"text": [1, 2, 3]}).write_parquet(corpora / "int.parquet")
    pl.DataFrame({"text": ["a" * 50, None, "b" * 50]}).write_parquet(corpora / "null.parquet")


def _studies(root: Path) -> None:
    study = build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2, "seq_len": 32})
    study_ledger.prepare(root / "study", study)
    documents = {"st_list": "[]", "st_str": '"hello"', "st_no_order": '{"name": "n"}',
                 "st_no_row": json.dumps({"format": 2, "hash": "h", "name": "n", "order": ["abc"], "runs": {}})}
    for name, text in documents.items():
        (root / name).mkdir()
        (root / name / "study.json").write_text(text)


BOOK_RUN = {"command": "python -m scaling.launch", "wall_s": 1.0, "rc": 0, "load_before": [1.0, 1.0, 1.0],
            "load_after": [1.0, 1.0, 1.0]}
BOOK_RUNS = {"trunc": '{"command": "x", "wall_s": 1', "list": "[1, 2]", "wall_str": json.dumps({**BOOK_RUN, "wall_s": "1"}),
             "rc_bool": json.dumps({**BOOK_RUN, "rc": True}), "no_cmd": json.dumps({"wall_s": 1.0}),
             "load_str": json.dumps({**BOOK_RUN, "load_after": ["high"]}), "good": json.dumps(BOOK_RUN)}


def _outputs(root: Path) -> None:
    """Marked reports (one inside a study), another records file, books' studies roots."""
    write_records(root / "records" / "other.parquet", seed=1)
    study_ledger.prepare(root / "st2", build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2,
                                              "seq_len": 32}))
    for out in ("rep", "st2/report"):
        fit_curves.run(["records/good.parquet"], out, bootstrap=10)
    (root / "st2" / "report" / "notes.txt").write_text("kept beside the report\n")
    (root / "st_fifo").mkdir()
    os.mkfifo(root / "st_fifo" / "study.json")
    os.mkfifo(root / "fifo")
    (root / "book").mkdir()
    (root / "book" / "dec-enc-cpu.md").write_text("# a book without its marker\n")
    for name, text in BOOK_RUNS.items():
        (root / "sr" / name / "dec-enc-cpu").mkdir(parents=True)
        (root / "sr" / name / "dec-enc-cpu" / review_book.RUN_FILE).write_text(text)


def _evaluated(study: Path) -> None:
    """Each run of a prepared study made to look trained and evaluated (no checkpoint)."""
    for run in sorted((study / "runs").iterdir()):
        (run / "status.json").write_text(json.dumps({"state": "done", "step": 2, "steps": 2}))
        (run / "metrics.ndjson").write_text(json.dumps({"kind": "train", "step": 2, "tokens": 128, "loss": 5.0,
                                                        "tokens_per_s": 10.0}) + "\n")
        write_records(run / "eval.parquet", run_id=run.name, step=2)


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


DAMAGE = {  # study folder -> (file under its one run, or under the study with "../..", what it holds then)
    "dm_step_x": ("status.json", {"step": "x"}), "dm_steps_null": ("status.json", {"steps": None}),
    "dm_warnings_int": ("status.json", {"warnings": 5}), "dm_state_odd": ("status.json", {"state": "sideways"}),
    "dm_settings_int": ("../../study.json", {"settings": 5}), "dm_seed_str": ("../../study.json", None),
    "dm_carry_str": ("../../study.json", {"settings": {"carry_lr": {"ar": "fast"}}}),
    "dm_options_str": ("spec.json", {"model_options": "x"}), "dm_ema_big": ("spec.json", {"ema": 7}),
    "dm_spec_list": ("spec.json", []), "dm_lock_dir": (".lock", "dir"), "dm_status_dir": ("status.json", "dir"),
    "dm_tokens_abc": ("metrics.ndjson", {"tokens": "abc"}), "dm_step_neg": ("metrics.ndjson", {"step": -3}),
    "dm_value_str": ("eval.parquet", "value"),
}


def _damage(root: Path, name: str, file: str, change) -> None:
    study = build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2, "seq_len": 32})
    study_ledger.prepare(root / name, study)
    _evaluated(root / name)
    path = next((root / name / "runs").iterdir()) / file
    if change == "dir":
        path.unlink(missing_ok=True)
        path.mkdir()
    elif change == "value":
        pl.read_parquet(path).with_columns(pl.col("value").cast(pl.String)).write_parquet(path)
    elif file == "metrics.ndjson":
        path.write_text(json.dumps({**json.loads(path.read_text()), **change}) + "\n")
    elif change is None:  # a run's row with a seed of another kind
        doc = json.loads(path.read_text())
        doc["runs"][doc["order"][0]]["seed"] = "one"
        path.write_text(json.dumps(doc))
    elif isinstance(change, list):
        path.write_text(json.dumps(change))
    else:
        _edit_json(path, **change)


SELECTED = {"family": "ar", "variant": "", "metric": "nll_l2r", "val_mean": 2.0, "n_candidates": 3,
            "budget_flops": 1e15, "sweep_lr": 1e-3, "size": "0.1M", "dataset": "shakespeare"}
FITS = {  # study folder -> its report/fits.json text (what --carry-lr-from reads)
    "fits_lr_str": {"sweep_lr": "1e-3"}, "fits_budget_str": {"budget_flops": "1e15"},
    "fits_budget_nan": {"budget_flops": float("nan")}, "fits_lr_neg": {"sweep_lr": -1e-3},
    "fits_no_val": {"val_mean": ...}, "fits_no_family": {"family": ...}, "fits_cand_str": {"n_candidates": "3"},
    "fits_val_inf": {"val_mean": float("inf")},
}


def _fits(root: Path) -> None:
    for name, changes in FITS.items():
        row = {k: v for k, v in {**SELECTED, **changes}.items() if v is not ...}
        (root / name / "report").mkdir(parents=True)
        (root / name / "report" / "fits.json").write_text(json.dumps({"selection": {"chosen": [row], "warnings": []}}))
    for name, text in {"fits_list": "[1]", "fits_trunc": '{"selection": {"cho', "fits_sel_str": '{"selection": "x"}',
                       "fits_chosen_int": '{"selection": {"chosen": 3}}', "fits_warn_int": '{"selection": '
                       '{"chosen": [], "warnings": [3]}}'}.items():
        (root / name / "report").mkdir(parents=True)
        (root / name / "report" / "fits.json").write_text(text)


RECORD_FILES = {  # records file -> its one row's changes (analysis' schema, the optional columns included)
    "lr_str": {"sweep_lr": "1e-3"}, "lr_nan": {"sweep_lr": float("nan")}, "lr_neg": {"sweep_lr": -1e-3},
    "budget_str": {"budget_flops": "1e15"}, "budget_nan": {"budget_flops": float("nan")},
    "budget_neg": {"budget_flops": -1e15}, "temp_nan": {"temperature": float("nan")}, "top_p_5": {"top_p": 5.0},
    "split_train": {"split": "train"}, "k_mc_0": {"k_mc": 0}, "weights_odd": {"weights": "average"},
    "role_boss": {"role": "boss"}, "epochs_neg": {"epochs": -1.0}, "warmup_inf": {"sweep_warmup": float("inf")},
    "factor_list": {"factor_depth": [3]}, "unit_bits": {"unit": "bits/byte", "run_id": "r2"},
    "family_mdm": {"family": "mdm"}, "copy": {}, "test_a": {"split": "test", "sweep_lr": 1e-3},
    "test_b": {"split": "test", "sweep_lr": 3e-3, "run_id": "r2"}, "temp_neg": {"temperature": -0.5},
    "n_layer_0": {"n_layer": 0}, "repeats_str": {"repeats": "2"},
}


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A trained run, a study, corpora, study files, symlinks; the caches are private folders."""
    root, cache, hf = (tmp_path_factory.mktemp(name) for name in ("ws", "cache", "hf"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(cache))
        mp.setenv("HF_HOME", str(hf))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        datasets = pytest.importorskip("datasets")
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", hf / "datasets")  # read by every load
        mp.chdir(root)
        spec = RunSpec(family="ar", size="0.1M", steps=2, lr=1e-3, warmup_steps=0, seq_len=32, batch_size=2,
                       eval_batches=1, log_every=1)
        assert train.train(root / "ar", spec, handle_signals=False) == "done"
        _studies(root)
        _corpora(root)
        for name, text in TOMLS.items():
            (root / f"{name}.toml").write_text(text)
        (root / "loop").symlink_to("loop2")
        (root / "loop2").symlink_to("loop")
        (root / "dangling").symlink_to("nowhere")
        (root / "records").mkdir()
        write_records(root / "records" / "good.parquet")
        _outputs(root)
        for name, (file, change) in DAMAGE.items():
            _damage(root, name, file, change)
        _fits(root)
        for name, changes in RECORD_FILES.items():
            write_records(root / "records" / f"{name}.parquet", **changes)
        yield root, cache, hf


def C(cli: str, argv: list[str], field: str):
    return pytest.param(cli, argv, field, id=f"{cli}:{' '.join(argv)[-60:]!r}")


def L(extra: list[str], field: str):
    return C("launch", [*LAUNCH, "--study-dir", "new_study", *extra], field)


def S(toml: str, field: str):
    return C("launch", ["--spec", f"{toml}.toml", "--study-dir", "new_study", "--no-progress"], field)


def T(extra: list[str], field: str, run_dir: str = "new_run"):
    return C("train", ["--run-dir", run_dir, *TRAIN, *extra], field)


def D(study_dir: str, field: str = "study-dir"):
    return C("launch", [*LAUNCH, "--study-dir", study_dir], field)


FIELDS = [  # types, finiteness, ranges and enumerations, from flags, --set and every TOML level
    L(["--tokens-per-param", "1e308"], "tokens_per_param"), L(["--tokens-per-param", "-3"], "tokens_per_param"),
    L(["--eval-suite", "quick:"], "eval_suite"), L(["--eval-suite", "cpu:,"], "eval_suite"),
    L(["--eval-suite", "giant"], "eval_suite"), L(["--ema", "0.99999999999999999"], "ema"),
    S("beta1", "run.beta1"), S("beta2_inf", "run.beta2"), S("clip_nan", "run.grad_clip"),
    S("wd_neg", "run.weight_decay"), S("precision", "run.precision"), S("engine_int", "resources.engine"),
    S("log_every", "resources.log_every"), S("suite_int", "eval_suite"), S("seeds_bool", "seeds"),
    S("seeds_float", "seeds"), S("network_int", "network"), S("judge_int", "judge"),
    S("text_field_empty", "text_field"), S("tpp_inf", "tokens_per_param"), S("arm_ema", "arms[0].ema"),
    S("arm_family_int", "arms[0].family"), S("arm_factors_str", "arms[0].factors"),
    S("arm_options_int", "arms[0].options"), S("arms_int", "arms"), S("tracking_str", "tracking"),
    S("tracking_mode", "tracking.mode"),
    T(["--set", "beta1=1.5"], "beta1"), T(["--set", "beta2=Infinity"], "beta2"), T(["--set", "grad_clip=NaN"], "grad_clip"),
    T(["--set", "weight_decay=-1"], "weight_decay"), T(["--set", "lr=-Infinity"], "lr"),
    T(["--set", "min_lr_ratio=NaN"], "min_lr_ratio"), T(["--set", "eval_suite=huge"], "eval_suite"),
    T(["--set", 'eval_suite="quick:"'], "eval_suite"), T(["--set", "role=boss"], "role"),
    T(["--set", "compile=maybe"], "compile"), T(["--set", "tracking.mode=sideways"], "tracking.mode"),
    T(["--set", "tracking.wandb=maybe"], "tracking.wandb"),
    C("generate", ["--run-dir", "ar", "--n-samples", "2", "--seed", "-1"], "--seed"),
    C("generate", ["--run-dir", "ar", "--n-samples", "2", "--seed", str(2**63)], "--seed"),
    C("evaluate", ["--run-dir", "ar", "--eval-suite", "quick:"], "--eval-suite"),
    C("evaluate", ["--run-dir", "ar", "--suite", "cpu:,"], "--eval-suite"),
]
UNKNOWN = [  # a key that is unknown or of the wrong kind is refused, never dropped
    T(["--set", 'model_options={"x":1}'], "model_options"), T(["--set", 'tracking={"mode":"x"}'], "tracking"),
    T(["--set", "tracking.colour=1"], "tracking.colour"), S("arm_unknown", "arms[0].colour"),
    S("arm_no_family", "arms[0]"), S("tracking_unknown", "tracking.colour"), S("run_seed", "run.seed"),
]
DUPLICATES = [  # named as the user wrote them
    L(["--sizes", "0.1M,0.3M,0.1M"], "sizes: 0.1M given twice"), L(["--families", "ar,mdm,ar"], "families: ar given twice"),
    L(["--families", "ar,,ar"], "families: ar given twice"), S("sizes_twice", "sizes: 0.1M given twice"),
]
BEFORE_TRAINING = [  # refused before any run trains or the study is written
    L(["--bootstrap", "5"], "--bootstrap"), L(["--bootstrap", "0"], "--bootstrap"),
    C("launch", ["--spec", "beta1.toml", "--study-dir", "new_study", "--no-progress", "--no-report"], "run.beta1"),
]
PLAN_SIZE = [
    L(["--seeds", "200000"], "max-runs"), L(["--seeds", "3", "--max-runs", "2"], "max-runs"),
    L(["--max-runs", "0"], "--max-runs"),
]
NAMES_AND_PATHS = [
    L(["--name", "../escaped_study"], "name"), L(["--name", "a/b"], "name"), L(["--name", "a\nb"], "name"),
    L(["--name", LONG], "name"), L(["--name", "a\0b"], "name"), L(["--name", ".hidden"], "name"),
    L(["--name", "two words"], "name"), S("name_up", "name"),
    D("study/runs/nested"), D("ar/nested"), D("ar"), D("loop"), D("dangling"), D(LONG), D(f"ok/{'y' * 256}"),
    T([], "--run-dir", run_dir=""), T([], "--run-dir", run_dir="loop"), T([], "--run-dir", run_dir="dangling"),
    T([], "--run-dir", run_dir=LONG), T([], "--run-dir", run_dir="ar/inner"),
    T([], "--run-dir", run_dir="study/elsewhere"),
    C("evaluate", ["--run-dir", "loop"], "--run-dir"), C("generate", ["--run-dir", "dangling"], "--run-dir"),
    C("fit_curves", ["loop"], "paths"), C("fit_curves", ["dangling"], "paths"),
    C("fit_curves", ["records/good.parquet", "--out", "loop"], "--out"),
    C("fit_curves", ["records/good.parquet", "--out", LONG], "--out"),
    C("status", ["st_list"], "study-dir"), C("status", ["st_str"], "study-dir"),
    C("status", ["st_no_order"], "study-dir"), C("status", ["st_no_row"], "study-dir"),
    D("st_list"), C("status", ["loop"], "study"),
]
DATA = [C("train", ["--run-dir", "new_run", *TRAIN, "--corpus", f"corpora/{name}.jsonl"], f"corpora/{name}.jsonl line 21")
        for name in JSONL] + [
    L(["--corpus", "corpora/null.jsonl"], "null.jsonl line 21: \"text\" is null"),
    L(["--corpus", "corpora/int.parquet"], "int.parquet row 0: \"text\""),
    L(["--corpus", "corpora/null.parquet"], "null.parquet row 1: \"text\" is null"),
    L(["--corpus", "corpora/big.jsonl"], "big.jsonl line 58001"),
    T(["--corpus", "corpora/big.jsonl"], "big.jsonl line 58001"),
]
def B(root: str, out: str, field: str, *extra: str):
    return C("book", ["--sections-only", "--presets", "dec-enc-cpu", "--studies-root", f"sr/{root}", "--out", out,
                      *extra], field)


def O(paths: list[str], out: str, field: str, *extra: str):  # noqa: E743 - O for output
    return C("fit_curves", [*paths, "--bootstrap", "10", "--out", out, *extra], field)


OUTPUTS = [  # an --out never replaces a study, a run, or what another source wrote
    O(["study"], "study", "study is a study folder"), O(["study"], "study/runs", "study/runs is a runs folder"),
    O(["study"], "study", "study folder", "--force"), O(["records/good.parquet"], "st2", "st2 is a study"),
    O(["records/good.parquet"], "study/runs/new", "inside the runs folder"),
    O(["records/good.parquet"], "ar", "ar is a run folder"), O(["records/good.parquet"], "ar/report", "inside the run"),
    O(["records/other.parquet"], "st2/report", "st2/report is the report of"),
    O(["records/other.parquet"], "rep", "--force to replace it"), O(["study"], "rep", "rep is the report of"),
    O(["records/good.parquet"], "records", "records holds files aoscale did not write"),
    O(["records/good.parquet"], "corpora", "no .aoscale-output.json"),
    O(["records/good.parquet"], "book", "pass a new folder"),
    C("fit_curves", ["st2", "--bootstrap", "10"], "st2/report is the report of"),
    B("good", "study", "study is a study folder"), B("good", "rep", "rep is a report aoscale wrote, not a book"),
    B("good", "ar", "ar is a run folder"), B("good", "records", "records holds files"),
    B("good", "st2/runs/x", "inside the runs folder"),
    B("trunc", "new_book", "book_run.json: not readable JSON"), B("list", "new_book", "holds a JSON list"),
    B("wall_str", "new_book", "book_run.json: wall_s: '1' must be a finite number"),
    B("rc_bool", "new_book", "rc: True must be an integer"), B("no_cmd", "new_book", "book_run.json: command is missing"),
    B("load_str", "new_book", "load_after[0]: 'high' must be a finite number"),
    B("missing", "new_book", "not found"),
]
SPECIAL = [  # devices, FIFOs and sockets refused before they are opened
    C("status", ["st_fifo"], "st_fifo/study.json is a FIFO"), D("st_fifo", "is a FIFO"),
    L(["--deepspeed-config", "/dev/zero"], "/dev/zero is a character device"),
    L(["--deepspeed-config", "fifo"], "fifo is a FIFO"),
    O(["records/good.parquet"], "fifo", "fifo is a FIFO"), C("fit_curves", ["fifo"], "fifo is a FIFO"),
    T([], "fifo is a FIFO", run_dir="fifo"),
]
def F(paths: list[str], field: str, *extra: str):
    return C("fit_curves", [*paths, "--bootstrap", "10", "--out", "new_report", *extra], field)


def R(name: str, field: str):
    return F([f"records/{name}.parquet"], field)


DAMAGED_FILES = [  # a file aoscale wrote, damaged: one line naming the file, the key and what was expected
    C("status", ["dm_settings_int"], "study.json: settings: 5 must be a table"),
    C("status", ["dm_carry_str"], "study.json: settings.carry_lr.ar: 'fast' must be a finite number"),
    C("status", ["dm_lock_dir"], ".lock: is a folder, not a lock file"),
    C("status", ["dm_tokens_abc"], "metrics.ndjson line 1: tokens: 'abc' must be an integer"),
    C("status", ["dm_step_neg"], "metrics.ndjson line 1: step: -3 must be an integer >= 0"),
    F(["dm_seed_str"], ".seed: 'one' must be an integer"), F(["dm_settings_int"], "study.json: settings: 5"),
    F(["dm_options_str"], "spec.json: model_options: 'x' must be a table"),
    F(["dm_ema_big"], "spec.json: ema: 7 must be a number in [0, 1)"),
    F(["dm_spec_list"], "spec.json: holds a JSON list, expected an object"),
    F(["dm_tokens_abc"], "metrics.ndjson line 1: tokens: 'abc' must be an integer"),
    F(["dm_step_neg"], "metrics.ndjson line 1: step: -3 must be an integer >= 0"),
    F(["dm_warnings_int"], "status.json: warnings: 5 must be a list"),
    F(["dm_step_x"], "status.json: step: 'x' must be an integer"),
    F(["dm_status_dir"], "status.json: is a folder"),
    F(["dm_value_str"], "eval.parquet: column 'value' has type String, expected float"),
    *[L(["--carry-lr-from", name], f"carry-lr-from: {name}/report/fits.json: {what}") for name, what in (
        ("fits_lr_str", "selection.chosen[0].sweep_lr: '1e-3' must be a finite number"),
        ("fits_budget_str", "selection.chosen[0].budget_flops: '1e15' must be a finite number"),
        ("fits_budget_nan", "selection.chosen[0].budget_flops: nan must be a finite number"),
        ("fits_lr_neg", "selection.chosen[0].sweep_lr: -0.001 must be a positive number"),
        ("fits_no_val", "selection.chosen[0].val_mean is missing (must be a finite number)"),
        ("fits_no_family", "selection.chosen[0].family is missing"),
        ("fits_cand_str", "selection.chosen[0].n_candidates: '3' must be"),
        ("fits_val_inf", "selection.chosen[0].val_mean: inf must be a finite number"),
        ("fits_list", "holds a JSON list, expected an object (fits.json)"), ("fits_trunc", "not readable JSON"),
        ("fits_sel_str", "selection: 'x' must be an object"), ("fits_chosen_int", "selection.chosen: 3 must be a list"),
        ("fits_warn_int", "selection.warnings[0]: 3 must be a string"))],
]
RECORD_COLUMN_VALUES = [  # every column typed and ranged, the optional ones included
    R("lr_str", "column 'sweep_lr' has type String, expected float"), R("lr_nan", "column 'sweep_lr' holds nan"),
    R("lr_neg", "column 'sweep_lr' holds -0.001 at row 0 (run_id r1, metric nll_l2r), expected > 0"),
    R("budget_str", "column 'budget_flops' has type String"), R("budget_nan", "column 'budget_flops' holds nan"),
    R("budget_neg", "column 'budget_flops' holds -1000000000000000.0 at row 0 (run_id r1, metric nll_l2r), expected > 0"),
    R("temp_nan", "column 'temperature' holds nan"), R("temp_neg", "column 'temperature' holds -0.5"),
    R("top_p_5", "column 'top_p' holds 5.0 at row 0 (run_id r1, metric nll_l2r), expected > 0 and <= 1"),
    R("split_train", "column 'split' holds 'train' at row 0 (run_id r1, metric nll_l2r), expected one of validation"),
    R("k_mc_0", "column 'k_mc' holds 0"), R("weights_odd", "column 'weights' holds 'average'"),
    R("role_boss", "column 'role' holds 'boss'"), R("epochs_neg", "column 'epochs' holds -1.0"),
    R("warmup_inf", "column 'sweep_warmup' holds inf"), R("factor_list", "column 'factor_depth' has type List"),
    R("n_layer_0", "column 'n_layer' holds 0"), R("repeats_str", "column 'repeats' has type String, expected int"),
    F(["records/good.parquet", "records/unit_bits.parquet"], "metric nll_l2r of study s is in 2 units"),
    F(["records/good.parquet", "records/family_mdm.parquet"], "run_id r1 names two runs (ar base 0.1M s0 and mdm"),
    F(["records/good.parquet", "records/copy.parquet"], "row 1 (run_id r1, metric nll_l2r) is given twice"),
    F(["records/good.parquet", "records/good.parquet"], "is given twice"),
    F(["records/test_a.parquet", "records/test_b.parquet"], "study s sweeps sweep_lr but holds no validation records"),
    F(["records/good.parquet"], "--bootstrap: 100000000000 must be at most 100000", "--bootstrap", "100000000000"),
    L(["--bootstrap", "100000000000"], "--bootstrap: 100000000000 must be at most 100000"),
]
CLASSES = {"fields": FIELDS, "unknown keys": UNKNOWN, "duplicates": DUPLICATES, "before training": BEFORE_TRAINING,
           "plan size": PLAN_SIZE, "names and paths": NAMES_AND_PATHS, "data": DATA,
           "outputs": OUTPUTS, "special files": SPECIAL, "damaged files": DAMAGED_FILES,
           "record columns": RECORD_COLUMN_VALUES}
CASES = [case for cases in CLASSES.values() for case in cases]


def test_every_class_holds_distinct_cases():
    keys = [(case.values[0], tuple(case.values[1])) for case in CASES]
    assert len(set(keys)) == len(keys) and all(len(cases) >= 3 for cases in CLASSES.values())


@pytest.mark.parametrize("cli, argv, field", CASES)
def test_bad_input_class_exits_2_with_one_line_naming_the_field_and_writes_nothing(ws, cli, argv, field, capsys):
    assert_refused(MAINS[cli], argv, field, ws, capsys)


def test_a_valid_dry_run_of_a_local_corpus_writes_nothing_anywhere(ws, capsys):
    """`datasets` is opened to check the corpus, but neither HF_HOME nor aoscale's cache changes."""
    root, cache, hf = ws
    good = root / "good.jsonl"
    good.write_text("".join(json.dumps({"text": "hello world " * 30}) + "\n" for _ in range(400)))
    before = snapshot(root, cache, hf)
    assert launch.main([*LAUNCH, "--corpus", str(good), "--study-dir", "new_study", "--dry-run"]) == 0
    assert snapshot(root, cache, hf) == before
    good.unlink()


REAL = [  # (module, argv): cases that once ended in a traceback
    ("scaling.launch", [*LAUNCH, "--tokens-per-param", "1e308", "--dry-run"]),
    ("scaling.launch", [*LAUNCH, "--name", LONG, "--dry-run"]),
    ("scaling.launch", [*LAUNCH, "--study-dir", "loop", "--dry-run"]),
    ("jobs.train", ["--run-dir", "r", *TRAIN, "--corpus", "int.jsonl"]),
]


def test_real_processes_exit_2_without_a_traceback(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "int.jsonl").write_text('{"text": "fine"}\n{"text": 12345}\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOSCALE_CACHE": str(tmp_path / "cache"),
           "HF_HOME": str(tmp_path / "hf")}
    procs = [subprocess.Popen([sys.executable, "-m", module, *argv], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for module, argv in REAL]
    for proc, (module, argv) in zip(procs, REAL):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and "Traceback" not in err, (module, argv[-3:], err)
        assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_output_replaces_only_a_report_of_its_own_sources(tmp_path, monkeypatch, capsys):
    """A report is marked with its sources: rebuilt in place from them, replaced from others only
    with --force (keeping what a user put beside it), and an unmarked report of the report's own
    files is the study's own at `<study>/report`."""
    monkeypatch.chdir(tmp_path)
    write_records(tmp_path / "a.parquet")
    write_records(tmp_path / "b.parquet", seed=1)
    fit = ["--bootstrap", "10", "--out", "rep"]
    assert fit_curves.main(["a.parquet", *fit]) == 0 and fit_curves.main(["a.parquet", *fit]) == 0
    (tmp_path / "rep" / "mine.txt").write_text("kept\n")
    assert fit_curves.main(["b.parquet", *fit]) == 2
    assert fit_curves.main(["b.parquet", *fit, "--force"]) == 0
    marker = json.loads((tmp_path / "rep" / ".aoscale-output.json").read_text())
    assert marker["kind"] == "report" and marker["sources"] == ["../b.parquet"]
    assert (tmp_path / "rep" / "mine.txt").read_text() == "kept\n"
    legacy = tmp_path / "report"  # the default out of a.parquet, unmarked: a report from before the marker
    legacy.mkdir()
    (legacy / "report.md").write_text("old\n")
    assert fit_curves.main(["a.parquet", "--bootstrap", "10"]) == 0 and (legacy / ".aoscale-output.json").is_file()
    capsys.readouterr()


def _processes(ws, cases: list[tuple[str, list[str]]]) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each `python -m module argv` run in the workspace, all at once."""
    root, cache, hf = ws
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOSCALE_CACHE": str(cache), "HF_HOME": str(hf),
           "HF_DATASETS_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", module, *argv], cwd=root, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for module, argv in cases]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    return [(proc.returncode, *output) for proc, output in zip(procs, outputs)]


DAMAGED_REAL = [  # (module, argv, what the one line names): each once a traceback (issue 37)
    ("scaling.launch", [*LAUNCH, "--study-dir", "new", "--carry-lr-from", "fits_budget_str", "--dry-run"],
     "selection.chosen[0].budget_flops: '1e15'"),
    ("scaling.status", ["dm_settings_int"], "study.json: settings: 5"),
    ("scaling.status", ["dm_lock_dir"], ".lock: is a folder"),
    ("analysis.fit_curves", ["dm_options_str", "--out", "new"], "spec.json: model_options: 'x'"),
    ("analysis.fit_curves", ["dm_tokens_abc", "--out", "new"], "metrics.ndjson line 1: tokens: 'abc'"),
    ("analysis.fit_curves", ["records/budget_neg.parquet", "--out", "new"], "column 'budget_flops' holds -1"),
    ("analysis.fit_curves", ["records/temp_nan.parquet", "--out", "new"], "column 'temperature' holds nan"),
    ("analysis.fit_curves", ["records/good.parquet", "--bootstrap", "100000000000", "--out", "new"], "--bootstrap"),
]


def test_damaged_files_and_records_exit_2_in_real_processes(ws):
    before = snapshot(*ws)
    for (code, _, err), (module, argv, named) in zip(_processes(ws, [c[:2] for c in DAMAGED_REAL]), DAMAGED_REAL):
        assert code == 2 and "Traceback" not in err, (module, argv, err)
        assert len(err.strip().splitlines()) == 1 and named in err, err
    assert snapshot(*ws) == before


REBUILT = {"dm_step_x": "step: 'x' must be an integer", "dm_steps_null": "steps: None must be an integer",
           "dm_warnings_int": "warnings: 5 must be a list", "dm_state_odd": "state: 'sideways' is not one of",
           "dm_status_dir": "status.json: is a folder"}


def test_status_rebuilds_a_damaged_status_json_naming_the_key_and_a_string_value_is_not_done(ws):
    """status.json is the one kind a reader repairs rather than refuses (a run's status is always
    true): status shows the run rebuilt from its checkpoints and warns naming the file and key,
    and writes nothing. Records whose `value` column is text are no result: the run is `trained`."""
    before = snapshot(*ws)
    cases = [("scaling.status", [name, "--json"]) for name in [*REBUILT, "dm_value_str"]]
    results = _processes(ws, cases)
    for (code, out, err), name in zip(results, [*REBUILT, "dm_value_str"]):
        assert code == 1 and "Traceback" not in err, (name, err)
        run = json.loads(out)["runs"][0]
        if name in REBUILT:
            assert run["state"] == "pending" and f"status.json: {REBUILT[name]}".split(": ", 1)[-1] in err, err
            assert "rebuilt from the checkpoints" in err, err
        else:
            assert run["state"] == "trained" and "eval-schema" in run["files"], run
            assert "eval.parquet: column 'value' has type String, expected float" in err, err
    assert snapshot(*ws) == before
