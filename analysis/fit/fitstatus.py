"""One rule for the status every fit reports (the size fits of `analysis.fit.scalefit` and the
frontier's isoFLOP parabolas and Approach 3 in `analysis.compare.frontier`).

A fit the solver calls `ok` (or the named `reduced` form) keeps that status only when at most
`MAX_BOUND_SHARE` of its resamples end at a bound of the search (more, and the interval is a
picture of the bounds, not of the data): otherwise it is `unstable`.
A lack of fit (the F test against the pure (seed) error rejects at `LACK_OF_FIT_LEVEL`: the curve
misses the size means by more than seeds explain) is a named warning in the fit's reason and the
report's warnings, not a status: every interval here already takes its scale from the residuals
about the curve whenever they exceed the seed noise (scalefit's max(MS_between, MS_pure), the
parabolas' residual t draws, Approach 3's residual bootstrap), so the misfit widens the interval
rather than voiding it; tests/analysis/fit/test_calibration.py measures 94-95 % coverage among `ok`
fits in designs whose sizes stray from the law by as much as the seeds do, where the test rejects
in about a quarter of replicas. Statuses other than `ok` and `reduced` (saturated, at_bound, edge,
...) are the solver's and are kept, with the notes.
"""
from __future__ import annotations

import math

from scipy import stats as sps

MAX_BOUND_SHARE = 0.05
LACK_OF_FIT_LEVEL = 0.05
TRUSTED = ("ok", "reduced")  # statuses the rules may overturn
UNSTABLE = "unstable"
LACK_OF_FIT_NOTE = "lack of fit"  # how the warning starts (the report greps for it)


def lack_of_fit_p(ss_resid: float, df_resid: int, ss_pure: float, df_pure: int) -> float | None:
    """p of the lack-of-fit F test: F = [(SS_resid - SS_pure) / (df_resid - df_pure)] / (SS_pure / df_pure),
    on (df_resid - df_pure, df_pure) df (scipy's F); None without pure error or lack-of-fit df."""
    df_lof = df_resid - df_pure
    if df_pure <= 0 or df_lof <= 0:
        return None
    num = max(ss_resid - ss_pure, 0.0) / df_lof
    den = ss_pure / df_pure
    if den <= 0:
        return 0.0 if num > 0 else 1.0
    return float(sps.f.sf(num / den, df_lof, df_pure))


def judge(status: str, *, resamples: int = 0, at_bound: int = 0,
          lof_p: float | None = None) -> tuple[str, list[str]]:
    """(status, notes) of a fit by the module's rules, from the solver's own status."""
    notes = []
    unstable = resamples > 0 and at_bound > MAX_BOUND_SHARE * resamples
    if unstable:
        notes.append(f"{at_bound} of {resamples} resamples end at a bound (> {MAX_BOUND_SHARE:.0%}): "
                     "the interval is not trusted")
    misfit = lof_p is not None and math.isfinite(lof_p) and lof_p < LACK_OF_FIT_LEVEL
    if misfit:
        notes.append(f"{LACK_OF_FIT_NOTE} against the seed noise (F test p = {lof_p:.2g} < {LACK_OF_FIT_LEVEL:g}; "
                     "carried in the interval's scale)")
    return (UNSTABLE if unstable and status in TRUSTED else status), notes
