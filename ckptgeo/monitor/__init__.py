"""Watch a training run live: per-layer RankMe, accuracy and events while the model trains.

* :mod:`ckptgeo.monitor.core`: :class:`Monitor` (``monitor.step(model, step)`` in any loop) writes the
  tables a scan writes, so ``ckptgeo analyze`` works on its folder unchanged.
* :mod:`ckptgeo.monitor.callback`: :class:`MonitorCallback`, a ``transformers.TrainerCallback``.
* :mod:`ckptgeo.monitor.live`: live collapse / recovery / acquisition events and what can be known
  online (the confirmation delay).
* :mod:`ckptgeo.monitor.schedule`: :class:`Schedule`, log-spaced early, regular later.

Importing this package is cheap; transformers loads with :class:`MonitorCallback`.
"""

from __future__ import annotations

import importlib

__all__ = ["Monitor", "MonitorConfig", "Reading", "task_suite", "MonitorCallback", "LiveEvent", "LiveTracker",
           "Schedule"]

_LAZY = {"Monitor": "core", "MonitorConfig": "core", "Reading": "core", "task_suite": "core",
         "MonitorCallback": "callback", "LiveEvent": "live", "LiveTracker": "live", "Schedule": "schedule"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
