"""A relaunch writes a damaged status.json back as rebuilt from the run's checkpoints (issue 49
item 7): the report and scaling.status then read a true, readable status; a run whose lock is
held (a live worker owns its status) is left alone."""
from __future__ import annotations

import json

from jobs.run import files as runfiles
from jobs.run.lock import holding
from scaling.run import study_ledger
from scaling.study.study_spec import build_study


def test_a_relaunch_writes_a_damaged_status_back_as_rebuilt_and_leaves_a_held_run_alone(tmp_path, capsys):
    study = build_study({"families": "ar", "sizes": "0.1M", "seeds": 2, "max_steps": 2, "seq_len": 32})
    study_dir = tmp_path / "study"
    study_ledger.prepare(study_dir, study)
    done, held = (study_ledger.run_dir(study_dir, r) for r in study.run_ids)
    for directory in (done, held):
        (directory / runfiles.CKPT_DIR / f"{runfiles.CKPT_PREFIX}00000002").mkdir(parents=True)
        (directory / runfiles.STATUS_FILE).write_text('{"state": "done", "ste')
    with holding(held):
        study_ledger.prepare(study_dir, study)
        assert (held / runfiles.STATUS_FILE).read_text() == '{"state": "done", "ste'
    status = json.loads((done / runfiles.STATUS_FILE).read_text())
    assert (status["state"], status["step"], status["steps"]) == ("done", 2, 2)
    assert "rebuilt from the checkpoints as done at step 2" in status["warnings"][0]
    assert runfiles.repair_status(done) is False  # readable now: nothing to write
    assert sorted(p.name for p in done.iterdir() if p.name.startswith(".status"))  == []
    assert "rebuilt from the checkpoints" in capsys.readouterr().err
