"""ckptgeo: walk the checkpoints of a training run and measure what changes inside the model.

The public API is this module's names; internal modules may move without breaking it::

    import ckptgeo

    res = ckptgeo.scan("EleutherAI/pythia-160m", revisions="every-10000", metrics=["rankme", "cka"])
    geometry = ckptgeo.read_table(res.out, "geometry")
    events = ckptgeo.analyze(res.out).events

========================  ========================================================================
``scan``, ``plan_scan``   measure the revisions of a source into Parquet tables / say what it would do
``analyze``               events (acquisition, collapse, precursor gap), summaries, figures, report.md and
                          report.html of a dataset (``plots=False``: no figures)
``forecast``              forecast acquisition per run and checkpoint; does geometry beat behaviour?
``claims``                the paper's claims judged on a study or scan folder (``ckptgeo claims``' table)
``combine``               the cross-checkpoint step: artifacts -> the ``compare`` table (CKA, distances)
``read_table``            one table of a dataset as a DataFrame
``open_source``           a checkpoint source from a Hub repo id, a folder or a family spec
``Monitor``               measure a model live, during training (``MonitorCallback`` for ``Trainer``)
``register_metric``       the decorator that adds a measure (``MetricValue``, ``CompareValue`` it returns)
``METRICS``, ``SOURCES``, registries of measures, checkpoint sources and suite loaders (entry-point
``LOADERS``               groups ``ckptgeo.metrics``, ``ckptgeo.sources``, ``ckptgeo.suites``)
``register_step``,        add an analysis step (reads and writes tables by name) / a claim row / a
``register_claim``,       figure; their registries (entry-point groups ``ckptgeo.analysis_steps``,
``register_figure``,      ``ckptgeo.claims``, ``ckptgeo.figures``)
``STEPS``, ``CLAIMS``,
``FIGURES``
``build_config``,         a model config of a named size, the tasks' tokenizer, task items (for
``build_tokenizer``,      training with ``transformers.Trainer`` and ``MonitorCallback``)
``generate``
========================  ========================================================================

Each name is imported on first use, so ``import ckptgeo`` and ``ckptgeo --help`` stay cheap; IDEs and type
checkers see the real objects through the ``TYPE_CHECKING`` imports.
"""

import os as _os

from ckptgeo._version import __version__

# Idle OpenMP threads sleep instead of spinning (unless the user chose otherwise). torch's CPU build reads this
# once, when it first loads libgomp, so it is set here, before any ckptgeo module imports torch. Spinning threads
# cost a 2-thread forward of a 14m-shaped model 1.3x its CPU time (1.1x wall) at load 2.5 on 2 cores, more on a busier
# one (scripts/bench_wait_policy.py measures it); the results do not change.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: public name -> the module that defines it (imported on first access of the name)
_FACADE = {
    "scan": "ckptgeo.engine.scan", "plan_scan": "ckptgeo.engine.plan", "ScanConfig": "ckptgeo.engine.config",
    "analyze": "ckptgeo.analysis.report", "combine": "ckptgeo.metrics.cross",
    "forecast": "ckptgeo.forecasting.api", "ForecastConfig": "ckptgeo.forecasting.config",
    "claims": "ckptgeo.studies.claims_api",
    "read_table": "ckptgeo.store.dataset", "open_source": "ckptgeo.sources.registry",
    "Monitor": "ckptgeo.monitor.core", "MonitorCallback": "ckptgeo.monitor.callback",
    "task_suite": "ckptgeo.monitor.core",
    "register_metric": "ckptgeo.metrics.registry", "MetricValue": "ckptgeo.metrics.registry",
    "CompareValue": "ckptgeo.metrics.registry",
    "METRICS": "ckptgeo.metrics.registry", "SOURCES": "ckptgeo.sources.registry", "LOADERS": "ckptgeo.suites.items",
    "STEPS": "ckptgeo.analysis.steps", "register_step": "ckptgeo.analysis.steps",
    "CLAIMS": "ckptgeo.claimtable.registry", "register_claim": "ckptgeo.claimtable.registry",
    "FIGURES": "ckptgeo.analysis.figures", "register_figure": "ckptgeo.analysis.figures",
    "build_config": "ckptgeo.training.sizes", "build_tokenizer": "ckptgeo.suites.vocab", "generate": "ckptgeo.suites.tasks",
}

__all__ = ["__version__", *_FACADE]

#: True only for static readers (mypy, pyright, IDEs treat a name ``TYPE_CHECKING`` as ``typing.TYPE_CHECKING``):
#: they see the real objects and their types below, while ``import ckptgeo`` imports neither ``typing`` nor
#: any submodule (``tests/test_facade.py`` holds this block and :data:`_FACADE` together)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckptgeo.analysis.figures import FIGURES, register_figure
    from ckptgeo.analysis.steps import STEPS, register_step
    from ckptgeo.analysis.report import analyze
    from ckptgeo.claimtable.registry import CLAIMS, register_claim
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.plan import plan_scan
    from ckptgeo.engine.scan import scan
    from ckptgeo.forecasting.api import forecast
    from ckptgeo.forecasting.config import ForecastConfig
    from ckptgeo.metrics.cross import combine
    from ckptgeo.metrics.registry import METRICS, CompareValue, MetricValue, register_metric
    from ckptgeo.monitor.callback import MonitorCallback
    from ckptgeo.monitor.core import Monitor, task_suite
    from ckptgeo.sources.registry import SOURCES, open_source
    from ckptgeo.store.dataset import read_table
    from ckptgeo.studies.claims_api import claims
    from ckptgeo.suites.items import LOADERS
    from ckptgeo.suites.tasks import generate
    from ckptgeo.suites.vocab import build_tokenizer
    from ckptgeo.training.sizes import build_config


#: modules of ckptgeo's own packages above the analysis that register analysis steps and figures (as an installed
#: package's entry points would): imported before the facade hands out an analysis name
_EXTENSIONS = ("ckptgeo.forecasting.tables",)
_ANALYSIS_NAMES = ("analyze", "STEPS", "register_step", "FIGURES", "register_figure")


def __getattr__(name: str):
    if name in _FACADE:
        import importlib

        for module in _EXTENSIONS if name in _ANALYSIS_NAMES else ():
            importlib.import_module(module)
        value = getattr(importlib.import_module(_FACADE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ckptgeo' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the public names (and the module's dunders); not TYPE_CHECKING, which exists only for static readers
    return sorted({n for n in globals() if n.startswith("__")} | set(__all__))
