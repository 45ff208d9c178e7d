"""Synthetic designs with a known truth, on which the forecast's tests are held to their level and their power.

Each design has settings of several seeds whose seeds are alike (they share the setting's level and timing, as
the runs of a study do), so that a test counting runs as independent rejects too often where one counting settings
does not:

* :func:`concordance_design`: forecasts that know only the task (a level per task) and acquisitions set by the
  setting, unrelated to them: concordance's null.
* :func:`skill_design`: per-run log scores of the two feature sets whose difference is a level per setting (mean 0)
  plus run noise: skill's null; ``timing`` adds a run-level gain to every run.
* :func:`runs_design`: whole :class:`~ckptgeo.forecasting.data.RunCurves` for :func:`ckptgeo.forecasting.evaluate.
  evaluate`: accuracy jumping at a setting-level checkpoint (plus a seed's shift) and RankMe drawn per setting,
  unrelated to acquisition (``lead=None``), or recovering ``lead`` checkpoints before each run's own acquisition (a
  run-level timing signal).

``scripts/forecast_false_positives.py`` prints the rates; ``tests/test_forecast_units.py`` asserts them.
Everything is seeded by a :class:`numpy.random.Generator`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ckptgeo.forecasting.data import RunCurves

__all__ = ["concordance_design", "skill_design", "runs_design"]


def concordance_design(rng: np.random.Generator, *, n_settings: int = 6, n_seeds: int = 3,
                       setting_sd: float = 100.0, seed_sd: float = 10.0
                       ) -> tuple[list[tuple[np.ndarray, np.ndarray, float]], list[str], list[str]]:
    """Acquired runs of one difficulty class whose forecasts are unrelated to their acquisition.

    Each setting is its own task. A run's acquisition step is ``500 + a_s + e`` (``a_s`` ~ N(0, ``setting_sd``),
    ``e`` ~ N(0, ``seed_sd``)); its forecast, one median for all its checkpoints, ``500 + f_s + e'`` with ``f_s``
    drawn independently of ``a_s`` (the same spreads).

    Returns
    -------
    forecasts : list of (steps, median_step, acquisition_step)
        As :func:`ckptgeo.forecasting.evaluate.concordance` takes them; ``n_settings * n_seeds`` runs.
    units : list of str
        Each run's setting.
    tasks : list of str
        Each run's task (here its setting).
    """
    forecasts, units = [], []
    for s in range(n_settings):
        a_s, f_s = rng.normal(0, setting_sd), rng.normal(0, setting_sd)
        for _ in range(n_seeds):
            acq = float(round(500 + a_s + rng.normal(0, seed_sd)))
            forecasts.append((np.zeros(1), np.array([500 + f_s + rng.normal(0, seed_sd)]), acq))
            units.append(f"t{s}-L1-tiny")
    return forecasts, units, list(units)


def skill_design(rng: np.random.Generator, *, n_settings: int = 9, n_seeds: int = 3, setting_sd: float = 0.1,
                 run_sd: float = 0.03, timing: float = 0.0, splits=("task", "seed")) -> pd.DataFrame:
    """Held-out scores as :func:`ckptgeo.forecasting.evaluate.skill_table` reads them, with no skill.

    Each setting is its own task; a run's behaviour log score is 0.5 plus noise, its geometry's the behaviour's
    plus ``g_s + e`` (``g_s`` ~ N(0, ``setting_sd``) shared by the setting's seeds, ``e`` ~ N(0, ``run_sd``)) minus
    ``timing`` (a gain of every run's own geometry; 0: none). The sibling copy's log score is the geometry's
    ``+ timing`` plus its own run noise (a sibling knows the setting, not the run). The same scores stand for every
    split in ``splits``.
    """
    rows = []
    for s in range(n_settings):
        g_s = rng.normal(0, setting_sd)
        for seed in range(1, n_seeds + 1):
            beh = 0.5 + rng.normal(0, 0.05)
            geo = beh + g_s + rng.normal(0, run_sd) - timing
            sib = geo + timing + rng.normal(0, run_sd)
            null = beh + rng.normal(0, run_sd)
            for split in splits:
                for name, ls in (("behaviour", beh), ("geometry", geo), ("geometry_sibling", sib),
                                 ("geometry_null", null)):
                    rows.append({"split": split, "feature_set": name, "run": f"t{s}-L1-tiny-s{seed}",
                                 "task": f"t{s}", "size": "tiny", "setting": f"t{s}-L1-tiny", "log_score": ls})
    return pd.DataFrame(rows)


def runs_design(rng: np.random.Generator, *, n_settings: int = 6, seeds=(1, 2, 3), lead: int | None = None,
                n_checkpoints: int = 40, step: int = 20) -> list[RunCurves]:
    """Runs whose acquisition is set by their setting (checkpoint 10..30, each seed within one checkpoint of it)
    and whose RankMe (layers 1, 2) is drawn per setting: a level ``exp(N(log 10, 0.5))`` and a collapse at a
    setting-level checkpoint, alike for its seeds (log noise 0.03 per checkpoint).

    ``lead=None``: the collapse's recovery at a checkpoint of the setting's own, unrelated to acquisition (the
    geometry knows the setting only). ``lead=k``: each run's RankMe recovers ``k`` checkpoints before its *own*
    acquisition (a run-level timing signal: a sibling's geometry is off by the seeds' shift).
    Half the settings are easy, half hard.
    """
    steps = np.arange(0, n_checkpoints * step, step)
    n, runs = n_checkpoints, []
    for t in range(n_settings):
        a_t = int(rng.integers(10, 31))
        level = float(np.exp(rng.normal(np.log(10.0), 0.5)))
        onset_t = int(rng.integers(6, 31))
        for s in seeds:
            a = int(np.clip(a_t + rng.integers(-2, 3), 8, n - 6))
            acc = np.clip(0.02 + rng.normal(0, 0.01, n), 0, 1)
            acc[a:] = 0.95
            onset = a - lead if lead is not None else onset_t
            layers = {}
            for k in (1, 2):
                v = np.full(n, 2.0 * level)
                v[3:] = 0.3 * level
                v[onset:] = 0.3 * level + np.minimum(1.0, np.arange(n - onset) / 3.0) * 1.5 * level
                layers[k] = v * np.exp(rng.normal(0, 0.03, n))
            runs.append(RunCurves(
                key=(f"t{t}-L1-tiny-s{s}", f"t{t}-L1", "h"), steps=steps.copy(), accuracy=acc,
                n_items=np.full(n, 200.0), chance=0.01, threshold=0.5, rankme=layers, acquisition_index=a, window=3,
                task=f"t{t}", level=1, size="tiny", seed=s, difficulty="hard" if t % 2 else "easy", size_order=1.0))
    return runs
