"""jobs.eval.evaluate / jobs.eval.generate on tiny trained runs: records, idempotence, bad input."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch

from jobs.eval import evaluate as ev
from jobs.eval import generate as gen
from jobs.eval import metrics
from jobs.eval.records import CONTRACT_SCHEMA
from jobs.run.spec import RunSpec
from jobs.train.loop import train

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def shared_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AOSCALE_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("AOSCALE_DATA", raising=False)
        torch.set_num_threads(1)
        yield


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_cache):
    """Three tiny trained runs side by side in one study's runs/ folder."""
    root = tmp_path_factory.mktemp("study") / "runs"
    out = {}
    for family in ("ar", "aogpt", "mdm", "judge"):
        spec = RunSpec(family="ar" if family == "judge" else family, size="0.1M", steps=6, lr=3e-3,
                       warmup_steps=1, seq_len=32, batch_size=8, eval_batches=1, log_every=1, study="t",
                       variant=family, seed=7 if family == "judge" else 0,
                       role="judge" if family == "judge" else "compared")
        run_dir = root / spec.run_id
        assert train(run_dir, spec) == "done"
        out[family] = run_dir
    return out


def test_quick_suite_rows_per_family(runs):
    expected = {"ar": {"nll_l2r", "bpb_l2r", "nll_unigram"},
                "aogpt": {"nll_l2r", "bpb_l2r", "nll_anyorder", "nll_ensemble", "nll_unigram"},
                "mdm": {"nll_l2r", "bpb_l2r", "nll_anyorder", "nll_elbo_mdlm", "nll_elbo_kdce", "nll_unigram"}}
    for family, run_dir in runs.items():
        if family == "judge":
            continue
        frame = ev.evaluate(run_dir, "quick")
        assert set(frame["metric"]) == expected[family]
        assert (run_dir / "eval.parquet").exists()
        assert list(frame.columns)[:len(CONTRACT_SCHEMA)] == list(CONTRACT_SCHEMA)
        assert frame["value"].is_finite().all() and frame["step"].to_list() == [6] * len(frame)
        assert set(frame["device"]) == {"cpu"} and set(frame["precision"]) == {"fp32"}  # the run's device here
        nll = frame.filter(pl.col("metric") == "nll_l2r")["value"][0]
        assert 0 < nll < math.log(257) + 0.5
    ens = pl.read_parquet(runs["aogpt"] / "eval.parquet").filter(pl.col("metric") == "nll_ensemble")
    assert sorted(ens["m"].to_list()) == [1, 2, 4] and set(ens["n_targets"]) == {8}
    anyorder = pl.read_parquet(runs["aogpt"] / "eval.parquet").filter(pl.col("metric") == "nll_anyorder")
    assert anyorder["k_mc"][0] == 4 and anyorder["se"][0] > 0


def test_evaluation_is_idempotent(runs):
    first = ev.evaluate(runs["aogpt"], "quick")
    second = ev.evaluate(runs["aogpt"], "quick")
    assert first.equals(second)
    assert pl.read_parquet(runs["aogpt"] / "eval.parquet").equals(second)


def test_zero_shot_infill_and_lambada_from_the_data_kit(runs, data_kit):
    frame = ev.evaluate(runs["mdm"], "quick", zero_shot=("wikitext2", "ptb"), zero_shot_chunks=2,
                        data_dir=str(data_kit), val_chunks=2)
    assert {"wikitext2", "ptb"} <= set(frame["dataset"])
    assert frame.filter(pl.col("dataset") == "ptb")["split"][0] == "test"
    settings = ev.make_settings("quick", val_chunks=2, zero_shot=("wikitext2",), zero_shot_chunks=3,
                                data_dir=str(data_kit), infill_span=4)
    from jobs.train.checkpoint import load_model

    for family in ("ar", "aogpt"):
        model, spec, info = load_model(runs[family])
        datasets = ev.load_datasets(spec, settings, model.seq_len)
        rows = ev.infill_rows(model, datasets[1], {"study": "t"}, settings)
        assert rows[0]["estimator"] == ("prefix_only" if family == "ar" else "prefix_suffix")
        assert rows[0]["value"] > 0 and 0 <= rows[1]["value"] <= 1


def test_generation_records_and_samples(runs):
    gs = gen.GenSettings(n_samples=3, length=16, steps=(4, 16), tokens_per_step=(1, 4))
    frame = gen.generate(runs["aogpt"], gs, judge_run=runs["judge"])
    rows = frame.filter(pl.col("metric").str.starts_with("gen_"))
    ppl = rows.filter(pl.col("metric") == "gen_ppl")
    assert len(ppl) == 2 and set(ppl["evaluator"]) == {runs["judge"].name}
    entropy = rows.filter(pl.col("metric") == "gen_entropy")
    assert len(entropy) == 2 and (entropy["value"] > 0).all() and (entropy["value"] <= math.log(16)).all()
    assert sorted(rows.filter(pl.col("metric") == "gen_self_nll")["tokens_per_step"].to_list()) == [1, 4]
    samples = pl.read_parquet(runs["aogpt"] / "samples.parquet")
    assert len(samples) == 6 and samples["tokens"].list.len().to_list() == [16] * 6
    assert "nll_l2r" in set(frame["metric"])  # evaluation rows survive the merge
    mdm = gen.generate(runs["mdm"], gen.GenSettings(n_samples=2, length=16, steps=(8,)), judge_run=runs["judge"])
    assert set(mdm.filter(pl.col("metric") == "gen_ppl")["estimator"]) == {"ancestral"}


def test_a_compared_run_never_judges_and_late_judging_scores_the_saved_samples(runs):
    gs = gen.GenSettings(n_samples=2, length=16, steps=(4,), tokens_per_step=(1,))
    with pytest.raises(ev.InputError, match="compared run"):
        gen.generate(runs["mdm"], gs, judge_run=runs["ar"])
    frame = gen.generate(runs["mdm"], gs)  # no judge yet: samples and entropy, no gen_ppl
    assert "gen_ppl" not in set(frame["metric"]) and "gen_entropy" in set(frame["metric"])
    scored = gen.score_samples(runs["mdm"], judge_run=runs["judge"])
    ppl = scored.filter(pl.col("metric") == "gen_ppl")
    assert len(ppl) == 1 and ppl["evaluator"][0] == runs["judge"].name and ppl["value"][0] > 1
    assert ppl["step"][0] == 6 and ppl["n_samples"][0] == 2
    assert gen.score_samples(runs["mdm"], judge_run=runs["judge"]) is None  # scored once


def test_unigram_entropy_of_a_constant_sample_is_zero():
    samples = torch.tensor([[5] * 8, [1, 2] * 4, list(range(8))])
    assert gen.unigram_entropy(samples).tolist() == pytest.approx([0.0, math.log(2), math.log(8)], abs=1e-12)


def test_an_ema_run_is_scored_with_both_weights(tmp_path):
    spec = RunSpec(family="ar", size="0.1M", steps=6, lr=3e-3, warmup_steps=1, seq_len=32, batch_size=8,
                   eval_batches=1, ema=0.9, study="t")
    assert train(tmp_path, spec) == "done"
    frame = ev.evaluate(tmp_path, "quick", val_chunks=2)
    nll = frame.filter(pl.col("metric") == "nll_l2r").sort("weights")
    assert nll["weights"].to_list() == ["ema", "raw"] and nll["value"][0] != nll["value"][1]
    assert frame.filter(pl.col("metric") == "nll_unigram")["weights"].to_list() == [None]


@pytest.mark.parametrize("args,field", [
    (["--k-mc", "0"], "--k-mc"), (["--m-max", "-1"], "--m-max"), (["--datasets", "nope"], "--datasets"),
    (["--seq-len", "64"], "--seq-len"), (["--suite", "huge"], "--eval-suite"),
    (["--suite", "paper", "--gen-samples", "0"], "--gen-samples"),
])
def test_bad_evaluate_input_exits_2_and_writes_nothing(runs, tmp_path, capsys, args, field):
    run_dir = runs["ar"]
    before = (run_dir / "eval.parquet").read_bytes() if (run_dir / "eval.parquet").exists() else None
    assert ev.main(["--run-dir", str(run_dir), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err
    after = (run_dir / "eval.parquet").read_bytes() if (run_dir / "eval.parquet").exists() else None
    assert before == after


def test_missing_checkpoint_exits_2_in_a_real_process(tmp_path):
    spec = RunSpec(family="ar", size="0.1M", steps=2, lr=1e-3, warmup_steps=0)
    (tmp_path / "spec.json").write_text(spec.to_json())
    proc = subprocess.run([sys.executable, "-m", "jobs.eval.evaluate", "--run-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--run-dir" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "eval.parquet").exists()
    assert gen.main(["--run-dir", str(tmp_path / "absent")]) == 2


def test_factor_levels_from_the_spec_become_record_columns(tmp_path):
    from jobs.eval.records import read_records, record, run_context, to_frame, write_records
    from jobs.run.spec import RunSpec

    spec = RunSpec(family="aogpt", size="0.1M", steps=4, lr=1e-3, warmup_steps=1,
                   tracking={"factor_ema": 0.9999, "factor_pe": "adaln", "wandb": False})
    counts = {"core": 10, "family_non_embedding": 12}
    row = record(run_context(spec, counts, 100, 4, "ema"), dataset="shakespeare", split="validation",
                 metric="nll_l2r", value=1.5, unit="nats/token", n_samples=8)
    merged = write_records(tmp_path, to_frame([row]))
    assert merged["factor_ema"].to_list() == ["0.9999"] and merged["factor_pe"].to_list() == ["adaln"]
    assert "wandb" not in merged.columns
    again = write_records(tmp_path, to_frame([row]))
    assert again.equals(read_records(tmp_path)) and again.height == 1


# ---- LAMBADA against a brute-force per-item decode ---------------------------------------------
def _slot_logits(model, seq: list[int]) -> torch.Tensor:
    """Logits [L, V] for one sequence, slot j predicting seq[j] from seq[:j] (identity order)."""
    tokens = torch.tensor([seq])
    if model.family == "ar":
        return model(tokens)[0]
    return model(tokens, torch.arange(len(seq))[None])[0]


def _truncate(model, context: list[int], target: list[int]) -> list[int]:
    return context[-(model.seq_len - len(target)):]


def _brute_force_hits(model, items) -> int:
    """Items one at a time: every target token must be the argmax at its slot."""
    hits = 0
    for context, target in items:
        context = _truncate(model, context, target)
        slots = _slot_logits(model, context + target)[len(context):]
        hits += int(slots.argmax(-1).tolist() == target)
    return hits


def _greedy_target(model, context: list[int], length: int) -> list[int]:
    """The model's own greedy continuation, decoded token by token (a dummy fills the slot)."""
    out: list[int] = []
    for _ in range(length):
        out.append(int(_slot_logits(model, context + out + [0])[-1].argmax()))
    return out


def _planted_items(model, items):
    """Every other item's target replaced by the model's greedy continuation of its context."""
    planted = []
    for i, (context, target) in enumerate(items):
        if i % 2 == 0:
            target = _greedy_target(model, _truncate(model, context, target), len(target))
        planted.append((context, target))
    return planted


def test_lambada_rows_contract_and_brute_force(runs, data_kit, monkeypatch):
    from jobs.data import datasets
    from jobs.train.checkpoint import load_model
    from jobs.data.corpus import get_encoding

    settings = ev.make_settings("paper", data_dir=str(data_kit))
    model, spec, _ = load_model(runs["ar"])
    real = datasets.load_lambada(get_encoding(spec.tokenizer), data_dir=str(data_kit))
    assert len(real) == 5153  # OpenAI LAMBADA test split
    with torch.no_grad():
        (row,) = ev.lambada_rows(model, spec, {"study": "t"}, settings)
        expected = _brute_force_hits(model, real) / len(real)
    assert (row["metric"], row["unit"], row["n_samples"]) == ("lambada_acc", "fraction", 5153)
    assert (row["dataset"], row["split"]) == ("lambada", "test")
    assert row["value"] == pytest.approx(expected, abs=1e-12)
    assert row["se"] == pytest.approx(math.sqrt(expected * (1 - expected) / 5153), abs=1e-12)
    for family in ("ar", "aogpt"):  # planted hits make the comparison non-trivial
        model, spec, _ = load_model(runs[family])
        with torch.no_grad():
            items = _planted_items(model, real[:48])
            expected = _brute_force_hits(model, items) / len(items)
            monkeypatch.setattr(metrics, "load_lambada", lambda enc, data_dir=None: items)
            (row,) = ev.lambada_rows(model, spec, {"study": "t"}, settings)
        assert expected >= 0.5 and row["n_samples"] == 48
        assert row["value"] == pytest.approx(expected, abs=1e-12)
        assert row["se"] == pytest.approx(math.sqrt(expected * (1 - expected) / 48), abs=1e-12)


# ---- the paper suite's generation stage --------------------------------------------------------
def test_paper_suite_generation_rows(runs):
    n = 3  # --gen-samples (the suite's default is 16)
    small = dict(val_chunks=2, k_mc=2, m_max=2, n_targets=4, ensemble_chunks=2, gen_samples=n)  # no zero-shot
    for family in ("ar", "aogpt"):
        spec = RunSpec.load(runs[family] / "spec.json").replace(judge=runs["judge"].name)  # as a study sets it
        (runs[family] / "spec.json").write_text(spec.to_json())
        frame = ev.evaluate(runs[family], "paper", **small).filter(pl.col("metric").str.starts_with("gen_"))
        assert frame["value"].is_finite().all() and (frame["value"] > 0).all()
        assert frame["n_samples"].to_list() == [n] * len(frame)
        ppl = frame.filter(pl.col("metric") == "gen_ppl")
        assert ppl["evaluator"].to_list() == [runs["judge"].name]
        assert (ppl["value"] >= 1).all() and (ppl["se"] > 0).all()
        assert len(frame.filter(pl.col("metric") == "gen_time_s")) == 1
        assert len(frame.filter(pl.col("metric") == "gen_entropy")) == 1
        # AR: one step per token (L = 32); aogpt: the requested T (the sampler caps it at L)
        assert ppl["steps"].to_list() == [32]  # AR: one step per token; aogpt: T = 64 capped at L = 32
        joint = frame.filter(pl.col("metric") == "gen_self_nll").sort("tokens_per_step")
        if family == "ar":
            assert joint.is_empty()
            continue
        assert joint["tokens_per_step"].to_list() == [1, 2, 4, 8]
        assert joint["steps"].to_list() == [32, 16, 8, 4]  # ceil(L / k)
        assert set(joint["estimator"]) == {"decode_order"} and (joint["se"] > 0).all()


# ---- speed at comparable quality: repeats and sampling settings --------------------------------
def test_repeats_keep_the_first_stream_and_pool_the_samples(runs):
    one = gen.GenSettings(n_samples=2, length=16, steps=(4,), tokens_per_step=(1,))
    gen.generate(runs["aogpt"], one, judge_run=runs["judge"])
    first = pl.read_parquet(runs["aogpt"] / "samples.parquet")["tokens"].to_list()
    three = gen.GenSettings(n_samples=2, length=16, steps=(4,), tokens_per_step=(1,), repeats=3)
    frame = gen.generate(runs["aogpt"], three, judge_run=runs["judge"])
    samples = pl.read_parquet(runs["aogpt"] / "samples.parquet")
    assert samples["repeat"].to_list() == [0, 0, 1, 1, 2, 2]
    assert samples["tokens"].to_list()[:2] == first  # repeat 0 is the single generation, draw for draw
    assert samples["tokens"].to_list()[2:4] != first  # later repeats draw from their own streams
    timed = frame.filter(pl.col("metric") == "gen_time_s").row(0, named=True)
    assert timed["repeats"] == 3 and timed["n_samples"] == 2 and timed["se"] is not None and timed["se"] >= 0
    ppl = frame.filter(pl.col("metric") == "gen_ppl").row(0, named=True)
    assert ppl["n_samples"] == 6 and ppl["repeats"] == 3  # the judge scored every repeat's samples
    assert (ppl["temperature"], ppl["top_p"]) == (1.0, 1.0)


def test_a_new_generation_replaces_every_old_generation_row(runs):
    gs = gen.GenSettings(n_samples=2, length=16, steps=(4, 8), tokens_per_step=(1, 2))
    gen.generate(runs["aogpt"], gs, judge_run=runs["judge"])
    frame = gen.generate(runs["aogpt"], gen.GenSettings(n_samples=2, length=16, steps=(4,), tokens_per_step=(1,),
                                                        sampling=gen.sm.Sampling(0.7, 0.95)), judge_run=runs["judge"])
    rows = frame.filter(pl.col("metric").str.starts_with("gen_"))
    assert set(rows["temperature"]) == {0.7} and set(rows["steps"]) == {4, 16}  # 16: gen_self_nll at k = 1
    assert len(rows) == 4  # time, entropy, ppl at T = 4, self-NLL at k = 1: none of the old samples' rows


def test_the_speed_suite_generates_each_step_count_under_each_sampling_setting(runs):
    from jobs.data.suites import SUITES

    suite = SUITES["cpu-speed"]
    assert suite.gen_steps == (32, 16, 8) and suite.gen_sampling == ((1.0, 1.0), (0.7, 0.95)) and suite.gen_repeats == 3
    spec = RunSpec.load(runs["aogpt"] / "spec.json").replace(judge=runs["judge"].name)
    (runs["aogpt"] / "spec.json").write_text(spec.to_json())
    small = dict(val_chunks=2, k_mc=2, m_max=2, n_targets=4, ensemble_chunks=2, gen_samples=2, zero_shot=())
    frame = ev.evaluate(runs["aogpt"], "cpu-speed", **small)
    ppl = frame.filter(pl.col("metric") == "gen_ppl").sort("temperature", "steps")
    assert ppl.select("temperature", "top_p", "steps").rows() == [
        (0.7, 0.95, 8), (0.7, 0.95, 16), (0.7, 0.95, 32), (1.0, 1.0, 8), (1.0, 1.0, 16), (1.0, 1.0, 32)]
    assert set(ppl["n_samples"]) == {6} and set(ppl["repeats"]) == {3}
    joint = frame.filter(pl.col("metric") == "gen_self_nll")
    assert sorted(joint.select("temperature", "tokens_per_step").rows()) == sorted(
        (t, k) for t in (0.7, 1.0) for k in (1, 2, 4, 8))
    samples = pl.read_parquet(runs["aogpt"] / "samples.parquet")
    assert len(samples) == 2 * 3 * 3 * 2  # settings x step counts x repeats x samples
    # annealing sharpens the samples: under the model itself they are likelier than plain ones
    at_1 = joint.filter(pl.col("tokens_per_step") == 1).sort("temperature")["value"].to_list()
    assert at_1[0] < at_1[1]
