"""Settings as the units of the claim table's evidence: which setting a run is, and the primary contrast with
acquisition time accounted for.

A **setting** is (task, level, size) (:func:`setting_of`). Its seeds share the task's geometry and its timing, so
every test of a claim row relabels whole settings (:mod:`ckptgeo.stats.units`), never single runs.

* :func:`adjusted_contrast` -- the primary row: each setting's mean lead regressed on difficulty and on the
  checkpoint at which the setting acquires (an intercept and a slope per schedule), the difficulty coefficient
  tested by Freedman and Lane's permutation of the reduced model's residuals among the settings of a schedule,
  its interval Student's t on the setting means. A geometry that knows nothing of behaviour leads a later
  acquisition by more and hard settings acquire later, so an unadjusted contrast would read that as a hard lead;
  the adjustment removes it while comparing every acquired setting, not only those that happen to acquire at the
  same checkpoint (the matched contrast it replaces had no matched cell in 4 of 8 such designs, issue 44).

Pure functions; nothing reads or writes files.

References
----------
Freedman, D. and Lane, D. (1983). A nonstochastic interpretation of reported significance levels. Journal of
Business & Economic Statistics 1(4), 292-298.
Anderson, M. J. and Legendre, P. (1999). An empirical comparison of permutation methods for tests of partial
regression coefficients in a linear model. J. Statist. Comput. Simul. 62, 271-303.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ckptgeo.stats.permutation import p_value
from ckptgeo.stats.units import unit_orders

__all__ = ["AdjustedContrast", "adjusted_contrast", "setting_of"]


def setting_of(model_or_run) -> str:
    """The setting ``<task>-L<level>-<size>`` of a grid run's name (``<task>-L<level>-<size>-s<seed>``); any other
    name is its own setting.

    >>> setting_of("parity-L1-tiny-s2"), setting_of("EleutherAI/pythia-160m")
    ('parity-L1-tiny', 'EleutherAI/pythia-160m')
    """
    from ckptgeo.events.curves import grid_run

    run = grid_run(str(model_or_run))
    return f"{run['task']}-L{run['level']}-{run['size']}" if run else str(model_or_run)


# ------------------------------------------------------------------------------------------ primary contrast

@dataclass(frozen=True)
class AdjustedContrast:
    """Hard minus easy lead with acquisition time accounted for, settings as units.

    ``estimate`` (checkpoints: the difficulty coefficient), ``low``/``high`` (its 95% t interval, never narrower
    than the floor; NaN without one), ``se``, ``df``, ``statistic`` (its t), ``p_value`` (one-sided, hard leads more:
    Freedman-Lane over settings within schedules), ``min_p`` (the smallest p these settings allow), ``exact``,
    ``n_runs``, ``n_settings``, ``n_hard``, ``n_easy``, ``n_schedules`` (those holding a setting), ``slope``
    (checkpoints of lead per checkpoint of acquisition, averaged over the schedules that have one), ``flag`` ("" or
    why there is no test).
    """

    estimate: float
    low: float
    high: float
    se: float
    df: int
    statistic: float
    p_value: float
    min_p: float
    exact: bool
    n_runs: int
    n_settings: int
    n_hard: int
    n_easy: int
    n_schedules: int
    slope: float
    flag: str = ""


def _design(s: pd.DataFrame) -> np.ndarray:
    """Columns: hard, then per schedule an intercept and (with >= 3 settings whose acquisitions differ) a slope on
    the acquisition checkpoint centred within the schedule."""
    cols = [s["hard"].to_numpy(float)]
    for _, g in s.groupby("schedule", sort=True):
        ind = s["schedule"].eq(g["schedule"].iloc[0]).to_numpy(float)
        cols.append(ind)
        acq = g["acquisition"].to_numpy(float)
        if len(g) >= 3 and np.ptp(acq) > 0:
            cols.append(ind * (s["acquisition"].to_numpy(float) - float(acq.mean())))
    return np.column_stack(cols)


def _t_of_first(x: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficient, standard error, slope coefficients) of column 0 of ``x`` for each row of ``ys`` (OLS)."""
    pinv = np.linalg.pinv(x)
    beta = ys @ pinv.T
    resid = ys - beta @ x.T
    df = x.shape[0] - np.linalg.matrix_rank(x)
    sigma2 = np.sum(resid ** 2, axis=1) / df
    c00 = float((pinv @ pinv.T)[0, 0])
    return beta[:, 0], np.sqrt(sigma2 * c00), beta


def adjusted_contrast(leads: pd.DataFrame, *, alpha: float, n_permutations: int = 999, seed: int = 0,
                      floor: float = 1.0) -> AdjustedContrast:
    """The primary contrast (module docstring): hard minus easy setting-mean lead, adjusted for when each setting
    acquires within its schedule.

    Parameters
    ----------
    leads : DataFrame
        One row per acquired run: ``lead`` (checkpoints; NaN rows are dropped), ``hard`` (bool), ``setting`` (task,
        level and size), ``schedule`` (its checkpoint schedule), ``acquisition`` (the checkpoint index at which it
        acquired on that schedule).
    n_permutations, seed : int
        Relabellings of the settings within schedules; every one where there are at most ``n_permutations``.
    alpha : float
        The interval is 1 - alpha (the analysis's alpha; no default).
    floor : float, default=1.0
        Smallest half-width of the interval (a lead is known to +-1 checkpoint).

    Returns
    -------
    AdjustedContrast
        NaN estimate and p (with ``flag``) when difficulty is not estimable apart from the schedules and the
        acquisition (every schedule all hard or all easy, or no residual degree of freedom).

    Notes
    -----
    Model over settings ``s`` in schedules ``c``: ``lead_s = beta hard_s + a_c + b_c (acq_s - mean_c acq) + e_s``.
    Freedman-Lane: fit the reduced model (no ``hard``), permute its residuals among the settings of each schedule,
    add them back to its fitted values and refit the full model; the null of ``beta`` is that of the refits (the
    coefficient, not its t: a design whose leads fit exactly gives p = 1, not an undefined t). Interval:
    ``beta +- t_{df, 1 - alpha/2} se``, ``df = settings - rank``.

    Examples
    --------
    >>> rows = [{"setting": f"s{k}", "hard": k % 2 == 1, "schedule": "a", "acquisition": k,
    ...          "lead": 0.5 * k + 4.0 * (k % 2)} for k in range(8)]
    >>> r = adjusted_contrast(pd.DataFrame(rows), alpha=0.05)
    >>> round(r.estimate, 2), r.p_value < 0.05, r.n_settings
    (4.0, True, 8)
    """
    d = leads.dropna(subset=["lead", "acquisition"])
    s = (d.groupby(["schedule", "setting"], sort=True)
         .agg(lead=("lead", "mean"), hard=("hard", "first"), acquisition=("acquisition", "mean"))
         .reset_index())
    s["hard"] = s["hard"].astype(bool)
    n_h, n_e = int(s["hard"].sum()), int((~s["hard"]).sum())
    base = dict(n_runs=len(d), n_settings=len(s), n_hard=n_h, n_easy=n_e, n_schedules=int(s["schedule"].nunique()))
    none = AdjustedContrast(math.nan, math.nan, math.nan, math.nan, 0, math.nan, math.nan, math.nan, False,
                            slope=math.nan, **base, flag="")
    if not n_h or not n_e:
        return _replace(none, flag=f"{n_h} hard and {n_e} easy settings acquired: both are needed")
    x = _design(s)
    red = x[:, 1:]
    rank, rank_red = np.linalg.matrix_rank(x), np.linalg.matrix_rank(red)
    df = len(s) - rank
    if rank == rank_red:
        return _replace(none, flag="difficulty is not separable from the schedules (each holds hard or easy "
                                   "settings only)")
    if df < 1:
        return _replace(none, flag=f"{len(s)} settings leave no residual degree of freedom for {rank} parameters")
    y = s["lead"].to_numpy(float)
    beta, se, coef = _t_of_first(x, y[None, :])
    est, se = float(beta[0]), float(se[0])
    slope_cols = [j for j in range(1, x.shape[1]) if set(np.unique(x[:, j])) - {0.0, 1.0}]
    slope = float(np.mean(coef[0, slope_cols])) if slope_cols else math.nan
    fitted0 = red @ (np.linalg.pinv(red) @ y)
    resid0 = y - fitted0
    orders, exact = unit_orders(s["setting"].astype(str).tolist(), s["schedule"].astype(str).tolist(),
                                n_permutations=n_permutations, seed=seed)
    b_null, _, _ = _t_of_first(x, fitted0[None, :] + resid0[orders])
    p = p_value(round(est, 9), np.round(b_null, 9), "greater", exact) if math.isfinite(est) else math.nan
    t_obs = est / se if se > 0 else math.nan
    half = max(float(sps.t.ppf(1 - alpha / 2, df)) * se, floor)
    min_p = 1.0 / len(orders) if exact else 1.0 / (len(orders) + 1)
    return AdjustedContrast(est, est - half, est + half, se, int(df), float(t_obs), float(p), float(min_p), exact,
                            slope=slope, **base)


def _replace(c: AdjustedContrast, **kw) -> AdjustedContrast:
    import dataclasses

    return dataclasses.replace(c, **kw)
