"""The report's data-repetition flag: runs whose records say they passed over their training split
more than once (`epochs` > 1, jobs.data.ledger). Repetition favours masked diffusion
(Prabhudesai et al. 2025), so a comparison that includes such runs says so."""
from __future__ import annotations

import polars as pl


def repetition_notes(final: pl.DataFrame) -> list[str]:
    """One note naming the runs past one epoch (none when no record carries `epochs`)."""
    if "epochs" not in final.columns:
        return []
    runs = (final.filter(pl.col("epochs") > 1).group_by("run_id", "family", "size")
            .agg(pl.col("epochs").max()).sort("run_id"))
    if runs.is_empty():
        return []
    listed = ", ".join(f"{r['run_id']} ({r['family']} {r['size']}: {r['epochs']:.2f})"
                       for r in runs.head(10).iter_rows(named=True))
    more = f" and {runs.height - 10} more" if runs.height > 10 else ""
    return [f"data repeated: {runs.height} run(s) trained past one epoch of their training split, "
            f"which favours masked diffusion: {listed}{more}"]
