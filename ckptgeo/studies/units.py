"""Settings as the units of evidence: permutation tests that move whole settings, and the primary contrast with
acquisition time accounted for.

A **setting** is (task, level, size). Its seeds share the task's geometry and its timing, so they are replicates of
one piece of evidence, not independent ones: a test that permutes runs counts three pieces where there is one, and
on designs whose effects live at the setting level (seeds of a setting alike, no difficulty effect) it rejects far
above alpha (14-17% at a setting spread of 1-2 checkpoints, issue 44). Every test here relabels whole settings:

* :func:`unit_orders` -- the relabellings: settings exchanged within a stratum (a checkpoint schedule), a run at
  seed position ``k`` of setting ``A`` taking the label of the run at position ``k`` of the setting that replaces
  ``A`` (cyclically where two settings hold different numbers of seeds). Every relabelling is enumerated where
  there are at most ``n_permutations`` of them (the p is exact), else they are drawn.
* :func:`unit_permutation_test` -- a statistic of runs against those relabellings (the tracking, the precursor,
  order and probe rows' p). Its smallest possible p is :func:`smallest_p`: one over the relabellings of the
  settings, never smaller, however many runs they hold.
* :func:`adjusted_contrast` -- the primary row: each setting's mean lead regressed on difficulty and on the
  checkpoint at which the setting acquires (an intercept and a slope per schedule), the difficulty coefficient
  tested by Freedman and Lane's permutation of the reduced model's residuals among the settings of a schedule,
  its interval Student's t on the setting means. A geometry that knows nothing of behaviour leads a later
  acquisition by more and hard settings acquire later, so an unadjusted contrast would read that as a hard lead;
  the adjustment removes it while comparing every acquired setting, not only those that happen to acquire at the
  same checkpoint.

Pure functions; nothing reads or writes files.

References
----------
Freedman, D. and Lane, D. (1983). A nonstochastic interpretation of reported significance levels. Journal of
Business & Economic Statistics 1(4), 292-298.
Anderson, M. J. and Legendre, P. (1999). An empirical comparison of permutation methods for tests of partial
regression coefficients in a linear model. J. Statist. Comput. Simul. 62, 271-303.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ckptgeo.analysis import stats
from ckptgeo.analysis.stat_types import PermutationResult

__all__ = ["unit_orders", "smallest_p", "unit_permutation_test", "AdjustedContrast", "adjusted_contrast",
           "setting_of"]


def setting_of(model_or_run) -> str:
    """The setting ``<task>-L<level>-<size>`` of a grid run's name (``<task>-L<level>-<size>-s<seed>``); any other
    name is its own setting.

    >>> setting_of("parity-L1-tiny-s2"), setting_of("EleutherAI/pythia-160m")
    ('parity-L1-tiny', 'EleutherAI/pythia-160m')
    """
    from ckptgeo.analysis.curves import grid_run

    run = grid_run(str(model_or_run))
    return f"{run['task']}-L{run['level']}-{run['size']}" if run else str(model_or_run)


def _blocks(units: Sequence, strata: Sequence | None) -> list[list[np.ndarray]]:
    """Per stratum, the item indices of each unit (units in first-seen order, items in order)."""
    units = [str(u) for u in units]
    strata = ["" for _ in units] if strata is None else [str(s) for s in strata]
    out: dict = {}
    for i, (s, u) in enumerate(zip(strata, units)):
        out.setdefault(s, {}).setdefault((s, u), []).append(i)
    return [[np.asarray(v) for v in by.values()] for by in out.values()]


def _relabelled(blocks: list[list[np.ndarray]], perms: Sequence[Sequence[int]], n: int) -> np.ndarray:
    order = np.arange(n)
    for units, perm in zip(blocks, perms):
        for a, b in enumerate(perm):
            src, dst = units[b], units[a]
            order[dst] = src[np.arange(len(dst)) % len(src)]
    return order


def _count(blocks: list[list[np.ndarray]]) -> int:
    return math.prod(math.factorial(len(u)) for u in blocks)


def unit_orders(units: Sequence, strata: Sequence | None = None, *, n_permutations: int = 999,
                seed: int = 0) -> tuple[np.ndarray, bool]:
    """Relabellings of items that move whole units (settings) within strata (module docstring).

    Parameters
    ----------
    units : sequence of shape (n,)
        Each item's unit (its setting).
    strata : sequence of shape (n,), optional
        Each item's stratum (its checkpoint schedule); units move only within one. A unit spread over two
        strata is two units.
    n_permutations : int, default=999
        Relabellings drawn when there are more; at most this many: every one (the identity first).
    seed : int, default=0

    Returns
    -------
    orders : ndarray of int, shape (n_orders, n)
        Row ``b``: item ``i`` takes the label of item ``orders[b, i]``. Exact: row 0 is the identity.
    exact : bool
        Every relabelling was enumerated.

    Examples
    --------
    >>> o, exact = unit_orders(["a", "a", "b", "b"])
    >>> o.tolist(), exact
    ([[0, 1, 2, 3], [2, 3, 0, 1]], True)
    """
    n = len(units)
    blocks = _blocks(units, strata)
    if _count(blocks) <= n_permutations:
        combos = itertools.product(*(itertools.permutations(range(len(u))) for u in blocks))
        return np.asarray([_relabelled(blocks, c, n) for c in combos], dtype=int).reshape(-1, n), True
    rng = np.random.default_rng(seed)
    return np.asarray([_relabelled(blocks, [rng.permutation(len(u)) for u in blocks], n)
                       for _ in range(int(n_permutations))], dtype=int).reshape(-1, n), False


def smallest_p(units: Sequence, strata: Sequence | None = None, *, n_permutations: int = 999) -> float:
    """The smallest p-value a test over these units can give: one over the number of relabellings of the
    settings within strata when they are enumerated, ``1 / (n_permutations + 1)`` when drawn.

    >>> smallest_p(["a"] * 3 + ["b"] * 3 + ["c"] * 3)   # 9 runs, 3 settings: 3! relabellings
    0.16666666666666666
    """
    total = _count(_blocks(units, strata))
    return 1.0 / total if total <= n_permutations else 1.0 / (n_permutations + 1)


def unit_permutation_test(statistic: Callable[[np.ndarray], float], units: Sequence, strata: Sequence | None = None,
                          *, n_permutations: int = 999, seed: int = 0,
                          alternative: str = "greater") -> PermutationResult:
    """A permutation p-value for a statistic of runs, whole settings relabelled within strata.

    Parameters
    ----------
    statistic : callable, ``order -> float``
        As :func:`ckptgeo.analysis.stats.permutation_test`: item ``i`` takes the label of item ``order[i]``
        (the identity gives the observed value). NaN results are dropped from the null.
    units, strata, n_permutations, seed
        As :func:`unit_orders`.
    alternative : {"greater", "less", "two-sided"}, default="greater"

    Returns
    -------
    PermutationResult
        Exact (every relabelling, the identity among them): p = #{null >= observed} / #relabellings, never below
        :func:`smallest_p`; else (1 + #{null >= observed}) / (1 + n_permutations).

    Examples
    --------
    >>> x = np.repeat([0.0, 1.0, 2.0, 3.0], 3)                    # 4 settings of 3 seeds
    >>> r = unit_permutation_test(lambda o: float(np.corrcoef(x, x[o])[0, 1]), np.repeat(list("abcd"), 3))
    >>> round(r.p_value, 4), r.exact                               # 1 / 4!
    (0.0417, True)
    """
    orders, exact = unit_orders(units, strata, n_permutations=n_permutations, seed=seed)
    observed = float(statistic(np.arange(len(units))))
    null = np.asarray([float(statistic(o)) for o in orders], dtype=np.float64)
    finite = null[np.isfinite(null)]
    mean = float(finite.mean()) if finite.size else math.nan
    lo, hi = (float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975))) if finite.size else (math.nan,) * 2
    return PermutationResult(observed, stats.p_value(observed, null, alternative, exact), mean, lo, hi,
                             int(null.size), exact, int(seed), alternative, null)


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


def adjusted_contrast(leads: pd.DataFrame, *, n_permutations: int = 999, seed: int = 0, alpha: float = 0.05,
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
    alpha : float, default=0.05
        The interval is 1 - alpha.
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
    add them back to its fitted values and refit the full model; the null of ``t = beta / se(beta)`` is that of
    the refits. Interval: ``beta +- t_{df, 1 - alpha/2} se``, ``df = settings - rank``.

    Examples
    --------
    >>> rows = [{"setting": f"s{k}", "hard": k % 2 == 1, "schedule": "a", "acquisition": k,
    ...          "lead": 0.5 * k + 4.0 * (k % 2)} for k in range(8)]
    >>> r = adjusted_contrast(pd.DataFrame(rows))
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
    t_obs = est / se if se > 0 else (math.inf if est > 0 else -math.inf if est < 0 else 0.0)
    fitted0 = red @ (np.linalg.pinv(red) @ y)
    resid0 = y - fitted0
    orders, exact = unit_orders(s["setting"].astype(str).tolist(), s["schedule"].astype(str).tolist(),
                                n_permutations=n_permutations, seed=seed)
    ys = fitted0[None, :] + resid0[orders]
    b_null, se_null, _ = _t_of_first(x, ys)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_null = np.where(se_null > 0, b_null / se_null, np.sign(b_null) * np.inf)
    p = stats.p_value(float(t_obs), t_null, "greater", exact)
    half = max(float(sps.t.ppf(1 - alpha / 2, df)) * se, floor)
    min_p = 1.0 / len(orders) if exact else 1.0 / (len(orders) + 1)
    return AdjustedContrast(est, est - half, est + half, se, int(df), float(t_obs), float(p), float(min_p), exact,
                            slope=slope, **base)


def _replace(c: AdjustedContrast, **kw) -> AdjustedContrast:
    import dataclasses

    return dataclasses.replace(c, **kw)
