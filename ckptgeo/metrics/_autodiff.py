"""What the gradient, Hessian and LLC metrics share: choosing parameters by name, switching a
Hugging Face model to eager attention for higher-order autograd, enabling gradients temporarily.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import re
from typing import Iterator

import torch

from ckptgeo.errors import InvalidParameterError

__all__: list[str] = []

logger = logging.getLogger(__name__)


def select_parameters(model: torch.nn.Module, params: str, *, metric: str) -> list[tuple[str, torch.nn.Parameter]]:
    """The model's parameters whose names match ``params``, in ``named_parameters()`` order.

    ``params`` is ``"all"``; or comma-separated shell globs over parameter names
    (``"gpt_neox.layers.*.attention.*,embed_out.weight"``); or ``"re:<regex>"`` matched with
    :func:`re.search`. Tied parameters appear once (as ``named_parameters`` lists them).

    Raises
    ------
    InvalidParameterError
        The pattern is empty or malformed, or matches no parameter (the message lists some names).
    """
    named = list(model.named_parameters())
    if not isinstance(params, str) or not params.strip():
        raise InvalidParameterError(f"The 'params' parameter of {metric} must be 'all', comma-separated globs "
                                    f"or 're:<regex>'. Got {params!r}.", name="params", value=params)
    spec = params.strip()
    if spec == "all":
        chosen = named
    elif spec.startswith("re:"):
        try:
            rx = re.compile(spec[3:])
        except re.error as err:
            raise InvalidParameterError(f"The 'params' regex of {metric} does not compile: {err}. Got {spec!r}.",
                                        name="params", value=params) from err
        chosen = [(n, p) for n, p in named if rx.search(n)]
    else:
        globs = [g.strip() for g in spec.split(",") if g.strip()]
        chosen = [(n, p) for n, p in named if any(fnmatch.fnmatchcase(n, g) for g in globs)]
    if not chosen:
        some = ", ".join(n for n, _ in named[:8])
        raise InvalidParameterError(f"The 'params' pattern {params!r} of {metric} matches no parameter. Names look "
                                    f"like: {some}{', ...' if len(named) > 8 else ''}.", name="params", value=params)
    return chosen


@contextlib.contextmanager
def eager_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run the body with ``model`` on eager attention, then restore its implementation.

    transformers 5.x defaults GPT-NeoX to SDPA; on CPU SDPA dispatches to a fused kernel whose
    backward has no derivative (double backward fails: "derivative for
    aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented"), and
    ``torch.func.vmap`` over it fails on data-dependent control flow. Eager attention supports both.
    Models without a ``config._attn_implementation`` are left alone.
    """
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if config is None or before is None or before == "eager":
        yield
        return
    setter = getattr(model, "set_attn_implementation", None)
    try:
        if callable(setter):
            setter("eager")
        else:
            config._attn_implementation = "eager"
        logger.debug("switched attention %s -> eager", before)
        yield
    finally:
        if callable(setter):
            setter(before)
        else:
            config._attn_implementation = before


@contextlib.contextmanager
def gradients_on(params: list[torch.nn.Parameter]) -> Iterator[None]:
    """Enable autograd and ``requires_grad`` on ``params`` for the body, restoring both after."""
    before = [p.requires_grad for p in params]
    try:
        with torch.enable_grad():
            for p in params:
                p.requires_grad_(True)
            yield
    finally:
        for p, flag in zip(params, before):
            p.requires_grad_(flag)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Run the body with ``model.eval()`` (no dropout), restoring the training flag after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def location(ctx) -> dict:
    """The fields of a NonFiniteActivationsError that locate a failure in a ModelContext."""
    return {"revision": getattr(ctx, "revision", None) or None, "suite": getattr(ctx, "suite", None) or None,
            "layer": -1}


def where(ctx) -> str:
    """" at step3000, suite logic" (empty parts left out), for error messages."""
    parts = []
    if getattr(ctx, "revision", ""):
        parts.append(f"at {ctx.revision}")
    if getattr(ctx, "suite", ""):
        parts.append(f"suite {ctx.suite}")
    return (" " + ", ".join(parts)) if parts else ""
