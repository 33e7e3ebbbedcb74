"""jobs.train: training one run, resumably, and everything checked before it starts.
`python -m jobs.train` is its command line.

`loop` (the training loop and resume), `stopping` (stop requests, signals and the deadline
reserve), `portable` (moving a run between engines and world sizes), `wsd_branch` (decay branches
from a trunk's snapshots), `cli` (the command line's flags), `engines` (the
torch and DeepSpeed engines behind one interface), `ds_config` (the generated DeepSpeed config and
the user's overlay), `checkpoint` (the checkpoint format and loading a run's weights), `preflight`
(types, family capabilities, memory, data and writable paths: what `jobs.train` and
`scaling.plan.launch_checks` check first) and `spec_rules` (the trainer's own rules on a spec and on an existing
run directory). It imports `jobs.run` and `jobs.data`.
"""
