"""analysis: what a study's records mean (docs/DESIGN.md §7, §10). Reads files only; no torch.

Four sub-packages, each importing only those before it: `records` (reading and checking a study's
records, run health, the choice among swept settings, the fit cells), `fit` (power laws, their
solvers, intervals and statistics), `compare` (the gap to AR, multipliers, the frontier, ablations,
fairness) and `report` (summary, sections, figures, atomic writes). `python -m analysis.fit_curves`
writes the report.
"""

MIN_BOOTSTRAP = 10  # fewer resamples cannot place a 95 % interval
# More resamples narrow no interval a reader can see, and each holds every fit's parameters in
# memory: 1e11 asked for 745 GiB. 1e5 keeps the largest study's bootstrap under a few GiB.
MAX_BOOTSTRAP = 100_000
DEFAULT_BOOTSTRAP = 1000  # resamples behind every 95 % interval, in scaling.launch and fit_curves alike
