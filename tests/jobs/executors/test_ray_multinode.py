"""A two-node Ray cluster on this machine: a head and a second node joined with
`ray start --address`, each with one CPU of its own. A study's trials land on both nodes; the
second node is killed mid-study and the study still finishes, the killed run retried on the head
from its checkpoint with the uninterrupted curve. The driver joins the cluster as a user would
(`--ray-address auto`, with the runtime_env that ships this checkout to the workers).

Run alone with `python -m pytest -m multinode`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jobs.executors.cluster_runs import (PIPELINE, curve, make_run, reference_curve,
                                               running_at, status, tiny_spec, training_starts)
from tests.polling import wait_until

ray = pytest.importorskip("ray", reason="ray not installed (pip install 'aoscale[ray]')")
from jobs.executors.ray_tune import RayExecutor, RayOptions, validate_ray_options  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.multinode]
STEPS = 240
TIMEOUT_S = 300
OBJECT_STORE_BYTES = 80 * 2**20  # each node's object store; the trials pass nothing through it


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ray_start(log: Path, *args: str) -> subprocess.Popen:
    """`ray start --block` in its own process group (stopping the group stops that node only;
    `ray stop` would stop every Ray on the machine)."""
    command = [shutil.which("ray") or "ray", "start", "--block", "--num-cpus", "1", "--disable-usage-stats",
               "--object-store-memory", str(OBJECT_STORE_BYTES), *args]
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture()
def cluster(monkeypatch) -> Iterator[dict]:
    """Head + second node; RAY_ADDRESS points `auto` at the head (a private --temp-dir keeps this
    cluster out of /tmp/ray, where other local Ray users would find it)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    root = Path(tempfile.mkdtemp(prefix="aoray-", dir="/tmp"))  # short: Ray's socket paths are capped
    temp_dir = root / "t"
    temp_dir.mkdir()
    address = f"127.0.0.1:{_free_port()}"
    head = _ray_start(root / "head.log", "--head", "--node-ip-address", "127.0.0.1", "--port", address.split(":")[1],
                      "--temp-dir", str(temp_dir), "--include-dashboard", "false", "--resources", '{"head": 1}')
    nodes = [head]
    try:
        wait_until(lambda: _reachable(address), 120, "the head node")
        second = _ray_start(root / "second.log", "--address", address, "--node-ip-address", "127.0.0.1",
                            "--resources", '{"second": 1}')
        nodes.append(second)
        monkeypatch.setenv("RAY_ADDRESS", address)
        yield {"address": address, "second": second}
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc in reversed(nodes):
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def _reachable(address: str) -> bool:
    try:
        validate_ray_options(RayOptions(address=address))
        return True
    except ValueError:
        return False


def _node_ids() -> dict[str, str]:
    """'head' / 'second' -> Ray node id, from each node's custom resource."""
    out = {}
    for node in ray.nodes():
        for name in ("head", "second"):
            if node["Alive"] and name in node["Resources"]:
                out[name] = node["NodeID"]
    return out


def test_trials_land_on_both_nodes_and_a_killed_node_is_survived(tmp_path, data_kit, cluster):
    study = tmp_path / "study"
    specs = [tiny_spec(seed=s, steps=STEPS, checkpoint_every=20) for s in range(3)]
    runs = [make_run(study, spec) for spec in specs]
    options = RayOptions(address="auto", cpus_per_trial=1, max_retries=2)
    validate_ray_options(options)  # auto resolves through RAY_ADDRESS
    handles = RayExecutor(study, options, pipeline=PIPELINE).submit_all(runs)
    wait_until(lambda: ray.is_initialized() and len(_node_ids()) == 2, 120, "the driver to see both nodes")
    ids = _node_ids()
    seen: dict[str, str] = {}

    def on_second_node_mid_run() -> bool:
        for run in runs:
            node = status(run).get("node_id")
            if node:
                seen.setdefault(node, run.name)
        return any(status(r).get("node_id") == ids["second"] and running_at(r, 40)() for r in runs)

    wait_until(on_second_node_mid_run, TIMEOUT_S, "a trial on the second node past step 40")
    killed = next(r for r in runs if status(r).get("node_id") == ids["second"] and status(r).get("state") == "running")
    _stop(cluster["second"])  # the node dies with its trial
    assert [h.result() for h in handles] == ["done"] * 3
    for run in runs:  # the head's trials may not have reported their node before the kill
        seen.setdefault(status(run)["node_id"], run.name)
    assert set(seen) == {ids["head"], ids["second"]}  # trials ran on both nodes
    starts = training_starts(killed)
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 20 and starts[1] % 20 == 0, starts
    assert status(killed)["node_id"] == ids["head"]  # retried on the surviving node
    spec = specs[runs.index(killed)]
    assert curve(killed) == reference_curve(tmp_path / "reference", spec)
    for run in runs:
        assert training_starts(run).count(0) == 1, run.name
    assert json.loads((study / "ray" / "experiment.json").read_text())["runs"]
