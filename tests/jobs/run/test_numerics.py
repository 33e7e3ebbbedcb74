"""The numerics path (jobs.run.numerics): recorded per training segment, a resume on another path
refused unless allowed, the records naming it, status and the analysis showing a mix.

The training tests are real `python -m jobs.train` processes: `AOSCALE_KERNELS` and
`ATEN_CPU_CAPABILITY` are read once per process. Each run is 0.1M, 32 x 8 tokens a step, so an
adaLN pass has 256 rows and the fused kernels take it (models.kernels.cpu_backend.FUSED_MIN_ROWS).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
import torch

from analysis.compare.fairness import numerics_warnings
from cli import numerics_ids
from jobs.eval import evaluate as ev
from jobs.run import numerics
from jobs.run.files import read_metrics
from models import kernels
from models import build_model
from scaling import status

REPO = Path(__file__).resolve().parents[3]
TINY = ("--size", "0.1M", "--steps", "4", "--seq-len", "32", "--batch-size", "8", "--warmup", "1",
        "--log-every", "1", "--lr", "3e-3")
PATH = numerics.NumericsPath("cpu", "AVX2", "2.13.0", "a56449e26daa70e1", 1, "fp32", False)


def train(run_dir: Path, family: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m jobs.train` on one thread, with `env` added to the environment."""
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", **env}
    return subprocess.run([sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir), "--family", family,
                           *TINY, *extra], env=environ, cwd=REPO, capture_output=True, text=True, timeout=300)


def losses(run_dir: Path) -> list[float]:
    return [row["loss"] for row in read_metrics(run_dir, "train")]


def weights(run_dir: Path) -> list[bytes]:
    """The final checkpoint's parameters, as bytes."""
    (step,) = sorted((run_dir / "ckpt").iterdir())
    state = torch.load(step / "model.pt", map_location="cpu")["model"]
    return [t.numpy().tobytes() for _, t in sorted(state.items())]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def test_the_path_id_is_stable_and_its_differences_are_named():
    assert PATH.id == "226429d3.a56449e2"  # a hash of plain values: the same on every machine
    assert replace(PATH, kernels=numerics.NOT_USED).id == "226429d3.-"  # one machine, kernels unreached
    assert PATH.label == "cpu AVX2 torch 2.13.0 kernels a56449e2 1 thread fp32"
    other = replace(PATH, kernels="off", threads=2)
    assert other.id != PATH.id
    assert PATH.differences(other) == ["kernels a56449e26daa70e1 -> off", "threads 1 -> 2"]


@pytest.mark.parametrize(("family", "options", "adaln"), [("ar", {}, False), ("mdm", {"loss": "mdlm"}, False),
                                                           ("sigma_gpt", {}, False), ("aogpt", {}, True),
                                                           ("mdm", {"loss": "sedd"}, True)])
def test_only_adaln_cores_put_the_kernels_on_their_path(family, options, adaln):
    model = build_model(family, "0.1M", vocab_size=256, seq_len=32, **options)
    path = numerics.current(model, torch.device("cpu"), bf16=False, compiled=False)
    expected = (kernels.build_key() if kernels.available() else "off") if adaln else numerics.NOT_USED
    assert path.kernels == expected
    assert numerics.current(model, torch.device("cpu"), bf16=True, compiled=False).kernels == numerics.NOT_USED


def test_an_adaln_resume_on_the_other_kernel_path_is_refused_then_allowed(tmp_path, cache):
    if not kernels.available():
        pytest.skip("no C compiler: the kernels cannot be switched")
    whole_on, whole_off, run = tmp_path / "on", tmp_path / "off", tmp_path / "run"
    assert train(whole_on, "aogpt").returncode == 0
    assert train(whole_off, "aogpt", AOSCALE_KERNELS="0").returncode == 0
    assert losses(whole_on)[0] == losses(whole_off)[0]  # the same start (the forward is bitwise equal) ...
    assert weights(whole_on) != weights(whole_off)  # ... and two models: the backward's rounding differs
    assert train(run, "aogpt", "--max-steps-this-call", "2").returncode == 3  # preempted, checkpointed
    before = snapshot(run)
    refused = train(run, "aogpt", AOSCALE_KERNELS="0")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "numerics path" in lines[0] and "kernels" in lines[0] and "--allow-numerics-change" in lines[0]
    assert snapshot(run) == before  # nothing written: status still says preempted at step 2
    assert json.loads((run / "status.json").read_text())["state"] == "preempted"
    assert train(run, "aogpt", "--allow-numerics-change", AOSCALE_KERNELS="0").returncode == 0
    first, second = numerics.segment_paths(run)
    assert (first.kernels, second.kernels) == (kernels.build_key(), "off")
    ev.evaluate(run, "quick", val_chunks=1, k_mc=1, m_max=1, n_targets=4, ensemble_chunks=1, zero_shot=())
    records = pl.read_parquet(run / "eval.parquet")
    assert set(records["numerics"]) == {f"{first.id}+{second.id}"}


def test_a_core_without_adaln_resumes_across_the_kernel_switch_to_the_bit(tmp_path, cache):
    whole, run = tmp_path / "whole", tmp_path / "run"
    assert train(whole, "ar").returncode == 0
    assert train(run, "ar", "--max-steps-this-call", "2").returncode == 3
    assert train(run, "ar", AOSCALE_KERNELS="0").returncode == 0  # the kernels take no AR pass: one path
    assert losses(run) == losses(whole)
    assert len(numerics.read_segments(run)) == 1


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() == "DEFAULT", reason="torch has one CPU path here")
def test_a_resume_on_another_instruction_set_is_refused(tmp_path, cache):
    run = tmp_path / "run"
    assert train(run, "ar", "--max-steps-this-call", "2").returncode == 3
    refused = train(run, "ar", ATEN_CPU_CAPABILITY="default")
    assert refused.returncode == 2 and "isa" in refused.stderr and "-> DEFAULT" in refused.stderr, refused.stderr


def test_a_damaged_numerics_file_is_named(tmp_path):
    (tmp_path / numerics.NUMERICS_FILE).write_text('{"segments": [{"from_step": "x"}]}')
    with pytest.raises(ValueError, match="numerics.json: not a numerics file"):
        numerics.read_segments(tmp_path)


@pytest.mark.parametrize("segment, named", [
    ({"from_step": "3", "path": "PATH"}, "segments[0].from_step must be a step count"),
    ({"from_step": -1, "path": "PATH"}, "segments[0].from_step must be a step count"),
    ({"from_step": 0, "path": {"threads": "8"}}, "segments[0].path.threads must be a int, not '8'"),
    ({"from_step": 0, "path": {"compiled": 1}}, "segments[0].path.compiled must be a bool, not 1"),
    ({"from_step": 0, "path": {"extra": "x"}}, "unexpected keyword argument 'extra'"),
])
def test_a_numerics_file_of_the_wrong_types_is_named_by_key(tmp_path, segment, named):
    from dataclasses import asdict

    fields = asdict(PATH)
    segment = {**segment, "path": fields if segment["path"] == "PATH" else {**fields, **segment["path"]}}
    (tmp_path / numerics.NUMERICS_FILE).write_text(json.dumps({"segments": [segment]}))
    with pytest.raises(ValueError, match="numerics.json: not a numerics file") as error:
        numerics.read_segments(tmp_path)
    assert named in str(error.value)
    assert status._numerics(tmp_path) == "unreadable"


def test_a_fifo_numerics_file_is_refused_before_it_is_opened(tmp_path):
    """A read would block forever: status shows `unreadable` at once, the trainer's resume check refuses."""
    import threading

    os.mkfifo(tmp_path / numerics.NUMERICS_FILE)
    shown = []
    reader = threading.Thread(target=lambda: shown.append(status._numerics(tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert shown == ["unreadable"]
    with pytest.raises(ValueError, match="numerics.json: a FIFO, not a numerics file; move it aside"):
        numerics.check_resume(tmp_path, "r", 3, PATH)


def test_segments_follow_the_checkpoint_a_run_resumes_from(tmp_path):
    other = replace(PATH, isa="DEFAULT")
    numerics.record_segment(tmp_path, 0, PATH)
    numerics.record_segment(tmp_path, 10, PATH)  # the same path: nothing new
    assert [s["from_step"] for s in numerics.read_segments(tmp_path)] == [0]
    numerics.record_segment(tmp_path, 20, other)
    assert numerics.training_column(tmp_path) == f"{PATH.id}+{other.id}"
    numerics.record_segment(tmp_path, 0, other)  # a restart from scratch forgets what it redoes
    assert numerics.training_column(tmp_path) == other.id


def records(paths: list[str | None]) -> pl.DataFrame:
    return pl.DataFrame({"run_id": [f"r{i}" for i in range(len(paths))], "numerics": paths},
                        schema={"run_id": pl.String, "numerics": pl.String})


def test_the_analysis_warns_when_runs_mix_paths():
    assert numerics_warnings(records(["m1.k1", "m1.k1", None])) == []
    assert numerics_warnings(records([None, None])) == []
    assert numerics_warnings(records(["m1.-", "m1.k1", "m1.-"])) == []  # AR beside AO-GPT, one machine
    (line,) = numerics_warnings(records(["m1.-", "m2.-", "m2.-", None]))
    assert "2 machine path(s) and 0 kernel build(s): m1.- (1 runs), m2.- (2 runs)" in line
    assert "1 record none" in line
    (line,) = numerics_warnings(records(["m1.k1", "m1.off"]))  # kernels on for one AO-GPT run, off for another
    assert "1 machine path(s) and 2 kernel build(s)" in line
    (line,) = numerics_warnings(records(["m1.k1", "m1.k1+m2.k1"]))
    assert "1 changed path on a resume (r1)" in line


def test_path_ids_from_before_the_machine_kernels_split_read_as_their_own_machine():
    assert numerics_ids.parts("1899df0a81ad") == [("1899df0a81ad", "-")]
    assert numerics_ids.conflicting(["1899df0a81ad", "1899df0a81ad"]) is False
    assert numerics_ids.conflicting(["1899df0a81ad", "226429d3.-"]) is True


def test_status_shows_each_runs_path_and_warns_on_a_mix(tmp_path):
    study = tmp_path / "study"
    for run_id, path in (("r0", PATH), ("r1", PATH), ("r2", replace(PATH, threads=2))):
        (study / "runs" / run_id).mkdir(parents=True)
        numerics.record_segment(study / "runs" / run_id, 0, path)
    (study / "runs" / "r3").mkdir()
    assert status._numerics(study / "runs" / "r0") == PATH.id
    assert status._numerics(study / "runs" / "r3") == "-"
    lines = status.numerics_lines(study, [("r0",), ("r1",), ("r2",), ("r3",)])
    assert lines[0] == f"numerics {PATH.id}: {PATH.label} (2 runs)"
    assert lines[1].endswith("2 threads fp32 (1 run)") and lines[2].startswith("warning: the runs trained on 2")


GPU_PATH = numerics.NumericsPath("cuda (NVIDIA H100 80GB HBM3)", "CUDA 12.8", "2.13.0", numerics.NOT_USED, 8,
                                 "bf16", True)


def test_a_gpu_run_resumes_on_another_gpu_model_and_a_cpu_run_keeps_its_refusal(tmp_path, monkeypatch):
    """A requeue in a mixed partition: no GPU path is bitwise, so the resume proceeds and the
    new segment is recorded; a CPU path is, and keeps the refusal unless allowed."""
    monkeypatch.delenv("AOSCALE_ALLOW_NUMERICS_CHANGE", raising=False)
    a100 = replace(GPU_PATH, device="cuda (NVIDIA A100-SXM4-80GB)", isa="CUDA 12.4", torch="2.12.0")
    gpu_run, cpu_run = tmp_path / "gpu", tmp_path / "cpu"
    gpu_run.mkdir()
    cpu_run.mkdir()
    numerics.record_segment(gpu_run, 0, GPU_PATH)
    numerics.record_segment(cpu_run, 0, PATH)
    for other in (a100, PATH):  # another GPU model, CUDA and torch; or the CPU
        numerics.check_resume(gpu_run, "r", 100, other)
    with pytest.raises(ValueError, match="--allow-numerics-change"):
        numerics.check_resume(cpu_run, "r", 100, replace(PATH, isa="DEFAULT"))
    with pytest.raises(ValueError, match="--allow-numerics-change"):
        numerics.check_resume(cpu_run, "r", 100, GPU_PATH)
    monkeypatch.setenv("AOSCALE_ALLOW_NUMERICS_CHANGE", "1")
    numerics.check_resume(cpu_run, "r", 100, GPU_PATH)
    numerics.record_segment(gpu_run, 100, a100)
    assert numerics.training_column(gpu_run) == f"{GPU_PATH.id}+{a100.id}"


def test_the_trainer_resumes_a_run_recorded_on_a_gpu_and_status_shows_the_mix(tmp_path):
    """A run dir whose recorded segment is a GPU path (built here: there is no GPU) resumes on
    this CPU through `python -m jobs.train`, the CPU segment is recorded, status names the mix."""
    study = tmp_path / "study"
    run = study / "runs" / "r0"
    assert train(run, "ar", "--max-steps-this-call", "2").returncode == 3
    (run / numerics.NUMERICS_FILE).write_text(json.dumps(
        {"segments": [{"from_step": 0, "path": {**GPU_PATH.__dict__}}]}))
    resumed = train(run, "ar")
    assert resumed.returncode == 0, resumed.stderr
    segments = numerics.read_segments(run)
    assert [s["from_step"] for s in segments] == [0, 2]
    assert segments[0]["path"]["device"] == GPU_PATH.device and segments[1]["path"]["device"] == "cpu"
    lines = status.numerics_lines(study, [("r0",)])
    assert lines[0] == f"numerics {GPU_PATH.id}: {GPU_PATH.label} (1 run)" and lines[1].startswith("numerics ")
    assert "numerics: 1 run changed path on a resume (a requeue onto another GPU model, CUDA or torch): r0" in lines
