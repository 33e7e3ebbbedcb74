"""The dry-run's evaluation cost (scaling.plan.dry_run.eval_flops): each run's suite, in forward
tokens and FLOPs, with MDM's exact L2R at one pass per token; its column and total line."""
from __future__ import annotations

from jobs.run.spec import RunSpec
from scaling.plan import dry_run as dr

L = 32


def spec(family: str, **changes) -> RunSpec:
    return RunSpec(family=family, size="0.1M", steps=2, seq_len=L, batch_size=4, lr=1e-3, warmup_steps=1, **changes)


def test_quick_suite_forward_tokens_per_family():
    # quick: 8 validation windows, 4 wikitext2 chunks (bytes: 1,240,786 // 32 of them, cut to 4), k_mc 4,
    # the ensemble on min(8, 8) windows x 8 targets x M 4 x L/2
    windows = 8 + 4
    assert dr.eval_forward_tokens(spec("ar")) == windows * L
    assert dr.eval_forward_tokens(spec("aogpt")) == windows * (L + 4 * L) + 8 * 8 * 4 * L / 2
    assert dr.eval_forward_tokens(spec("mdm")) == windows * (L * L + 2 * 4 * L)  # L2R: L passes of L
    assert dr.eval_forward_tokens(spec("mdm", model_options={"loss": "sedd"})) == windows * (L * L + 3 * 4 * L)
    assert dr.eval_forward_tokens(spec("mdm", ema=0.9)) == 2 * windows * (L * L + 2 * 4 * L)  # both weights


def test_paper_suite_counts_every_set_lambada_infilling_and_generation():
    ar, mdm = spec("ar", eval_suite="paper", tokenizer="gpt2"), spec("mdm", eval_suite="paper", tokenizer="gpt2")
    chunks = [256] + [dr.ZERO_SHOT_TOKENS["gpt2"][n] // L for n in ("wikitext2", "ptb", "lm1b")]
    lambada = dr.LAMBADA_TOKENS["gpt2"]
    gen_ar = 16 * L * (1 + 1)  # one cached generation of L and the judge's pass, per sample
    gen_mdm = 16 * L * (64 + 1)  # 64 steps of L, and the judge's pass
    assert dr.eval_forward_tokens(ar) == sum(chunks) * L + chunks[1] * L + lambada[0] + gen_ar
    assert dr.eval_forward_tokens(mdm) == (sum(chunks) * (L * L + 2 * 16 * L) + chunks[1] * L * 16 + lambada[1]
                                           + gen_mdm)
    per_token = dr.family_accounting("mdm", "0.1M", "{}", 50257, L)[1]
    assert dr.eval_flops(mdm, per_token) == dr.eval_forward_tokens(mdm) * per_token / 3


def test_the_plan_shows_each_runs_evaluation_cost_and_its_total(capsys, tmp_path):
    from scaling import launch

    assert launch.main(["--dry-run", "--study-dir", str(tmp_path / "s"), "--sizes", "0.1M", "--families", "ar,mdm",
                        "--eval-suite", "paper"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1].split()
    assert header[header.index("steps") + 1:][:2] == list(dr.EVAL_COLUMNS)
    rows = [line.split() for line in lines[2:] if line.split()[:1] and line.split()[1:2] in (["ar"], ["mdm"])]
    cost = {row[1]: float(row[header.index("eval_flops")]) for row in rows}
    assert cost["mdm"] > 10 * cost["ar"] > 0  # MDM's exact L2R: a pass per token
    total = [line for line in lines if line.startswith("evaluation (paper suite): ")]
    assert len(total) == 1 and "GPU-hours" in total[0]
