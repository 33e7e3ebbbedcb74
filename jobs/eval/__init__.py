"""jobs.eval: measuring a trained run. `python -m jobs.eval.evaluate` / `python -m jobs.eval.generate` run it.

`evaluate` (likelihoods, ensembles, LAMBADA, infilling into eval.parquet; its `inputs` and
`metrics`, on every rank through `shard`, resuming per set through `progress`), `generate`
(samples, generative perplexity under a judge, samples.parquet) and `records` (the records'
schema and merging). It imports `jobs.run`, `jobs.data` and `jobs.train` (checkpoints, preflight).
"""
