"""scaling: what to run (docs/DESIGN.md §3).

Named studies and study files (`presets`, `study`: families × variants × sizes × seeds, with
data, budget and engine), the arms of a study (`arms`), the run rules of each rung (`recipes`:
tokens, batch, learning rate), the dry-run plan (`plan`), the checks before anything is written
(`preflight`), the study directory as a ledger (`ledger`), the backends and the scheduler that
submit runs, the `launch` and `status` commands, and `aoscale` (one command over every entry
point: `aoscale launch | status | fit | train | evaluate | generate`).
"""
