"""scaling.plan: a study before anything is written (docs/DESIGN.md §2).

The dry-run plan and its cost estimate (`dry_run`) and the launcher's checks of flags, study
file, study directory and resources (`launch_checks`).
"""
