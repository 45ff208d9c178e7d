"""Power before verdicts: the smallest lead a claim row could detect at this design.

Rank rows (a Kendall tau between sizes or against parameters) state theirs in tau: :func:`kendall_mde`; the
top-down row (a mean tau over runs, each its own depth) :func:`mean_kendall_mde`. A row may say "not reproduced"
only where its MDE is at or below the margin fixed in advance (:data:`ckptgeo.claimtable.table.MARGIN`
checkpoints, :data:`ckptgeo.claimtable.table.TAU_MARGIN` in tau).

Each judged run's curve is replaced by a smooth curve of its own size (RankMe: a fall by the run's own drop, then
a recovery; other measures: a step by the run's own largest departure) with its onset planted ``d``
checkpoints before the run's accuracy onset, plus Gaussian noise at the run's own checkpoint-to-checkpoint
level (:func:`ckptgeo.stats.noise.robust_noise_sd`). The row's own test is run on the planted curves; the
**power** at ``d`` is the share of ``n_power`` replicates in which it detects the lead, and the **minimum
detectable effect** (MDE) the smallest ``d`` of :data:`LEADS` with power >= 80%. A curve that never moved (a
blind detector) plants nothing and gives no power; an onset that would fall before the second checkpoint is
planted there (the grid cannot show more).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

import numpy as np

import ckptgeo.stats as stats
from ckptgeo.claimtable.leads import grid_index

__all__ = ["LEADS", "POWER", "planted_curve", "plant", "power_at", "minimum_detectable", "kendall_mde",
           "mean_kendall_mde", "mde_text", "tau_mde_text"]

#: permutations inside each planted replicate of a power analysis.
POWER_PERMUTATIONS = 199
#: planted leads tried, in checkpoints.
LEADS = (1, 2, 3, 4, 6, 8)
#: power a row needs at an effect before it may say "not reproduced".
POWER = 0.8


def planted_curve(values: np.ndarray, kind: str, onset: int, rng: np.random.Generator) -> np.ndarray:
    """A smooth curve the size of ``values`` with its onset at index ``onset``, plus noise at its own level."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    fin = v[np.isfinite(v)]
    if len(fin) < 3:
        return np.full(n, np.nan)
    v0 = float(fin[0])
    sd = stats.robust_noise_sd(fin)
    sd = 0.0 if not math.isfinite(sd) else sd
    k = np.arange(n, dtype=float)
    if kind == "recovery":
        amp = max(v0 - float(np.min(fin)), 0.0)
        o = min(max(int(onset), 2), n - 1)
        fall = np.clip(k / max(o - 1, 1), 0.0, 1.0)
        rise = np.clip((k - o + 1) / 2.0, 0.0, 1.0)
        curve = v0 - amp * fall + 0.6 * amp * rise
    else:
        amp = float(np.max(np.abs(fin - v0)))
        o = min(max(int(onset), 1), n - 1)
        curve = v0 + amp * np.clip((k - o + 1) / 2.0, 0.0, 1.0)
    return curve + rng.normal(0.0, sd, n) if sd > 0 else curve


def plant(curves: Mapping[str, object], behaviour: Mapping, leads: Mapping[str, int], fraction: float,
          rng: np.random.Generator) -> dict:
    """``curves`` with each run of ``leads`` replaced by a planted curve whose onset leads its accuracy onset by
    ``leads[run]`` checkpoints (runs not in ``leads`` are kept as they are)."""
    out = dict(curves)
    for m, d in leads.items():
        c, b = curves.get(m), behaviour.get(m)
        if c is None or b is None:
            continue
        a = b.onset(fraction)
        if a.step is None:
            continue
        at = grid_index(np.asarray(c.steps, dtype=float), a.step) - int(d)
        out[m] = dataclasses.replace(c, values=planted_curve(c.values, c.kind, at, rng))
    return out


def power_at(detects: Callable[[dict], bool], curves: Mapping, behaviour: Mapping, who: Mapping[str, int],
             *, n_power: int, fraction: float, seed: int = 0) -> float:
    """Share of ``n_power`` planted replicates (leads ``who``: run -> checkpoints) in which ``detects`` fires."""
    rng = np.random.default_rng(seed)
    hits = sum(bool(detects(plant(curves, behaviour, who, fraction, rng))) for _ in range(n_power))
    return hits / n_power if n_power else math.nan


def minimum_detectable(detects: Callable[[dict], bool], curves: Mapping, behaviour: Mapping, judged,
                       *, n_power: int, fraction: float, seed: int = 0, others: Mapping[str, int] | None = None,
                       leads=LEADS) -> tuple[float, dict]:
    """(MDE in checkpoints, {lead: power}): the smallest planted lead of ``leads`` (in ``judged`` runs; the runs
    of ``others`` planted at their own leads, e.g. 0) detected with power >= :data:`POWER`; inf when none is.
    Stops at the first lead that reaches it."""
    table = {}
    for d in leads:
        who = {m: d for m in judged} | dict(others or {})
        table[d] = power_at(detects, curves, behaviour, who, n_power=n_power, fraction=fraction, seed=seed + d)
        if table[d] >= POWER:
            return float(d), table
    return math.inf, table


def mde_text(mde: float, table: Mapping) -> str:
    """The MDE in checkpoints with the power at each planted lead tried, as a row prints it."""
    shown = ", ".join(f"{d}: {p:.0%}" for d, p in table.items())
    return (f"MDE {mde:g} checkpoints" if math.isfinite(mde) else f"MDE > {max(LEADS)} checkpoints") + \
        f" (power by planted lead: {shown})"


def tau_mde_text(mde: float) -> str:
    """The MDE in Kendall tau as a row prints it."""
    return (f"MDE tau {mde:+.2f} (power >= 80%)" if math.isfinite(mde)
            else "no tau detectable with power >= 80% at this design")


def _tau_b_many(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Kendall tau-b of ``x`` (n,) against each row of ``ys`` (m, n) (rows without ties)."""
    iu = np.triu_indices(x.size, 1)
    dx = np.sign(x[:, None] - x[None, :])[iu]
    dy = np.sign(ys[:, :, None] - ys[:, None, :])[:, iu[0], iu[1]]
    nx, ny = np.count_nonzero(dx), np.count_nonzero(dy, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (dy @ dx) / np.sqrt(nx * ny)


def kendall_mde(x, *, alpha: float, n_sim: int = 400, n_null: int = 1999, seed: int = 0,
                rhos=tuple(np.round(np.arange(0.05, 1.0, 0.05), 2))) -> tuple[float, dict]:
    """(MDE in Kendall tau, {tau: power}): the smallest rank correlation a one-sided Kendall test of ``x``
    against a continuous outcome detects with power >= :data:`POWER` at alpha, at this design (``x`` with its
    ties, e.g. the parameters of each run, or one size's values over the shared settings).

    The outcome is drawn from a Gaussian copula on ``x``'s normal scores at correlation rho (``n_sim`` draws per
    rho of ``rhos``); the effect is the mean tau-b of those draws; a draw is detected when its permutation p
    (against ``n_null`` permutations of the outcome, as the rows' own test; every one enumerated when fewer)
    is below alpha. inf when no rho reaches the power (a design that cannot reject: three settings).

    Examples
    --------
    >>> kendall_mde([1, 2, 3], alpha=0.05)[0]
    inf
    """
    from scipy.stats import norm, rankdata

    xv = np.asarray(x, dtype=float)
    xv = xv[np.isfinite(xv)]
    n = xv.size
    if n < 3 or np.unique(xv).size < 2:
        return math.inf, {}
    rng = np.random.default_rng(seed)
    base = np.arange(n, dtype=float)
    if math.factorial(n) <= n_null:
        import itertools

        null = _tau_b_many(xv, np.asarray(list(itertools.permutations(base)), dtype=float))
        den, extra = null.size, 0
    else:
        null = _tau_b_many(xv, np.stack([rng.permutation(base) for _ in range(n_null)]))
        den, extra = null.size + 1, 1
    null = np.sort(null)
    score = norm.ppf((rankdata(xv) - 0.5) / n)
    score = (score - score.mean()) / (score.std() or 1.0)
    table = {}
    for rho in rhos:
        y = rho * score + math.sqrt(1.0 - rho ** 2) * rng.standard_normal((n_sim, n))
        taus = _tau_b_many(xv, y)
        ge = null.size - np.searchsorted(null, taus - 1e-12, side="left")
        p = (ge + extra) / den
        effect, power = float(np.round(np.mean(taus), 2)), float(np.mean(p < alpha))
        table[effect] = power
        if power >= POWER:
            return effect, table
    return math.inf, table


def mean_kendall_mde(xs, *, alpha: float, n_sim: int = 200, n_null: int = 999, seed: int = 0,
                     rhos=tuple(np.round(np.arange(0.05, 1.0, 0.05), 2))) -> tuple[float, dict]:
    """(MDE in mean Kendall tau, {tau: power}) of a test of the mean tau over runs, each run's outcome permuted
    among its own items (the top-down row: depth against collapse onset within each run).

    ``xs`` holds each run's ``x`` (its block depths, without ties). Each run's outcome is drawn from a Gaussian
    copula at correlation rho on its ``x`` (``n_sim`` studies per rho); the effect is the mean over studies of the
    mean tau; a study is detected when its one-sided permutation p against ``n_null`` joint within-run
    permutations is below alpha. A magnitude: a test of tau < 0 has the same MDE by symmetry. inf when no rho
    reaches :data:`POWER`.

    Examples
    --------
    >>> mean_kendall_mde([[1, 2, 3]], alpha=0.05)[0]
    inf
    """
    from scipy.stats import norm, rankdata

    runs = [np.asarray(x, dtype=float) for x in xs]
    runs = [x[np.isfinite(x)] for x in runs]
    runs = [x for x in runs if x.size >= 2 and np.unique(x).size == x.size]
    if not runs:
        return math.inf, {}
    rng = np.random.default_rng(seed)
    null = np.mean([_tau_b_many(x, np.stack([rng.permutation(x.size).astype(float) for _ in range(n_null)]))
                    for x in runs], axis=0)
    null = np.sort(null)
    table = {}
    for rho in rhos:
        taus = []
        for x in runs:
            score = norm.ppf((rankdata(x) - 0.5) / x.size)
            score = (score - score.mean()) / (score.std() or 1.0)
            y = rho * score + math.sqrt(1.0 - rho ** 2) * rng.standard_normal((n_sim, x.size))
            taus.append(_tau_b_many(x, y))
        mean = np.mean(taus, axis=0)
        ge = null.size - np.searchsorted(null, mean - 1e-12, side="left")
        p = (ge + 1) / (null.size + 1)
        effect, power = float(np.round(np.mean(mean), 2)), float(np.mean(p < alpha))
        table[effect] = power
        if power >= POWER:
            return effect, table
    return math.inf, table
