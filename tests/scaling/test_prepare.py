"""`aoscale prepare` / `python -m scaling.prepare` and the launcher's prepare stage: a study prepared
with the launcher's flags then launches with no network and the Hugging Face offline switches on
(a `save_to_disk` copy of the data kit's WebText snippets, and the same text cached under a Hub
name as a stand-in for OpenWebText, which cannot be downloaded here); `prepare STUDY_DIR` reads
the cache folder the study recorded; the dry-run states the cache folder (beside the study dir on
a cluster backend) and how the data will be prepared."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.aoscale import main as aoscale
from jobs.data import corpus as data
from jobs.data import tokencache
from scaling import launch
from scaling.prepare import main as prepare_main

datasets = pytest.importorskip("datasets")
REPO = Path(__file__).resolve().parents[2]
HUB_NAME = "Skylion007/openwebtext"  # the paper preset's corpus; its cache is built here from the kit
STUDY = ["--sizes", "0.1M", "--families", "ar", "--seeds", "1", "--seq-len", "32", "--max-steps", "2",
         "--tokenizer", "gpt2", "--batch-size", "4", "--no-progress", "--no-report"]


def saved_webtext(data_kit: Path, folder: Path) -> Path:
    """The kit's WebText snippets as a `save_to_disk` DatasetDict (train: the test file, validation: valid)."""
    def rows(name: str) -> list[dict]:
        path = data_kit / "text/webtext-snippets" / name
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]

    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows("webtext.test.jsonl")),
                          "validation": datasets.Dataset.from_list(rows("webtext.valid.jsonl"))}).save_to_disk(str(folder))
    return folder


def cache_under_hub_name(saved: Path, cache: Path) -> None:
    """The saved corpus tokenised into the cache folder of the Hub name (a prepared OpenWebText)."""
    os.environ["AOSCALE_CACHE"] = str(cache)
    try:
        plan = dataclasses.replace(data.corpus_sources(str(saved)), tokenizer="gpt2")
        tokencache.build(data.cache_folder(HUB_NAME, "gpt2"), plan, {"corpus": HUB_NAME}, workers=2)
    finally:
        del os.environ["AOSCALE_CACHE"]


def offline(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """A command in a network namespace of its own (no network at all), Hugging Face offline, and
    AOSCALE_REQUIRE_PREPARED=1 so that nothing may be tokenised either."""
    env = {key: value for key, value in os.environ.items() if key != "AOSCALE_CACHE"}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", AOSCALE_REQUIRE_PREPARED="1",
               OMP_NUM_THREADS="1", WANDB_MODE="offline")
    return subprocess.run(["unshare", "-rn", sys.executable, *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture()
def no_cache_env(monkeypatch):
    monkeypatch.delenv("AOSCALE_CACHE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (a network namespace)")
def test_a_prepared_study_launches_with_no_network_and_hf_offline(data_kit, tmp_path, no_cache_env, capsys):
    saved = saved_webtext(data_kit, tmp_path / "webtext")
    cache, study = tmp_path / "shared-cache", tmp_path / "study"
    assert aoscale(["prepare", "--corpus", str(saved), "--cache-dir", str(cache), "--study-dir", str(study),
                    *STUDY]) == 0
    assert "tokens/s" in capsys.readouterr().err
    cache_under_hub_name(saved, cache)
    for corpus, where in ((str(saved), study), (HUB_NAME, tmp_path / "hub-study")):
        done = offline("-m", "scaling.launch", "--corpus", corpus, "--cache-dir", str(cache), "--study-dir",
                       str(where), *STUDY, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert ": 1 done" in done.stdout
        assert json.loads((where / "data.json").read_text())["cache_dir"] == str(cache)
        (run_dir,) = (where / "runs").iterdir()
        assert json.loads((run_dir / "status.json").read_text())["state"] == "done"
    assert not (cache / "datasets" / "downloads").exists()
    # the study directory alone names its corpora and the cache folder it recorded
    assert aoscale(["prepare", str(study)]) == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("prepare: ")]
    assert line.startswith(f"prepare: {saved} (gpt2, text field text): already prepared") and str(cache) in line


def test_the_dry_run_names_the_cache_beside_the_study_on_a_cluster_backend(tmp_path, no_cache_env, capsys):
    pytest.importorskip("submitit")
    study = tmp_path / "studies" / "s"
    assert launch.main(["--dry-run", "--backend", "slurm", "--study-dir", str(study), "--sizes", "0.1M",
                        "--families", "ar"]) == 0
    out = capsys.readouterr().out
    assert f"data: token cache {tmp_path / 'studies' / 'aoscale-cache'} (--backend slurm: beside the study dir)" in out
    assert "shakespeare (bytes, text field text): to prepare" in out
    assert "Slurm CPU job of its own (16 CPUs at most, no GPU)" in out and "--dependency=afterok" in out
    assert "AOSCALE_REQUIRE_PREPARED=1" in out
    assert not study.exists() and not (tmp_path / "studies" / "aoscale-cache" / "tokens").exists()  # nor tokenises
    assert launch.main(["--dry-run", "--study-dir", str(study), "--sizes", "0.1M", "--families", "ar",
                        "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert f"data: token cache {tmp_path / 'c'} (--cache-dir)" in out and "prepared in this process" in out


def test_prepare_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, no_cache_env, capsys):
    cache = tmp_path / "cache"
    assert aoscale(["prepare", str(tmp_path / "nothing-here"), "--cache-dir", str(cache)]) == 2
    assert aoscale(["prepare", "--corpus", str(tmp_path / "missing.jsonl"), "--cache-dir", str(cache)]) == 2
    assert prepare_main(["--workers", "0", "--cache-dir", str(cache)]) == 2  # python -m scaling.prepare: the same
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("prepare: ") for line in lines)
    assert "holds no study.json" in lines[0] and "no such file or folder" in lines[1] and "workers" in lines[2]
    assert not cache.exists()


def test_the_cache_folder_is_the_setting_then_the_recorded_then_the_environment_then_the_backend_default(
        tmp_path, no_cache_env, monkeypatch):
    from scaling.run.prepare_stage import CLUSTER_CACHE, DATA_FILE, cache_folder

    study = tmp_path / "studies" / "s"
    beside = (tmp_path / "studies" / CLUSTER_CACHE, "--backend slurm: beside the study dir")
    assert cache_folder(None, study, "slurm") == beside
    assert cache_folder(None, study, "ray") == (beside[0], "--backend ray: beside the study dir")
    assert cache_folder(None, study, "local") == (data.cache_root().absolute(), "default")
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "env"))
    assert cache_folder(None, study, "slurm") == (tmp_path / "env", "$AOSCALE_CACHE")
    study.mkdir(parents=True)
    (study / DATA_FILE).write_text(json.dumps({"cache_dir": str(tmp_path / "recorded")}))
    assert cache_folder(None, study, "slurm") == (tmp_path / "recorded", f"recorded in {study / DATA_FILE}")
    assert cache_folder(str(tmp_path / "flag"), study, "local") == (tmp_path / "flag", "--cache-dir")
