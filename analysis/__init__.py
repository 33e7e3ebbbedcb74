"""analysis: what a study's records mean (docs/DESIGN.md §7, §10). Reads files only; no torch.

Reading the records of one or more studies (`records`) and turning them into fit cells
(`cells`), power-law fits with bootstrap intervals (`powerlaw`, `fits`, `stats`), the gap to AR
and its trend (`gap`), ensemble sensitivity (`ensemble`), ablation tables (`ablations`), the
fairness checks (`fairness`), and the report: summary, sections, figures, atomic writes
(`summary`, `sections`, `figures`, `report`, `io`). `python -m analysis.fit_curves` writes it.
"""

MIN_BOOTSTRAP = 10  # fewer resamples cannot place a 95 % interval
# More resamples narrow no interval a reader can see, and each holds every fit's parameters in
# memory: 1e11 asked for 745 GiB. 1e5 keeps the largest study's bootstrap under a few GiB.
MAX_BOOTSTRAP = 100_000
DEFAULT_BOOTSTRAP = 1000  # resamples behind every 95 % interval, in scaling.launch and fit_curves alike
