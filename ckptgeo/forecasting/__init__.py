"""Forecast a capability's acquisition before it happens, and measure whether the geometry helps.

Definitions: docs/definitions.md#forecast.

=====================  ===============================================================================
module                 what it holds
=====================  ===============================================================================
``config``             :class:`ForecastConfig`, its settings each declared once
``data``               the runs a forecast reads (:class:`RunCurves`): accuracy, RankMe per layer, identity
``features``           what is known at each checkpoint: the behaviour and behaviour + geometry feature sets
``model``              the discrete-time hazard model (scikit-learn logistic regression) and its forecasts
``evaluate``           held-out splits, scores, the skill test, its null copy, concordance, across sizes
``tables``             the ``forecast/`` tables and the analysis step that writes them
``figures``            a forecast figure per run
``api``                :func:`forecast` (``ckptgeo.forecast``) and its console summary
``live``               the monitor's per-checkpoint forecast (``Monitor(forecast_from=...)``)
=====================  ===============================================================================
"""

from importlib import import_module

__all__ = ["forecast", "ForecastResult", "ForecastConfig", "forecast_text"]
_WHERE = {"forecast": "api", "ForecastResult": "api", "forecast_text": "api", "ForecastConfig": "config"}


def __getattr__(name: str):
    # lazily: the CLI reads ForecastConfig's declarations without pandas or scikit-learn
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
