"""jobs.train: training one run, resumably, and everything checked before it starts.
`python -m jobs.train` is its command line.

`loop` (the training loop, signals, resume), `cli` (the command line's flags), `engines` (the
torch and DeepSpeed engines behind one interface), `ds_config` (the generated DeepSpeed config and
the user's overlay), `checkpoint` (the checkpoint format and loading a run's weights), `preflight`
(types, family capabilities, memory, data and writable paths: what `jobs.train` and
`scaling.plan.launch_checks` check first) and `rules` (the trainer's own rules on a spec and on an existing
run directory). It imports `jobs.run` and `jobs.data`.
"""
