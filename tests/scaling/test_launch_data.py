"""`python -m scaling.launch` on local `datasets` corpora with only a train split and a
non-default text field: evaluated runs, the held-out rule in the run manifest; bad data input
exits 2 with one line and writes nothing."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from jobs.data import corpus as data
from jobs.data.suites import SUITES
from scaling import launch
from scaling.run import study_ledger
from tests.jobs.data.test_tokencache import parquet_corpus, save_to_disk_corpus

pytest.importorskip("datasets")
RUN = ["--sizes", "0.1M", "--families", "ar", "--seeds", "1", "--seq-len", "32", "--max-steps", "2",
       "--no-progress", "--no-report"]


@pytest.fixture(autouse=True)
def _env(cache_dir, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("AOSCALE_DATA", raising=False)


@pytest.mark.slow
@pytest.mark.parametrize("make", [save_to_disk_corpus, parquet_corpus])
def test_a_train_only_dataset_with_its_own_text_field_reaches_evaluated_runs(make, tmp_path, capsys):
    corpus = str(make(tmp_path / "corpus", 1500))
    study = tmp_path / "study"
    assert launch.main(["--study-dir", str(study), "--corpus", corpus, "--text-field", "body", *RUN]) == 0
    (run_id,) = json.loads((study / "study.json").read_text())["order"]
    run_dir = study_ledger.run_dir(study, run_id)
    spec = json.loads((run_dir / "spec.json").read_text())
    assert (spec["text_field"], spec["eval_suite"], spec["corpus"]) == ("body", "quick", corpus)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["text_field"] == "body"
    held_out = manifest["validation_split"]
    assert held_out["source"] == "held-out slice of train" and held_out["p"] == 0.5
    assert manifest["splits"]["validation"]["documents"] == len(data.load_documents(corpus, "validation", "body"))
    records = pl.read_parquet(run_dir / "eval.parquet")
    assert set(records["dataset"]) == {corpus}  # no zero-shot set offline without AOSCALE_DATA ...
    status = json.loads((run_dir / "status.json").read_text())
    assert any("zero-shot set not evaluated: wikitext2" in w for w in status["warnings"])  # ... and says so
    from analysis.records.read import load

    (note,) = load([study]).notes  # the report's notes name it too
    assert note.startswith("not evaluated in 1 run(s): wikitext2: ")


def _refused(tmp_path: Path, capsys, *flags: str) -> str:
    study = tmp_path / "study"
    capsys.readouterr()
    assert launch.main(["--study-dir", str(study), *flags, *RUN]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert not study.exists() and not (data.cache_root() / "tokens").exists()
    return err


def test_bad_data_input_exits_2_naming_the_field(tmp_path, capsys):
    import datasets

    corpus = str(save_to_disk_corpus(tmp_path / "corpus", 50))
    assert "text_field 'nope': not a column" in _refused(tmp_path, capsys, "--corpus", corpus,
                                                         "--text-field", "nope")
    assert "tokenizer 'sentencepiece' is unknown" in _refused(tmp_path, capsys, "--tokenizer", "sentencepiece")
    assert "tokenizer 'hf:" in _refused(tmp_path, capsys, "--tokenizer", f"hf:{tmp_path}/none.json")
    empty = tmp_path / "empty"
    datasets.Dataset.from_dict({"text": []}, features=datasets.Features(
        {"text": datasets.Value("string")})).save_to_disk(str(empty))
    assert "has no documents" in _refused(tmp_path, capsys, "--corpus", str(empty))
    assert "eval_suite: zero-shot set 'ptb' cannot be had" in _refused(
        tmp_path, capsys, "--eval-suite", "quick:ptb")
    refusal = _refused(tmp_path, capsys, "--eval-suite", "huge")
    assert f"eval_suite: 'huge' is not one of {', '.join(SUITES)}" in refusal


def test_the_paper_preset_evaluates_with_the_paper_suite_and_holds_out_openwebtext():
    from scaling.study.study_spec import build_study

    study = build_study({"preset": "paper"})
    assert {cell.spec.eval_suite for cell in study.cells} == {"paper"}
    assert {cell.spec.corpus for cell in study.cells} == {"Skylion007/openwebtext"}
    quick = build_study({})
    assert {cell.spec.eval_suite for cell in quick.cells} == {"cpu"}
