"""Variable projection for log L_hat = log(E + A z), z = x^-alpha: a 1-D profile over alpha.

For a fixed exponent the curve E + A z is linear in (E, A) on the raw scale, but the objective
sum_i w_i (log L_hat_i - ybar_i)^2 is on log values, so the inner 2-parameter problem is solved
by Gauss-Newton: linearising log L_hat about the current L gives the weighted linear least
squares of L (1 + ybar - log L) on (1, z) with weights w / L^2, in closed form (E held on its
lower bound when the free solution falls below it). The outer problem phi(alpha) = min_(E, A)
objective is then one-dimensional: Newton steps with the envelope gradient (d phi / d alpha is
the partial derivative at the inner optimum) and the Gauss-Newton Schur complement as curvature,
halved until phi decreases. This walks the floor of the curved (E, A, alpha) valley of nearly
flat curves (alpha near 0) that a 3-D Levenberg-Marquardt crawls along for hundreds of steps.

Vectorised over problems; used by `analysis.fit.powerlaw.polish` to carry the problems LM has not
settled within a few iterations to the valley floor before the same LM finishes them (so the
polish's convergence test decides). Problems whose A sits on its bound (alpha then not
identified) are left where they are.
"""
from __future__ import annotations

import numpy as np

INNER_STEPS = 2  # Gauss-Newton steps for (E, A) at each trial alpha (warm started)
OUTER_STEPS = 40  # Newton steps in alpha at most
STEP_RTOL = 1e-12  # an alpha step this small (relative) ends the walk
GAIN_RTOL = 1e-15  # as does an accepted step that lowers phi by less than this, relative
MAX_HALVINGS = 8  # or this many rejected steps in a row (a kink of phi: E reaching its bound)


def _inner(alpha, e_lin, a_lin, lx, y, w, floor, a_min):
    """INNER_STEPS Gauss-Newton steps for (E, A) [B] at fixed alpha [B]; E >= floor, A >= a_min
    (a bound that binds holds its parameter there while the other is re-solved alone)."""
    z = np.exp(-alpha[:, None] * lx)
    for _ in range(INNER_STEPS):
        big = e_lin[:, None] + a_lin[:, None] * z
        target = big * (1.0 + y - np.log(big))
        om = w / (big * big)
        s0, s1, s2 = om.sum(1), (om * z).sum(1), (om * z * z).sum(1)
        t0, t1 = (om * target).sum(1), (om * z * target).sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            det = s0 * s2 - s1 * s1
            e_new = (s2 * t0 - s1 * t1) / det
            a_new = (s0 * t1 - s1 * t0) / det
            a_floor = (t1 - floor * s1) / s2
            e_alone = (t0 - a_min * s1) / s0
        low = ~(e_new > floor)
        a_new = np.where(low, a_floor, a_new)
        e_new = np.where(low, floor, e_new)
        flat = ~(a_new > a_min)
        e_lin = np.where(flat, np.maximum(e_alone, floor), e_new)
        a_lin = np.where(flat, a_min, a_new)
    return e_lin, a_lin, z


def _state(alpha, e_lin, a_lin, lx, y, w, floor, a_min):
    """Inner solve at alpha, then phi, its envelope gradient and Gauss-Newton curvature [B]."""
    e_lin, a_lin, z = _inner(alpha, e_lin, a_lin, lx, y, w, floor, a_min)
    big = e_lin[:, None] + a_lin[:, None] * z
    r = np.log(big) - y
    phi = (w * r * r).sum(1)
    j_e, j_a = 1.0 / big, z / big
    j_al = -a_lin[:, None] * lx * j_a
    g = (w * r * j_al).sum(1)
    h_ee, h_aa, h_ea = (w * j_e * j_e).sum(1), (w * j_a * j_a).sum(1), (w * j_e * j_a).sum(1)
    h_ll, h_el, h_al = (w * j_al * j_al).sum(1), (w * j_e * j_al).sum(1), (w * j_a * j_al).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        det = h_ee * h_aa - h_ea * h_ea
        free = h_ll - (h_aa * h_el * h_el - 2 * h_ea * h_el * h_al + h_ee * h_al * h_al) / det
        held = h_ll - h_al * h_al / h_aa  # E on its bound: A alone is profiled
    curv = np.where(e_lin <= floor, held, free)
    return phi, g, curv, e_lin, a_lin


def walk(lx: np.ndarray, y: np.ndarray, w: np.ndarray, e_lin: np.ndarray, a_lin: np.ndarray,
         alpha: np.ndarray, lower: tuple[float, float, float], upper_alpha: float):
    """Newton walk on phi(alpha) from (E, A_ref, alpha) [B] each (reference units), with lower
    bounds (E, A_ref, alpha) and alpha's upper bound. Returns (E, A_ref, alpha) [B]. A problem
    stops when its step no longer moves alpha or gains less than GAIN_RTOL, or after MAX_HALVINGS
    rejected steps in a row; the ones still walking are kept in compact arrays."""
    floor, a_min, al_lo = lower
    out = [e_lin.copy(), a_lin.copy(), alpha.copy()]
    phi, g, curv, e_lin, a_lin = _state(alpha, e_lin, a_lin, lx, y, w, floor, a_min)
    out[0][:], out[1][:] = e_lin, a_lin
    ids = np.arange(alpha.size)
    step = np.zeros_like(alpha)
    fails = np.where(a_lin > a_min, 0, MAX_HALVINGS + 1)
    for _ in range(OUTER_STEPS):
        with np.errstate(divide="ignore", invalid="ignore"):
            proposal = np.where(curv > 0, -g / curv, -np.sign(g) * 0.1 * alpha)
        step = np.where(fails == 0, np.clip(proposal, -0.5 * alpha, alpha), step * 0.5)  # alpha/2 .. 2 alpha
        trial = np.clip(alpha + step, al_lo, upper_alpha)
        phi_t, g_t, curv_t, e_t, a_t = _state(trial, e_lin, a_lin, lx, y, w, floor, a_min)
        better = (phi_t < phi) & (a_t > a_min)  # A on its bound: alpha not identified, left to the polish
        moved = np.abs(trial - alpha) > STEP_RTOL * alpha
        gain = np.where(better, (phi - phi_t) / np.maximum(phi, 1e-300), 0.0)
        alpha, phi, g, curv, e_lin, a_lin = (np.where(better, new, old) for new, old in (
            (trial, alpha), (phi_t, phi), (g_t, g), (curv_t, curv), (e_t, e_lin), (a_t, a_lin)))
        fails = np.where(better, 0, fails + 1)
        done = ~moved | (better & (gain < GAIN_RTOL)) | (fails > MAX_HALVINGS)
        for arr, v in zip(out, (e_lin, a_lin, alpha)):
            arr[ids] = v
        if done.all():
            break
        keep = ~done
        ids, alpha, phi, g, curv, e_lin, a_lin, step, fails, y = (
            a[keep] for a in (ids, alpha, phi, g, curv, e_lin, a_lin, step, fails, y))
    return tuple(out)
