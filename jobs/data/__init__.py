"""jobs.data: every token a run reads, and what an evaluation reads.

`corpus` (training corpora, cached token arrays, batch sampling), `tokenizers` (GPT-2 BPE and
bytes, offline), `tokencache` (tokenising large corpora once, in shards), `unigram` (the unigram
baseline), `datasets` (the zero-shot evaluation sets) and `suites` (what an evaluation suite
measures and how many samples it spends). It imports only `jobs.run` of `jobs`.
"""
