"""No behaviour change: eval.parquet and samples.parquet of tiny runs of every family.

Each arm (every family; MDM under each of its losses) trains 2 steps on one thread, is evaluated
with a shrunken quick suite and generates 2 samples judged by a tiny AR judge. Text, integers and
sampled tokens must equal the recorded ones exactly; floats must agree within float32 rounding,
RTOL_F32 relative plus ATOL_F32 absolute, not to the bit: the golden machine's numerics path (its
CPU's vector ISA, the BLAS code path torch picks for it) rounds differently from another machine's
(jobs/run/numerics.py). Measured on one AVX2 machine against the golden file written on another,
and again with ATEN_CPU_CAPABILITY=default or MKL_CBWR=COMPATIBLE: every value moved by at most
1.5e-7 of itself (a float32 ulp or two), every standard error by at most 1e-7 of its value (a
standard error is a difference of values near each other, so its own relative change can reach
4e-2); a change of maths moves these values by 1e-4 or more. Only wall time (`gen_time_s`) and
the numerics columns (which name the machine's path) are left out.
A change that is meant to move these numbers regenerates the file:
`AOSCALE_REGEN_GOLDEN=1 python -m pytest tests/jobs/eval/test_golden_records.py`.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch

from jobs.eval import evaluate as ev
from jobs.eval import generate as gen
from jobs.run.spec import RunSpec
from jobs.train.loop import train

GOLDEN = Path(__file__).parent / "golden" / "tiny_records.json"
ARMS = {"ar": ("ar", {}), "aogpt": ("aogpt", {}), "sigma_gpt": ("sigma_gpt", {}),
        "mdm-mdlm": ("mdm", {"loss": "mdlm"}), "mdm-kdce": ("mdm", {"loss": "kdce"}),
        "mdm-sedd": ("mdm", {"loss": "sedd"})}
WALL_TIME_METRICS = ("gen_time_s",)
PATH_COLUMNS = ("numerics", "eval_numerics")  # the machine's numerics path ids (jobs.run.numerics)
RTOL_F32 = 1e-5  # ~84 float32 epsilons (1.19e-7); measured across paths: <= 1.5e-7 of the value
ATOL_F32 = 1e-6  # about one ulp at the records' magnitudes (4-8), for values near 0


def tiny_spec(family: str, variant: str, **changes) -> RunSpec:
    """A 2-step, 16-token run at the smallest rung."""
    return RunSpec(family=family, size="0.1M", steps=2, lr=3e-3, warmup_steps=1, seq_len=16, batch_size=4,
                   eval_batches=1, log_every=1, study="golden", variant=variant, **changes)


def records(run_dir: Path) -> dict:
    """The run's eval and sample rows as plain JSON values, wall times blanked."""
    frame = pl.read_parquet(run_dir / "eval.parquet")
    timed = pl.col("metric").is_in(WALL_TIME_METRICS)
    frame = frame.with_columns(pl.when(timed).then(None).otherwise(pl.col(c)).alias(c) for c in ("value", "se"))
    frame = frame.drop(PATH_COLUMNS, strict=False)
    frame = frame.sort(["metric", "dataset", "estimator", "weights", "m", "steps", "tokens_per_step"],
                       nulls_last=True)
    samples = pl.read_parquet(run_dir / gen.SAMPLES_FILE).sort(["steps", "sample"])
    return json.loads(json.dumps({"eval": frame.to_dicts(), "samples": samples.to_dicts()}))


def tiny_records(tmp: Path) -> dict:
    """Every arm's records, trained and evaluated under `tmp` on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp / "cache"))
        mp.delenv("AOSCALE_DATA", raising=False)
        judge = tiny_spec("ar", "judge", seed=7, role="judge")
        assert train(root / judge.run_id, judge) == "done"
        out = {}
        for name, (family, options) in ARMS.items():
            spec = tiny_spec(family, name, model_options=options)
            run_dir = root / spec.run_id
            assert train(run_dir, spec) == "done"
            ev.evaluate(run_dir, "quick", val_chunks=2, k_mc=2, m_max=2, n_targets=4, ensemble_chunks=2,
                        zero_shot=())
            gen.generate(run_dir, gen.GenSettings(n_samples=2, length=16, steps=(4,), tokens_per_step=(1, 2)),
                         judge_run=root / judge.run_id)
            out[name] = records(run_dir)
    torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def actual(tmp_path_factory) -> dict:
    out = tiny_records(tmp_path_factory.mktemp("golden"))
    if os.environ.get("AOSCALE_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def mismatches(got: dict, want: dict) -> list[str]:
    """The fields of one row that differ: floats by more than RTOL_F32 of their row's magnitude
    plus ATOL_F32, anything else at all (NaN equals NaN; a float against a non-float differs).
    A standard error is a difference of per-window values, so its rounding is that of the value
    it belongs to: its tolerance scales with the larger of the two."""
    bad = []
    for key in sorted(set(got) | set(want)):
        a, b = got.get(key), want.get(key)
        if isinstance(a, float) and isinstance(b, float):
            scale = max(abs(b), abs(want["value"])) if key == "se" and _finite(want.get("value")) else abs(b)
            same = (math.isnan(a) and math.isnan(b)) or abs(a - b) <= RTOL_F32 * scale + ATOL_F32
        else:
            same = json.dumps(a) == json.dumps(b)
        if not same:
            bad.append(f"{key}: {a!r} != {b!r}")
    return bad


def _finite(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def test_the_tolerance_tells_a_change_of_maths_from_rounding():
    row = {"metric": "nll_l2r", "value": 7.256896954178032, "se": 0.0008803904056549071, "n_samples": 8}
    assert mismatches({**row, "value": 7.256896825191044, "se": 0.0008804798126220702}, row) == []  # two machines
    assert mismatches({**row, "value": row["value"] * (1 + 1e-4)}, row)  # a real change of the value
    assert mismatches({**row, "n_samples": 9}, row) and mismatches({**row, "se": None}, row)
    assert mismatches({**row, "value": float("nan")}, row) and not mismatches({**row, "value": float("nan")},
                                                                              {**row, "value": float("nan")})


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("part", ("eval", "samples"))
def test_records_equal_the_golden_ones(actual, arm, part):
    golden = json.loads(GOLDEN.read_text())[arm][part]
    got = actual[arm][part]
    assert len(got) == len(golden), f"{arm} {part}: {len(got)} rows, golden has {len(golden)}"
    for row, want in zip(got, golden):  # floats within rounding, the rest exactly
        if part == "samples":  # sampled tokens and their text: exact (stable across paths, measured)
            assert json.dumps(row, sort_keys=True) == json.dumps(want, sort_keys=True)
        else:
            assert not mismatches(row, want), f"{arm} {row.get('metric')}: {mismatches(row, want)}"


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() == "DEFAULT", reason="torch has no vector path here")
def test_records_hold_on_another_numerics_path(actual, tmp_path):
    """The tiny runs again on another path of this machine (torch's scalar kernels instead of its
    vector ones: ATEN_CPU_CAPABILITY=default), a second machine in miniature: some values differ
    from this path's in their last bits, and all stay within the tolerance of the golden file."""
    out = tmp_path / "records.json"
    code = ("import json, pathlib, sys; from tests.jobs.eval.test_golden_records import tiny_records; "
            "pathlib.Path(sys.argv[1]).write_text(json.dumps(tiny_records(pathlib.Path(sys.argv[2]))))")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path)], env=env, check=True,
                   cwd=Path(__file__).resolve().parents[3], capture_output=True)
    other, golden = json.loads(out.read_text()), json.loads(GOLDEN.read_text())
    floats = [(a, b) for arm in ARMS for row, here in zip(other[arm]["eval"], actual[arm]["eval"])
              for a, b in zip(row.values(), here.values()) if isinstance(a, float)]
    assert any(a != b and not (math.isnan(a) and math.isnan(b)) for a, b in floats)  # the path does differ
    for arm in ARMS:
        for row, want in zip(other[arm]["eval"], golden[arm]["eval"]):
            assert not mismatches(row, want), f"{arm} {row.get('metric')}: {mismatches(row, want)}"


def test_the_golden_covers_every_family():
    from models.families import FAMILIES

    assert {family for family, _ in ARMS.values()} == set(FAMILIES)
    golden = json.loads(GOLDEN.read_text())
    assert all(golden[arm]["eval"] and golden[arm]["samples"] for arm in ARMS)
