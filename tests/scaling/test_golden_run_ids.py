"""Run ids of every preset, every example study file and the README's used-by command, pinned.

The ids come from the launcher's own path (its parser, `study_from_args`, the dry-run plan), so a
refactor of how settings are parsed, merged or checked must leave every one of them unchanged.
Regenerate only for a change that is meant to change run ids: `AOSCALE_UPDATE_GOLDEN=1`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from scaling import launch
from scaling.plan.dry_run import plan_rows
from scaling.study.presets import PRESETS

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "all_run_ids.json"
COMMANDS = {f"--preset {name}": ["--preset", name] for name in PRESETS}
COMMANDS["--sizes 125M,350M,760M --seeds 3"] = ["--sizes", "125M,350M,760M", "--seeds", "3"]
COMMANDS.update({f"--spec examples/{p.name}": ["--spec", str(p)] for p in sorted((REPO / "examples").glob("*.toml"))})


def plan(argv: list[str]) -> dict:
    """The study's name, hash and the run ids of its dry-run plan, in plan order."""
    study = launch.study_from_args(launch.parser().parse_args([*argv, "--dry-run"]))
    return {"name": study.name, "hash": study.study_hash, "run_ids": [row.run_id for row in plan_rows(study)]}


def golden_doc() -> dict:
    return {label: plan(argv) for label, argv in COMMANDS.items()}


def test_every_preset_and_the_used_by_command_keep_their_run_ids():
    if os.environ.get("AOSCALE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(golden_doc(), indent=1) + "\n")
    assert golden_doc() == json.loads(GOLDEN.read_text())
