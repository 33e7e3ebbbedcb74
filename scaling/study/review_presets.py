"""CPU-scale versions of the review's ablation presets: each question as a study a laptop finishes.

The GPU-scale presets (`pe`, `ema`, `l2r-mix`, `factorial`) keep their names; these carry a
`-cpu` suffix. Every one has 3 seeds and at least 2 sizes, trains on Shakespeare bytes with the
quickstart's schedule (seq 32 x batch 32, peak lr 3e-3 after 60 warm-up steps, cosine to 10 %) and
is sized so that `scaling.launch --dry-run` estimates at most 40 minutes on 2 cores
(`tests/scaling/study/test_review_presets.py` checks it). That estimate leaves out start-up and
evaluation, ~30 s per run on one thread (scaling/plan/dry_run.py); `REAL_S_PER_RUN` projects it.

Networks and budgets (docs/design-log/quickstart-tuning.md, docs/results/laptop/):
- rotary positions (`gpt2,pos=rope`) for every study but `pe-cpu`: with them AO-GPT and MDLM leave
  the unigram plateau within a few hundred steps (laptop: AO-GPT 2/48/2 ends 0.34 nats/byte below
  it after 430 steps, MDLM 0.20);
- `pe-cpu` on learned positions: with RoPE an AO-GPT slot's query is rotated by its *target*
  position in every layer, so every variant already receives the target position inside each
  attention layer and the injection under test only adds to it; the paper's contrast (target
  position enters only through the injection) needs learned positions. With them AO-GPT (adaLN,
  mix:0.1) needs ~2,000 steps to end 0.24 (0.1M) and 0.32 (0.3M) below the plateau, hence the
  budget and the sizes 0.1M and 3/80/2 (the smaller 2/48/2 would stay nearer the plateau).
Which runs still end on the plateau is the study's own output (`scaling.status`, the report).

De-confounding designs (issue 36; designed, not yet trained). `pe-cpu` and `factorial-cpu` ran
every arm at one lr (3e-3), and adaLN's modulation, larger than the core, may need another: their
verdicts stay open until each arm has its own. `pe-lr-cpu` and `factorial-lr-cpu` sweep
`LR_SWEEP` for every arm (scaling.study.sweep: a study-wide `lr` list; analysis.records.selection chooses per
cell, which includes the variant, so each arm gets its own lr) on the `frontier` suite, which
evaluates a validation slice for the choice and a disjoint test slice for every reported number
(512 windows each). A choice at an end of the sweep is warned ("widen the sweep"); widening it
(every old value kept) extends the study in place (scaling.run.study_ledger.widens). To stay within 60
minutes each, both run at one size (0.1M, where the shared-lr verdicts were read). `ema-long-cpu`
trains long enough that 0.999 and 0.9999 differ under the warm-up min(rate, (1+n)/(10+n))
(models/ema.py: they part at n = 8,991 updates); its rate-0 arm is dropped because every EMA run
also scores its raw weights (EMA - raw is paired within each run).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .arms import DEFAULT_ARMS, Arm

TOKENS_PER_STEP = 32 * 32
LR_SWEEP = [1e-3, 3e-3, 1e-2]  # around the shared 3e-3, one half-decade each side
# factorial-lr-cpu trained on LR_SWEEP chose 1e-2, its top, in 15 arm-metric cells (the report's "widen the
# sweep" warnings), so its sweep was widened in place to 3e-2 (scaling.run.study_ledger.widens); no cell
# chose 3e-2. The preset plans the widened sweep, so a rerun is that study
FACTORIAL_LR_SWEEP = [*LR_SWEEP, 3e-2]
SPLIT_SUITE = "frontier"  # validation for selection, a disjoint test slice for the report (jobs/data/suites.py)
# 0.999 and 0.9999 part once (1+n)/(10+n) > 0.999, n >= 8,991 updates; at 15,000 steps 0.9999's decay
# ends at 0.99940 (an average over ~1,670 steps against 0.999's ~1,000)
EMA_LONG_STEPS = 15_000
ROPE = "gpt2,pos=rope"
REAL_S_PER_RUN = 30.0  # start-up and `cpu`-suite evaluation per run, one thread (scaling/plan/dry_run.py)
CPU_REVIEW: dict[str, Any] = {
    "sizes": ["2/48/2", "0.1M"], "seeds": 3, "tokenizer": "bytes", "corpus": "shakespeare", "seq_len": 32,
    "batch_size": 32, "lr": 3e-3, "warmup_steps": 60, "ema": 0.0, "network": ROPE, "eval_suite": "cpu",
}


def _settings(steps: int, arms: list[Arm], **changes: Any) -> dict[str, Any]:
    """The common CPU settings at `steps` optimizer steps per run, with these arms."""
    return {**CPU_REVIEW, "tokens": steps * TOKENS_PER_STEP, **changes, "arms": arms}


GPU_PRESETS: dict[str, Callable[[], dict[str, Any]]] = {}  # filled by scaling.study.presets (bind), which imports us


def bind(presets: dict[str, Callable[[], dict[str, Any]]]) -> None:
    """Give this module the GPU-scale presets whose arms the CPU versions reuse."""
    GPU_PRESETS.update(presets)


def _arms(preset: str) -> list[Arm]:
    """The arms of a GPU-scale preset (scaling.study.presets), so both scales ask the same question."""
    return GPU_PRESETS[preset]()["arms"]


def pe_cpu() -> dict[str, Any]:
    """The 4 target-position injections on learned positions at 0.1M and 3/80/2, 2,000 steps, 3 seeds."""
    return _settings(2000, _arms("pe"), sizes=["0.1M", "3/80/2"], network="gpt2")


def ema_cpu() -> dict[str, Any]:
    """EMA 0 / .99 / .999 / .9999 on AO-GPT, 1,500 steps: below 8,991 steps the warm-up
    min(rate, (1+n)/(10+n)) caps .999 and .9999 alike, so those two arms must agree."""
    return _settings(1500, _arms("ema"))


def l2r_mix_cpu() -> dict[str, Any]:
    """L2R share 0 / .1 / .3 / .5 / .9, any-order and L2R loss, 1,000 steps, 2 sizes x 3 seeds."""
    return _settings(1000, _arms("l2r-mix"))


def factorial_cpu() -> dict[str, Any]:
    """adaLN x EMA .9999 x 10 % L2R (2x2x2) plus σ-GPT on the same network, 1,000 steps."""
    return _settings(1000, [*_arms("factorial"), DEFAULT_ARMS["sigma_gpt"]])


def dec_enc_cpu() -> dict[str, Any]:
    """Decoder vs encoder: AO-GPT vs MDLM at 3 sizes, L2R and any-order, ensembling M = 1, 2, 4."""
    return _settings(1000, [DEFAULT_ARMS["aogpt"], DEFAULT_ARMS["mdm"]], sizes=["2/48/2", "0.1M", "3/80/2"])


def mdm_loss_cpu() -> dict[str, Any]:
    """Encoder objectives on one network: MDLM, RADD's k-DCE and SEDD's score entropy, 1,000 steps."""
    arms = [Arm("mdm", {"loss": loss}, factors={"loss": loss}) for loss in ("mdlm", "kdce", "sedd")]
    return _settings(1000, arms)


def infill_cpu() -> dict[str, Any]:
    """Infilling (8-byte middle spans) and generation for AR, AO-GPT, σ-GPT and MDLM, 1,000 steps;
    generation at matched step counts, plain and annealed, 3 repeats, judged by a dedicated AR run
    (the `cpu-speed` suite)."""
    arms = [DEFAULT_ARMS[f] for f in ("ar", "aogpt", "sigma_gpt", "mdm")]
    return _settings(1000, arms, eval_suite="cpu-speed")


def _each_arm_tuned(settings: dict[str, Any], lrs: list[float] = LR_SWEEP) -> dict[str, Any]:
    """The settings with every arm's lr swept over `lrs`, chosen on validation, reported on test."""
    return {**settings, "sweep": {"lr": list(lrs)}, "eval_suite": SPLIT_SUITE}


def pe_lr_cpu() -> dict[str, Any]:
    """pe-cpu with each injection at its own lr: 1e-3 / 3e-3 / 1e-2 per arm at 0.1M, 2,000 steps, 3 seeds."""
    return _each_arm_tuned({**pe_cpu(), "sizes": ["0.1M"]})


def factorial_lr_cpu() -> dict[str, Any]:
    """factorial-cpu with each arm at its own lr: 1e-3 / 3e-3 / 1e-2 / 3e-2 per arm at 0.1M, 1,000 steps, 3 seeds."""
    return _each_arm_tuned({**factorial_cpu(), "sizes": ["0.1M"]}, FACTORIAL_LR_SWEEP)


def ema_long_cpu() -> dict[str, Any]:
    """EMA 0.999 vs 0.9999 at 15,000 steps, where the warm-up no longer makes them one computation; 2/48/2, 3 seeds."""
    arms = [arm for arm in _arms("ema") if dict(arm.factors).get("ema") in (0.999, 0.9999)]
    return _settings(EMA_LONG_STEPS, arms, sizes=["2/48/2"])


CPU_PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "pe-cpu": pe_cpu, "ema-cpu": ema_cpu, "l2r-mix-cpu": l2r_mix_cpu, "factorial-cpu": factorial_cpu,
    "dec-enc-cpu": dec_enc_cpu, "mdm-loss-cpu": mdm_loss_cpu, "infill-cpu": infill_cpu,
    "pe-lr-cpu": pe_lr_cpu, "factorial-lr-cpu": factorial_lr_cpu, "ema-long-cpu": ema_long_cpu,
}
# the de-confounding designs of issue 36: one size each, and each may take up to 60 minutes
DECONFOUNDING = ("pe-lr-cpu", "factorial-lr-cpu", "ema-long-cpu")
