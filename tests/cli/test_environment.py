"""Every environment variable aoscale reads is in one table (cli.environment.VARIABLES), checked
when a command starts: a value outside its rule is one line naming the variable, exit 2, and
nothing written (working folder, a study, the caches, HF_HOME, HOME). `AOSCALE_PIPELINE` naming a
function that cannot be imported is refused then, not by every run after the study is written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import environment
from scaling import launch, status
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.test_bad_inputs import assert_refused, snapshot

REPO = Path(__file__).resolve().parents[2]
LAUNCH = ["--families", "ar", "--sizes", "0.1M", "--max-steps", "2", "--seq-len", "32", "--no-progress", "--no-report"]
BAD = [  # (variables set, what the one line names)
    ({"LOCAL_RANK": "abc"}, "LOCAL_RANK='abc'"), ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"), ({"RANK": "abc"}, "RANK='abc'"), ({"RANK": "-1"}, "RANK='-1'"),
    ({"RANK": "2"}, "RANK='2': expected a whole number >= 0, below WORLD_SIZE (WORLD_SIZE is 1)"),
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "2"}, "LOCAL_RANK='2'"), ({"WORLD_SIZE": "1.5"}, "WORLD_SIZE"),
    ({"OMP_NUM_THREADS": "abc"}, "OMP_NUM_THREADS='abc'"), ({"OMP_NUM_THREADS": "0"}, "OMP_NUM_THREADS='0'"),
    ({"AOSCALE_KERNELS": "abc"}, "AOSCALE_KERNELS='abc'"), ({"AOSCALE_WANDB": "yes"}, "AOSCALE_WANDB='yes'"),
    ({"AOSCALE_PIPELINE": "nosuch.module:fn"}, "AOSCALE_PIPELINE='nosuch.module:fn'"),
    ({"AOSCALE_PIPELINE": "jobs.pipeline:nosuch"}, "has no function nosuch"),
    ({"AOSCALE_PIPELINE": "jobs.pipeline"}, "not module:function"), ({"AOSCALE_PIPELINE": ""}, "AOSCALE_PIPELINE"),
    ({"AOSCALE_BRANCH_WAIT_S": "abc"}, "AOSCALE_BRANCH_WAIT_S"), ({"AOSCALE_BRANCH_WAIT_S": "-5"}, "AOSCALE_BRANCH_WAIT_S"),
    ({"AOSCALE_BRANCH_WAIT_S": "inf"}, "AOSCALE_BRANCH_WAIT_S"), ({"AOSCALE_ANALYSIS_WORKERS": "0"}, "AOSCALE_ANALYSIS_WORKERS"),
    ({"AOSCALE_CACHE": "a_file"}, "AOSCALE_CACHE='a_file'"), ({"AOSCALE_KERNEL_CACHE": "a_file"}, "AOSCALE_KERNEL_CACHE"),
    ({"TIKTOKEN_CACHE_DIR": "a_file"}, "TIKTOKEN_CACHE_DIR"), ({"RAY_TMPDIR": "a_file"}, "RAY_TMPDIR"),
    ({"AOSCALE_DATA": "nowhere"}, "AOSCALE_DATA='nowhere'"), ({"NETRC": "nowhere"}, "NETRC"),
    ({"CUDA_VISIBLE_DEVICES": "first"}, "CUDA_VISIBLE_DEVICES"), ({"HF_HUB_OFFLINE": "maybe"}, "HF_HUB_OFFLINE"),
    ({"HF_DATASETS_OFFLINE": "2"}, "HF_DATASETS_OFFLINE"), ({"WANDB_MODE": "sideways"}, "WANDB_MODE"),
    ({"WANDB_BASE_URL": "ftp://x"}, "WANDB_BASE_URL"), ({"AOSCALE_FAULT": "a b"}, "AOSCALE_FAULT"),
    ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID"), ({"SLURM_ARRAY_TASK_ID": "x"}, "SLURM_ARRAY_TASK_ID"),
    ({"RAY_ADDRESS": "two words"}, "RAY_ADDRESS"), ({"TOKENIZERS_PARALLELISM": "maybe"}, "TOKENIZERS_PARALLELISM"),
    ({"CC": ""}, "CC"),
]
GOOD = {"CUDA_VISIBLE_DEVICES": ["", "-1", "0,1", "GPU-8f6e2c1a-1b2c"], "HF_HUB_OFFLINE": ["1", "true", "0", ""],
        "OMP_NUM_THREADS": ["4", "4,2"], "WORLD_SIZE": ["1"], "RANK": ["0"], "AOSCALE_ANALYSIS_WORKERS": ["", "2"],
        "AOSCALE_PIPELINE": ["tests.scaling.failing_pipeline:run", environment.DEFAULT_PIPELINE],
        "RAY_ADDRESS": ["auto", "10.0.0.1:6379", "ray://head:10001"], "AOSCALE_CACHE": ["", "new_folder"]}


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A working folder holding a study and a file; private caches, HF_HOME and HOME; none of the
    table's variables set."""
    for entry in environment.VARIABLES:
        monkeypatch.delenv(entry.name, raising=False)
    roots = [tmp_path / name for name in ("ws", "cache", "hf", "home")]
    for root in roots:
        root.mkdir()
    for name, root in zip(("AOSCALE_CACHE", "HF_HOME", "HOME"), roots[1:]):
        monkeypatch.setenv(name, str(root))
    monkeypatch.chdir(roots[0])
    study_ledger.prepare(roots[0] / "study", build_study({"families": "ar", "sizes": "0.1M", "max_steps": 2, "seq_len": 32}))
    (roots[0] / "a_file").write_text("not a folder\n")
    return tuple(roots)


@pytest.mark.parametrize("variables, named", BAD, ids=[",".join(f"{k}={v}" for k, v in c.items()) for c, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_variable_and_nothing_is_written(ws, variables, named, monkeypatch, capsys):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert_refused(launch.main, [*LAUNCH, "--study-dir", "new"], named, ws, capsys)
    assert_refused(launch.main, [*LAUNCH, "--study-dir", "study"], named, ws, capsys)
    assert_refused(status.main, ["study"], named, ws, capsys)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_the_values_each_variable_takes_pass(ws, name, monkeypatch):
    for value in GOOD[name]:
        monkeypatch.setenv(name, value)
        environment.check_environment()


def test_every_variable_the_product_reads_is_in_the_table():
    """Each upper-case name on (or just above) a line that reads os.environ, in every package."""
    found = set()
    for package in ("analysis", "cli", "jobs", "models", "scaling"):
        for path in (REPO / package).rglob("*.py"):
            lines = path.read_text().splitlines()
            for i, line in enumerate(lines):
                if "environ" in line:
                    found |= set(re.findall(r'"([A-Z][A-Z0-9_]+)"', lines[i - 1] + line))
    constants = {"AOSCALE_ANALYSIS_WORKERS", "AOSCALE_FAULT"}  # read through WORKERS_ENV, FAULT_ENV
    assert found and (found | constants) - set(environment.BY_NAME) == set()
    assert all(entry.expects and entry.reader for entry in environment.VARIABLES)


def test_real_launches_refuse_a_bad_pipeline_or_world_size_before_writing_the_study(tmp_path):
    """As users run it (no --dry-run): AOSCALE_PIPELINE naming no module used to write the study
    and then fail every run; WORLD_SIZE=0 and LOCAL_RANK=abc were accepted."""
    env = {k: v for k, v in os.environ.items() if k not in environment.BY_NAME}
    env.update(PYTHONPATH=str(REPO), AOSCALE_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))
    cases = [("AOSCALE_PIPELINE", "nosuch.module:fn"), ("WORLD_SIZE", "0"), ("LOCAL_RANK", "abc")]
    procs = [subprocess.Popen([sys.executable, "-m", "scaling.launch", *LAUNCH, "--study-dir", "st"], cwd=tmp_path,
                              env={**env, name: value}, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, value in cases]
    before = snapshot(tmp_path)
    for proc, (name, value) in zip(procs, cases):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and err.startswith(f"launch: {name}={value!r}"), err
        assert len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path) == before and list(tmp_path.iterdir()) == []


def test_real_train_and_launch_refuse_a_bad_rank_or_branch_wait_before_writing(tmp_path):
    """`python -m jobs.train` with RANK, WORLD_SIZE or LOCAL_RANK outside the table's rule, and
    `python -m scaling.launch` with AOSCALE_BRANCH_WAIT_S outside it: exit 2, one line naming the
    variable, no run folder and no study written."""
    env = {k: v for k, v in os.environ.items() if k not in environment.BY_NAME}
    env.update(PYTHONPATH=str(REPO), AOSCALE_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))
    train = ["jobs.train", "--run-dir", "r", "--family", "ar", "--size", "0.1M", "--steps", "2", "--seq-len", "32"]
    launch_argv = ["scaling.launch", *LAUNCH, "--study-dir", "st"]
    cases = [(train, {"RANK": "abc"}), (train, {"WORLD_SIZE": "abc"}), (train, {"LOCAL_RANK": "x"}),
             (train, {"RANK": "1"}), (launch_argv, {"AOSCALE_BRANCH_WAIT_S": "abc"}),
             (launch_argv, {"AOSCALE_BRANCH_WAIT_S": "0"})]
    procs = [subprocess.Popen([sys.executable, "-m", *argv], cwd=tmp_path, env={**env, **variables}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for argv, variables in cases]
    for proc, (argv, variables) in zip(procs, cases):
        _, err = proc.communicate(timeout=300)
        (name, value), = variables.items()
        assert proc.returncode == 2 and f"{name}={value!r}: expected" in err, (argv[0], err)
        assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_the_trainer_the_branch_wait_and_srun_read_the_tables_rules(tmp_path, monkeypatch):
    """Called as a library (a worker, no command around it), jobs.train.loop.train reads RANK,
    a WSD branch its wait and distributed_env srun's variables through cli.environment: a bad
    value is its one InputError line, before the run folder is made."""
    from jobs.run.spec import RunSpec
    from jobs.train import engines, wsd_branch
    from jobs.train.loop import train
    from cli import InputError

    for entry in environment.VARIABLES:
        monkeypatch.delenv(entry.name, raising=False)
    spec = RunSpec(family="ar", size="0.1M", steps=2, lr=1e-3, warmup_steps=0, seq_len=32, batch_size=2)
    monkeypatch.setenv("RANK", "abc")
    with pytest.raises(InputError, match=r"^RANK='abc': expected a whole number >= 0"):
        train(tmp_path / "run", spec, handle_signals=False)
    assert not (tmp_path / "run").exists()
    assert wsd_branch.branch_wait_s() == environment.BY_NAME["AOSCALE_BRANCH_WAIT_S"].default == 3600.0
    monkeypatch.setenv("AOSCALE_BRANCH_WAIT_S", "-1")
    with pytest.raises(InputError, match=r"^AOSCALE_BRANCH_WAIT_S='-1': expected a positive number of seconds"):
        wsd_branch.branch_wait_s()
    monkeypatch.delenv("RANK")  # under srun RANK comes from SLURM_PROCID
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "two")
    with pytest.raises(InputError, match=r"^SLURM_NTASKS='two'"):
        engines.distributed_env()
