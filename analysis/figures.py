"""PNG figures (matplotlib, Agg): loss vs size with fitted curves, gap vs size, NLL vs M, training
curves. Each function returns PNG bytes; the caller writes them and embeds them in the HTML."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from analysis.cells import Cell  # noqa: E402
from analysis.fits import CurveFit  # noqa: E402
from analysis.stats import summarise  # noqa: E402

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


def loss_vs_size(cells: list[Cell], fits: dict[tuple, CurveFit], title: str, x: str) -> bytes:
    """Seed means with 95 % t-intervals per family/variant, log-log, with fitted curves."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cell in cells:
        xs = np.array([p.x for p in cell.points])
        bar = _errorbar(ax, xs, [p.array for p in cell.points], f"{cell.key[0]}/{cell.key[1]}")
        fit = fits.get(cell.key)
        curve = fit.curve() if fit else None
        if curve is not None:
            grid = np.geomspace(xs.min(), xs.max() * 10, 100)
            ax.plot(grid, curve.predict(grid), "-", color=bar[0].get_color(), lw=1)
    ax.set(xscale="log", yscale="log", xlabel=x, ylabel="value", title=title)
    ax.legend(fontsize=7)
    return _png(fig)


def gap_vs_size(gaps: list, title: str, x: str) -> bytes:
    """Delta(x) with 95 % intervals for each compared family/metric."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for gap in gaps:
        pts = gap.points
        mean = np.array([p.delta.mean for p in pts])
        err = np.nan_to_num(np.array([[p.delta.mean - p.delta.lo, p.delta.hi - p.delta.mean] for p in pts]).T)
        ax.errorbar([p.x for p in pts], mean, yerr=err, fmt="o-", capsize=3,
                    label=f"{gap.family}/{gap.variant} {gap.metric}")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel=x, ylabel="Δ nats/token vs AR nll_l2r", title=title)
    ax.legend(fontsize=7)
    return _png(fig)


def nll_vs_m(study) -> bytes:
    """NLL vs ensemble size M per model size (95 % t-intervals), with the fitted c + b M^-gamma."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for fit, points in zip(study.fits, study.points):
        ms = np.array([p.x for p in points])
        bar = _errorbar(ax, ms, [p.array for p in points], fit.labels["size"])
        curve = fit.curve()
        if curve is not None:
            grid = np.geomspace(ms.min(), ms.max(), 50)
            ax.plot(grid, curve.predict(grid), "-", color=bar[0].get_color(), lw=1)
    ax.set(xscale="log", xlabel="ensemble size M", ylabel="nll_ensemble",
           title=f"{study.family}/{study.variant} {study.dataset}/{study.split}")
    ax.legend(fontsize=7, title="model size")
    return _png(fig)


def training_curves(curves: pl.DataFrame, labels: pl.DataFrame) -> bytes:
    """Loss vs step for every run, one colour per family."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    data = curves.join(labels, on="run_id", how="left").with_columns(pl.col("family").fill_null("?"))
    colours = {f: f"C{i}" for i, f in enumerate(sorted(data["family"].unique().to_list()))}
    for (rid, kind), run in data.group_by(["run_id", "kind"], maintain_order=True):
        run = run.sort("step")
        ax.plot(run["step"], run["loss"], "-" if kind == "train" else "o", color=colours[run["family"][0]],
                alpha=0.5, lw=0.8, ms=3)
    for fam, colour in colours.items():
        ax.plot([], [], color=colour, label=fam)
    ax.set(xlabel="step", ylabel="loss (train line, val dots)", title="training curves", yscale="log")
    ax.legend(fontsize=7)
    return _png(fig)
