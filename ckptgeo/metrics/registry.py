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
    randomness; ``position_ids`` (optional) give left-padded rows their positions. :meth:`loss` is the
    task loss: the mean token cross-entropy (nats) over scored positions, the output head applied only
    at the last :meth:`logits_to_keep` positions (``_autodiff.task_token_losses``);
    :meth:`per_sample_loss` returns one loss per item, shape ``(n_items,)``.
    """

    model: torch.nn.Module
    batch: dict
    device: torch.device
    seed: int = 0
    revision: str = ""
    suite: str = ""

    def logits_to_keep(self, batch: dict | None = None) -> int:
        """Last positions whose logits the task loss reads (see ``_autodiff.scored_tail``); computed once
        from ``batch`` (default this context's), outside any ``vmap``."""
        from ckptgeo.metrics._autodiff import scored_tail

        if batch is None or batch is self.batch:
            if getattr(self, "_keep", None) is None:
                self._keep = scored_tail(self.batch["labels"])
            return self._keep
        return scored_tail(batch["labels"])

    def per_sample_loss(self, model: torch.nn.Module | None = None, batch: dict | None = None,
                        keep: int | None = None) -> torch.Tensor:
        from ckptgeo.metrics._autodiff import task_token_losses

        batch = batch or self.batch
        tok, mask = task_token_losses(model or self.model, batch, keep or self._tail(batch))
        return tok.sum(1) / mask.sum(1).clamp_min(1)

    def loss(self, model: torch.nn.Module | None = None, batch: dict | None = None) -> torch.Tensor:
        from ckptgeo.metrics._autodiff import task_token_losses

        batch = batch or self.batch
        tok, mask = task_token_losses(model or self.model, batch, self._tail(batch))
        return tok.sum() / mask.sum().clamp_min(1)

    def _tail(self, batch: dict) -> int:
        # rows drawn from this context's batch keep its columns, so its tail covers them
        same = "labels" in self.batch and batch["labels"].shape[1] == self.batch["labels"].shape[1]
        return self.logits_to_keep() if same else self.logits_to_keep(batch)


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

