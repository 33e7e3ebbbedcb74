"""scaling.rounds: a frontier study extended in rounds (the planner's runs as cells of the study,
the round file and the held-out predictions written before training, a killed round resumed
without training anything twice). Training is a stand-in that marks runs done and gives them
values on a planted law, so no model trains here."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from analysis.compare import frontier, frontier_plan
from jobs.run import files as runfiles
from models.ladder import core_params, get_shape
from scaling import rounds
from scaling.run import study_ledger
from scaling.study.study_spec import build_study
from tests.analysis import frontier_synth as fs
from tests.jobs.executors.test_slurm import PROBLEM as SLURM_PROBLEM
from tests.test_bad_inputs import snapshot

slurm_cluster = pytest.mark.skipif(bool(SLURM_PROBLEM), reason=SLURM_PROBLEM or "cluster up")


class Killed(Exception):
    """The stand-in trainer's kill."""


@pytest.fixture
def study(tmp_path, monkeypatch):
    """AR's frontier preset at one budget, every run trained on the planted law; the trainer
    stand-in records what it trains and can be killed after `kill_after` runs."""
    spec = build_study({"preset": "frontier", "families": "ar", "budgets": [1e12], "name": "rounds-test"})
    study_dir = tmp_path / "study"
    study_ledger.prepare(study_dir, spec)
    state = {"trained": [], "kill_after": None}

    def train(run_ids):
        for run_id in run_ids:
            if study_ledger.view(study_dir, run_id).state == "done":
                continue
            if state["kill_after"] is not None and len(state["trained"]) >= state["kill_after"]:
                state["kill_after"] = None
                raise Killed
            runfiles.write_status(study_ledger.run_dir(study_dir, run_id), "done", step=1, steps=1)
            state["trained"].append(run_id)

    def fake_train(directory, study_spec, args, *backend):
        study_ledger.prepare(directory, study_spec, extending=True)
        train(study_spec.run_ids)
        return 0

    monkeypatch.setattr(study_ledger, "_records_gap", lambda directory, steps: None)
    monkeypatch.setattr(rounds, "_train", fake_train)
    monkeypatch.setattr(frontier_plan, "read_study", planted_points)
    train(spec.run_ids)
    state["trained"].clear()
    return study_dir, state


def planted_points(directory, resamples=200, seed=0):
    """The planner's view of the study: each done run's value on the planted law (not its records)."""
    rows = []
    for run_id in study_ledger.study_run_ids(directory):
        if study_ledger.view(directory, run_id).state != "done":
            continue
        s = study_ledger.load_spec(directory, run_id)
        n, c = core_params(get_shape(s.size)), float(dict(s.tracking)["budget_flops"])
        value = fs.loss(n, s.tokens) + fs.LR_PENALTY * math.log10(s.lr / fs.BEST_LR) ** 2
        rows.append({"family": s.family, "variant": s.variant, "budget_flops": c, "n_params": float(n),
                     "seed": s.seed, "lr": s.lr, "value": value})
    return pl.DataFrame(rows), frontier.Frontier((), ())


def _args(study_dir, **changes):
    return rounds.parser().parse_args([str(study_dir), "--no-report", "--max-rounds", "1", *changes.get("extra", [])])


def test_a_dry_run_prints_the_round_and_writes_nothing(study, capsys):
    study_dir, state = study
    before = sorted(p.name for p in study_dir.rglob("*"))
    assert rounds.rounds(rounds.parser().parse_args([str(study_dir), "--dry-run"])) == 0
    out = capsys.readouterr().out
    assert out.startswith("round 1: ") and "training FLOPs" in out and "[budgets]" in out
    assert sorted(p.name for p in study_dir.rglob("*")) == before and not state["trained"]


def test_a_round_extends_the_study_and_a_killed_round_resumes_without_training_twice(study):
    study_dir, state = study
    order = study_ledger.study_run_ids(study_dir)
    state["kill_after"] = 3
    with pytest.raises(Killed):
        rounds.rounds(_args(study_dir))
    doc = json.loads((study_dir / "rounds" / "round-1.json").read_text())
    planned = [r["run_id"] for r in doc["runs"]]
    assert len(planned) > 3 and all(r["reason"] and r["criterion"] for r in doc["runs"])
    assert study_ledger.study_run_ids(study_dir)[:len(order)] == order  # the study's own runs kept, first
    first = list(state["trained"])
    assert rounds.rounds(_args(study_dir)) == 0  # the relaunch resumes round 1 (the cap is 1 round)
    assert sorted(first + state["trained"][len(first):]) == sorted(planned)
    assert len(state["trained"]) == len(set(state["trained"]))  # nothing trained twice
    assert json.loads((study_dir / "rounds" / "round-1.json").read_text()) == doc
    assert len(rounds.round_files(study_dir)) == 1


def test_the_planned_runs_are_cells_at_their_budget_lr_and_shape(study):
    study_dir, _ = study
    doc, extended = rounds.next_round(study_dir, frontier_plan.PlanConfig(), 200)
    assert doc is not None
    by_id = {c.run_id: c.spec for c in extended.cells}
    for row in doc["runs"]:
        spec = by_id[row["run_id"]]
        tags = dict(spec.tracking)
        assert tags["budget_flops"] == row["budget_flops"] and tags["sweep_lr"] == spec.lr == row["lr"]
        assert spec.size == row["size"] and spec.seed == row["seed"]


def test_predictions_are_written_once_before_the_budget_trains(tmp_path):
    front = frontier.analyse(fs.records(seeds=1).filter(pl.col("split") == "test"), resamples=20)
    plan = frontier_plan.RoundPlan((), (), (("ar", "v", 3e14),))
    first = rounds.write_predictions(tmp_path, front, plan)
    assert [p.name for p in first] == ["3e14.json"]
    doc = json.loads(first[0].read_text())
    entry = doc["entries"][0]
    assert doc["written_before_training"] and entry["family"] == "ar" and entry["n_opt"]["ci95"][0] is not None
    assert rounds.write_predictions(tmp_path, front, plan) == []  # kept as first written
    both = frontier_plan.RoundPlan((), (), (("ar", "v", 3e14), ("aogpt", "v", 3e14)))
    assert rounds.write_predictions(tmp_path, front, both) == first  # the new family added beside it
    entries = json.loads(first[0].read_text())["entries"]
    assert [e["family"] for e in entries] == ["ar", "aogpt"] and entries[0] == entry


ROUND_RUN = {"run_id": "r1", "family": "ar", "variant": "", "size": "0.1M", "seed": 0, "lr": 1e-3,
             "budget_flops": 1e12, "criterion": "budgets", "reason": "a budget above the measured range", "spec": {}}
BAD_ROUNDS = {  # rounds/round-1.json's text -> what the one line names (cli.schema.ROUND)
    "run_id": (json.dumps({"round": 1, "cost_flops": 1e12, "runs": [{**ROUND_RUN, "run_id": "../../x"}]}),
               "round-1.json: runs[0].run_id: '../../x' is not one path component"),
    "seed": (json.dumps({"round": 1, "cost_flops": 1e12, "runs": [{**ROUND_RUN, "seed": "one"}]}),
             "round-1.json: runs[0].seed: 'one' must be"),
    "lr": (json.dumps({"round": 1, "cost_flops": 1e12, "runs": [{**ROUND_RUN, "lr": -1.0}]}),
           "round-1.json: runs[0].lr: -1.0 must be"),
    "spec": (json.dumps({"round": 1, "cost_flops": 1e12, "runs": [{k: v for k, v in ROUND_RUN.items() if k != "spec"}]}),
             "round-1.json: runs[0].spec is missing"),
    "met": (json.dumps({"round": 1, "cost_flops": 1e12, "runs": [], "checks": [
        {"criterion": "seeds", "subject": "ar", "met": "yes", "detail": ""}]}), "round-1.json: checks[0].met: 'yes'"),
    "runs": (json.dumps({"round": 1, "cost_flops": 1e12, "runs": {}}), "round-1.json: runs: {} must be a list"),
    "cost": (json.dumps({"round": 1, "cost_flops": "1e12", "runs": []}), "round-1.json: cost_flops: '1e12' must be"),
    "list": ("[]", "round-1.json: holds a JSON list"), "cut": ('{"round": 1, "ru', "round-1.json: not readable JSON"),
}


def test_a_damaged_round_file_is_one_line_naming_the_key_in_a_real_process_and_nothing_is_written(tmp_path):
    """The round file (a round's plan) is read back through cli.schema.ROUND: a run id that is no
    id, a seed, lr or cost of another type, a missing spec, a check's `met` as text, a list or a
    cut file are each exit 2 with one line naming the file, the key and the fix; nothing written."""
    repo = Path(__file__).resolve().parents[2]
    for name, (text, _) in BAD_ROUNDS.items():
        study_ledger.prepare(tmp_path / name, build_study({"families": "ar", "sizes": "0.1M", "seeds": 1, "max_steps": 2,
                                                     "seq_len": 32}))
        (tmp_path / name / "rounds").mkdir()
        (tmp_path / name / "rounds" / "round-1.json").write_text(text)
    before = snapshot(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(repo), "AOSCALE_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-m", "scaling.rounds", name, "--dry-run"], cwd=tmp_path, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in BAD_ROUNDS]
    for proc, (name, (_, named)) in zip(procs, BAD_ROUNDS.items()):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and "Traceback" not in err, (name, err[-2000:])
        assert len(err.strip().splitlines()) == 1 and named in err and "move it away and relaunch" in err, err
    assert snapshot(tmp_path) == before


# ---- the backends: a round trains where the launcher trains ----------------------------------------------
ROUND_RUNS = 2  # the real planner's round, cut to its first runs so the round trains in seconds


@pytest.fixture
def small_round(tmp_path, monkeypatch, cache_dir):
    """AR's frontier preset at one budget capped at 2 steps a run; round 0 marked done on the planted
    law (a stand-in), the real planner's round 1 cut to ROUND_RUNS runs, which train for real."""
    spec = build_study({"preset": "frontier", "families": "ar", "budgets": [1e12], "name": "rounds-backend",
                        "max_steps": 2, "eval_suite": "quick"})
    study_dir = tmp_path / "study"
    study_ledger.prepare(study_dir, spec)
    for run_id in spec.run_ids:
        runfiles.write_status(study_ledger.run_dir(study_dir, run_id), "done", step=2, steps=2)
    planned = frontier_plan.plan_round

    def cut(points, config, shape_n):
        plan = planned(points, config, shape_n)
        return frontier_plan.RoundPlan(plan.runs[:ROUND_RUNS], plan.checks, plan.new_budgets)

    round0 = set(spec.run_ids)
    monkeypatch.setattr(study_ledger, "_records_gap", lambda directory, steps: None if directory.name in round0
                        else _real_gap(directory, steps))
    monkeypatch.setattr(frontier_plan, "read_study", planted_points)
    monkeypatch.setattr(frontier_plan, "plan_round", cut)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # jobs inherit the environment (sbatch --export=ALL)
    monkeypatch.setenv("WANDB_MODE", "offline")
    return study_dir


_real_gap = study_ledger._records_gap


@slurm_cluster
@pytest.mark.slurm
def test_rounds_on_the_slurm_backend_train_the_round_as_one_job_array_and_wait(small_round, data_kit, capsys):
    study_dir = small_round
    argv = [str(study_dir), "--backend", "slurm", "--slurm-partition", "debug", "--slurm-time", "10",
            "--max-rounds", "1", "--no-report"]
    assert rounds.main(argv) == 0
    out = capsys.readouterr().out
    doc = json.loads((study_dir / "rounds" / "round-1.json").read_text())
    assert len(doc["runs"]) == ROUND_RUNS
    jobs = set()
    for row in doc["runs"]:
        run_dir = study_ledger.run_dir(study_dir, row["run_id"])
        status = runfiles.read_status(run_dir)
        assert status["state"] == "done" and "_" in status["job_id"], status  # a task of a Slurm job array
        jobs.add(status["job_id"].split("_")[0])
        assert [int(r["from_step"]) for r in runfiles.read_metrics(run_dir, "start")] == [0]
        assert [int(r["step"]) for r in runfiles.read_metrics(run_dir, "train")][-1] == 2
        assert (run_dir / "eval.parquet").exists()
    assert len(jobs) == 1  # the round's runs as one array, waited on before the next round is planned
    assert "1 rounds recorded (--max-rounds); not starting another" in out
    assert list((study_dir / "logs" / "slurm").glob("*/*/*.out")), "job logs live in the study dir"


def test_rounds_take_the_launchers_backend_flags_and_refuse_bad_ones_before_writing(tmp_path, capsys, monkeypatch):
    """The same flags as scaling.launch (scaling.run.backends declares them once): a dry run on
    Slurm prints the job array it would submit, with no controller; bad flags are one line, exit 2."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # no sinfo, sbatch, squeue
    study_ledger.prepare(tmp_path / "s", build_study({"preset": "frontier", "families": "ar", "budgets": [1e12],
                                                      "name": "rounds-flags"}))
    monkeypatch.setattr(study_ledger, "_records_gap", lambda directory, steps: None)
    monkeypatch.setattr(frontier_plan, "read_study", planted_points)
    for run_id in study_ledger.study_run_ids(tmp_path / "s"):
        runfiles.write_status(study_ledger.run_dir(tmp_path / "s", run_id), "done", step=1, steps=1)
    before = snapshot(tmp_path)
    slurm = ["--backend", "slurm", "--slurm-partition", "gpu", "--nodes", "2", "--gpus-per-node", "4"]
    assert rounds.main([str(tmp_path / "s"), "--dry-run", *slurm]) == 0
    out = capsys.readouterr().out
    assert out.startswith("round 1: ") and "#SBATCH --gpus-per-node=4" in out and "#SBATCH --nodes=2" in out
    assert snapshot(tmp_path) == before
    for argv, line in [(["--backend", "kubernetes"], "rounds: backend: unknown backend 'kubernetes'"),
                       (["--slurm-partition", "debug"], "rounds: slurm-partition: only used with --backend slurm"),
                       (["--backend", "slurm", "--nodes", "0"], "rounds: nodes: 0 must be a positive integer"),
                       (["--backend", "ray", "--cpus-per-trial", "0"], "rounds: cpus_per_trial: 0.0 must be > 0"),
                       (["--max-retries", "-1"], "rounds: max-retries: -1")]:
        assert rounds.main([str(tmp_path / "s"), *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(line), err
    assert snapshot(tmp_path) == before


def test_runs_on_more_than_one_gpu_train_with_deepspeed_under_the_same_ids():
    study = build_study({"preset": "frontier", "families": "ar", "budgets": [1e12], "name": "rounds-ranks"})
    spread = rounds.on_ranks(study, 8)
    assert spread.run_ids == study.run_ids and rounds.on_ranks(study, 1) is study
    assert {c.spec.engine for c in spread.cells} == {"deepspeed"} and {c.spec.engine for c in study.cells} == {"torch"}
    assert dict(spread.settings)["resources"] == {"engine": "deepspeed"}
