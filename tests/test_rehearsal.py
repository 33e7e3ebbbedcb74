"""The dress rehearsal of the cluster path (issue 45): the used-by command at real size, on CPU.

`python -m scaling.launch --sizes 125M --seeds 1 --max-steps 2` on the project's two-node Slurm test
cluster (scripts/slurm-two-nodes.sh: two slurmd in network namespaces, traffic inside them):

- real width, depth and context: the 125M rung (12 x 768, 12 heads) at 1,024 tokens, GPT-2 BPE,
  the study's default network (AO-GPT's official one) and EMA 0.9999;
- a WebText-like local corpus (the data kit's snippets) standing in for OpenWebText, tokenised by
  the prepare stage in a CPU job of its own that the run waits for (afterok); the run job may not
  tokenise (AOSCALE_REQUIRE_PREPARED);
- DeepSpeed ZeRO-2, bf16 autocast over fp32 weights, 2 ranks (one per node) over gloo;
- preempted by SIGTERM after step 1: it checkpoints and is requeued. Node n2 is drained first, so
  the requeued two-node job cannot start; the user cancels it and relaunches on one node, and
  the run resumes on 1 rank from its step-1 checkpoint (the consolidated state: a move), trains
  step 2, is evaluated and the report is written;
- the planning check: 350M and 760M fit 8 x 80 GiB with the micro-batch the plan chooses.

The batch is cut to 2 sequences (one per rank; the rung's rule asks 512): the path, not the
throughput, is rehearsed. Run alone: `python -m pytest -m rehearsal` (as root, with
scripts/slurm-cluster.sh started: the two nodes reuse its munged and mariadb).
"""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from jobs.run.files import read_metrics
from scaling import launch
from tests.jobs.data.test_prepare import webtext_corpus
from tests.jobs.executors.cluster_runs import status, training_starts
from tests.polling import wait_until
from tests.jobs.executors.test_slurm_multinode import WHY_NOT, cluster_env, two_nodes  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slurm, pytest.mark.multinode, pytest.mark.rehearsal, pytest.mark.slow,
              pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "two nodes possible")]
STEP_TIMEOUT_S = 600  # the two-node job: queue, prepare, DeepSpeed start, one 125M step on 1 core
USED_BY = ["--sizes", "125M", "--seeds", "1", "--max-steps", "2"]
REHEARSAL = ["--families", "ar", "--batch-size", "2", "--tokenizer", "gpt2", "--eval-suite", "quick",
             "--set", "run.precision=bf16", "--set", "resources.zero_stage=2", "--set", "resources.log_every=1",
             "--engine", "deepspeed",
             "--no-progress", "--backend", "slurm", "--slurm-partition", "debug", "--slurm-time", "30",
             "--cpus-per-task", "1", "--slurm-prepare-cpus", "1"]


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, timeout=30)


def _job_id(study) -> str:
    (job,) = json.loads((study / "logs/slurm/jobs.json").read_text()).values()
    return job


def _job_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=20).stdout
    return out.strip()


def test_the_used_by_command_at_125m_prepares_trains_on_two_ranks_moves_to_one_and_reports(
        tmp_path, data_kit, cluster_env, capsys):  # noqa: F811 (the two-node fixtures)
    corpus = webtext_corpus(data_kit, tmp_path / "webtext")
    study = tmp_path / "studies" / "rehearsal"
    flags = [*USED_BY, *REHEARSAL, "--corpus", str(corpus), "--study-dir", str(study)]
    started = time.monotonic()

    assert launch.main([*flags, "--nodes", "2"]) == 0  # prepare job + one run job over 2 nodes
    (run,) = (study / "runs").iterdir()
    spec = json.loads((run / "spec.json").read_text())
    assert (spec["size"], spec["seq_len"], spec["tokenizer"], spec["ema"]) == ("125M", 1024, "gpt2", 0.9999)
    assert dict(spec["model_options"])["norm"] == "rmsnorm"  # the study's default network: the official one
    job = _job_id(study)
    # The signal lands during step 1 (~25 s of one core at 125M x 1,024 tokens): the trainer ends the
    # step, checkpoints it and is requeued.
    wait_until(lambda: bool(read_metrics(run, "start")), STEP_TIMEOUT_S, "the two-rank 125M run to start")
    _scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=rehearsal")  # the requeue cannot start on 2
    subprocess.run(["scancel", "--signal=TERM", job], check=True, timeout=30)  # the steps, as a preemption
    wait_until(lambda: status(run).get("state") == "preempted", STEP_TIMEOUT_S, "the SIGTERM checkpoint")
    wait_until(lambda: _job_state(job) == "PENDING", 120, "the requeue")
    first_segment = read_metrics(run, "start")
    assert [(r["world_size"], r["engine"]) for r in first_segment] == [(2, "deepspeed")]
    assert status(run)["step"] == 1  # checkpointed after step 1, not at the end
    subprocess.run(["scancel", job], check=True, timeout=30)  # the user moves the study to one node
    _scontrol("update", "NodeName=n2", "State=RESUME")

    assert launch.main([*flags, "--nodes", "1", "--wait"]) == 0  # resumes, trains step 2, evaluates, reports
    assert status(run)["state"] == "done"
    starts = read_metrics(run, "start")
    assert [(r["world_size"], r["engine"]) for r in starts] == [(2, "deepspeed"), (1, "deepspeed")]
    assert training_starts(run)[-1] == 1  # resumed from the SIGTERM checkpoint: nothing redone or skipped
    assert sorted(r["step"] for r in read_metrics(run, "train")) == [1, 2]
    assert (run / "eval.parquet").exists() and (study / "report" / "report.md").exists()
    prepare = json.loads((study / "logs/slurm/prepare.json").read_text())
    assert prepare["job_id"] and "afterok" not in json.dumps(spec)  # the data came from the prepare job
    manifest = json.loads((run / "manifest.json").read_text())
    assert "bfloat16" in manifest["dtype"]
    wall_s = time.monotonic() - started
    print(f"rehearsal: 125M, 2 ranks -> SIGTERM at step 1 -> 1 rank -> done, evaluated, reported in {wall_s:.0f} s")

    plan = subprocess.run(["python", "-m", "scaling.launch", "--sizes", "125M,350M,760M", "--seeds", "3",
                           "--backend", "slurm", "--gpus-per-node", "8", "--dry-run",
                           "--study-dir", str(tmp_path / "plan")], capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr
    fits = re.findall(r"^\w{12}\s+(125M|350M|760M)\s+(\d+) x (\d+) x 8 = (\d+)\s+([\d.]+)$", plan.stdout, re.M)
    assert {size for size, *_ in fits} == {"125M", "350M", "760M"} and len(fits) == 36
    assert all(int(m) * int(a) * 8 == int(b) and float(gib) <= 80 for _, m, a, b, gib in fits)
