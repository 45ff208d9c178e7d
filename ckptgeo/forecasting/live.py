"""The forecast during training: a model fitted to a dataset of finished runs, applied to a live run's curves.

:class:`LiveForecaster` is fitted once (:meth:`LiveForecaster.from_dataset`, every run of the dataset, the
behaviour + geometry set by default) and asked at each measuring step of a :class:`~ckptgeo.monitor.Monitor`
(``Monitor(forecast_from=DATASET)``; ``ckptgeo train --monitor N --forecast-from DATASET``)::

    acquisition forecast: step 1200 [900, 1600], P(next 5 checkpoints) 0.31

The live run is another run than those it was fitted to, so its forecast is out of sample. Its interval is
widened as a held-out fold's is (:mod:`ckptgeo.forecasting.calibrate`: the dataset's runs held out a group at a
time, by task where they have two tasks or more, else seed). Future checkpoints are the monitor's schedule (past
its end, at its last spacing). The forecast's clock is the step as a share of the run's planned steps
(:func:`ckptgeo.forecasting.data.plan_clock`): the monitor passes the plan where it knows it (``ckptgeo train``'s
``--steps``, the Trainer's ``max_steps``); a live run of unknown length is read as planned like the median run it
was fitted to.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ckptgeo.events.rules import EventRules
from ckptgeo.forecasting.data import RunCurves, runs_from_tables
from ckptgeo.forecasting.calibrate import FitCache, widen, widening
from ckptgeo.forecasting.evaluate import ForecastConfig, primary_split, split_groups

__all__ = ["LiveForecaster", "LiveForecast", "read_runs", "usable_runs", "forecast_line"]


@dataclass(frozen=True)
class LiveForecast:
    """One live forecast: at ``step``, the acquisition step's median and interval (NaN: beyond the horizon),
    P(acquired within the next ``horizon`` checkpoints), or ``acquired`` once the acquisition is known."""

    suite: str
    step: int
    median_step: float
    low_step: float
    high_step: float
    p_next: float
    horizon: int
    feature_set: str
    acquired: bool = False

    @property
    def message(self) -> str:
        return forecast_line(self)


def forecast_line(f: LiveForecast) -> str:
    """``acquisition forecast: step 1200 [900, 1600], P(next 5 checkpoints) 0.31`` (``>N`` beyond the horizon).

    Examples
    --------
    >>> forecast_line(LiveForecast("copy-L1", 100, 1200.0, 900.0, 1600.0, 0.314, 5, "geometry"))
    'acquisition forecast: step 1200 [900, 1600], P(next 5 checkpoints) 0.31'
    """
    if f.acquired:
        return f"acquisition forecast: acquired at step {f.median_step:.0f}"

    def s(x):
        return f"{x:.0f}" if math.isfinite(x) else "beyond horizon"

    return (f"acquisition forecast: step {s(f.median_step)} [{s(f.low_step)}, {s(f.high_step)}], "
            f"P(next {f.horizon} checkpoints) {f.p_next:.2f}")


def usable_runs(root: str | os.PathLike) -> list[RunCurves]:
    """The runs of ``root`` (:func:`read_runs`) when a forecast can learn from them: two or more, one acquired.
    ``ckptgeo train --forecast-from`` asks this before training starts.

    Raises
    ------
    DatasetLayoutError
        ``root`` is not a dataset, or holds fewer than two runs or none that acquires.
    """
    from ckptgeo.errors import DatasetLayoutError

    runs = read_runs(root)
    if len(runs) < 2 or not any(r.acquisition_index is not None for r in runs):
        raise DatasetLayoutError(f"--forecast-from {root} holds {len(runs)} run(s), "
                                 f"{sum(r.acquisition_index is not None for r in runs)} acquired; a forecast needs "
                                 "two runs or more and at least one acquisition to learn from.", path=str(root))
    return runs


def read_runs(root: str | os.PathLike, *, rules: EventRules | None = None) -> list[RunCurves]:
    """The runs of a dataset folder as the analysis sees them, without running it: the dataset read as
    :func:`ckptgeo.analysis.pipeline.read_inputs` reads it for :func:`~ckptgeo.analysis.analyze` (grouped revisions
    left out, accuracy or else normalised accuracy, converged values only, the task loss), acquisitions and
    difficulty classes by the analysis's own rule (:func:`ckptgeo.analysis.curve_events.acquisitions` at its
    default settings, with the acquisition threshold and window of ``rules``, default
    :class:`~ckptgeo.events.rules.EventRules`), the cross-checkpoint measures of ``compare/`` where
    the scan wrote it, and the curves through the curve contract (:func:`ckptgeo.forecasting.data.runs_from_tables`).

    Raises
    ------
    DatasetLayoutError
        ``root`` holds no behaviour table.
    """
    from ckptgeo.analysis.curve_events import acquisitions
    from ckptgeo.analysis.config import config_from
    from ckptgeo.analysis.pipeline import read_inputs
    from ckptgeo.errors import DatasetLayoutError
    from ckptgeo.store.dataset import read_table

    root = Path(root)
    if not root.is_dir() or read_table(root, "behavior").empty:
        raise DatasetLayoutError(f"--forecast-from {root} holds no behavior/ table; give a ckptgeo dataset of finished "
                                 "runs (a study's dataset/, or the --out of `ckptgeo scan`).", path=str(root))
    inputs = read_inputs(root)
    rules = rules or EventRules()
    acq, _ = acquisitions(inputs["accuracy"], config_from({"acc_threshold": rules.acc_threshold, "window": rules.window}))
    compare = read_table(root, "compare") if (root / "compare").is_dir() else None
    return runs_from_tables(inputs["accuracy"], inputs["curves"], acq, compare)


class LiveForecaster:
    """A hazard model fitted to finished runs, forecasting a live run's acquisition checkpoint by checkpoint.

    Parameters
    ----------
    runs : list of RunCurves
        The finished runs to fit on (two or more; at least one acquired).
    feature_set : {"geometry", "behaviour"}, default="geometry"
    config : ForecastConfig, optional

    Attributes
    ----------
    widening : float
        The interval's widening in ``log1p(step)`` (0 with ``config.calibrate`` False).
    default_plan : int
        The planned steps assumed for a live run that gives none: the median of the fitted runs' plans.
    """

    def __init__(self, runs: list[RunCurves], *, feature_set: str = "geometry", config: ForecastConfig | None = None):
        self.config = config or ForecastConfig()
        self.feature_set = feature_set
        cache = FitCache(runs, [self.config.features(r, feature_set) for r in runs], self.config)
        self.model = cache.without(())
        self.n_runs = len(runs)
        self.default_plan = int(np.median([r.plan for r in runs]))
        split = primary_split(runs)
        labels = split_groups(runs, split) if split else [""] * len(runs)
        self.widening = widening(cache, list(range(len(runs))), labels)[0] if self.config.calibrate else 0.0

    @classmethod
    def from_dataset(cls, root: str | os.PathLike, **kwargs) -> "LiveForecaster":
        """Fit on every run of the dataset folder ``root`` (:func:`read_runs`).

        Raises
        ------
        DatasetLayoutError
            ``root`` holds fewer than two runs, or none that acquires.
        """
        return cls(usable_runs(root), **kwargs)

    def forecast(self, suite: str, steps, accuracy, *, chance: float | None, rankme: dict, n_items: float = math.nan,
                 rules: EventRules | None = None, future=None, loss=None, cross: dict | None = None,
                 planned_steps: int | None = None) -> LiveForecast:
        """The forecast at the last of ``steps`` from the curves so far.

        Parameters
        ----------
        steps, accuracy : sequence of shape (n_checkpoints,)
            The live curve so far (increasing steps).
        rankme : dict of int to sequence of shape (n_checkpoints,)
            RankMe per layer on ``steps`` (NaN where not measured).
        rules : EventRules, optional
            The event rules (the monitor's own; default :class:`~ckptgeo.events.rules.EventRules`): the acquisition
            is found by :meth:`~ckptgeo.events.rules.EventRules.acquisition`, and the run carries its threshold and
            window.
        future : sequence of int, optional
            The next measuring steps (default: the last spacing repeated).
        loss : sequence of shape (n_checkpoints,), optional
            The task loss on ``steps`` (nats per answer token; NaN where not measured); None: none recorded.
        cross : dict of str to sequence of shape (n_checkpoints,), optional
            Cross-checkpoint curves by name of :data:`ckptgeo.forecasting.data.CROSS_CURVES` (the monitor has none).
        planned_steps : int, optional
            The steps the live run is planned to train for (the forecast's clock is the step's share of it);
            None: :attr:`default_plan`.
        """
        steps = np.asarray(steps, dtype=np.int64)
        acc = np.asarray(accuracy, float)
        rules = rules or EventRules()
        a = rules.acquisition(steps, acc, chance)
        thr, window = a.threshold, rules.window
        h = self.config.horizon
        if a.status == "acquired":
            return LiveForecast(suite, int(steps[-1]), float(a.step), float(a.step), float(a.step), 1.0, h,
                                self.feature_set, acquired=True)
        grid = steps if future is None else np.concatenate([steps, [s for s in future if s > steps[-1]]]).astype(np.int64)
        n = len(steps)

        def pad(v):
            return np.concatenate([np.asarray(v, float), np.full(len(grid) - n, np.nan)])

        run = RunCurves(key=("live", suite, ""), steps=grid,
                        accuracy=np.concatenate([acc, np.full(len(grid) - n, np.nan)]),
                        n_items=np.full(len(grid), n_items), chance=math.nan if chance is None else float(chance),
                        threshold=thr, window=window,
                        rankme={k: pad(v) for k, v in rankme.items() if k > 0},
                        loss=None if loss is None else pad(loss), cross={k: pad(v) for k, v in (cross or {}).items()},
                        planned_steps=int(planned_steps or self.default_plan))
        feats = self.config.features(run, self.feature_set)
        fc = widen(self.model.forecast_run(run, feats, horizon=h, coverage=self.config.coverage, landmarks=[n - 1]),
                   self.widening, run)
        r = fc.iloc[0]
        return LiveForecast(suite, int(steps[-1]), float(r["median_step"]), float(r["low_step"]),
                            float(r["high_step"]), float(r["p_next"]), h, self.feature_set)
