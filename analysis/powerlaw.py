"""Saturating power law L(x) = E + A * x**(-alpha), fitted as in the Epoch AI Chinchilla
replication (Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt"): Huber loss on
log L, L-BFGS-B from a grid of starts, with the analytic gradient.

Parameters are optimised as theta = (e, a, alpha) with E = exp(e), A_ref = exp(a) and x taken
relative to a reference x_ref (geometric mean of the fitted x), so log L_hat =
logaddexp(e, a - alpha * log(x / x_ref)). Many problems (bootstrap resamples, grid starts) are
solved together by iteratively reweighted Levenberg-Marquardt vectorised over problems
(`minimise_batched`); the best grid start is then polished by L-BFGS-B (`polish`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

HUBER_DELTA = 1e-3  # Huber threshold on log-loss residuals (Hoffmann et al. 2022, App. D.2; Epoch replication)
BOUNDS = ((-20.0, 10.0), (-20.0, 10.0), (1e-3, 4.0))  # (e, a, alpha): E, A_ref in [2e-9, 2.2e4]
E_START_FRACTIONS = (0.2, 0.5, 0.8, 0.95)  # E start = fraction * smallest observed L
A_START_FRACTIONS = (0.1, 0.3, 1.0, 3.0)  # A_ref start = fraction * observed range of L
ALPHA_STARTS = (0.05, 0.15, 0.3, 0.6, 1.0)
LBFGS_OPTIONS = {"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10, "maxcor": 20}


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


def huber_objective(theta: np.ndarray, lx: np.ndarray, log_y: np.ndarray,
                    delta: float = HUBER_DELTA) -> tuple[float, np.ndarray]:
    """Sum over problems and points of Huber_delta(log L_hat - log L) / delta, and its gradient.

    theta [B, 3] (or [3]), lx [n] (log x / x_ref), log_y [B, n] (or [n]). Dividing by delta keeps
    the gradient O(1) so L-BFGS-B's tolerances mean the same at any delta; the minimiser is
    unchanged. Returns (value, gradient shaped like theta).
    """
    th = np.atleast_2d(theta)
    e, a, alpha = th[:, :1], th[:, 1:2], th[:, 2:3]
    power_term = a - alpha * lx
    pred = np.logaddexp(e, power_term)
    r = pred - np.atleast_2d(log_y)
    absr = np.abs(r)
    quad = absr <= delta
    value = np.where(quad, 0.5 * r * r, delta * (absr - 0.5 * delta)).sum() / delta
    psi = np.clip(r / delta, -1.0, 1.0)  # d(Huber/delta)/dr
    w_e = np.exp(e - pred)  # d pred / d e
    w_a = 1.0 - w_e  # d pred / d a
    grad = np.stack([(psi * w_e).sum(1), (psi * w_a).sum(1), -(psi * w_a * lx).sum(1)], axis=1)
    return float(value), grad.reshape(np.shape(theta))


def grid_starts(y: np.ndarray) -> np.ndarray:
    """The grid of starting points [n_starts, 3] scaled to the observed losses y (reference units)."""
    y_min, y_range = float(np.min(y)), float(np.ptp(y)) or 1e-3 * float(np.min(y))
    grid = [(math.log(fe * y_min), math.log(fa * y_range), al)
            for fe in E_START_FRACTIONS for fa in A_START_FRACTIONS for al in ALPHA_STARTS]
    return np.clip(np.array(grid), [b[0] for b in BOUNDS], [b[1] for b in BOUNDS])


LM_MAX_ITERS = 200  # batched LM iterations for resamples (IRLS on a near-L1 loss converges linearly)
LM_RTOL = 1e-8  # stop a block when its objective improves by less than this, relative
GRID_ITERS = 60  # LM iterations from each grid start; the best is then polished to convergence


def _residuals_and_jacobian(theta: np.ndarray, lx: np.ndarray, log_y: np.ndarray):
    """Residuals [B, n] and the Jacobian columns d pred/d(e, a, alpha), each [B, n]."""
    e, a, alpha = theta[:, :1], theta[:, 1:2], theta[:, 2:3]
    pred = np.logaddexp(e, a - alpha * lx)
    w_e = np.exp(e - pred)
    w_a = 1.0 - w_e
    return pred - log_y, (w_e, w_a, -w_a * lx)


def _huber_rows(r: np.ndarray, delta: float = HUBER_DELTA) -> np.ndarray:
    absr = np.abs(r)
    return (np.where(absr <= delta, 0.5 * r * r, delta * (absr - 0.5 * delta)) / delta).sum(axis=1)


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
    return np.stack([x0, x1, x2], axis=1) / det[:, None]


def _lm_step(r: np.ndarray, jac: tuple[np.ndarray, ...], damping: np.ndarray) -> np.ndarray:
    """Damped IRLS Gauss-Newton step for Huber: (J'WJ + lambda diag) step = -J'W r."""
    weight = np.minimum(1.0, HUBER_DELTA / np.maximum(np.abs(r), 1e-300)) / HUBER_DELTA
    wj = [weight * j for j in jac]
    h = {f"{i}{k}": (wj[i] * jac[k]).sum(1) for i in range(3) for k in range(i, 3)}
    for i in range(3):
        h[f"{i}{i}"] = h[f"{i}{i}"] * (1 + damping) + 1e-12
    return solve_sym3(h, tuple(-(w * r).sum(1) for w in wj))


def minimise_batched(lx: np.ndarray, log_y: np.ndarray, starts: np.ndarray,
                     max_iters: int = LM_MAX_ITERS) -> tuple[np.ndarray, np.ndarray]:
    """B independent fits by iteratively reweighted Levenberg-Marquardt, vectorised over blocks.

    Huber's IRLS weights min(1, delta/|r|)/delta give a quadratic majoriser of the objective, so
    each accepted step (objective decreases, else the damping grows tenfold) is a descent step of
    the same objective `huber_objective` defines. Returns (theta [B, 3], objective [B]).
    """
    lo, hi = np.array([b[0] for b in BOUNDS]), np.array([b[1] for b in BOUNDS])
    log_y = np.ascontiguousarray(np.broadcast_to(log_y, (starts.shape[0], lx.size)))
    theta = np.clip(starts.astype(float), lo, hi)
    r, jac = _residuals_and_jacobian(theta, lx, log_y)
    value = _huber_rows(r)
    damping = np.full(theta.shape[0], 1e-3)
    idx = np.arange(theta.shape[0])
    for _ in range(max_iters):
        if idx.size == 0:
            break
        trial = np.clip(theta[idx] + _lm_step(r[idx], tuple(j[idx] for j in jac), damping[idx]), lo, hi)
        r_t, jac_t = _residuals_and_jacobian(trial, lx, log_y[idx])
        v_t = _huber_rows(r_t)
        better = v_t < value[idx]
        gain = np.where(better, (value[idx] - v_t) / np.maximum(value[idx], 1e-300), 0.0)
        acc = idx[better]
        theta[acc], r[acc], value[acc] = trial[better], r_t[better], v_t[better]
        for j, j_t in zip(jac, jac_t):
            j[acc] = j_t[better]
        damping[idx] = np.where(better, damping[idx] / 10, damping[idx] * 10)
        idx = idx[~((better & (gain < LM_RTOL)) | (damping[idx] > 1e12))]
    return theta, value


def polish(lx: np.ndarray, log_y: np.ndarray, theta0: np.ndarray) -> tuple[np.ndarray, float]:
    """Single-problem L-BFGS-B with the analytic gradient (`jac=True`) from theta0."""
    res = minimize(huber_objective, theta0, args=(lx, log_y), jac=True, method="L-BFGS-B",
                   bounds=BOUNDS, options=LBFGS_OPTIONS)
    return res.x, float(res.fun)


POLISH_TOP = 1  # grid solutions polished by L-BFGS-B; the best polished one is the estimate


def fit_theta(lx: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Best fit from the grid of starts: batched LM from every start, L-BFGS-B on the best few."""
    log_y = np.log(y)
    thetas, values = minimise_batched(lx, log_y, grid_starts(y), max_iters=GRID_ITERS)
    candidates = [polish(lx, log_y, thetas[i]) for i in np.argsort(values)[:POLISH_TOP]]
    return min(candidates, key=lambda c: c[1])


def fit_resamples(lx: np.ndarray, y_samples: np.ndarray, theta0: np.ndarray) -> np.ndarray:
    """Fit every bootstrap resample [B, n], warm-started from the point estimate; theta [B, 3]."""
    starts = np.repeat(theta0[None, :], y_samples.shape[0], axis=0)
    return minimise_batched(lx, np.log(y_samples), starts)[0]
