"""Bad input to every command line: exit status 2, one line naming the field, nothing written.

One table of cases across `jobs.train`, `jobs.eval.evaluate`, `jobs.eval.generate`, `scaling.launch`,
`scaling.status` and `analysis.fit_curves`, each run in-process through the CLI's `main(argv)`;
a few run as real processes to prove the exit status. For each case the workspace (run, study,
corpus and records files) and the token cache must be byte-for-byte and mtime-for-mtime unchanged.
"""
from __future__ import annotations

import json
import os
import shutil
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

REPO = Path(__file__).resolve().parents[1]
MAINS = {"train": train.main, "evaluate": evaluate.main, "generate": generate.main,
         "launch": launch.main, "status": status.main, "fit_curves": fit_curves.main}
IS_ROOT = os.geteuid() == 0
TRAIN = ["--family", "ar", "--size", "0.1M", "--steps", "2", "--seq-len", "32", "--batch-size", "2"]
LAUNCH = ["--families", "ar", "--sizes", "0.1M", "--seeds", "1", "--max-steps", "2", "--seq-len", "32",
          "--no-progress", "--no-report"]


def tiny_run(family: str, **changes) -> RunSpec:
    base = dict(family=family, size="0.1M", steps=2, lr=1e-3, warmup_steps=0, seq_len=32, batch_size=2,
                eval_batches=1, checkpoint_every=1, keep_checkpoints=2, log_every=1)
    return RunSpec(**{**base, **changes})


def write_records(path: Path, **changes) -> None:
    """A one-row records file (analysis' schema) with some columns changed or dropped."""
    row = dict(study="s", run_id="r1", family="ar", variant="", size="0.1M", n_params=1000,
               n_params_family=1000, tokens=100, flops=1e9, seed=0, step=2, dataset="shakespeare",
               split="validation", metric="nll_l2r", value=2.0, se=0.1, n_samples=8, m=None,
               unit="nats/token")
    for key, value in changes.items():
        if value is ...:
            row.pop(key)
        else:
            row[key] = value
    frame = pl.DataFrame([row])
    frame.write_parquet(path) if path.suffix == ".parquet" else frame.write_ndjson(path)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """The workspace every case runs in: trained runs, a study, corpora, records, TOML files."""
    root = tmp_path_factory.mktemp("ws")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(cache))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.chdir(root)
        _populate(root)
        mounts = _read_only_mounts(root) if IS_ROOT else []
        yield root, cache
        for mount in mounts:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _populate(root: Path) -> None:
    assert train.train(root / "ar", tiny_run("ar"), handle_signals=False) == "done"
    assert train.train(root / "ao", tiny_run("aogpt"), handle_signals=False) == "done"
    shutil.copytree(root / "ar", root / "ar_corrupt")
    latest = sorted((root / "ar_corrupt" / "ckpt").glob("step_*"))[-1] / "model.pt"
    latest.write_bytes(latest.read_bytes()[:-7] + b"garbage")
    (root / "nockpt").mkdir()
    (root / "nockpt" / "spec.json").write_text(tiny_run("ar").to_json())
    (root / "empty_dir").mkdir()
    (root / "a_file").write_text("not a folder\n")
    corpora = root / "corpora"
    corpora.mkdir()
    (corpora / "empty.txt").write_text("")
    (corpora / "short.txt").write_text("to be or not\n")
    (corpora / "latin1.txt").write_bytes(("caf\u00e9 " * 400).encode("latin-1"))
    (corpora / "binary.txt").write_bytes(bytes(range(256)) * 8)
    (corpora / "nofield.jsonl").write_text("".join(json.dumps({"body": "x" * 200}) + "\n" for _ in range(30)))
    (corpora / "badjson.jsonl").write_text('{"text": "fine"}\n{"text": oops}\n')
    (corpora / "valtail.txt").write_text("a" * 300 + "\n" + "b" * 10 + "\n")  # 5 % tail < 33 tokens
    (corpora / "nodocs").mkdir()
    spec = json.loads(tiny_run("ar").to_json())
    (root / "steps_str.json").write_text(json.dumps({**spec, "steps": "100", "run_id": None} | {}).replace(
        ', "run_id": null', ""))
    (root / "unknown_field.json").write_text(json.dumps({**spec, "colour": "red"}))
    (root / "stale_id.json").write_text(json.dumps({**spec, "run_id": "000000000000"}))
    (root / "corrupt.json").write_text('{"family": "ar", ')
    (root / "other.json").write_text(tiny_run("ar", steps=3).to_json())
    _toml_files(root)
    _records(root)
    study = build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2, "seq_len": 32})
    study_ledger.prepare(root / "study", study)
    (root / "bad_study").mkdir()
    (root / "bad_study" / "study.json").write_text("{not json")


def _toml_files(root: Path) -> None:
    base = 'families = "ar"\nsizes = "0.1M"\nseeds = 1\nmax_steps = 2\nseq_len = 32\n'
    tomls = {
        "malformed": "[run\nlr = 1\n",
        "sizes_int": 'families = "ar"\nsizes = 5\n',
        "seeds_str": base.replace("seeds = 1", 'seeds = "two"'),
        "unknown_key": base + "colour = 1\n",
        "ckpt_neg": base + "[resources]\ncheckpoint_every = -1\n",
        "clip_neg": base + "[run]\ngrad_clip = -1.0\n",
        "run_unknown": base + "[run]\nwibble = 1\n",
        "lr_str": base + 'lr = "fast"\n',
        "families_int": base.replace('families = "ar"', "families = [1, 2]"),
        "zero_stage": base + "[resources]\nzero_stage = 5\n",
        "keep_zero": base + "[resources]\nkeep_checkpoints = 0\n",
        "eval_batches": base + "[run]\neval_batches = 0\n",
        "min_lr": base + "[run]\nmin_lr_ratio = 2.0\n",
        "run_not_table": base.replace("seeds = 1\n", "seeds = 1\nrun = 3\n"),
    }
    for name, text in tomls.items():
        (root / f"{name}.toml").write_text(text)
    (root / "latin1.toml").write_bytes('name = "caf\u00e9"\n'.encode("latin-1"))


def _records(root: Path) -> None:
    records = root / "records"
    records.mkdir()
    write_records(records / "missing_value.parquet", value=...)
    write_records(records / "str_nparams.parquet", n_params="many")
    write_records(records / "neg_nparams.parquet", n_params=-5)
    write_records(records / "null_family.parquet", family=None)
    write_records(records / "missing_metric.ndjson", metric=...)
    write_records(records / "good.parquet")
    pl.read_parquet(records / "good.parquet").head(0).write_parquet(records / "zero_rows.parquet")
    (records / "broken.parquet").write_bytes(b"PAR1 not really")
    (records / "table.csv").write_text("a,b\n1,2\n")


def _read_only_mounts(root: Path) -> list[Path]:
    """Read-only tmpfs folders (root only): an empty one and one holding a run's spec.json."""
    made = []
    for name in ("ro", "ro_run"):
        path = root / name
        path.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)]).returncode:
            return made
        made.append(path)
    shutil.copy(root / "ar" / "spec.json", root / "ro_run" / "spec.json")
    for path in made:
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
    return made


def C(cli: str, argv: list[str], field: str, *, ro: bool = False):
    return pytest.param(cli, argv, field, ro, id=f"{cli}:{' '.join(argv)[:70]}")


def T(extra: list[str], field: str, run_dir: str = "new_run", base: list[str] = TRAIN, **kw):
    return C("train", ["--run-dir", run_dir, *base, *extra], field, **kw)


def L(extra: list[str], field: str, base: list[str] = LAUNCH, **kw):
    return C("launch", [*base, "--study-dir", "new_study", *extra], field, **kw)


def E(extra: list[str], field: str, run_dir: str = "ar", **kw):
    return C("evaluate", ["--run-dir", run_dir, *extra], field, **kw)


def G(extra: list[str], field: str, run_dir: str = "ar", **kw):
    return C("generate", ["--run-dir", run_dir, "--n-samples", "2", "--steps", "2", *extra], field, **kw)


def F(argv: list[str], field: str, **kw):
    return C("fit_curves", argv, field, **kw)


NO_FLAGS = ["--run-dir", "new_run"]
TRAIN_CASES = [
    T(["--steps", "0"], "steps"), T(["--steps", "-3"], "steps"), T(["--steps", "abc"], "--steps"),
    T(["--steps", "1.5"], "--steps"), T(["--batch-size", "0"], "batch_size"),
    T(["--batch-size", "-1"], "batch_size"), T(["--seq-len", "1"], "seq_len"), T(["--seq-len", "0"], "seq_len"),
    T(["--lr", "0"], "lr"), T(["--lr", "-1"], "lr"), T(["--lr", "inf"], "--lr"), T(["--lr", "nan"], "--lr"),
    T(["--lr", "fast"], "--lr"), T(["--warmup", "-1"], "warmup_steps"), T(["--warmup", "-5"], "warmup_steps"),
    T(["--schedule", "linear"], "schedule"), T(["--weight-decay", "-0.1"], "weight_decay"),
    T(["--set", "beta2=inf"], "beta2"), T(["--text-field", ""], "text_field"),
    T(["--seed", "-1"], "seed"), T(["--set", "seed=1e23"], "seed"), T(["--set", "seed=100000000000000000000"], "seed"),
    T(["--set", 'steps="100"'], "steps"), T(["--set", 'lr="fast"'], "lr"), T(["--set", "lr=true"], "lr"),
    T(["--set", "seq_len=null"], "seq_len"), T(["--ema", "1.0"], "ema"), T(["--ema", "-0.1"], "ema"),
    T(["--ema", "nan"], "--ema"), T(["--family", "gpt5"], "family"), T(["--size", "12X"], "size"),
    T(["--size", "1/100000/1"], "size"), T(["--size", "0/64/4"], "size"), T(["--size", "2/65/4"], "size"),
    T(["--engine", "jax"], "engine"), T(["--zero-stage", "4"], "zero_stage"), T(["--precision", "fp8"], "precision"),
    T(["--micro-batch-size", "3"], "micro_batch_size"), T(["--micro-batch-size", "-1"], "micro_batch_size"),
    T(["--checkpoint-every", "-1"], "checkpoint_every"), T(["--eval-every", "-1"], "eval_every"),
    T(["--log-every", "0"], "log_every"), T(["--set", "keep_checkpoints=0"], "keep_checkpoints"),
    T(["--set", "eval_batches=0"], "eval_batches"), T(["--set", "grad_clip=-1"], "grad_clip"),
    T(["--set", "min_lr_ratio=2"], "min_lr_ratio"), T(["--set", "weight_decay=\"x\""], "weight_decay"),
    T(["--set", "nonsense_option=1"], "nonsense_option"), T(["--set", "badpair"], "--set"),
    T(["--set", "=5"], "--set"), T(["--tokenizer", "klingon"], "tokenizer"),
    T(["--family", "aogpt", "--set", "order=sideways"], "order"),
    T(["--family", "aogpt", "--set", "target_pe=everywhere"], "target_pe"),
    T(["--family", "mdm", "--set", "loss=mse"], "loss"),
    T(["--corpus", "corpora/missing.txt"], "corpus"), T(["--corpus", "corpora/empty.txt"], "corpus"),
    T(["--corpus", "corpora/latin1.txt"], "corpus"), T(["--corpus", "corpora/binary.txt"], "corpus"),
    T(["--corpus", "corpora/short.txt"], "corpus"), T(["--corpus", "corpora/nofield.jsonl"], "corpus"),
    T(["--corpus", "corpora/badjson.jsonl"], "corpus"), T(["--corpus", "corpora/valtail.txt"], "corpus"),
    T(["--corpus", "corpora/nodocs"], "corpus"), T(["--corpus", ""], "corpus"),
    T(["--corpus", "nobody/no-such-dataset"], "corpus"), T(["--max-steps-this-call", "0"], "--max-steps-this-call"),
    C("train", ["--run-dir", "new_run", "--size", "0.1M", "--steps", "2"], "arguments"),
    C("train", ["--run-dir", "new_run", "--family", "ar", "--size", "0.1M"], "arguments"),
    C("train", [*TRAIN], "--run-dir"),
    T([], "run_dir", run_dir="a_file"), T([], "run_dir", run_dir="ro/run", ro=True),
    T([], "run_dir", run_dir="ar"),
    C("train", ["--run-dir", "new_run", "--spec", "nope.json"], "spec"),
    C("train", ["--run-dir", "new_run", "--spec", "empty_dir"], "spec"),
    C("train", ["--run-dir", "new_run", "--spec", "corrupt.json"], "spec"),
    C("train", ["--run-dir", "new_run", "--spec", "steps_str.json"], "steps"),
    C("train", ["--run-dir", "new_run", "--spec", "unknown_field.json"], "spec"),
    C("train", ["--run-dir", "new_run", "--spec", "stale_id.json"], "spec"),
    C("train", ["--run-dir", "ar", "--spec", "other.json"], "run_dir"),
    T(["--tokens", "0"], "tokens"), T(["--tokens", "100", "--batch-size", "0"], "batch_size"),
    T(["--bogus-flag"], "unrecognized"), T(["--set", "tracking.x"], "--set"),
]
EVAL_CASES = [
    E(["--suite", "huge"], "--eval-suite"), E(["--k-mc", "0"], "--k-mc"), E(["--k-mc", "-2"], "--k-mc"),
    E(["--m-max", "0"], "--m-max"), E(["--n-targets", "0"], "--n-targets"), E(["--val-chunks", "0"], "--val-chunks"),
    E(["--gen-samples", "0"], "--gen-samples"), E(["--max-chunks", "0"], "--max-chunks"),
    E(["--seq-len", "1"], "--seq-len"), E(["--seq-len", "100000"], "--seq-len"), E(["--weights", "ema"], "weights"),
    E(["--weights", "best"], "weights"), E(["--datasets", "nosuch"], "--datasets"), E(["--seed", "-1"], "--seed"),
    E(["--k-mc", "x"], "--k-mc"), E([], "--run-dir", run_dir="nowhere"), E([], "--run-dir", run_dir="empty_dir"),
    E([], "--run-dir", run_dir="a_file"), E([], "--run-dir", run_dir="nockpt"),
    E([], "--run-dir", run_dir="ar_corrupt"), E([], "--run-dir", run_dir="ro_run", ro=True),
    C("evaluate", ["--suite", "quick"], "--run-dir"), E(["--bogus"], "unrecognized"),
]
GEN_CASES = [
    G(["--n-samples", "0"], "--n-samples"), G(["--length", "0"], "--length"), G(["--length", "100000"], "--length"),
    C("generate", ["--run-dir", "ar", "--steps", "0,1"], "--steps"),
    C("generate", ["--run-dir", "ar", "--steps", "a,b"], "--steps"),
    G(["--schedule", "weird"], "--schedule"), G(["--sampler", "weird"], "--sampler"),
    G(["--temperature", "-1"], "--temperature"), G(["--top-p", "0"], "--top-p"), G(["--top-p", "1.5"], "--top-p"),
    G(["--tokens-per-step", "0"], "--tokens-per-step"), G(["--temperature", "nan"], "--temperature"),
    G(["--evaluator-run", "ao"], "--judge-run", run_dir="ao"), G(["--judge-run", "ao"], "--judge-run", run_dir="ao"),
    G([], "--run-dir", run_dir="nowhere"),
    G(["--weights", "ema"], "weights"), G([], "--run-dir", run_dir="ar_corrupt"),
]
LAUNCH_CASES = [
    L(["--sizes", ""], "sizes"), L(["--families", ""], "families"), L(["--sizes", ","], "sizes"),
    L(["--sizes", "12X"], "size"), L(["--families", "ar,transformerxl"], "families"), L(["--seeds", "0"], "seeds"),
    L(["--seeds", "-1"], "seeds"), L(["--seeds", "two"], "--seeds"), L(["--seq-len", "1"], "seq_len"),
    L(["--seq-len", "0"], "seq_len"), L(["--tokens", "0"], "tokens"), L(["--tokens-per-param", "0"], "tokens_per_param"),
    L(["--tokens-per-param", "inf"], "--tokens-per-param"), L(["--max-tokens", "0"], "max_tokens"),
    L(["--batch-size", "0"], "batch_size"), L(["--lr", "0"], "lr"), L(["--lr", "inf"], "--lr"),
    L(["--lr", "nan"], "--lr"), L(["--warmup-steps", "-5"], "warmup_steps"), L(["--max-steps", "0"], "max_steps"),
    L(["--engine", "jax"], "engine"), L(["--tokenizer", "klingon"], "tokenizer"), L(["--preset", "huge"], "preset"),
    L(["--backend", "kubernetes"], "backend"), L(["--max-retries", "-1"], "max-retries"),
    L(["--bootstrap", "x"], "--bootstrap"), L(["--wait"], "wait"), L(["--name", ""], "name"),
    L(["--corpus", "corpora/missing.txt"], "corpus"), L(["--corpus", "corpora/empty.txt"], "corpus"),
    L(["--corpus", "corpora/binary.txt"], "corpus"), L(["--corpus", "corpora/latin1.txt"], "corpus"),
    L(["--corpus", "corpora/short.txt"], "corpus"), L(["--corpus", "corpora/nofield.jsonl"], "corpus"),
    L(["--corpus", "corpora/valtail.txt"], "corpus"), L(["--corpus", "nobody/no-such-dataset"], "corpus"),
    L(["--spec", "missing.toml"], "spec"), L(["--spec", "empty_dir"], "spec"), L(["--spec", "malformed.toml"], "spec"),
    L(["--spec", "latin1.toml"], "spec"), L(["--spec", "unknown_key.toml"], "spec"),
    C("launch", ["--spec", "sizes_int.toml", "--study-dir", "new_study"], "sizes"),
    C("launch", ["--spec", "seeds_str.toml", "--study-dir", "new_study"], "seeds"),
    C("launch", ["--spec", "ckpt_neg.toml", "--study-dir", "new_study"], "checkpoint_every"),
    C("launch", ["--spec", "clip_neg.toml", "--study-dir", "new_study"], "grad_clip"),
    C("launch", ["--spec", "run_unknown.toml", "--study-dir", "new_study"], "run"),
    C("launch", ["--spec", "lr_str.toml", "--study-dir", "new_study"], "lr"),
    C("launch", ["--spec", "families_int.toml", "--study-dir", "new_study"], "families"),
    C("launch", ["--spec", "zero_stage.toml", "--study-dir", "new_study"], "zero_stage"),
    C("launch", ["--spec", "keep_zero.toml", "--study-dir", "new_study"], "keep_checkpoints"),
    C("launch", ["--spec", "eval_batches.toml", "--study-dir", "new_study"], "eval_batches"),
    C("launch", ["--spec", "min_lr.toml", "--study-dir", "new_study"], "min_lr_ratio"),
    C("launch", ["--spec", "run_not_table.toml", "--study-dir", "new_study"], "run"),
    C("launch", [*LAUNCH, "--study-dir", "a_file"], "study-dir"),
    C("launch", [*LAUNCH, "--study-dir", "ro/study"], "study-dir", ro=True),
    C("launch", [*LAUNCH, "--study-dir", "bad_study"], "study-dir"),
    C("launch", [*LAUNCH[:-4], "--seeds", "2", "--study-dir", "study", "--seq-len", "32", "--no-progress"],
      "study-dir"),
    C("launch", [*LAUNCH, "--study-dir", ""], "study-dir"),
    C("launch", ["--sizes", "760M", "--seeds", "1", "--families", "ar", "--study-dir", "new_study"], "budget"),
    C("launch", [*LAUNCH, "--sizes", "1/40000/1", "--study-dir", "new_study"], "size"),
    L(["--network", "weird"], "network"), L(["--network", "gpt2,pos=alibi"], "network"),
    L(["--network", "gpt2,rope"], "network"), L(["--ema", "1.5"], "ema"), L(["--ema", "nan"], "--ema"),
    L(["--judge-run", ""], "judge"), L(["--bogus"], "unrecognized"), L(["--slurm-partition", "gpu"], "slurm"),
    L(["--set", "run.beta2=2"], "run.beta2"), L(["--set", "grid_points=0"], "grid_points"),
    L(["--grid-step", "x"], "--grid-step"),
]
STATUS_CASES = [
    C("status", [], "study"), C("status", ["nowhere"], "study"), C("status", ["a_file"], "study"),
    C("status", ["empty_dir"], "study"), C("status", ["bad_study"], "study-dir"),
    C("status", ["study", "--bogus"], "unrecognized"),
]
FIT_CASES = [
    F(["nowhere"], "nowhere"), F(["empty_dir"], "eval.parquet"), F(["records/missing_value.parquet"], "value"),
    F(["records/str_nparams.parquet"], "n_params"), F(["records/neg_nparams.parquet"], "n_params"),
    F(["records/null_family.parquet"], "family"), F(["records/missing_metric.ndjson"], "metric"),
    F(["records/zero_rows.parquet"], "0 rows"), F(["records/broken.parquet"], "broken.parquet"),
    F(["records/table.csv"], "table.csv"), F(["records/good.parquet", "--bootstrap", "5"], "--bootstrap"),
    F(["records/good.parquet", "--bootstrap", "x"], "--bootstrap"), F(["records/good.parquet", "--x", "depth"], "--x"),
    F(["records/good.parquet", "--seed", "-1"], "--seed"), F(["records/good.parquet", "--out", "a_file"], "--out"),
    F(["records/good.parquet", "--out", "ro/report"], "--out", ro=True), F([], "paths"),
]
CASES = TRAIN_CASES + EVAL_CASES + GEN_CASES + LAUNCH_CASES + STATUS_CASES + FIT_CASES


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every path under the roots with its size and mtime (what a write would change)."""
    out = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            stat = path.lstat()
            out[str(path)] = (stat.st_size if path.is_file() else 0, stat.st_mtime_ns)
    return out


def test_the_table_holds_at_least_150_distinct_inputs():
    keys = [(case.values[0], tuple(case.values[1])) for case in CASES]
    assert len(set(keys)) == len(keys) >= 150


@pytest.mark.parametrize("cli, argv, field, ro", CASES)
def test_bad_input_exits_2_with_one_line_naming_the_field_and_writes_nothing(ws, cli, argv, field, ro, capsys):
    root, cache = ws
    if ro and not (root / "ro").is_mount():
        pytest.skip("read-only folders need root (a read-only tmpfs)")
    assert_refused(MAINS[cli], argv, field, (root, cache), capsys)


def assert_refused(main, argv: list[str], field: str, roots: tuple[Path, ...], capsys) -> None:
    """`main(argv)` exits 2 with one line on stderr naming `field`, and nothing under `roots` changes."""
    before = snapshot(*roots)
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1, err
    assert field in err[0], err[0]
    assert snapshot(*roots) == before


REAL = [  # (module, argv, first words of the one line)
    ("scaling.launch", ["--sizes", "", "--study-dir", "s"], "launch: sizes:"),
    ("jobs.eval.evaluate", ["--run-dir", "nowhere", "--k-mc", "0"], "error: --k-mc:"),
    ("analysis.fit_curves", ["nowhere", "--seed", "-1"], "fit_curves: --seed:"),
]


def test_real_processes_exit_2(tmp_path):
    """The CLIs as users run them (all at once, to spend one interpreter start-up)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "AOSCALE_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-m", module, *argv], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for module, argv, _ in REAL]
    for proc, (module, _, first) in zip(procs, REAL):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and err.startswith(first), (module, err)
        assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
