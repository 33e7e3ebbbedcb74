"""jobs.run: what one run is and owns, below every other part of `jobs`.

`spec` (the frozen `RunSpec` and its run id), `files` (the run directory's layout and atomic
writes), `lock` (the per-run flock), `rng` (seeding and RNG state), `device` (the one device and
precision rule), `allocator` (keeping freed activation memory), `tracking` (manifest, metrics,
wandb) and `recipes` (each rung's run rules: tokens, batch, learning rate, warm-up; the one default
of every study and of `python -m jobs.train`). It imports nothing else of `jobs`.
"""
