"""scaling: what to run (docs/DESIGN.md §3).

Three sub-packages, each importing only those before it: `study` (named studies and study files:
presets, arms, run rules, sweeps, settings), `plan` (the dry-run plan and the checks before
anything is written) and `run` (the study directory as a ledger, its journal, the backends and
the scheduler that submit runs). The entry points stay here: `launch`, `status` and `rounds`
(`python -m scaling.launch | status | rounds`); the `aoscale` command is `cli.aoscale`.
"""
