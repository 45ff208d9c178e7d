"""Synthetic study designs whose truth is known, for the claim table's tests of its own tests.

A design is a list of settings (:class:`Setting`: name, schedule, difficulty). :func:`synthetic_leads` draws the
runs of a design with their effects **at the setting level**: every setting has its own acquisition checkpoint
(hard settings later, as in the paper's premise), its own geometric onset (unrelated to acquisition and to
difficulty unless a hard lead is planted), and its seeds scatter around both by a smaller run-level spread. A
run's lead is its accuracy onset minus its geometric onset, in checkpoints; so, with no planted lead, a setting
that acquires later leads by more, and nothing else separates hard from easy.

:data:`CPU_DESIGN` is the acquirable part of the ``cpu`` preset (:mod:`ckptgeo.studies.presets`): 24 settings
(12 hard, 12 easy) of 3 seeds on three schedules, 9, 4 and 11 settings. :data:`SMALL_DESIGN` is the design of
issue 44's measurements: 3 easy and 6 hard settings of 3 seeds on one schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["Setting", "CPU_DESIGN", "SMALL_DESIGN", "synthetic_leads", "lead_matrix_of"]


@dataclass(frozen=True)
class Setting:
    """One setting of a design: ``name`` (``<task>-L<level>-<size>``), ``schedule``, ``hard``."""

    name: str
    schedule: str
    hard: bool


def _cpu() -> tuple[Setting, ...]:
    from ckptgeo.suites.tasks import is_hard

    short = [(t, 1) for t in ("copy", "reverse", "compare", "parity")] + \
            [(t, 2) for t in ("copy", "reverse", "compare", "parity", "sort")]
    long = [(t, 1) for t in ("sort", "addition", "modular", "multiplication")]
    larger = [(t, 1, "mini") for t in ("copy", "reverse", "compare", "sort", "parity", "addition")] + \
             [(t, 1, "small") for t in ("copy", "reverse", "compare", "sort", "parity")]
    out = [Setting(f"{t}-L{lv}-tiny", "short", is_hard(t, lv)) for t, lv in short]
    out += [Setting(f"{t}-L{lv}-tiny", "long", is_hard(t, lv)) for t, lv in long]
    out += [Setting(f"{t}-L{lv}-{sz}", "larger", is_hard(t, lv)) for t, lv, sz in larger]
    return tuple(out)


#: the cpu preset's acquirable settings (module docstring)
CPU_DESIGN = _cpu()
#: 3 easy and 6 hard settings on one schedule (issue 44's synthetic design)
SMALL_DESIGN = tuple(Setting(f"task{k}-L1-tiny", "one", k >= 3) for k in range(9))


def synthetic_leads(design: Sequence[Setting], rng: np.random.Generator, *, hard_lead: float | Sequence = 0.0,
                    setting_sd: float = 1.0, run_sd: float = 0.5, n_seeds: int = 3, n_checkpoints: int = 40,
                    hard_delay: float = 8.0, acquisition_sd: float = 4.0, tracks: bool = False) -> pd.DataFrame:
    """The runs of one synthetic study of ``design`` (module docstring).

    Parameters
    ----------
    design : sequence of Setting
    rng : numpy Generator
    hard_lead : float or (low, high), default=0
        Lead planted on hard settings, checkpoints (a pair: drawn uniformly per study, rounded).
    setting_sd : float, default=1.0
        Spread of the settings' geometric onsets around their schedule's (checkpoints): the setting-level effect.
    run_sd : float, default=0.5
        Spread of a seed around its setting, for both onsets (checkpoints).
    n_seeds : int, default=3
    n_checkpoints : int, default=40
        Checkpoints per schedule; onsets are whole checkpoints in [1, n_checkpoints - 1].
    hard_delay : float, default=8.0
        How much later hard settings acquire on average (checkpoints); their acquisitions overlap the easy ones'
        by ``acquisition_sd``.
    acquisition_sd : float, default=4.0
        Spread of the settings' acquisition checkpoints within a difficulty.
    tracks : bool, default=False
        False: the geometric onset knows nothing of acquisition (about checkpoint 8, the setting's spread
        around it), so a later acquisition leads by more. True: it follows the run's accuracy onset at a lead of
        2 checkpoints plus the setting's spread (a precursor on every setting, no difficulty effect).

    Returns
    -------
    DataFrame
        One row per run: ``model``, ``setting``, ``schedule``, ``hard``, ``seed``, ``acquisition`` (checkpoint
        index), ``acc_onset``, ``geo_onset`` (checkpoint indices), ``lead`` (``acc_onset - geo_onset``).
    """
    delta = float(rng.integers(int(hard_lead[0]), int(hard_lead[1]) + 1)) if isinstance(hard_lead, (tuple, list)) \
        else float(hard_lead)
    hi = n_checkpoints - 1
    rows = []
    for st in design:
        acq = 14.0 + (hard_delay if st.hard else 0.0) + rng.normal(0.0, acquisition_sd)
        geo = 8.0 + rng.normal(0.0, setting_sd)
        for seed in range(1, n_seeds + 1):
            a = int(np.clip(round(acq + rng.normal(0.0, run_sd)), 3, hi))
            o = a - 2                                   # accuracy's onset: two checkpoints before acquisition
            g = (o - 2.0 + geo - 8.0 if tracks else geo) + rng.normal(0.0, run_sd) - (delta if st.hard else 0.0)
            g = int(np.clip(round(g), 0, hi))
            rows.append({"model": f"{st.name}-s{seed}", "setting": st.name, "schedule": st.schedule,
                         "hard": st.hard, "seed": seed, "acquisition": a, "acc_onset": o, "geo_onset": g,
                         "lead": float(o - g)})
    return pd.DataFrame(rows)


def lead_matrix_of(runs: pd.DataFrame):
    """The :class:`ckptgeo.claimtable.leads.LeadMatrix` of :func:`synthetic_leads`' runs (grid spacing one step a
    checkpoint): run i's geometric onset against run j's accuracy onset, for runs of one schedule."""
    from ckptgeo.claimtable.leads import LeadMatrix

    n = len(runs)
    acc = runs["acc_onset"].to_numpy(float)
    geo = runs["geo_onset"].to_numpy(float)
    strata = runs["schedule"].astype(str).tolist()
    same = np.equal.outer(np.asarray(strata, dtype=object), np.asarray(strata, dtype=object))
    lead = np.where(same, acc[None, :] - geo[:, None], np.nan)
    return LeadMatrix(runs["model"].tolist(), strata, lead, lead.copy(), geo, acc, np.ones(n), np.ones(n),
                      np.ones(n, dtype=bool))
