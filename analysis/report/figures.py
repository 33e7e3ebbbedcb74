"""PNG figures (matplotlib, Agg): loss vs size with fitted curves, loss vs training FLOPs, gap vs
size, NLL vs M, training curves. Shaded bands are 95 % intervals (bootstrap bands around fitted
curves, t-intervals over seeds around measured points). Axes name their quantity and unit, log
ticks are plain numbers (56k, 1M, 2.5), fitted curves and bands turn dashed and faint past the
data, and each family has one colour in every figure: a stable hash of its name into the tab10
palette (no family table). Each function returns PNG bytes; the caller writes them and embeds
them in the HTML."""
from __future__ import annotations

import hashlib
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from analysis.records.cells import Cell, CellKey  # noqa: E402
from analysis.fit.fits import CurveFit, predict  # noqa: E402
from analysis.fit.stats import percentile_ci, summarise  # noqa: E402

DPI = 90
PALETTE = "tab10"
MARKERS = ("o", "s", "^", "D", "v", "P")


def family_colour(family: str):
    """The family's colour in every figure: sha256 of its name into the palette."""
    return matplotlib.colormaps[PALETTE](int(hashlib.sha256(family.encode()).hexdigest(), 16) % 10)


def _marker(variant: str) -> str:
    return MARKERS[int(hashlib.sha256(variant.encode()).hexdigest(), 16) % len(MARKERS)]


def plain(v: float, _pos=None) -> str:
    """A tick as a plain number: 56k, 1.5M, 3e+20 only past 1e15, 2.5, 0.03."""
    if v == 0 or not np.isfinite(v):
        return "0"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale and abs(v) < 1e15:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}" if abs(v) < 1e15 else f"{v:.0e}"


MINOR_LABEL_DECADES = 2.0  # minor ticks (2, 5) are labelled only on log axes spanning at most this


def log_ticks(ax, axes: str = "xy") -> None:
    """Plain-number labels on the log axes among `axes`: the majors, and the 2 and 5 minors where
    the axis spans at most MINOR_LABEL_DECADES (beyond that their labels would crowd; matplotlib's
    own minor labels, "2×10⁴3×10⁴4×10⁴", run together). Call it after plotting."""
    for name in axes:
        axis = getattr(ax, f"{name}axis")
        if getattr(ax, f"get_{name}scale")() != "log":
            continue
        lo, hi = sorted(getattr(ax, f"get_{name}lim")())
        narrow = lo > 0 and np.log10(hi / lo) <= MINOR_LABEL_DECADES
        axis.set_major_formatter(FuncFormatter(plain))
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(FuncFormatter(plain) if narrow else NullFormatter())




def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _errorbar(ax, xs, values, label, family: str = "", variant: str = "", **kw):
    stats = [summarise(v) for v in values]
    mean = np.array([s.mean for s in stats])
    err = np.array([[s.mean - s.lo, s.hi - s.mean] for s in stats]).T
    return ax.errorbar(xs, mean, yerr=np.nan_to_num(err), fmt=_marker(variant), capsize=3, label=label,
                       color=family_colour(family), **kw)


def _who(family: str, variant: str) -> str:
    """Legend label: family/variant, or the family alone when the variant has no label."""
    return f"{family}/{variant}" if variant else family


def _band(ax, xs, lo, hi, color, alpha: float = 0.18, **kw) -> None:
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.sum() >= 2:
        ax.fill_between(np.asarray(xs, float)[ok], lo[ok], hi[ok], color=color, alpha=alpha, lw=0, **kw)


def _fit_band(ax, fit: CurveFit, grid: np.ndarray, color) -> None:
    """The fitted curve and its 95 % bootstrap band over `grid`: solid over the measured range,
    dashed and fainter past it (an extrapolation)."""
    x_max = max(fit.xs) if fit.xs else grid.max()
    inside, past = grid[grid <= x_max], grid[grid >= x_max]
    lo = hi = None
    if fit.samples is not None and len(fit.samples):
        lo, hi = percentile_ci(np.stack([predict(fit.samples, x) for x in grid], axis=1))
    for part, style, alpha in ((inside, "-", 0.18), (past, "--", 0.07)):
        if part.size < 2:
            continue
        ax.plot(part, fit.curve().predict(part), style, color=color, lw=1)
        if lo is not None:
            sel = np.isin(grid, part)
            _band(ax, part, lo[sel], hi[sel], color, alpha=alpha)


def _seed_band(ax, xs, values, label: str, color=None):
    """Seed means joined by a line, with their 95 % t-interval as a band."""
    stats = [summarise(v) for v in values]
    line = ax.plot(xs, [s.mean for s in stats], "o-", ms=4, lw=1, label=label, color=color)[0]
    _band(ax, xs, [s.lo for s in stats], [s.hi for s in stats], line.get_color())
    return line


def loss_vs_size(cells: list[Cell], fits: dict[CellKey, CurveFit], title: str, x: str, ylabel: str = "loss") -> bytes:
    """Seed means with 95 % t-intervals per family/variant, log-log, with fitted curves (dashed
    past the data)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cell in cells:
        xs = np.array([p.x for p in cell.points])
        who = cell.key.family, cell.key.variant
        _errorbar(ax, xs, [p.array for p in cell.points], _who(*who), *who)
        fit = fits.get(cell.key)
        if fit is not None and fit.curve() is not None:
            _fit_band(ax, fit, np.geomspace(xs.min(), xs.max() * 10, 100), family_colour(cell.key.family))
    ax.set(xscale="log", yscale="log", xlabel=f"{x} (parameters)" if x.startswith("n_params") else x,
           ylabel=ylabel, title=title)
    log_ticks(ax)
    ax.legend(fontsize=7)
    return _png(fig)


def loss_vs_flops(cells: list[Cell], title: str, ylabel: str = "loss") -> bytes:
    """Seed means vs training FLOPs with 95 % t-interval bands, one line per family/variant."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cell in cells:
        _seed_band(ax, [p.x for p in cell.points], [p.array for p in cell.points],
                   _who(cell.key.family, cell.key.variant), family_colour(cell.key.family))
    ax.set(xscale="log", yscale="log", xlabel="training compute (FLOPs)", ylabel=ylabel, title=title)
    log_ticks(ax)
    ax.legend(fontsize=7)
    return _png(fig)


def gap_vs_size(gaps: list, title: str, x: str, unit: str = "nats/token") -> bytes:
    """Delta(x) with 95 % interval bands for each compared family/metric (any-order solid, L2R dotted)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for gap in gaps:
        pts = gap.points
        colour = family_colour(gap.family)
        ax.plot([p.x for p in pts], [p.delta.mean for p in pts], "o-" if gap.metric != "nll_l2r" else "s:", ms=4, lw=1,
                label=f"{_who(gap.family, gap.variant)} {gap.metric}", color=colour)
        _band(ax, [p.x for p in pts], [p.delta.lo for p in pts], [p.delta.hi for p in pts], colour)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel=f"{x} (parameters)" if x.startswith("n_params") else x,
           ylabel=f"Δ = family − AR nll_l2r ({unit})", title=title)
    log_ticks(ax, "x")
    ax.legend(fontsize=7)
    return _png(fig)


def nll_vs_m(study, unit: str = "nats/token") -> bytes:
    """NLL vs ensemble size M per model size (95 % t-interval bands), with the fitted c + b M^-gamma."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for fit, points in zip(study.fits, study.points):
        ms = np.array([p.x for p in points])
        line = _seed_band(ax, ms, [p.array for p in points], fit.labels["size"])
        curve = fit.curve()
        if curve is not None:
            grid = np.geomspace(ms.min(), ms.max(), 50)
            ax.plot(grid, curve.predict(grid), "--", color=line.get_color(), lw=1)
    ax.set(xscale="log", xlabel="ensemble size M", ylabel=f"nll_ensemble ({unit})",
           title=f"{_who(study.family, study.variant)} {study.dataset}/{study.split}")
    log_ticks(ax, "x")
    ax.legend(fontsize=7, title="model size")
    return _png(fig)


def training_curves(curves: pl.DataFrame, labels: pl.DataFrame) -> bytes:
    """Loss vs step for every run, one colour per family."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    data = curves.join(labels, on="run_id", how="left").with_columns(pl.col("family").fill_null("?"))
    colours = {f: family_colour(f) for f in sorted(data["family"].unique().to_list())}
    for (_, kind), run in data.group_by(["run_id", "kind"], maintain_order=True):
        run = run.sort("step")
        ax.plot(run["step"], run["loss"], "-" if kind == "train" else "o", color=colours[run["family"][0]],
                alpha=0.5, lw=0.8, ms=3)
    for fam, colour in colours.items():
        ax.plot([], [], color=colour, label=fam)
    ax.set(xlabel="optimizer step", ylabel="training loss (line) and validation loss (dots)", title="training curves",
           yscale="log")
    log_ticks(ax, "y")
    ax.legend(fontsize=7)
    return _png(fig)
