"""A discrete-time hazard model of acquisition, fitted with scikit-learn.

The event is the checkpoint ``C`` at which an acquisition becomes known: the last checkpoint of the confirming
window (``C = A + window - 1`` for an acquisition at checkpoint ``A``). A forecast made at checkpoint ``i``
(a *landmark*, the run not yet confirmed: ``C > i``) is a distribution over ``C = i + k``, ``k = 1 ..
max_horizon``, from the hazards

    h(k | x_i) = P(C = i + k | C > i + k - 1, x_i),

one row per (run, landmark, k) while the run is at risk and observed (the hazard is 0 for ``k`` below
:func:`first_possible`: an acquisition cannot become known before its window fills); a run that never acquires contributes rows
with no event up to its last checkpoint (right-censored), as does a run whose window is cut off by its end. The
hazard is a logistic regression (``sklearn.linear_model.LogisticRegression``, L2, after ``StandardScaler``) on the
landmark's features ``x_i`` (:mod:`ckptgeo.forecasting.features`), ``log k`` times each feature, and cubic spline
bases (``SplineTransformer``, 6 knots at quantiles) of ``log k`` and of the target checkpoint's clock (its step as a
share of the run's planned steps, :func:`ckptgeo.forecasting.data.plan_clock`): the flexible baseline hazard of a
discrete-time model, in checkpoints ahead and in training time. Training time is read relative to the plan, not in
absolute steps, so that a run of another length (a size trained 10 times longer) is not placed where no fitted run
was. From the hazards,
``S(k) = prod_{j<=k} (1 - h(j))`` and ``F = 1 - S``; the forecast's median and 80% interval are the steps of the
first ``k`` where ``F`` reaches 0.5, 0.1 and 0.9 (None: beyond the horizon, "not within max_horizon
checkpoints"), mapped back to the acquisition checkpoint ``i + k - window + 1``; ``P(next h)`` is
``F(h + window - 1)``: the acquisition falls at or before ``i + h``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ckptgeo.forecasting.config import DEFAULT_COVERAGE, DEFAULT_HORIZON, DEFAULT_MAX_HORIZON
from ckptgeo.forecasting.data import RunCurves, plan_clock

__all__ = ["HazardModel", "future_steps", "first_possible", "FORECAST_COLUMNS", "DEFAULT_MAX_HORIZON", "DEFAULT_HORIZON",
           "DEFAULT_COVERAGE"]

#: columns of a run's forecast (:meth:`HazardModel.forecast_run`)
FORECAST_COLUMNS = ["checkpoint", "step", "median_step", "low_step", "high_step", "p_next", "beyond_horizon"]


def future_steps(steps: np.ndarray, i: int, n_ahead: int) -> np.ndarray:
    """Steps of checkpoints ``i+1 .. i+n_ahead`` of a grid, extended past its end at its last spacing.

    Examples
    --------
    >>> future_steps(np.array([0, 10, 20]), 1, 3).tolist()
    [20, 30, 40]
    """
    steps = np.asarray(steps, dtype=np.int64)
    known = steps[i + 1:i + 1 + n_ahead]
    if len(known) == n_ahead:
        return known
    last = int(steps[-1])
    spacing = int(steps[-1] - steps[-2]) if len(steps) > 1 and steps[-1] > steps[-2] else 1
    extra = last + spacing * np.arange(1, n_ahead - len(known) + 1)
    return np.concatenate([known, extra]).astype(np.int64)


def first_possible(run: RunCurves) -> np.ndarray:
    """Per checkpoint ``i``, the nearest ``k`` at which the acquisition can become known: ``window - a`` where the
    last ``a`` checkpoints up to ``i`` are above the threshold (``a < window``; a run not above it at ``i`` needs a
    whole window ahead). The event's definition, not a fitted quantity.

    Examples
    --------
    >>> r = RunCurves(("m", "s", ""), np.arange(5), np.array([0.0, 0.9, 0.0, 0.9, 0.9]), np.full(5, 100.0),
    ...               0.0, 0.5)
    >>> first_possible(r).tolist()
    [3, 2, 3, 2, 1]
    """
    above = np.asarray(run.accuracy, float) > run.threshold
    out = np.empty(len(above), dtype=int)
    a = 0
    for i, up in enumerate(above):
        a = a + 1 if up else 0
        out[i] = max(1, run.window - min(a, run.window - 1))
    return out


def _design(x: np.ndarray, k: np.ndarray, target_clock: np.ndarray) -> np.ndarray:
    """Rows of (log k, the target checkpoint's clock, landmark features, their interactions with log k): ``x``
    (n, d), the rest (n,). The first two columns get a spline basis in the pipeline (:func:`_estimator`)."""
    lk = np.log(k.astype(float))
    return np.column_stack([lk, target_clock, x, x * lk[:, None]])


def _estimator(n_columns: int, C: float):
    """Splines of log k and of the target checkpoint's clock (a flexible baseline hazard in both, as the
    time dummies of a discrete-time model), the other columns as they are; standardised; L2 logistic regression."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import SplineTransformer, StandardScaler

    basis = ColumnTransformer([("time", SplineTransformer(n_knots=6, degree=3, knots="quantile",
                                                          extrapolation="constant"), [0, 1])],
                              remainder="passthrough")
    return make_pipeline(basis, StandardScaler(), LogisticRegression(C=C, solver="newton-cholesky", max_iter=200))


@dataclass
class _Constant:
    """The hazard of training rows without a single event (or only events): their smoothed rate."""

    rate: float

    def predict_proba(self, z):
        return np.column_stack([np.full(len(z), 1 - self.rate), np.full(len(z), self.rate)])


class HazardModel:
    """Discrete-time hazard of acquisition from one feature set (module docstring).

    Parameters
    ----------
    max_horizon : int, default=48
        Checkpoints ahead modelled.
    max_landmarks : int, default=32
        Landmarks per run used for fitting (evenly spaced among the run's at-risk checkpoints); forecasts are made
        at every checkpoint.
    C : float, default=1.0
        Inverse L2 strength of the logistic regression (on standardised columns).
    seed : int, default=0
    """

    @classmethod
    def from_config(cls, cfg) -> "HazardModel":
        """The model a :class:`~ckptgeo.forecasting.config.ForecastConfig` declares."""
        return cls(max_horizon=cfg.max_horizon, max_landmarks=cfg.max_landmarks, C=cfg.C, seed=cfg.seed)

    def __init__(self, *, max_horizon: int = DEFAULT_MAX_HORIZON, max_landmarks: int = 32, C: float = 1.0,
                 seed: int = 0):
        self.max_horizon = max_horizon
        self.max_landmarks = max_landmarks
        self.C = C
        self.seed = seed
        self.estimator_ = None
        self.n_rows_ = 0
        self.n_events_ = 0

    # --------------------------------------------------------------------------------------------- fitting
    def _rows(self, run: RunCurves, feats: np.ndarray):
        n = len(run.steps)
        c = run.confirmed_index
        end = n - 1 if c is None else min(c, n - 1)   # landmarks 0 .. end-1 are at risk and have a future
        at_risk = np.arange(0, end)
        if len(at_risk) > self.max_landmarks:
            at_risk = np.unique(np.round(np.linspace(0, end - 1, self.max_landmarks)).astype(int))
        clock = plan_clock(run.steps, run.plan)
        first_k = first_possible(run)
        X, y = [], []
        for i in at_risk:
            last = min(n - 1, i + self.max_horizon) if c is None else min(c, n - 1, i + self.max_horizon)
            k = np.arange(first_k[i], last - i + 1)
            if not len(k):
                continue
            X.append(_design(np.repeat(feats[i][None, :], len(k), axis=0), k, clock[i + k]))
            y.append((i + k == c).astype(int) if c is not None else np.zeros(len(k), int))
        return X, y

    def fit(self, runs: list[RunCurves], features: list[np.ndarray]) -> "HazardModel":
        """Fit on ``runs`` (their features from :func:`ckptgeo.forecasting.features.run_features`, same order)."""
        from threadpoolctl import threadpool_limits

        Xs, ys = [], []
        for run, f in zip(runs, features):
            X, y = self._rows(run, f)
            Xs += X
            ys += y
        if not Xs:
            self.estimator_, self.n_rows_, self.n_events_ = _Constant(0.5), 0, 0
            return self
        X, y = np.vstack(Xs), np.concatenate(ys)
        self.n_rows_, self.n_events_ = len(y), int(y.sum())
        if 0 < self.n_events_ < len(y):
            est = _estimator(X.shape[1], self.C)
            with threadpool_limits(limits=1):   # a BLAS thread per core is 10x slower on a busy machine (note)
                self.estimator_ = est.fit(X, y)
        else:
            self.estimator_ = _Constant((self.n_events_ + 0.5) / (len(y) + 1.0))
        return self

    # ------------------------------------------------------------------------------------------ forecasting
    def event_cdf(self, feats: np.ndarray, steps: np.ndarray, landmarks: np.ndarray,
                  first_k: np.ndarray | None = None, *, plan: float | None = None) -> np.ndarray:
        """``F[j, k-1]`` = P(C <= landmarks[j] + k | C > landmarks[j]) for k = 1..max_horizon.

        Parameters
        ----------
        feats : ndarray of shape (n_checkpoints, n_features)
        steps : ndarray of shape (n_checkpoints,)
            The run's grid so far (future checkpoints beyond it at its last spacing).
        landmarks : ndarray of int, shape (n_landmarks,)
        first_k : ndarray of int, shape (n_checkpoints,), optional
            The nearest ``k`` the acquisition can become known at from each checkpoint (:func:`first_possible`);
            the hazard before it is 0.
        plan : float, optional
            The run's planned steps (:attr:`RunCurves.plan`); default: the last of ``steps``.
        """
        K = self.max_horizon
        k = np.arange(1, K + 1)
        plan = float(plan if plan else max(1, int(steps[-1])))
        blocks = [_design(np.repeat(feats[i][None, :], K, axis=0), k, plan_clock(future_steps(steps, int(i), K), plan))
                  for i in landmarks]
        if not blocks:
            return np.zeros((0, K))
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1):
            h = self.estimator_.predict_proba(np.vstack(blocks))[:, 1].reshape(len(landmarks), K)
        if first_k is not None:
            h = np.where(k[None, :] < first_k[np.asarray(landmarks)][:, None], 0.0, h)
        return 1.0 - np.cumprod(1.0 - h, axis=1)

    def forecast_run(self, run: RunCurves, feats: np.ndarray, *, horizon: int = DEFAULT_HORIZON,
                     coverage: float = DEFAULT_COVERAGE, landmarks=None) -> pd.DataFrame:
        """The forecast at each landmark of ``run`` (default: every checkpoint before the acquisition is known).

        Returns
        -------
        DataFrame
            :data:`FORECAST_COLUMNS`: ``checkpoint`` (index), ``step``; ``median_step``, ``low_step``,
            ``high_step`` (the acquisition step's median and ``coverage`` interval; NaN where the quantile lies
            beyond ``max_horizon`` checkpoints); ``p_next`` (acquired at or before ``checkpoint + horizon``);
            ``beyond_horizon`` (P(C beyond the horizon)).
        """
        n = len(run.steps)
        if landmarks is None:
            c = run.confirmed_index
            landmarks = np.arange(0, n if c is None else min(c, n))
        landmarks = np.asarray(landmarks, dtype=int)
        F = self.event_cdf(feats, run.steps, landmarks, first_possible(run), plan=run.plan)
        w = run.window
        tail = (1.0 - coverage) / 2
        rows = []
        for j, i in enumerate(landmarks):
            grid = np.concatenate([run.steps[:i + 1], future_steps(run.steps, int(i), self.max_horizon)])

            def step_at(q):
                hit = np.nonzero(F[j] >= q)[0]
                if not len(hit):
                    return math.nan
                return float(grid[max(0, int(i) + int(hit[0]) + 1 - (w - 1))])

            kk = min(horizon + w - 1, self.max_horizon)
            rows.append((int(i), int(run.steps[i]), step_at(0.5), step_at(tail), step_at(1.0 - tail),
                         float(F[j, kk - 1]), float(1.0 - F[j, -1])))
        return pd.DataFrame(rows, columns=FORECAST_COLUMNS)
