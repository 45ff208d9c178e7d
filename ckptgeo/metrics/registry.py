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

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ckptgeo.errors import InvalidParameterError

__all__ = ["MetricSpec", "MetricValue", "ModelContext", "register_metric", "get_metric", "all_metrics",
           "default_metrics", "parse_metrics"]

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


_REGISTRY: dict[str, MetricSpec] = {}


def register_metric(*, name: str, needs: str, cost: str = "cheap", unit: str = "", range=(float("-inf"), float("inf")),
                    config: type | None = None, table: str = "geometry"):
    """Decorator registering ``fn`` as metric ``name``.

    Raises
    ------
    ValueError
        ``name`` already registered (both targets named), or ``needs``/``cost`` not a known choice.
    """
    if needs not in NEEDS:
        raise ValueError(f"needs must be one of {NEEDS}; got {needs!r}")
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}; got {cost!r}")

    def deco(fn):
        if name in _REGISTRY:
            raise ValueError(f"metric {name!r} registered twice: {_REGISTRY[name].fn.__module__}."
                             f"{_REGISTRY[name].fn.__qualname__} and {fn.__module__}.{fn.__qualname__}")
        _REGISTRY[name] = MetricSpec(name=name, fn=fn, needs=needs, cost=cost, unit=unit, range=tuple(range),
                                     config=config, table=table)
        return fn

    return deco


def _load_builtin() -> None:
    # importing the modules registers their metrics
    from ckptgeo.metrics import rankme, behavior  # noqa: F401
    import importlib

    for mod in ("probe", "gradients", "hessian", "llc"):
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as err:
            if err.name != f"{__package__}.{mod}":
                raise


def all_metrics() -> dict[str, MetricSpec]:
    """Every registered metric by name (built-in modules imported on first call)."""
    _load_builtin()
    return dict(_REGISTRY)


def get_metric(name: str) -> MetricSpec:
    """The spec of metric ``name``.

    Raises
    ------
    InvalidParameterError
        Unknown name; the message suggests close names and lists all.
    """
    specs = all_metrics()
    if name not in specs:
        close = difflib.get_close_matches(name, specs, n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise InvalidParameterError(f"Unknown metric {name!r}.{hint} Available: {', '.join(sorted(specs))}.",
                                    name="metrics", value=name)
    return specs[name]


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


_ = (dataclasses, Any)
