"""The settings of a forecast (:class:`ForecastConfig`), each declared once; a light module (no pandas, torch or
scikit-learn at import) so that ``ckptgeo forecast --help`` builds its flags from the declarations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptgeo._settings import Interval, setting, with_settings_doc
from ckptgeo.analysis.config import AnalysisConfig

if TYPE_CHECKING:
    import numpy as np

    from ckptgeo.forecasting.data import RunCurves

__all__ = ["ForecastConfig", "DEFAULT_MAX_HORIZON", "DEFAULT_HORIZON", "DEFAULT_COVERAGE"]

#: checkpoints ahead the hazard is modelled (a later acquisition is "beyond the horizon")
DEFAULT_MAX_HORIZON = 48
#: h of P(acquired within the next h checkpoints)
DEFAULT_HORIZON = 5
#: the forecast interval's coverage
DEFAULT_COVERAGE = 0.8


@dataclass(frozen=True)
class ForecastConfig(AnalysisConfig):
    """Settings of a forecast: the analysis's (:class:`~ckptgeo.analysis.config.AnalysisConfig`: the event rules its
    geometry features apply, ``min_drop`` and ``recovery``; the seed of the null copy and the permutations; the
    relabellings of each concordance test, ``n_permutations``; the tests' level ``alpha``), and its own below, each
    declared once with its ``ckptgeo forecast`` flag where it has one. Written into its tables' metadata.

    Attributes
    ----------
    {settings}
    """

    horizon: int = setting(DEFAULT_HORIZON, "h of P(acquired within the next h checkpoints).",
                           admits=(Interval(int, 1, None),), flag="--horizon",
                           help="h of P(acquired within the next h checkpoints) (default %(default)s)")
    max_horizon: int = setting(DEFAULT_MAX_HORIZON, "Checkpoints ahead the hazard models; a later acquisition is "
                               "\"beyond the horizon\".", admits=(Interval(int, 1, None),), flag="--max-horizon",
                               help="checkpoints ahead the hazard is modelled; later is 'beyond the horizon' "
                                    "(default %(default)s)")
    max_landmarks: int = setting(32, "Checkpoints per run the model is fitted at (evenly spaced).",
                                 admits=(Interval(int, 1, None),))
    coverage: float = setting(DEFAULT_COVERAGE, "The forecast interval's coverage.",
                              admits=(Interval(float, 0, 1, closed="neither"),), flag="--coverage",
                              help="the forecast interval's coverage (default %(default)s)")
    C: float = setting(0.1, "Inverse L2 strength of the logistic regression.",
                       admits=(Interval(float, 0, None, closed="neither"),))
    calibrate: bool = setting(True, "Widen each held-out fold's intervals by an inner leave-one-group-out on its "
                              "training runs (:mod:`ckptgeo.forecasting.calibrate`); False: the model's own intervals.")

    def features(self, run: RunCurves, feature_set: str, with_tokens: bool = False) -> np.ndarray:
        from ckptgeo.forecasting.features import run_features

        return run_features(run, feature_set, min_drop=self.min_drop, recovery=self.recovery, with_tokens=with_tokens)


ForecastConfig.__doc__ = with_settings_doc(ForecastConfig.__doc__, ForecastConfig)
