"""wandb as users expect it, offline: names, ids, project/entity/group/tags, the mode chosen from
the login, a rewind after a checkpoint rollback, and the study flags that turn it on."""
from __future__ import annotations

import pytest

from jobs.run import tracking
from jobs.run.files import read_metrics
from jobs.run.spec import RunSpec
from jobs.run.tracking import Tracker
from scaling import launch
from scaling.study.study_spec import build_study, load_toml

wandb = pytest.importorskip("wandb")
TABLE = {"wandb": True, "project": "gap", "entity": "lab", "group": "sweep-1", "tags": ["cpu", "smoke"],
         "mode": "offline"}


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("AOSCALE_WANDB", raising=False)


def spec(**tracking_table) -> RunSpec:
    return RunSpec(family="aogpt", size="0.1M", steps=6, lr=1e-3, warmup_steps=1, variant="adaln+mix:0.1",
                   seed=1, study="unit", tracking={**tracking_table, "factor_pe": "adaln"})


def log_steps(tracker: Tracker, from_step: int, to_step: int) -> None:
    tracker.log({"kind": "start", "step": from_step, "from_step": from_step})
    for step in range(from_step + 1, to_step + 1):
        tracker.log({"kind": "train", "step": step, "loss": 1.0 / step})


def test_a_run_is_named_readably_with_the_run_id_as_wandb_id_and_the_study_table(tmp_path):
    run_spec = spec(**TABLE)
    tracker = Tracker(tmp_path, run_spec)
    log_steps(tracker, 0, 3)
    run = tracker.wandb
    assert (run.name, run.id) == ("aogpt-adaln+mix:0.1-0.1M-s1", run_spec.run_id)
    assert (run.project, run.group, tuple(run.tags), run.settings.mode) == ("gap", "sweep-1", ("cpu", "smoke"), "offline")
    assert run.settings.entity == "lab"
    assert run.config["factor_pe"] == "adaln" and run.config["run_id"] == run_spec.run_id
    assert run.settings.resume == "allow" and run.settings.resume_from is None
    tracker.close("done")
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1


def test_resuming_behind_the_last_logged_step_rewinds_wandb_history(tmp_path):
    run_spec = spec(wandb=True, mode="offline")
    first = Tracker(tmp_path, run_spec)
    log_steps(first, 0, 6)  # logged to step 6, then the process died; the last checkpoint is step 4
    first.close("failed")
    second = Tracker(tmp_path, run_spec)
    log_steps(second, 4, 6)
    moment = second.wandb.settings.resume_from
    assert (moment.run, moment.metric, moment.value) == (run_spec.run_id, "_step", 5)  # keeps steps 1..4
    second.close("done")
    third = Tracker(tmp_path, run_spec)  # a resume at the last logged step has nothing to rewind
    log_steps(third, 6, 6)
    assert third.wandb.settings.resume_from is None and third.wandb.settings.resume == "allow"
    third.close("done")


def test_online_whenever_logged_in_unless_offline_is_asked_for(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert tracking.wandb_mode({}) == "offline"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "0" * 40 + "\n")
    (tmp_path / "netrc").chmod(0o600)
    assert tracking.wandb_mode({}) == "online"  # what `wandb login` leaves behind
    assert tracking.wandb_mode({"mode": "offline"}) == "offline"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert tracking.wandb_mode({}) == "offline"


def test_init_gets_no_deprecated_argument(tmp_path, monkeypatch, recwarn):
    monkeypatch.delenv("WANDB_SILENT")
    tracker = Tracker(tmp_path, spec(wandb=True, mode="offline"))
    log_steps(tracker, 0, 1)
    tracker.close("done")
    assert not [w for w in recwarn if "deprecat" in str(w.message).lower()]
    assert tracking.wandb_settings(spec(wandb=True), tmp_path, 0)["reinit"] == "finish_previous"


def test_wandb_flag_and_tracking_table_reach_every_run_and_keep_run_ids(tmp_path):
    base = {"families": "ar", "sizes": "0.1M", "seeds": 2}
    plain = build_study(base)
    args = launch.parser().parse_args(["--families", "ar", "--sizes", "0.1M", "--seeds", "2", "--wandb", "myproj"])
    flagged = launch.study_from_args(args)
    assert flagged.run_ids == plain.run_ids and flagged.name == plain.name
    assert all(dict(c.spec.tracking) == {"wandb": True, "project": "myproj"} for c in flagged.cells)
    bare = launch.study_from_args(launch.parser().parse_args(["--families", "ar", "--sizes", "0.1M", "--wandb"]))
    assert dict(bare.cells[0].spec.tracking) == {"wandb": True}
    path = tmp_path / "study.toml"
    path.write_text('families = ["ar"]\nsizes = ["0.1M"]\nseeds = 2\n[tracking]\nproject = "p"\ntags = ["a"]\n')
    from_file = build_study({}, load_toml(path))
    assert from_file.run_ids == plain.run_ids
    assert dict(from_file.cells[0].spec.tracking) == {"wandb": True, "project": "p", "tags": ["a"]}


@pytest.mark.parametrize("table, field", [
    ('[tracking]\nprojet = "p"\n', "tracking.projet: 'p' is not a known key"),
    ('[tracking]\nmode = "cloud"\n', "tracking.mode"),
    ('[tracking]\ntags = "a"\n', "tracking.tags"),
])
def test_a_bad_tracking_table_exits_2_naming_the_key(table, field, tmp_path, monkeypatch, capsys):
    (tmp_path / "s.toml").write_text('families = ["ar"]\nsizes = ["0.1M"]\n' + table)
    monkeypatch.chdir(tmp_path)
    assert launch.main(["--spec", "s.toml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"launch: {field}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_reachability_is_a_tcp_connection_to_wandbs_server():
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert tracking.unreachable(f"http://127.0.0.1:{server.getsockname()[1]}") is None
    assert tracking.unreachable("http://127.0.0.1:9").startswith("127.0.0.1:9 unreachable (")  # discard: closed


def test_an_api_key_without_a_server_trains_offline_and_says_so_in_a_real_process(tmp_path, data_kit):
    """The real condition of a compute node: a key (WANDB_API_KEY, so online is chosen) and no route
    to wandb's server. The run trains, logs offline into run_dir/wandb, and its status says so."""
    import json
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(PYTHONPATH=str(repo), WANDB_API_KEY="0123456789abcdef" * 2 + "01234567", HOME=str(tmp_path),
               AOSCALE_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    if tracking.unreachable(wandb.Settings().base_url) is None:
        pytest.skip("wandb's server answers from here: this test needs a machine without internet")
    run_dir = tmp_path / "run"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jobs.train", "--run-dir", str(run_dir), "--family", "ar", "--size",
                           "0.1M", "--steps", "3", "--seq-len", "32", "--batch-size", "4", "--set", "tracking.wandb=true"],
                          env=env, cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "done" and status["tracking"].startswith("wandb offline: "), status
    assert "unreachable" in status["tracking"] and "wandb sync" in status["tracking"]
    assert "wandb offline: " in proc.stderr
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))
    assert [r["step"] for r in read_metrics(run_dir, "train")][-1] == 3  # trained to the end, logged locally
    assert time.monotonic() - start < 120  # no wait on wandb's 90 s init timeout
