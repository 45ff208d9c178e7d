"""One registry of metric specs; adding a metric is one module with one decorator.

A metric declares what it *needs* from the engine; the engine collects each kind of input once per
revision and suite and hands it to every metric that needs it:

``"hidden_states"``  ``fn(hidden_states, config) -> float`` called per layer on a
                     ``(n_samples, d_model)`` tensor of the suite's forward sweep.
``"probe_states"``   ``fn(states, labels, config) -> ProbeResult`` per layer, same sweep.
``"outputs"``        ``fn(correct, config) -> float`` on the sweep's per-item 0/1 scores (behaviour).
``"model"``          ``fn(ctx: ModelContext, config) -> list[MetricValue]`` on the whole model
                     (gradients, Hessian, LLC). One :class:`ModelContext` per revision and suite
                     carries the fixed batch, the loss, and inputs several metrics share
                     (per-sample gradients).
``"weights"``        ``fn(model, config) -> dict[str, ndarray]``, once per revision (no suite).

A **cross-checkpoint** measure (CKA, weight distance) compares two revisions, which may be measured by
different processes or runs. It registers a ``compare`` function besides ``fn``: at each revision ``fn``
returns a compact *artifact* (arrays by name; ``needs="hidden_states"``: one per layer and suite, from
the ``(n_samples, d_model)`` states), which the scan stores under ``artifacts/``; after the scan
:func:`ckptgeo.metrics.cross.combine` pairs each revision with its ``partners`` (``"previous"``,
``"first"``, ``"reference"``) and calls ``compare(artifact, partner_artifact, config)``, a list of
:class:`CompareValue` (``extra`` goes into the row's ``settings``), writing the ``compare`` table.

Rows go to the metric's ``table`` (``geometry``: one per layer, ``layer = -1`` for whole-model
metrics; ``behavior``; ``probes``), with the metric's settings as JSON in ``settings`` and, for the
fields named in ``columns``, as table columns of their own (RankMe's ``centered`` and ``epsilon``).
A ``hidden_states`` measure may register ``interval(hidden_states, config, seed) -> (low, high)``: its
measurement error at one checkpoint (RankMe: resampling the items), written as ``value_low`` /
``value_high``. A whole-model measure's ``extra`` may carry ``converged`` (False where a budget cut the
estimate short) and ``grad_norm`` (the gradient norm at the checkpoint); both become geometry columns.
``unit`` and ``range`` say what a value means; a value outside ``range`` is flagged in the row's
``reason``. ``cost`` is ``"cheap"`` (on by default) or ``"expensive"`` (opt-in with ``--metrics``).
Settings are the ``config`` dataclass: ``metric_options={"hessian": {"k": 10}}`` in Python,
``--metric-option hessian.k=10`` on the command line, checked against its ``_parameter_constraints``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Callable

from ckptgeo._params import replace_params
from ckptgeo._registry import Registry
from ckptgeo.errors import InvalidParameterError
from ckptgeo.metrics.context import ModelContext

__all__ = ["METRICS", "MetricSpec", "MetricValue", "CompareValue", "ModelContext", "register_metric", "get_metric",
           "all_metrics", "metric_names", "default_metrics", "parse_metrics"]

NEEDS = ("hidden_states", "probe_states", "outputs", "model", "weights")
PARTNERS = ("previous", "first", "reference")
COSTS = ("cheap", "expensive")
COLLAPSE = ("falls", "rises")


@dataclass(frozen=True)
class MetricSpec:
    """Everything the engine and the CLI know about a metric."""

    name: str
    fn: Callable
    needs: str
    cost: str
    unit: str
    range: tuple[float, float]
    config: type | None = None  # a frozen dataclass of the metric's settings, defaults = documented defaults
    table: str = "geometry"
    columns: tuple[tuple[str, str], ...] = ()  # (config field, table column) pairs written as columns
    compare: Callable | None = None  # cross-checkpoint: compare(artifact, partner_artifact, config)
    partners: tuple[str, ...] = ()   # which revisions each one is compared with (PARTNERS)
    interval: Callable | None = None  # hidden_states only: interval(states, config, seed) -> (low, high)
    # preflight(model, config, device): checked on the model built from config.json alone, before any weights are
    # downloaded; raises InvalidParameterError for settings that cannot fit (a buffer beyond host memory)
    preflight: Callable | None = None
    # how its curve is read (ckptgeo.events.curves.reading): the variant read where a dataset holds several,
    # as (column, value) pairs; whether higher is better; which way it moves at a collapse (COLLAPSE)
    preferred: tuple[tuple[str, Any], ...] = ()
    higher_is_better: bool | None = None
    collapse: str | None = None

    @property
    def cross(self) -> bool:
        """Whether this measure compares checkpoints (stores an artifact per revision, rows after the scan)."""
        return self.compare is not None

    def default_config(self):
        return self.config() if self.config is not None else None

    def configure(self, options: Mapping[str, Any] | None = None):
        """The metric's settings: its defaults with ``options`` set by field name, validated.

        Raises
        ------
        InvalidParameterError
            An option the config does not have (the valid ones listed), or a value outside its
            constraints (*The 'k' parameter of hessian must be an int in [1, inf). Got -1.*).
        """
        base = self.default_config()
        if base is None:
            if options:
                raise InvalidParameterError(f"Unknown option {next(iter(options))!r} of {self.name}. Valid options: "
                                            f"none (it takes no options).", name=str(next(iter(options))))
            return None
        return replace_params(base, dict(options or {}), owner=self.name)

    def out_of_range(self, value: float) -> str | None:
        """Why ``value`` is outside the declared ``range`` (for the row's ``reason``), else None."""
        lo, hi = self.range
        if value is None or value != value or lo <= value <= hi:
            return None
        return f"{value:.6g} is outside the declared range [{lo:g}, {hi:g}] of {self.name}"


@dataclass(frozen=True)
class CompareValue:
    """One value of a cross-checkpoint measure between a revision and a partner: ``layer`` (hidden-state
    layer, -1 for the whole model, None for a block that is no layer), ``block`` (what was compared, e.g. a
    parameter group), ``distance`` (an absolute distance where the value is relative) and ``partner_norm``
    (the partner's norm it was divided by)."""

    value: float
    layer: int | None = None
    block: str | None = None
    suite: str | None = None
    distance: float | None = None
    partner_norm: float | None = None
    n_rows: int | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MetricValue:
    """One value of a whole-model metric. ``index`` orders multi-valued metrics (Hessian eigenvalue
    rank); ``extra`` holds per-value diagnostics (chain spread, ...) stored as JSON in the row."""

    value: float
    index: int | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict)


def _check_spec(name: str, obj) -> None:
    if not isinstance(obj, MetricSpec):
        raise TypeError(f"expected a measure registered with @register_metric(name={name!r}, ...), got "
                        f"{type(obj).__name__} {getattr(obj, '__qualname__', obj)!r}")


#: Every measure: the built-ins (their modules are imported on first use of a name), then the ones
#: installed packages declare in the ``ckptgeo.metrics`` entry-point group.
METRICS = Registry("measure", "ckptgeo.metrics", {
    "rankme": "ckptgeo.metrics.rankme", "behavior": "ckptgeo.metrics.behavior", "probe": "ckptgeo.metrics.probe",
    "grad_rank": "ckptgeo.metrics.gradients", "grad_cov_rank": "ckptgeo.metrics.gradients",
    "hessian": "ckptgeo.metrics.hessian", "llc": "ckptgeo.metrics.llc",
    "cka": "ckptgeo.metrics.cka", "weight_distance": "ckptgeo.metrics.weight_distance",
}, check=_check_spec)


def register_metric(*, name: str, needs: str, cost: str = "cheap", unit: str = "", range=(float("-inf"), float("inf")),
                    config: type | None = None, table: str = "geometry", columns: Mapping[str, str] | None = None,
                    compare: Callable | None = None, partners: tuple[str, ...] = (), interval: Callable | None = None,
                    preferred: Mapping[str, Any] | None = None, higher_is_better: bool | None = None,
                    collapse: str | None = None, preflight: Callable | None = None):
    """Decorator registering ``fn`` as metric ``name`` in :data:`METRICS` (``fn`` itself is returned).

    ``preferred``, ``higher_is_better`` and ``collapse`` say how its curve is read
    (:func:`ckptgeo.events.curves.reading`): ``preferred={"centered": False}`` makes every table, claim and
    figure read the uncentred rows where a dataset holds both; ``collapse`` is ``"falls"`` or ``"rises"``, the way
    the measure moves at a representation collapse (None: it marks none).

    ``compare`` and ``partners`` make it a cross-checkpoint measure (module docstring); its rows go to
    the ``compare`` table. ``interval`` gives a hidden-state measure's per-checkpoint error (module docstring).
``preflight(model, config, device)`` checks the settings against the architecture (the model built from the
first revision's config.json, weights not loaded) before a scan downloads anything; it raises
:class:`~ckptgeo.errors.InvalidParameterError` where they cannot fit.

    Raises
    ------
    DuplicateNameError
        ``name`` already registered to another function (both targets named).
    ValueError
        ``needs``/``cost``/a partner not a known choice, or ``compare`` without ``partners``.
    """
    if needs not in NEEDS:
        raise ValueError(f"needs must be one of {NEEDS}; got {needs!r}")
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}; got {cost!r}")
    if compare is not None and (not partners or not set(partners) <= set(PARTNERS)):
        raise ValueError(f"a cross-checkpoint measure needs partners among {PARTNERS}; got {partners!r}")
    if collapse not in (None, *COLLAPSE):
        raise ValueError(f"collapse must be one of {COLLAPSE} or None; got {collapse!r}")
    if needs == "weights" and compare is None:
        raise ValueError('needs="weights" is for cross-checkpoint measures (give compare= and partners=)')
    if interval is not None and (needs != "hidden_states" or compare is not None):
        raise ValueError("interval= is for hidden_states measures that are not cross-checkpoint")

    def deco(fn):
        METRICS.register(name, MetricSpec(name=name, fn=fn, needs=needs, cost=cost, unit=unit, range=tuple(range),
                                          config=config, table="compare" if compare is not None else table,
                                          columns=tuple((columns or {}).items()), compare=compare,
                                          partners=tuple(partners), interval=interval,
                                          preferred=tuple((preferred or {}).items()),
                                          higher_is_better=higher_is_better, collapse=collapse,
                                          preflight=preflight))
        return fn

    return deco


def metric_names() -> list[str]:
    """Every measure's name, sorted, without importing any measure (cheap: for ``--help``)."""
    return METRICS.names()


def all_metrics() -> dict[str, MetricSpec]:
    """Every registered metric by name (each module imported on first call)."""
    return METRICS.load_all()


def get_metric(name: str) -> MetricSpec:
    """The spec of metric ``name``.

    Raises
    ------
    InvalidParameterError
        Unknown name: ``Unknown measure 'rankmee'. Did you mean: rankme? Available: ...``.
    PluginLoadError
        ``name`` comes from an installed package that fails to load.
    """
    return METRICS.get(name)


def default_metrics() -> list[str]:
    """Names of the cheap metrics, on by default."""
    return [n for n, s in all_metrics().items() if s.cost == "cheap"]


def parse_metrics(value: str | list[str] | None) -> list[str]:
    """``"rankme,behavior"`` or a list -> validated names; ``None``/``"default"`` -> the cheap ones;
    ``"all"`` -> every metric."""
    if value is None or value == "default" or value == ["default"]:
        return default_metrics()
    parts = value.split(",") if isinstance(value, str) else [p for v in value for p in v.split(",")]
    names = [p.strip() for p in parts if p.strip()]
    if names == ["all"]:
        return sorted(all_metrics())
    for n in names:
        get_metric(n)
    return list(dict.fromkeys(names))

