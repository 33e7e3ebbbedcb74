"""Named studies: the quickstart, the paper's recipe and the ablations of the seed review.

A preset is a set of arms plus settings (sizes, seeds, data, budget, network, EMA, run
overrides). Settings a preset leaves out come from a base chosen by the sizes: the CPU base for
CPU rungs, the paper base as soon as a GPT-3 rung is in the study. The network and the EMA rate
are study settings: every family of a study trains on the same network with the same EMA
(docs/DESIGN.md §7); only ablation arms override them, explicitly and labelled.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.ladder import GPT3_RUNGS

from .arms import DEFAULT_ARMS, NETWORKS, PAPER_EMA, Arm
from . import review_presets
from .review_presets import CPU_PRESETS

CPU_BASE: dict[str, Any] = {
    "sizes": ["0.1M", "0.3M", "1M"], "seeds": 2, "tokenizer": "bytes", "corpus": "shakespeare",
    "seq_len": 128, "network": "gpt2", "ema": 0.0,
}
# The AO-GPT paper's recipe (docs/DESIGN.md §12): GPT-2 BPE, OpenWebText, context 1024, 1,048,576
# tokens per step (16 x 1024 x 64), 2000 warm-up steps of that batch, cosine to 10 % of peak,
# AdamW (0.9, 0.95), weight decay 0.05, clip 1.0. Peak LRs (6e-4 Small, 3e-4 Medium) equal GPT-3's
# table, which also gives 760M's 2.5e-4 (the paper trains no 760M). Difference: the paper trains
# 500k steps; a scaling study trains tokens_per_param x params (Chinchilla 20 by default). Every
# family trains on the official AO-GPT network with its EMA 0.9999 (docs/DESIGN.md §7: one network, one EMA).
# OpenWebText has only a train split: validation is the held-out slice of jobs.data.tokencache
# (0.05 % of documents by hash, as nanoGPT holds out 0.05 %), the same on every machine.
PAPER_BASE: dict[str, Any] = {
    "sizes": ["125M", "350M", "760M"], "seeds": 3, "tokenizer": "gpt2",
    "corpus": "Skylion007/openwebtext", "seq_len": 1024, "batch_size": 1024,
    "warmup_tokens": 2000 * 2**20, "network": "official", "ema": PAPER_EMA,
    "run": {"weight_decay": 0.05, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "min_lr_ratio": 0.1},
}


def base_for(sizes: list[str]) -> dict[str, Any]:
    """The paper base when any GPT-3 rung is in the study, else the CPU base."""
    return PAPER_BASE if any(size in GPT3_RUNGS for size in sizes) else CPU_BASE


def _family_arms() -> list[Arm]:
    """Every registered family's default arm, in the registry's order."""
    return list(DEFAULT_ARMS.values())


def _aogpt(factors: dict[str, Any], **changes: Any) -> Arm:
    """An AO-GPT arm: its default (the paper's adaln, mix:0.1) with some options changed; `ema=`
    overrides the study's rate (an ablated factor)."""
    options = {**dict(DEFAULT_ARMS["aogpt"].options), **changes}
    ema = options.pop("ema", None)
    return Arm("aogpt", options, ema, factors)


# Quickstart (docs/results/quickstart/, docs/design-log/quickstart-tuning.md): AR, AO-GPT (adaLN, mix:0.1) and
# MDLM at 2/48/2 and 0.1M (57k and 100k core parameters), 3 seeds, EMA off, rotary positions for
# every family (network gpt2,pos=rope), 600 steps of 32 sequences x 32 bytes (614,400 tokens per
# run), peak lr 3e-3 (the width rule's cap) after 60 warm-up steps. Three seeds because with two,
# t(1) = 12.7 makes a paired 95 % interval 9x its sd: MDLM 0.3M's two seeds differed by 0.38
# nats/byte and its gap interval held zero (issue 26). Three seeds at 0.1M/0.3M would take ~10 min
# of 2 idle cores, so the rungs are the two cheapest of the laptop ladder (~2.4x less compute):
# measured, every gap to AR then excludes zero and every run ends >= 0.30 nats/byte below the
# unigram baseline. With learned positions AO-GPT needs ~2,000 steps to leave the plateau; with
# RoPE 600 suffice. The `cpu` suite scores 4,096 windows spread over the whole validation split.
QUICKSTART_NETWORK = "gpt2,pos=rope"
QUICKSTART_STEPS = 600
QUICKSTART_TOKENS = QUICKSTART_STEPS * 32 * 32
QUICKSTART: dict[str, Any] = {
    "sizes": ["2/48/2", "0.1M"], "seeds": 3, "tokens": QUICKSTART_TOKENS, "seq_len": 32,
    "batch_size": 32, "lr": 3e-3, "warmup_steps": 60, "ema": 0.0, "network": QUICKSTART_NETWORK,
    "eval_suite": "cpu",
}
QUICKSTART_FAMILIES = ("ar", "aogpt", "mdm")
# Laptop study (docs/design-log/quickstart-tuning.md, "Measured throughput"): 4 sizes x 3 seeds,
# budgets proportional to size (8 tokens per core parameter: 0.44M tokens at 2/48/2 ... 2.7M at
# 0.3M), the quickstart's network (RoPE), sequence length, batch, lr and warm-up, EMA off for every
# family. Sizes span 6x in core parameters (55k ... 336k): one thread trains 0.3M at ~8k tokens/s
# and 1M at ~3k, so 1M alone at this budget would take ~20 min per family and seed. With learned
# positions AO-GPT 2/48/2 stayed on the unigram plateau at 12 tokens/param (1 seed of 3).
# Projected from side-by-side throughput: ~50 min on 2 idle cores.
LAPTOP_TOKENS_PER_PARAM = 8.0
LAPTOP: dict[str, Any] = {
    "sizes": ["2/48/2", "0.1M", "3/80/2", "0.3M"], "seeds": 3,
    "tokens_per_param": LAPTOP_TOKENS_PER_PARAM, "seq_len": 32, "batch_size": 32, "lr": 3e-3,
    "warmup_steps": 60, "ema": 0.0, "network": QUICKSTART_NETWORK, "eval_suite": "cpu",
}


def laptop() -> dict[str, Any]:
    """AR, AO-GPT and MDLM at 4 sizes x 3 seeds, budgets proportional to size, ~50 min on 2 cores."""
    return {**CPU_BASE, **LAPTOP, "arms": [DEFAULT_ARMS[f] for f in QUICKSTART_FAMILIES]}


def quickstart() -> dict[str, Any]:
    """AR vs AO-GPT vs MDLM at 2/48/2 and 0.1M x 3 seeds on Shakespeare bytes (RoPE), every run off the plateau."""
    return {**CPU_BASE, **QUICKSTART, "arms": [DEFAULT_ARMS[f] for f in QUICKSTART_FAMILIES]}


# MDLM's own time conventions (kuleshov-group/mdlm; docs/recipe-fidelity.md): masking w.p.
# (1 - eps)·t and stratified antithetic times. The `paper` preset's MDM arm trains with them.
MDLM_CONVENTIONS: dict[str, Any] = {"mask_prob": "mdlm", "antithetic": "stratified"}


def paper() -> dict[str, Any]:
    """125M/350M/760M on OpenWebText, every family on the official AO-GPT network with EMA 0.9999, 3 seeds."""
    arms = [Arm(a.family, {**dict(a.options), **MDLM_CONVENTIONS}) if dict(a.options).get("loss") == "mdlm" else a
            for a in _family_arms()]
    return {**PAPER_BASE, "arms": arms, "eval_suite": "paper"}


def network() -> dict[str, Any]:
    """AR and AO-GPT on the GPT-2 network vs the official AO-GPT one: the architecture effect, measured apart."""
    arms = [Arm(arm.family, arm.options, factors={"network": name}, network=name)
            for arm in (DEFAULT_ARMS["ar"], DEFAULT_ARMS["aogpt"]) for name in NETWORKS]
    return {"arms": arms}


def pos() -> dict[str, Any]:
    """AR, AO-GPT and MDLM with learned absolute positions vs rotary ones (RoPE), on GPT-2's network."""
    networks = {pos: "gpt2" if pos == "learned" else f"gpt2,pos={pos}" for pos in ("learned", "rope")}
    arms = [Arm(DEFAULT_ARMS[f].family, DEFAULT_ARMS[f].options, factors={"network": net, "pos": pos}, network=net)
            for f in QUICKSTART_FAMILIES for pos, net in networks.items()]
    return {"arms": arms}


def pe() -> dict[str, Any]:
    """Target-position injection: adaln, input, layer_shared, layer_distinct (paper Fig. 6/7)."""
    modes = ("adaln", "input", "layer_shared", "layer_distinct")
    return {"arms": [_aogpt({"pe": mode}, target_pe=mode) for mode in modes]}


def ema() -> dict[str, Any]:
    """AO-GPT with EMA rate 0 (off), 0.99, 0.999, 0.9999 (each arm overrides the study's rate)."""
    return {"arms": [_aogpt({"ema": rate}, ema=rate) for rate in (0.0, 0.99, 0.999, 0.9999)]}


def l2r_mix() -> dict[str, Any]:
    """Share of left-to-right sequences 0, .1, .3, .5, .9; evaluation scores both orders."""
    return {"arms": [_aogpt({"l2r_mix": p}, order=f"mix:{p}") for p in (0.0, 0.1, 0.3, 0.5, 0.9)]}


def orders() -> dict[str, Any]:
    """Training orders: l2r, uniform, one fixed permutation, blockwise (16-token blocks)."""
    kinds = ("l2r", "uniform", "fixed:0", "blockwise:16")
    return {"arms": [_aogpt({"order": kind}, order=kind) for kind in kinds]}


def factorial() -> dict[str, Any]:
    """adaln vs input x EMA 0.9999 vs off x mix:0.1 vs uniform: 2x2x2, main effects separable."""
    arms = []
    for mode in ("adaln", "input"):
        for rate in (0.0, PAPER_EMA):
            for mix in (0.0, 0.1):
                factors = {"pe": mode, "ema": rate, "l2r_mix": mix}
                arms.append(_aogpt(factors, target_pe=mode, ema=rate, order=f"mix:{mix}"))
    return {"arms": arms}


# Frontier study (issue: each family on its own compute-optimal frontier). AR, AO-GPT (adaLN,
# mix:0.1) and MDLM on the quickstart's network, sequence and batch. isoFLOP profiles at 3 budgets
# over one decade (3e11, 1e12, 3e12 training FLOPs, each family's own count), 5 continuous shapes
# per budget spaced 1.6x in core parameters around the Chinchilla-predicted optimum (at 2x the
# smallest shapes of the top budgets would pass 2.7 epochs of Shakespeare's 4.5M training bytes;
# at 1.6x two runs reach 1.57, flagged by the data ledger; budgets a decade lower would put the
# tiniest shapes near the unigram plateau). The lr is swept (1e-3, 3e-3, 1e-2, 3e-2: the first
# reference run's best was 1e-2, the edge of 1e-3..1e-2, so the sweep was widened in place,
# scaling.run.study_ledger.widens) at the middle budget only; the other budgets run the quickstart's 3e-3, the
# value the rule carries until a choice exists (the report's chosen-settings table shows what the
# middle budget picked per size; `--carry-lr-from <this study>` then plans the study with each
# family's choice at the outer budgets: analysis.records.carry states the rule). Two
# seeds at each budget's predicted optimum (the central size), one elsewhere. Warm-up: 10 % of a
# run (the rule's cap; 61k tokens asked). Evaluation: the `frontier` suite, validation for
# selection and a disjoint test split for every reported number.
FRONTIER_BUDGETS = (3e11, 1e12, 3e12)
FRONTIER_LRS = (1e-3, 3e-3, 1e-2, 3e-2)
# MDLM's best at 1e12 then sat on 3e-2 (by 0.0006 nats over 1e-2, one seed): its sweep alone also
# takes 1e-1, so its carried lr is an interior choice (AR and AO-GPT chose 1e-2, inside).
FRONTIER_MDM_LRS = (*FRONTIER_LRS, 1e-1)
FRONTIER: dict[str, Any] = {
    "budgets": list(FRONTIER_BUDGETS), "grid_points": 5, "grid_step": 1.6, "seeds": 1, "optimum_seeds": 2,
    "sweep": {"lr": list(FRONTIER_LRS), "mdm": {"lr": list(FRONTIER_MDM_LRS)}, "at_budget": FRONTIER_BUDGETS[1]},
    "seq_len": 32, "batch_size": 32,
    "lr": 3e-3, "warmup_tokens": 60 * 32 * 32, "ema": 0.0, "network": QUICKSTART_NETWORK,
    "eval_suite": "frontier",
}
# Its GPU-scale counterpart at Marin's isoFLOP budgets (1e18, 1e19, 1e20), on the paper base
# (OpenWebText, GPT-2 BPE, context 1024, official network, EMA 0.9999), lr swept around GPT-3's
# 125M-350M values at the middle budget.
FRONTIER_GPU: dict[str, Any] = {
    "budgets": [1e18, 1e19, 1e20], "grid_points": 5, "grid_step": 2.0, "seeds": 1, "optimum_seeds": 2,
    "sweep": {"lr": [3e-4, 6e-4, 1.2e-3], "at_budget": 1e19}, "lr": 6e-4, "eval_suite": "frontier",
}


def frontier() -> dict[str, Any]:
    """AR, AO-GPT and MDLM isoFLOP profiles at 3e11-3e12 FLOPs, lr swept at the middle budget, ~70 min on 2 cores."""
    return {**CPU_BASE, **FRONTIER, "arms": [DEFAULT_ARMS[f] for f in QUICKSTART_FAMILIES]}


def frontier_gpu() -> dict[str, Any]:
    """The frontier study at 1e18-1e20 FLOPs on OpenWebText (GPU cluster; dry-run for GPU-hours)."""
    return {**PAPER_BASE, **FRONTIER_GPU, "arms": [DEFAULT_ARMS[f] for f in QUICKSTART_FAMILIES]}


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "quickstart": quickstart, "laptop": laptop, "paper": paper, "network": network, "pos": pos, "pe": pe,
    "ema": ema, "l2r-mix": l2r_mix, "orders": orders, "factorial": factorial,
    "frontier": frontier, "frontier-gpu": frontier_gpu,
    **CPU_PRESETS,  # the same questions at CPU scale (scaling/study/review_presets.py)
}
review_presets.bind(PRESETS)  # the CPU versions reuse the GPU presets' arms


def preset_settings(name: str) -> dict[str, Any]:
    """A preset's settings; unknown name -> ValueError naming the valid ones."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    return {"name": name, **PRESETS[name]()}
