"""Precursor-gap analysis: when each capability arrived, and whether the geometry moved first, over a whole
dataset as DataFrames (the events of one curve are :mod:`ckptgeo.events`, the statistics :mod:`ckptgeo.stats`).

* :mod:`ckptgeo.analysis.pipeline`: :func:`analyze` over a whole dataset: it runs the registered steps
  (:mod:`ckptgeo.analysis.steps`, ``STEPS``; the built-ins in :mod:`ckptgeo.analysis.builtin_steps`) in
  dependency order, writing ``events/``, ``summary/`` and ``compare/`` tables. The steps call
  :mod:`~ckptgeo.analysis.curve_events` (events per curve) and :mod:`~ckptgeo.analysis.across_runs`
  (rates and their nulls, top-down, probe lead, sizes, seeds); :mod:`~ckptgeo.analysis.config` holds
  :class:`AnalysisConfig` and :class:`Analysis`, :mod:`~ckptgeo.analysis.view` the console view.
* :mod:`ckptgeo.analysis.figures`: the PNGs ``ckptgeo analyze`` writes, each a function of an
  :class:`Analysis` you can call yourself:

  - :func:`plot_suite` (model, suite, path): RankMe per layer vs step, accuracy, events marked, the
    precursor gap shaded, and the collapse -> acquisition window at linear scale;
  - :func:`plot_heatmap` (model, suite, path): layer x step RankMe with the same events;
  - :func:`plot_probes` (model, suite, path): probe vs shuffled-label control per layer, probe onsets
    and acquisition marked;
  - :func:`plot_seeds` (base, models, suite, path): runs that differ only by seed, mean and band;
  - :func:`plot_gaps` (path): precursor gap by task and model size;
  - :func:`plot_all` (figures folder) does all of them; :mod:`ckptgeo.analysis.plotting` holds the drawing
    pieces they share.
* :mod:`ckptgeo.analysis.report`: :func:`write_report` (``report.md``: the tables, and the figures linked).

  >>> from ckptgeo.analysis import analyze, plot_suite            # doctest: +SKIP
  >>> a = analyze("results/demo/dataset")                          # doctest: +SKIP
  >>> plot_suite(a, "addition-L2-tiny-s0", "addition-L2", "addition.png")  # doctest: +SKIP

Importing this package is cheap; :func:`analyze` and friends load on first use.
"""

from __future__ import annotations

import importlib

__all__ = ["analyze", "Analysis", "AnalysisConfig", "events_text", "pipeline", "figures",
           "steps", "STEPS", "register_step",
           "plot_suite", "plot_heatmap", "plot_probes", "plot_seeds", "plot_gaps", "plot_all",
           "write_report"]

_LAZY = {"analyze": "pipeline", "Analysis": "config", "AnalysisConfig": "config", "events_text": "view",
         "pipeline": None, "figures": None, "steps": None,
         "STEPS": "steps", "register_step": "steps",
         "write_report": "report",
         **{name: "figures" for name in ("plot_suite", "plot_heatmap", "plot_probes", "plot_seeds", "plot_gaps",
                                         "plot_all")}}


def __getattr__(name: str):
    if name in _LAZY:
        mod = importlib.import_module(f".{_LAZY[name] or name}", __name__)
        return mod if _LAZY[name] is None else getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
