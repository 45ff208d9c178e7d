"""What the gradient, Hessian and LLC metrics share: the task loss, choosing parameters by name, the
host-memory check, progress bars, switching a Hugging Face model to eager attention for higher-order
autograd, enabling gradients temporarily.

The task loss
-------------
The whole-model measures differentiate the task's loss, never the language-modelling loss: the mean
token cross-entropy (nats) over the answer / continuation tokens of the suite's items (labels other
than -100), with the output head applied only at the positions that predict them. The engine's
fixed batch (:func:`ckptgeo.engine.forward.model_batch`) is left-padded, so every item's scored
tokens end at the last column and the last ``n`` positions (:func:`scored_tail`) cover them all; a
causal LM is called with ``logits_to_keep=n``. For a 50K-token vocabulary this is most of the cost:
logits at every position of 32 items of ~100 tokens are 160M floats, at the answers a few million.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import re
from typing import Iterator

import torch

from ckptgeo.errors import InvalidParameterError

__all__: list[str] = []

#: what the whole-model measures record as their loss (``settings["loss"]``).
TASK_LOSS = "answer tokens: mean cross-entropy (nats) over the scored continuation tokens; logits only there"

logger = logging.getLogger(__name__)


def select_parameters(model: torch.nn.Module, params: str, *, metric: str) -> list[tuple[str, torch.nn.Parameter]]:
    """The model's parameters whose names match ``params``, in ``named_parameters()`` order.

    ``params`` is ``"all"``; or comma-separated shell globs over parameter names
    (``"gpt_neox.layers.*.attention.*,embed_out.weight"``), a glob also matching a name's dotted tail
    (``"layers.5.*"`` selects ``gpt_neox.layers.5.*``); or ``"re:<regex>"`` matched with
    :func:`re.search`. Tied parameters appear once (as ``named_parameters`` lists them).

    Raises
    ------
    InvalidParameterError
        The pattern is empty or malformed, or matches no parameter (the message lists some names).
    """
    named = list(model.named_parameters())
    if not isinstance(params, str) or not params.strip():  # engine validation normally catches this first
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
        chosen = [(n, p) for n, p in named
                  if any(fnmatch.fnmatchcase(n, g) or fnmatch.fnmatchcase(n, "*." + g) for g in globs)]
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


def scored_tail(labels: torch.Tensor) -> int:
    """How many last positions' logits the task loss of ``labels`` reads.

    Parameters
    ----------
    labels : LongTensor of shape (n_items, seq_len)
        -100 where a token is not scored.

    Returns
    -------
    int
        ``seq_len − f`` for ``f`` the first position whose next token is scored in any row (at least 1):
        those positions' logits predict every scored token.

    Examples
    --------
    >>> scored_tail(torch.tensor([[-100, -100, 5, 6], [-100, -100, -100, 7]]))
    3
    """
    scored = (labels[:, 1:] != -100).any(0)
    if not bool(scored.any()):
        return 1
    return int(labels.shape[1] - int(scored.nonzero()[0, 0]))


def task_token_losses(model, batch: dict, keep: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy of the scored tokens, the output head applied only at the last ``keep``
    positions.

    Parameters
    ----------
    model : callable
        A causal LM (or a ``functional_call`` closure over one) taking ``input_ids``,
        ``attention_mask``, ``position_ids`` and ``logits_to_keep``.
    batch : dict
        ``input_ids``, ``attention_mask``, ``labels`` of shape (B, T), optionally ``position_ids``.
    keep : int, optional
        Positions kept (default :func:`scored_tail` of the labels; pass it from outside ``vmap``).

    Returns
    -------
    (Tensor, Tensor)
        Losses (nats) of shape (B, keep − 1), zero where unscored, and the 0/1 scored mask.
    """
    labels = batch["labels"]
    keep = keep or scored_tail(labels)
    kwargs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    try:
        logits = model(**kwargs, logits_to_keep=keep).logits
    except TypeError:  # a model without logits_to_keep: full logits, sliced
        logits = model(**kwargs).logits
    logits = logits[:, -keep:]
    shift_labels = labels[:, labels.shape[1] - keep + 1:]
    mask = shift_labels != -100
    tok = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                            shift_labels.clamp_min(0).reshape(-1),
                                            reduction="none").view(shift_labels.shape)
    return tok * mask, mask


def task_loss(model, batch: dict, keep: int | None = None) -> torch.Tensor:
    """The task loss of a whole batch, the output head applied only at the positions that predict a
    scored token.

    Parameters
    ----------
    model : callable
        A causal LM (or a closure over one) taking ``input_ids``, ``attention_mask``, ``position_ids``
        and ``logits_to_keep``.
    batch : dict
        ``input_ids``, ``attention_mask``, ``labels`` of shape (B, T), optionally ``position_ids``.
    keep : int, optional
        The tail for the fallback (:func:`task_token_losses`).

    Returns
    -------
    Tensor of shape ()
        Mean token cross-entropy (nats) over the scored tokens; the same value as
        ``task_token_losses`` summed and divided by the token count.

    Notes
    -----
    transformers ≥ 5 accepts a boolean ``(B, T)`` mask as ``logits_to_keep`` and returns logits of
    shape ``(n_true, vocab)``: only the rows that predict a scored token (445 of the 832 a tail of 26
    keeps on 32 BIG-bench three-object items), which halves the output head's work and the memory
    its logits take in a Hessian's double-backward graph. Not usable under ``vmap`` (data-dependent
    shape); a model that does not take a mask falls back to the tail.
    """
    labels = batch["labels"]
    want = torch.zeros_like(labels, dtype=torch.bool)
    want[:, :-1] = labels[:, 1:] != -100
    n_true = int(want.sum())
    kwargs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    logits = None
    if n_true:
        try:
            logits = model(**kwargs, logits_to_keep=want).logits
        except (TypeError, IndexError, RuntimeError):
            logits = None
    if logits is None or logits.ndim != 2 or logits.shape[0] != n_true:
        tok, mask = task_token_losses(model, batch, keep)
        return tok.sum() / mask.sum().clamp_min(1)
    target = labels[:, 1:][want[:, :-1]]
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum") / n_true


def available_host_bytes() -> int | None:
    """Free physical memory (bytes) as the kernel reports it (``MemAvailable``), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_host_memory(need: int, *, metric: str, what: str, free: int | None = None) -> None:
    """Refuse, before any work, a measure whose buffers would take more than half the free host memory.

    Raises
    ------
    InvalidParameterError
        ``need`` bytes exceed half of ``free`` (default :func:`available_host_bytes`); the message
        names the buffers and the remedy (a parameter subset, ``params=layers.5.*``).
    """
    free = available_host_bytes() if free is None else free
    if free is not None and need > free // 2:
        raise InvalidParameterError(
            f"{metric} needs about {need / 2**30:.1f} GiB of host memory for {what}, more than half of the "
            f"{free / 2**30:.1f} GiB free (a measure may take at most half). Choose a parameter subset with 'params' (e.g. {metric}.params=layers.5.*) "
            f"or smaller buffers.", name="params", value=need)


def progress(total: int | None, desc: str, unit: str):
    """A tqdm bar on a terminal (silenced by ``CKPTGEO_NO_PROGRESS=1``)."""
    from tqdm.auto import tqdm

    from ckptgeo.constants import NO_PROGRESS

    return tqdm(total=total, desc=desc, unit=unit, disable=NO_PROGRESS or None, dynamic_ncols=True, leave=False)
