"""One registry of metric specs; adding a metric is one module with one decorator.

A metric declares what it *needs* from the engine:

``"hidden_states"``  ``fn(hidden_states, config) -> float`` called per layer on a
                     ``(n_samples, d_model)`` tensor; rows go to ``geometry`` with that layer.
``"probe_states"``   ``fn(states, labels, config) -> dict`` per layer; rows go to ``probes``.
``"outputs"``        computed by the engine's forward pass itself (behaviour); rows go to ``behavior``.
``"model"``          ``fn(ctx: ModelContext, config) -> list[MetricValue]`` on the whole model
                     (gradients, Hessian, LLC); rows go to ``geometry`` with ``layer = -1``.

``cost`` is ``"cheap"`` (on by default) or ``"expensive"`` (opt-in with ``--metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ckptgeo._registry import Registry

if TYPE_CHECKING:  # torch is imported where a loss is computed, so `ckptgeo scan --help` stays cheap
    import torch

__all__ = ["METRICS", "MetricSpec", "MetricValue", "ModelContext", "register_metric", "get_metric", "all_metrics",
           "metric_names", "default_metrics", "parse_metrics"]

NEEDS = ("hidden_states", "probe_states", "outputs", "model")
COSTS = ("cheap", "expensive")


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

    def default_config(self):
        return self.config() if self.config is not None else None


@dataclass(frozen=True)
class MetricValue:
    """One value of a whole-model metric. ``index`` orders multi-valued metrics (Hessian eigenvalue
    rank); ``extra`` holds per-value diagnostics (chain spread, ...) stored as JSON in the row."""

    value: float
    index: int | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class ModelContext:
    """What a ``needs="model"`` metric receives.

    ``model`` is the causal LM in eval mode on ``device``. ``batch`` holds ``input_ids`` and
    ``attention_mask`` of shape ``(n_items, seq_len)`` and ``labels`` of the same shape with -100
    where a position is not scored (the answer tokens of each item are scored). ``seed`` seeds any
    randomness. :meth:`loss` is the mean token cross-entropy (nats) over scored positions;
    :meth:`per_sample_loss` returns one loss per item, shape ``(n_items,)``.
    """

    model: torch.nn.Module
    batch: dict
    device: torch.device
    seed: int = 0
    revision: str = ""
    suite: str = ""

    def _token_losses(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        shift_logits = logits[:, :-1].float()
        shift_labels = labels[:, 1:]
        mask = shift_labels != -100
        tok = torch.nn.functional.cross_entropy(
            shift_logits.reshape(-1, shift_logits.shape[-1]), shift_labels.clamp_min(0).reshape(-1),
            reduction="none").view(shift_labels.shape)
        return tok * mask, mask

    def per_sample_loss(self, model: torch.nn.Module | None = None, batch: dict | None = None) -> torch.Tensor:
        model = model or self.model
        batch = batch or self.batch
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        tok, mask = self._token_losses(out.logits, batch["labels"])
        return tok.sum(1) / mask.sum(1).clamp_min(1)

    def loss(self, model: torch.nn.Module | None = None, batch: dict | None = None) -> torch.Tensor:
        model = model or self.model
        batch = batch or self.batch
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        tok, mask = self._token_losses(out.logits, batch["labels"])
        return tok.sum() / mask.sum().clamp_min(1)


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
}, check=_check_spec)


def register_metric(*, name: str, needs: str, cost: str = "cheap", unit: str = "", range=(float("-inf"), float("inf")),
                    config: type | None = None, table: str = "geometry"):
    """Decorator registering ``fn`` as metric ``name`` in :data:`METRICS` (``fn`` itself is returned).

    Raises
    ------
    DuplicateNameError
        ``name`` already registered to another function (both targets named).
    ValueError
        ``needs``/``cost`` not a known choice.
    """
    if needs not in NEEDS:
        raise ValueError(f"needs must be one of {NEEDS}; got {needs!r}")
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}; got {cost!r}")

    def deco(fn):
        METRICS.register(name, MetricSpec(name=name, fn=fn, needs=needs, cost=cost, unit=unit, range=tuple(range),
                                          config=config, table=table))
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

