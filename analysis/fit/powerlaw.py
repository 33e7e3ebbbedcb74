"""Saturating power law L(x) = E + A * x**(-alpha), fitted by weighted least squares on log L.

Parameters are optimised as theta = (e, a, alpha) with E = exp(e), A_ref = exp(a) and x taken
relative to a reference x_ref (geometric mean of the fitted x), so log L_hat =
logaddexp(e, a - alpha * log(x / x_ref)).

Objective (`objective`): sum_i w_i (log L_hat_i - ybar_i)^2, with ybar_i the mean log loss of size
i over its seeds and w_i its seed count. Up to a constant (the within-size sum of squares) that is
the least-squares fit of the per-seed points, so every seed counts once.

Solver (`solve`): a grid over alpha with (E, A) profiled out in closed form at each grid value
(`grid_starts`), its steepest point and the pure power law (E at its bound); the lowest is
polished by Levenberg-Marquardt to convergence (`polish`). It is vectorised over problems, so the
point fit and every bootstrap resample go through the very same code: grid, then polish.

Curved valleys. Nearly flat curves (alpha near 0) trade E against A along a curved valley where
LM's steps shrink until its convergence test stops it short of the minimum (up to 1e-4 relative
above scipy's best on 4-point ensemble fits). A problem still running after WALK_AFTER LM
iterations is walked to the valley floor by a 1-D profile over alpha (`analysis.fit.varpro`: (E, A)
solved at each alpha, Newton in alpha), and LM then finishes it with the same convergence test.

The polish steps in (E, a, alpha), E itself rather than its log: the objective and the bounds are
the same (E = exp(e) is monotone), but the Jacobian column of E, 1 / L_hat, does not vanish as E
-> 0, so a fit whose optimum lies on the face E = 2e-9 reaches it in a few steps instead of
crawling down e = log E (a 4-point fit took ~400 steps that way, ~60 now).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit import varpro

BOUNDS = ((-20.0, 10.0), (-30.0, 30.0), (1e-3, 4.0))  # (e, a, alpha); e = -20 is E = 2e-9: no offset
ALPHA_GRID = tuple(float(a) for a in np.geomspace(0.01, BOUNDS[2][1], 36))  # E, A profiled out at each
POLISH_ITERS = 400  # LM iterations for the best start, stopped earlier at convergence
WALK_AFTER = 20  # LM iterations before a problem still running is walked along its profile
STEEP_ITERS = 30  # LM iterations for the steepest grid start before the candidates are compared
POLISH_RTOL = 1e-14  # converged: a step changes the objective by less than this, relative
MAX_DAMPING = 1e12  # no descent step left at any damping: converged (or stuck on a bound)


@dataclass(frozen=True)
class PowerLaw:
    """A fitted curve; `A` is in the units of the original x (A = A_ref * x_ref**alpha)."""

    E: float
    A: float
    alpha: float

    def predict(self, x: np.ndarray | float) -> np.ndarray:
        """L(x) = E + A x^-alpha."""
        return self.E + self.A * np.power(np.asarray(x, dtype=float), -self.alpha)

    def inverse(self, loss: np.ndarray | float) -> np.ndarray:
        """The x at which the curve reaches `loss`; inf where loss <= E (never reached)."""
        excess = np.asarray(loss, dtype=float) - self.E
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(excess > 0, np.power(self.A / np.where(excess > 0, excess, 1.0), 1 / self.alpha), np.inf)
        return x


def _bounds() -> tuple[np.ndarray, np.ndarray]:
    return np.array([b[0] for b in BOUNDS]), np.array([b[1] for b in BOUNDS])


def _residuals_and_jacobian(theta: np.ndarray, lx: np.ndarray, ybar: np.ndarray):
    """Residuals [B, n] of log L_hat - ybar and the Jacobian columns d pred/d(e, a, alpha), each [B, n]."""
    e, a, alpha = theta[:, :1], theta[:, 1:2], theta[:, 2:3]
    pred = np.logaddexp(e, a - alpha * lx)
    w_e = np.exp(e - pred)
    w_a = 1.0 - w_e
    return pred - ybar, (w_e, w_a, -w_a * lx)


def objective(theta: np.ndarray, lx: np.ndarray, ybar: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_i w_i r_i^2 per problem: theta [B, 3], ybar [B, n] (or [n]), w [n]; returns [B]."""
    th = np.atleast_2d(theta)
    r, _ = _residuals_and_jacobian(th, lx, np.broadcast_to(ybar, (th.shape[0], lx.size)))
    return (w * r * r).sum(axis=1)


def solve_sym3(h: dict[str, np.ndarray], g: tuple[np.ndarray, ...]) -> np.ndarray:
    """Solve batched symmetric 3x3 systems H x = g by the adjugate; h holds the six entries [B]."""
    c00 = h["11"] * h["22"] - h["12"] ** 2
    c01 = h["02"] * h["12"] - h["01"] * h["22"]
    c02 = h["01"] * h["12"] - h["02"] * h["11"]
    c11 = h["00"] * h["22"] - h["02"] ** 2
    c12 = h["01"] * h["02"] - h["00"] * h["12"]
    c22 = h["00"] * h["11"] - h["01"] ** 2
    det = h["00"] * c00 + h["01"] * c01 + h["02"] * c02
    x0 = c00 * g[0] + c01 * g[1] + c02 * g[2]
    x1 = c01 * g[0] + c11 * g[1] + c12 * g[2]
    x2 = c02 * g[0] + c12 * g[1] + c22 * g[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.stack([x0, x1, x2], axis=1) / det[:, None]
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)


def _linear_e_residuals(theta: np.ndarray, lx: np.ndarray, ybar: np.ndarray):
    """Residuals [B, n] and the Jacobian [B, 3, n] of pred in (E, a, alpha), rows theta = (E, a, alpha)."""
    E, a, alpha = theta[:, :1], theta[:, 1:2], theta[:, 2:3]
    with np.errstate(divide="ignore", invalid="ignore"):  # NaN rows (a failed start) lose at solve's pick
        pred = np.logaddexp(np.log(E), a - alpha * lx)
    inv = np.exp(-pred)
    w_a = 1.0 - E * inv
    return pred - ybar, np.stack([inv, w_a, -w_a * lx], axis=1)


def _polish_bounds() -> tuple[np.ndarray, np.ndarray]:
    """BOUNDS with the first coordinate as E = exp(e)."""
    lo, hi = _bounds()
    return np.array([np.exp(lo[0]), lo[1], lo[2]]), np.array([np.exp(hi[0]), hi[1], hi[2]])


_DIAG = np.arange(3)


def _lm_step(theta: np.ndarray, r: np.ndarray, jac: np.ndarray, w: np.ndarray,
             damping: np.ndarray, lo: np.ndarray, hi: np.ndarray, force: np.ndarray | None = None) -> np.ndarray:
    """Marquardt step (J'WJ + lambda diag(J'WJ)) step = -J'W r on the free parameters: one at a
    bound whose descent direction points out of the box is held there (an active set), as is every
    coordinate of `force` [B, 3] (True: held). jac [B, 3, n]."""
    wj = jac * w
    g = np.einsum("bkn,bn->bk", wj, r)
    h = np.einsum("bkn,bjn->bkj", wj, jac)
    held = ((theta <= lo) & (g > 0)) | ((theta >= hi) & (g < 0))
    if force is not None:
        held |= force
    free = ~held
    h *= free[:, :, None] & free[:, None, :]
    h[:, _DIAG, _DIAG] = np.where(held, 1.0, h[:, _DIAG, _DIAG] * (1 + damping[:, None]) + 1e-14)
    rhs = np.where(held, 0.0, -g)
    entries = {f"{i}{k}": h[:, i, k] for i in range(3) for k in range(i, 3)}
    return solve_sym3(entries, (rhs[:, 0], rhs[:, 1], rhs[:, 2]))


def _projected_trial(theta, r, jac, lx, ybar, w, damping, lo, hi):
    """The LM trial clipped to the box and, where that clipping cut a coordinate, the projected
    step too: the clipped coordinates set on their bound and the others re-solved on that face
    (the clipped trial alone moves the free coordinates as if the bound were not there, and is
    then rejected step after step). The lower of the two objectives is the trial."""
    raw = theta + _lm_step(theta, r, jac, w, damping, lo, hi)
    trial = np.clip(raw, lo, hi)
    r_t, jac_t = _linear_e_residuals(trial, lx, ybar)
    v_t = (w * r_t * r_t).sum(1)
    cut = raw != trial
    rows = np.flatnonzero(cut.any(1))
    if rows.size:
        fixed = np.where(cut[rows], trial[rows] - theta[rows], 0.0)
        r_face = r[rows] + np.einsum("bkn,bk->bn", jac[rows], fixed)
        free = _lm_step(theta[rows], r_face, jac[rows], w, damping[rows], lo, hi, cut[rows])
        face = np.clip(theta[rows] + fixed + free, lo, hi)
        r_f, jac_f = _linear_e_residuals(face, lx, ybar[rows])
        v_f = (w * r_f * r_f).sum(1)
        take = v_f < v_t[rows]
        sel = rows[take]
        trial[sel], r_t[sel], v_t[sel], jac_t[sel] = face[take], r_f[take], v_f[take], jac_f[take]
    return trial, r_t, jac_t, v_t


def _damping(damping, grow, better, actual, predicted):
    """Nielsen's damping update: after an accepted step shrink lambda by max(1/3, 1 - (2 rho - 1)^3)
    (rho: actual over predicted decrease, so a step the linear model foresaw well shrinks it most);
    after a rejected one multiply it by a factor that doubles with each rejection in a row."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.nan_to_num(actual / predicted, nan=0.0)
    shrink = np.maximum(1 / 3, 1 - (2 * np.clip(rho, 0.0, 1.0) - 1) ** 3)
    return np.where(better, damping * shrink, damping * grow), np.where(better, 2.0, grow * 2)


def minimise(lx: np.ndarray, ybar: np.ndarray, w: np.ndarray, starts: np.ndarray, iters: int,
             rtol: float = POLISH_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """B independent weighted least-squares fits by Levenberg-Marquardt (see `_minimise`):
    returns (theta [B, 3], objective [B])."""
    theta, value, _ = _minimise(lx, ybar, w, starts, iters, rtol)
    return theta, value


def _minimise(lx: np.ndarray, ybar: np.ndarray, w: np.ndarray, starts: np.ndarray, iters: int,
              rtol: float = POLISH_RTOL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """B independent weighted least-squares fits by Levenberg-Marquardt, vectorised over problems.

    Steps are taken in (E, a, alpha) (see the module doc) and clipped to BOUNDS; a step is accepted
    only if it lowers the objective (else the damping grows tenfold). Starts and the returned theta
    are (e, a, alpha). Returns (theta [B, 3], objective [B], running [B]: not converged within
    `iters`). The problems still running are kept in compact arrays, written back as they converge.
    """
    lo, hi = _polish_bounds()
    y = np.ascontiguousarray(np.broadcast_to(ybar, (starts.shape[0], lx.size)))
    theta = starts.astype(float).copy()
    theta[:, 0] = np.exp(theta[:, 0])
    theta = np.clip(theta, lo, hi)
    r, jac = _linear_e_residuals(theta, lx, y)
    value = (w * r * r).sum(1)
    out_theta, out_value = theta.copy(), value.copy()
    damping = np.full(theta.shape[0], 1e-3)
    grow = np.full(theta.shape[0], 2.0)
    ids = np.arange(theta.shape[0])
    for _ in range(iters):
        if ids.size == 0:
            break
        trial, r_t, jac_t, v_t = _projected_trial(theta, r, jac, lx, y, w, damping, lo, hi)
        better = v_t < value
        gain = np.where(better, (value - v_t) / np.maximum(value, 1e-300), 0.0)
        # converged: an accepted step gains < rtol, or a rejected one moves the objective by < rtol
        # (a descent step that fails only at rounding level: nothing left to gain at any damping)
        flat = ~better & (v_t - value <= rtol * value)
        damping, grow = _damping(damping, grow, better, value - v_t,
                                 value - (w * (r + np.einsum("bkn,bk->bn", jac, trial - theta)) ** 2).sum(1))
        theta[better], r[better], value[better], jac[better] = trial[better], r_t[better], v_t[better], jac_t[better]
        done = (better & (gain < rtol)) | flat | (damping > MAX_DAMPING)
        if done.any():
            out_theta[ids[done]], out_value[ids[done]] = theta[done], value[done]
            keep = ~done
            ids, theta, r, jac, value, damping, grow, y = (a[keep] for a in (ids, theta, r, jac, value, damping, grow, y))
    out_theta[ids], out_value[ids] = theta, value
    out_theta[:, 0] = np.clip(np.log(out_theta[:, 0]), *BOUNDS[0])
    running = np.zeros(out_value.shape, bool)
    running[ids] = True
    return out_theta, out_value, running


def _profile_starts(lx: np.ndarray, y: np.ndarray, w: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """(e, a, alpha) [B, G, 3] for each grid alpha [G], with (E, A) the closed-form weighted
    least-squares line of L on x^-alpha (weights w / L^2, the linearisation of the log objective),
    E kept >= its bound; all grid points at once."""
    lo, hi = _bounds()
    z = np.exp(-alphas[:, None] * lx)  # [G, n]
    om = w / (y * y)  # [B, n]
    s0, t0 = om.sum(1)[:, None], (om * y).sum(1)[:, None]
    s1, s2, t1 = om @ z.T, om @ (z * z).T, (om * y) @ z.T  # [B, G]
    with np.errstate(divide="ignore", invalid="ignore"):
        det = s0 * s2 - s1 * s1
        e_lin = (s2 * t0 - s1 * t1) / det
        a_lin = (s0 * t1 - s1 * t0) / det
        floor = np.exp(lo[0])
        a_only = np.maximum((t1 - floor * s1) / s2, 1e-300)  # E at its bound: A alone
        a_lin = np.where(e_lin > floor, a_lin, a_only)
        e_lin = np.maximum(e_lin, floor)
        a_ref = np.log(np.maximum(a_lin, 1e-300))
        out = np.stack([np.log(e_lin), a_ref, np.broadcast_to(alphas, e_lin.shape)], axis=2)
    return np.clip(out, lo, hi)


def grid_starts(lx: np.ndarray, ybar: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Starts [B, 3, 3] for problems ybar [B, n]: the best point of a grid over alpha (E and A
    profiled out in closed form at each alpha), the grid point at alpha's upper bound (a step-like
    local minimum the best point may not lead to), and the pure power law (E at its bound: the
    exact log-log least-squares line)."""
    lo, hi = _bounds()
    y = np.exp(np.minimum(ybar, 700.0))
    cand = _profile_starts(lx, y, w, np.asarray(ALPHA_GRID))  # [B, G, 3]
    with np.errstate(invalid="ignore"):  # a grid point whose profile failed is NaN: scored inf below
        pred = np.logaddexp(cand[..., :1], cand[..., 1:2] - cand[..., 2:3] * lx)  # [B, G, n]
    v = np.nan_to_num((w * (pred - ybar[:, None, :]) ** 2).sum(2), nan=np.inf)
    rows = np.arange(cand.shape[0])
    best, steep = cand[rows, v.argmin(1)], cand[:, -1]  # argmin: the first grid point of the lowest
    xm = (w * lx).sum() / w.sum()
    ym = (ybar * w).sum(1) / w.sum()
    slope = ((ybar - ym[:, None]) * (lx - xm) * w).sum(1) / ((lx - xm) ** 2 * w).sum()
    pure = np.stack([np.full_like(ym, lo[0]), ym - slope * xm, -slope], axis=1)
    return np.clip(np.stack([best, steep, pure], axis=1), lo, hi)


def profile_walk(lx: np.ndarray, ybar: np.ndarray, w: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Starts (e, a, alpha) [B, 3] carried to the floor of their valley by `analysis.fit.varpro`'s
    1-D profile over alpha; a start the walk does not improve is kept."""
    lo, hi = _bounds()
    e_lin, a_lin, alpha = varpro.walk(lx, ybar, w, np.exp(starts[:, 0]), np.exp(starts[:, 1]), starts[:, 2].copy(),
                                         (np.exp(lo[0]), np.exp(lo[1]), lo[2]), hi[2])
    with np.errstate(divide="ignore"):
        walked = np.clip(np.stack([np.log(e_lin), np.log(a_lin), alpha], axis=1), lo, hi)
    keep = ~(objective(walked, lx, ybar, w) < objective(starts, lx, ybar, w))
    walked[keep] = starts[keep]
    return walked


def polish(lx: np.ndarray, ybar: np.ndarray, w: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LM to convergence (POLISH_ITERS in all) from starts [B, 3]; the problems still running after
    WALK_AFTER iterations (curved valleys: alpha near 0) are first walked to their valley floor by
    the 1-D profile (`profile_walk`), then LM finishes them with its own convergence test."""
    theta, value, running = _minimise(lx, ybar, w, starts, WALK_AFTER)
    if running.any():
        walked = profile_walk(lx, ybar[running], w, theta[running])
        theta[running], value[running] = minimise(lx, ybar[running], w, walked, POLISH_ITERS - WALK_AFTER)
    return theta, value


def solve(lx: np.ndarray, ybar: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Grid + polish for every problem: ybar [B, n] (or [n]) -> (theta [B, 3], objective [B]).

    The grid's best start is polished by LM, its steepest start briefly (enough to settle at the
    exponent's bound when that is where it lies); the pure power law is already the exact optimum
    on the face E = 2e-9 (its bound), where LM would only crawl. The lowest of the three is then
    polished to convergence."""
    ybar = np.atleast_2d(ybar)
    n_prob = ybar.shape[0]
    starts = grid_starts(lx, ybar, w)
    best, best_v = polish(lx, ybar, w, starts[:, 0])
    steep, steep_v = minimise(lx, ybar, w, starts[:, 1], STEEP_ITERS)
    cands = np.stack([best, steep, starts[:, 2]], axis=1)
    steep_v = np.where(steep_v < best_v * (1 - 1e-9), steep_v, np.inf)  # only a distinct, lower minimum
    vals = np.stack([best_v, steep_v, objective(starts[:, 2], lx, ybar, w)], axis=1)
    pick = np.nan_to_num(vals, nan=np.inf).argmin(axis=1)
    theta, value = cands[np.arange(n_prob), pick], vals[np.arange(n_prob), pick]
    redo = pick == 1
    if redo.any():
        theta[redo], value[redo] = polish(lx, ybar[redo], w, theta[redo])
    return theta, value


def to_original(theta: np.ndarray, x_ref: float) -> np.ndarray:
    """[B, 3] (e, a, alpha) in reference units -> (E, A, alpha) in original units."""
    return np.stack([np.exp(theta[:, 0]), np.exp(theta[:, 1] + theta[:, 2] * np.log(x_ref)), theta[:, 2]], 1)


def predict(params: np.ndarray, x: float | np.ndarray) -> np.ndarray:
    """E + A x^-alpha for rows of (E, A, alpha) [B, 3] at one x; returns [B]."""
    params = np.atleast_2d(params)
    return params[:, 0] + params[:, 1] * np.power(x, -params[:, 2])
