"""analysis.fit.background: a part computed in a child process equals the same part computed in the
caller, the child is skipped where it cannot pay, and a failing child falls back to the caller."""
from __future__ import annotations

import os

import numpy as np

from analysis.fit import background
from analysis.records.cells import latest
from analysis.fit.ensemble import ensemble_studies
from tests.analysis import synth

PARENT_ENV = "AOSCALE_TEST_BACKGROUND_PARENT"


def _final():
    return latest(synth.records(families=("aogpt",), sizes={k: synth.SIZES[k] for k in ("0.1M", "0.3M")}))[0]


def test_the_childs_ensemble_fits_equal_the_callers_bit_for_bit(monkeypatch):
    monkeypatch.setenv(background.WORKERS_ENV, "2")
    resamples = background.MIN_RESAMPLES
    pending = background.in_background(ensemble_studies, _final(), "n_params", resamples, 0, resamples=resamples)
    assert pending._child is not None  # it ran in a child process
    there, here = pending.result(), ensemble_studies(_final(), "n_params", resamples, 0)
    assert [s.family for s in there] == [s.family for s in here] and len(there[0].fits) == 2
    for a, b in zip(there, here):
        for fa, fb in zip(a.fits, b.fits):
            assert fa.status == fb.status and fa.params == fb.params and np.array_equal(fa.samples, fb.samples)


def test_no_child_with_one_worker_or_few_resamples(monkeypatch):
    monkeypatch.setenv(background.WORKERS_ENV, "1")
    assert background.in_background(sum, [1, 2], resamples=10**6)._child is None
    monkeypatch.setenv(background.WORKERS_ENV, "2")
    pending = background.in_background(sum, [1, 2], resamples=background.MIN_RESAMPLES - 1)
    assert pending._child is None and pending.result() == 3


def only_in_the_parent(value: int) -> int:
    """Raises anywhere but in the process that set PARENT_ENV."""
    if os.getpid() != int(os.environ[PARENT_ENV]):
        raise RuntimeError("not the parent")
    return value + 1


def test_a_failing_child_falls_back_to_the_caller_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv(background.WORKERS_ENV, "2")
    monkeypatch.setenv(PARENT_ENV, str(os.getpid()))
    pending = background.in_background(only_in_the_parent, 41, resamples=background.MIN_RESAMPLES)
    assert pending._child is not None and pending.result() == 42
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("analysis: background part failed (RuntimeError: not the parent)"), err


def test_a_bad_worker_count_exits_2_in_one_line_writing_nothing(tmp_path, monkeypatch, capsys):
    from analysis import fit_curves
    study = synth.write_study(tmp_path / "study", synth.records(families=("ar",), sizes={"0.1M": synth.SIZES["0.1M"]}))
    before = sorted(study.rglob("*"))
    monkeypatch.setenv(background.WORKERS_ENV, "all")
    assert fit_curves.main([str(study), "--bootstrap", "200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fit_curves: AOSCALE_ANALYSIS_WORKERS='all': expected a whole number >= 1"), err
    assert sorted(study.rglob("*")) == before
    monkeypatch.setenv(background.WORKERS_ENV, " 3 ")
    assert background.usable_cores() == 3
