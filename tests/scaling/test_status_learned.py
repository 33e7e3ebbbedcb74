"""scaling.status flags an evaluated run that is still on the unigram plateau."""
from __future__ import annotations

import torch

from jobs.eval import evaluate as ev
from jobs.run.spec import RunSpec
from jobs.train.loop import train
from scaling.status import learned


def test_an_untrained_run_is_flagged_plateau(tmp_path, monkeypatch):
    monkeypatch.setenv("AOSCALE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("AOSCALE_DATA", raising=False)
    torch.set_num_threads(1)
    run_dir = tmp_path / "run"
    spec = RunSpec(family="aogpt", size="0.1M", steps=2, lr=1e-4, warmup_steps=1, seq_len=32, batch_size=4,
                   eval_batches=1, model_options={"order": "uniform"})
    assert train(run_dir, spec) == "done"
    assert learned(run_dir) == "-"  # not evaluated yet
    frame = ev.evaluate(run_dir, "quick", val_chunks=2, k_mc=2, m_max=2, n_targets=4, ensemble_chunks=2)
    base = frame.filter(frame["metric"] == "nll_unigram")["value"][0]
    l2r = frame.filter(frame["metric"] == "nll_l2r")["value"][0]
    assert l2r > base - 0.1  # two steps at lr 1e-4 learn nothing; a unigram model is far better
    assert learned(run_dir) == "plateau"
