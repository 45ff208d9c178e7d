"""The claim table's inference: intervals over tasks and seeds, the hard-minus-easy contrast of leads, equivalence
for absence, rank association and Holm's adjustment.

* :func:`cluster_interval` -- a mean over settings (each the mean of its seeds) with an interval of real
  coverage: Student's t on the setting means from 5 settings on (exact for normal setting effects; the
  hierarchical percentile bootstrap it replaces covered 74-86% at 3 tasks), below 5 the range of the setting
  means with its exact distribution-free coverage of their median (1 - 2^(1-G): 75% at 3), flagged. Never of
  zero width: a floor half-width (the grid's resolution, one checkpoint) is kept.
* :func:`rate_interval` -- a rate over runs (a share of yes/no outcomes): the setting-level interval of
  :func:`cluster_interval` on the settings' rates, widened where narrower to the exact Clopper-Pearson interval of
  the pooled count, so a rate of 0% or 100% (or any constant) never gets a zero-width interval.
* :func:`contrast` -- hard minus easy difference in lead, settings paired within checkpoint schedules: a
  stratified rank statistic tested by permuting the difficulty labels among the settings of a schedule (seeds
  of a setting move together, as difficulty is assigned per setting), the estimate in checkpoints with a t
  interval on setting means (pooled within-cell variance) from 5 settings on, else the exact interval from
  inverting the permutation test over shifts.
* :func:`holm` -- Holm's step-down adjustment.

Pure functions; nothing reads or writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps


__all__ = ["MIN_TASKS", "Interval", "cluster_interval", "rate_interval", "Contrast", "contrast", "holm"]

#: fewest settings (tasks) for a t interval; below it the exact fall-back, flagged.
MIN_TASKS = 5


@dataclass(frozen=True)
class Interval:
    """A mean over settings with its interval: ``value``, ``low``, ``high`` (infinite: unbounded), ``coverage``
    (the interval's own, e.g. 0.95, or the exact 0.75 of a 3-setting range), ``n_settings``, ``method``,
    ``flag`` ("" or why the interval is weaker than 95%)."""

    value: float
    low: float
    high: float
    coverage: float
    n_settings: int
    method: str
    flag: str = ""

    def text(self, unit: str = "", fmt: str = "{:+.1f}") -> str:
        if math.isnan(self.value):
            return "-"
        lo = "-inf" if self.low == -math.inf else fmt.format(self.low)
        hi = "inf" if self.high == math.inf else fmt.format(self.high)
        cov = "" if abs(self.coverage - 0.95) < 1e-9 else f", {self.coverage:.0%} coverage"
        return f"{fmt.format(self.value)}{unit} [{lo}, {hi}{cov}]"


def cluster_interval(values: Sequence[float], clusters: Sequence, *, confidence: float = 0.95,
                     floor: float = 0.0) -> Interval:
    """Mean of the cluster (setting) means of ``values`` with an interval of real coverage.

    Parameters
    ----------
    values : array-like of shape (n_runs,)
        NaN values are dropped.
    clusters : array-like of shape (n_runs,)
        The setting (task) of each run; seeds of a setting are averaged first.
    confidence : float, default=0.95
    floor : float, default=0
        Smallest half-width: an interval is never narrower than what the measurement resolves.

    Returns
    -------
    Interval
        t on the cluster means (df = G - 1) with at least :data:`MIN_TASKS` clusters; below that the range of
        the cluster means (exact coverage of their median 1 - 2^(1-G), flagged); NaN without a value.

    Examples
    --------
    >>> r = cluster_interval([1, 2, 3, 4, 5, 6], ["a", "a", "b", "b", "c", "c"])
    >>> r.value, (r.low, r.high), r.coverage, r.flag != ""
    (3.5, (1.5, 5.5), 0.75, True)
    """
    v = np.asarray(values, dtype=float)
    c = np.asarray(list(clusters), dtype=object)
    ok = np.isfinite(v)
    if not ok.any():
        return Interval(math.nan, math.nan, math.nan, math.nan, 0, "none")
    means = pd.Series(v[ok]).groupby(pd.Series(c[ok]).astype(str).to_numpy()).mean().to_numpy()
    g = len(means)
    centre = float(np.mean(means))
    if g >= MIN_TASKS:
        half = float(sps.t.ppf(0.5 + confidence / 2, g - 1) * np.std(means, ddof=1) / math.sqrt(g))
        half = max(half, floor)
        return Interval(centre, centre - half, centre + half, confidence, g, f"t on {g} setting means")
    if g == 1:
        return Interval(centre, -math.inf, math.inf, confidence, g, "one setting: no interval",
                        "1 setting: unbounded")
    lo, hi = float(np.min(means)), float(np.max(means))
    lo, hi = min(lo, centre - floor), max(hi, centre + floor)
    cov = 1.0 - 2.0 ** (1 - g)
    return Interval(centre, lo, hi, cov, g, f"range of {g} setting means (exact for their median)",
                    f"{g} settings (< {MIN_TASKS}): exact range, {cov:.0%} coverage")


def rate_interval(hits: Sequence[float], clusters: Sequence, *, confidence: float = 0.95) -> Interval:
    """A rate over runs (``k / n``) with an interval of real coverage that is never of zero width.

    Seeds of one setting are replicates, settings are not: with two or more settings the interval is
    :func:`cluster_interval` on the settings' rates (t from :data:`MIN_TASKS` settings, the exact range below,
    flagged), clipped to [0, 1]; it is then widened, where narrower, to the exact (Clopper-Pearson) interval of the
    pooled count, the narrowest a rate of ``n`` independent runs can honestly have. At 0% or 100% (every setting
    the same) the settings' spread is zero and the exact interval is what remains: 54/54 gives [93.4%, 100%], not
    [100%, 100%]. One setting: the exact interval alone (its seeds are independent replicates).

    Parameters
    ----------
    hits : array-like of shape (n_runs,)
        1.0 / 0.0 per run (True / False); NaN runs are left out.
    clusters : array-like of shape (n_runs,)
        Each run's setting (task, level and size).
    confidence : float, default=0.95

    Returns
    -------
    Interval
        ``value`` the pooled rate k / n, ``low`` / ``high`` in [0, 1], ``coverage`` (that of the setting-level
        interval below :data:`MIN_TASKS` settings, else ``confidence``), ``flag`` below :data:`MIN_TASKS`
        settings. NaN without a run.

    Examples
    --------
    >>> r = rate_interval([1.0] * 54, [i // 3 for i in range(54)])
    >>> r.value, round(r.low, 3), r.high, r.flag
    (1.0, 0.934, 1.0, '')
    >>> r = rate_interval([0, 0, 0], ["a", "a", "a"])
    >>> r.value, (round(r.low, 3), round(r.high, 3)), r.method
    (0.0, (0.0, 0.708), 'exact (Clopper-Pearson) on 3 runs of one setting')
    """
    v = np.asarray(hits, dtype=float)
    c = np.asarray(list(clusters), dtype=object)
    ok = np.isfinite(v)
    v, c = v[ok], c[ok]
    n = int(v.size)
    if not n:
        return Interval(math.nan, math.nan, math.nan, math.nan, 0, "none")
    k = int(round(float(v.sum())))
    exact = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    g = len(set(map(str, c)))
    if g < 2:
        return Interval(k / n, float(exact.low), float(exact.high), confidence, g,
                        f"exact (Clopper-Pearson) on {n} runs of one setting")
    ci = cluster_interval(v, c, confidence=confidence)
    lo, hi = min(max(ci.low, 0.0), float(exact.low)), max(min(ci.high, 1.0), float(exact.high))
    return Interval(k / n, lo, hi, ci.coverage, g, f"{ci.method} of the rate, at least the exact interval of "
                                                   f"{k}/{n}", ci.flag)


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and does not count in the family).

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03, float("nan")]).round(3).tolist()
    [0.03, 0.06, 0.06, nan]
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = len(idx)
    if not m:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


# ---------------------------------------------------------------------------------------------- contrast

@dataclass(frozen=True)
class Contrast:
    """Hard minus easy difference in lead over settings paired within schedules.

    ``estimate`` (checkpoints), ``low``/``high`` (its interval; infinite: unbounded), ``coverage``, ``method``,
    ``statistic`` (the stratified rank statistic: hard settings' mean centred rank within their schedule, in
    [-0.5, 0.5]), ``p_value`` (one-sided: hard leads more), ``min_p`` (the smallest p this design can give),
    ``n_hard``, ``n_easy`` (settings in schedules holding both), ``n_strata``, ``flag``.
    """

    estimate: float
    low: float
    high: float
    coverage: float
    method: str
    statistic: float
    p_value: float
    min_p: float
    n_hard: int
    n_easy: int
    n_strata: int
    flag: str = ""


def _settings(leads: pd.DataFrame) -> pd.DataFrame:
    """Setting means of ``lead`` in schedules that hold both hard and easy settings."""
    s = (leads.dropna(subset=["lead"]).groupby(["stratum", "setting"], sort=True)
         .agg(lead=("lead", "mean"), hard=("hard", "first")).reset_index())
    both = s.groupby("stratum")["hard"].transform(lambda h: h.any() and (~h).any())
    return s[both.astype(bool)].reset_index(drop=True)


def _groups(s: pd.DataFrame) -> list[np.ndarray]:
    return [np.asarray(g) for g in s.groupby("stratum").groups.values()]


def _weights(groups: list, hard: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per setting, the coefficients (a, b) with difference = sum(lab * a * x) - sum((1 - lab) * b * x): schedules
    weighted n_h n_e / (n_h + n_e) (the counts are the same under every labelling within schedules)."""
    a, b, total = np.zeros(n), np.zeros(n), 0.0
    for g in groups:
        n_h = int(hard[g].sum())
        n_e = len(g) - n_h
        if not n_h or not n_e:
            continue
        w = n_h * n_e / (n_h + n_e)
        a[g], b[g] = w / n_h, w / n_e
        total += w
    return (a / total, b / total) if total else (a, b)


def _difference(labs: np.ndarray, x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The weighted hard-minus-easy difference of ``x`` under each labelling (rows of ``labs``)."""
    return labs.astype(float) @ (x * (a + b)) - float(np.sum(x * b))


def _labellings(groups: list, hard: np.ndarray, n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """Difficulty labellings of the settings within schedules (rows): every one when few (exact), else random."""
    import itertools

    n = len(hard)
    total = math.prod(math.comb(len(g), int(hard[g].sum())) for g in groups)
    if total <= n_permutations:
        per = [[np.isin(g, list(c)) for c in itertools.combinations(g.tolist(), int(hard[g].sum()))] for g in groups]
        out = []
        for combo in itertools.product(*per):
            lab = np.zeros(n, dtype=bool)
            for g, mask in zip(groups, combo):
                lab[g] = mask
            out.append(lab)
        return np.asarray(out), True
    rng = np.random.default_rng(seed)
    out = np.repeat(hard[None, :], n_permutations, axis=0)
    for row in out:
        for g in groups:
            row[g] = hard[g][rng.permutation(len(g))]
    return out, False


def contrast(leads: pd.DataFrame, *, alpha: float, n_permutations: int = 999, seed: int = 0,
             floor: float = 1.0) -> Contrast:
    """The hard-minus-easy contrast of leads (module docstring).

    Parameters
    ----------
    leads : DataFrame
        One row per run: ``lead`` (checkpoints), ``hard`` (bool), ``setting`` (task, level and size: the unit
        difficulty is assigned to), ``stratum`` (the checkpoint schedule).
    n_permutations, seed : int
        Random labellings drawn when there are more than ``n_permutations`` distinct ones (else all, exact).
    alpha : float
        The interval is 1 - alpha.
    floor : float
        Smallest half-width of the interval (the lead's resolution: one checkpoint).
    """
    s = _settings(leads)
    n_h, n_e = int(s["hard"].sum()), int((~s["hard"]).sum())
    n_strata = int(s["stratum"].nunique()) if len(s) else 0
    if not n_h or not n_e:
        return Contrast(math.nan, math.nan, math.nan, math.nan, "none", math.nan, math.nan, math.nan, n_h, n_e,
                        n_strata, "no schedule holds both hard and easy settings with a lead")
    hard = s["hard"].to_numpy(bool)
    lead = s["lead"].to_numpy(float)
    groups = _groups(s)
    a, b = _weights(groups, hard, len(s))
    est = float(_difference(hard[None, :], lead, a, b)[0])
    labs, exact = _labellings(groups, hard, n_permutations, seed)
    centred = np.empty(len(s))
    for g in groups:
        centred[g] = (sps.rankdata(lead[g]) - (len(g) + 1) / 2) / len(g)
    observed = float(centred[hard].mean())
    null = labs.astype(float) @ centred / n_h
    ge = int(np.sum(null >= observed - 1e-12))
    p = ge / len(null) if exact else (1 + ge) / (1 + len(null))
    min_p = (1 / len(null)) if exact else 1 / (1 + len(null))
    g = n_h + n_e
    cells = s.groupby(["stratum", "hard"])["lead"]
    resid = (s["lead"] - cells.transform("mean")).to_numpy()
    df = g - cells.ngroups
    if g >= MIN_TASKS and df >= 1:
        sd = math.sqrt(float(np.sum(resid ** 2)) / df)
        half = max(float(sps.t.ppf(1 - alpha / 2, df) * sd * math.sqrt(np.sum(np.where(hard, a, b) ** 2))), floor)
        lo, hi, how, flag = est - half, est + half, f"t on {g} setting means (df {df})", ""
    else:
        lo, hi = _inverted(hard, lead, labs, a, b, alpha, exact)
        lo, hi = min(lo, est - floor), max(hi, est + floor)
        how = "inverted permutation test over shifts (exact)"
        flag = f"{g} settings (< {MIN_TASKS}): exact interval from the permutation test"
    return Contrast(est, float(lo), float(hi), 1 - alpha, how, observed, float(p), float(min_p), n_h, n_e, n_strata,
                    flag)


def _inverted(hard: np.ndarray, lead: np.ndarray, labs: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float,
              exact: bool) -> tuple[float, float]:
    """The shifts delta whose two-sided permutation test (difference of means, hard leads minus delta) keeps
    p > alpha: an exact interval under a shift model. Unbounded when no labelling can reject."""
    if len(labs) * alpha < 1:   # no outcome can reach a two-sided p <= alpha
        return -math.inf, math.inf
    span = float(np.ptp(lead)) + 1.0
    grid = np.linspace(-3 * span, 3 * span, 241)
    kept = []
    for d in grid:
        x = lead - d * hard
        obs = float(_difference(hard[None, :], x, a, b)[0])
        null = _difference(labs, x, a, b)
        extreme = int(np.sum(np.abs(null) >= abs(obs) - 1e-12))
        p = extreme / len(null) if exact else (1 + extreme) / (1 + len(null))
        if p > alpha:
            kept.append(d)
    if not kept:
        return math.nan, math.nan
    lo, hi = min(kept), max(kept)
    return (-math.inf if lo <= grid[0] else lo), (math.inf if hi >= grid[-1] else hi)
