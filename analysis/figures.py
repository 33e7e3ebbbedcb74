"""PNG figures (matplotlib, Agg): loss vs size with fitted curves, loss vs training FLOPs, gap vs
size, NLL vs M, training curves. Shaded bands are 95 % intervals (bootstrap bands around fitted
curves, t-intervals over seeds around measured points). Each function returns PNG bytes; the
caller writes them and embeds them in the HTML."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from analysis.cells import Cell  # noqa: E402
from analysis.fits import CurveFit, predict  # noqa: E402
from analysis.stats import percentile_ci, summarise  # noqa: E402

DPI = 90


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _errorbar(ax, xs, values, label, **kw):
    stats = [summarise(v) for v in values]
    mean = np.array([s.mean for s in stats])
    err = np.array([[s.mean - s.lo, s.hi - s.mean] for s in stats]).T
    return ax.errorbar(xs, mean, yerr=np.nan_to_num(err), fmt="o", capsize=3, label=label, **kw)


def _who(family: str, variant: str) -> str:
    """Legend label: family/variant, or the family alone when the variant has no label."""
    return f"{family}/{variant}" if variant else family


def _band(ax, xs, lo, hi, color) -> None:
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.sum() >= 2:
        ax.fill_between(np.asarray(xs, float)[ok], lo[ok], hi[ok], color=color, alpha=0.18, lw=0)


def _fit_band(ax, fit: CurveFit, grid: np.ndarray, color) -> None:
    """The fitted curve and its 95 % bootstrap band over `grid`."""
    ax.plot(grid, fit.curve().predict(grid), "-", color=color, lw=1)
    if fit.samples is not None and len(fit.samples):
        lo, hi = percentile_ci(np.stack([predict(fit.samples, x) for x in grid], axis=1))
        _band(ax, grid, lo, hi, color)


def _seed_band(ax, xs, values, label: str):
    """Seed means joined by a line, with their 95 % t-interval as a band."""
    stats = [summarise(v) for v in values]
    line = ax.plot(xs, [s.mean for s in stats], "o-", ms=4, lw=1, label=label)[0]
    _band(ax, xs, [s.lo for s in stats], [s.hi for s in stats], line.get_color())
    return line


def loss_vs_size(cells: list[Cell], fits: dict[tuple, CurveFit], title: str, x: str) -> bytes:
    """Seed means with 95 % t-intervals per family/variant, log-log, with fitted curves."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cell in cells:
        xs = np.array([p.x for p in cell.points])
        bar = _errorbar(ax, xs, [p.array for p in cell.points], _who(*cell.key[:2]))
        fit = fits.get(cell.key)
        if fit is not None and fit.curve() is not None:
            _fit_band(ax, fit, np.geomspace(xs.min(), xs.max() * 10, 100), bar[0].get_color())
    ax.set(xscale="log", yscale="log", xlabel=x, ylabel="value", title=title)
    ax.legend(fontsize=7)
    return _png(fig)


def loss_vs_flops(cells: list[Cell], title: str) -> bytes:
    """Seed means vs training FLOPs with 95 % t-interval bands, one line per family/variant."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cell in cells:
        _seed_band(ax, [p.x for p in cell.points], [p.array for p in cell.points], _who(*cell.key[:2]))
    ax.set(xscale="log", yscale="log", xlabel="training FLOPs", ylabel="value", title=title)
    ax.legend(fontsize=7)
    return _png(fig)


def gap_vs_size(gaps: list, title: str, x: str) -> bytes:
    """Delta(x) with 95 % interval bands for each compared family/metric."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for gap in gaps:
        pts = gap.points
        line = ax.plot([p.x for p in pts], [p.delta.mean for p in pts], "o-", ms=4, lw=1,
                       label=f"{_who(gap.family, gap.variant)} {gap.metric}")[0]
        _band(ax, [p.x for p in pts], [p.delta.lo for p in pts], [p.delta.hi for p in pts], line.get_color())
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel=x, ylabel="Δ nats/token vs AR nll_l2r", title=title)
    ax.legend(fontsize=7)
    return _png(fig)


def nll_vs_m(study) -> bytes:
    """NLL vs ensemble size M per model size (95 % t-interval bands), with the fitted c + b M^-gamma."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for fit, points in zip(study.fits, study.points):
        ms = np.array([p.x for p in points])
        line = _seed_band(ax, ms, [p.array for p in points], fit.labels["size"])
        curve = fit.curve()
        if curve is not None:
            grid = np.geomspace(ms.min(), ms.max(), 50)
            ax.plot(grid, curve.predict(grid), "--", color=line.get_color(), lw=1)
    ax.set(xscale="log", xlabel="ensemble size M", ylabel="nll_ensemble",
           title=f"{_who(study.family, study.variant)} {study.dataset}/{study.split}")
    ax.legend(fontsize=7, title="model size")
    return _png(fig)


def training_curves(curves: pl.DataFrame, labels: pl.DataFrame) -> bytes:
    """Loss vs step for every run, one colour per family."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    data = curves.join(labels, on="run_id", how="left").with_columns(pl.col("family").fill_null("?"))
    colours = {f: f"C{i}" for i, f in enumerate(sorted(data["family"].unique().to_list()))}
    for (_, kind), run in data.group_by(["run_id", "kind"], maintain_order=True):
        run = run.sort("step")
        ax.plot(run["step"], run["loss"], "-" if kind == "train" else "o", color=colours[run["family"][0]],
                alpha=0.5, lw=0.8, ms=3)
    for fam, colour in colours.items():
        ax.plot([], [], color=colour, label=fam)
    ax.set(xlabel="step", ylabel="loss (train line, val dots)", title="training curves", yscale="log")
    ax.legend(fontsize=7)
    return _png(fig)
