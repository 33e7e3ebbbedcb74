"""jobs: how one run executes, from its spec to its records (docs/DESIGN.md §2, §3, §8).

Sub-packages in import order, each importing only those before it: `run` (the run spec and id,
the run directory's files, the lock, RNG, device rule, allocator, tracking), `data` (corpora,
tokenizers, the token cache, the unigram baseline, zero-shot sets, evaluation suites), `train`
(preflight checks, the training loop and its CLI, the torch and DeepSpeed engines, checkpoints),
`eval` (evaluation, generation, records) and `executors` (local, Slurm, Ray). `pipeline` runs
one run end to end; `python -m jobs.train | jobs.eval.evaluate | jobs.eval.generate` run the single jobs.
"""
